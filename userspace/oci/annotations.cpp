// SPDX-License-Identifier: Apache-2.0
#include "oci/annotations.h"

#include <cerrno>

#include "util/text.h"

namespace agentcage::oci {

bool is_sandbox_container(const std::map<std::string, std::string>& annotations, std::string_view id) {
  struct Runtime {
    const char* type;
    const char* sandbox_id;
  };
  for (const Runtime& r : {Runtime{"io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id"},
                           Runtime{"io.kubernetes.cri-o.ContainerType", "io.kubernetes.cri-o.SandboxID"}}) {
    auto type = annotations.find(r.type);
    auto sandbox = annotations.find(r.sandbox_id);
    if (type != annotations.end() && type->second == "sandbox" && sandbox != annotations.end() &&
        !id.empty() && sandbox->second == id)
      return true;
  }
  return false;
}

Status check_container_id(std::string_view id) {
  auto bad = [&] {
    return Error{"container id " + quote(id) + " is not valid (" + std::string(kContainerIdRule) + ")", EINVAL};
  };
  if (id.empty() || id.size() > kMaxContainerIdBytes || id.front() == '.' || id.front() == '-') return bad();
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return bad();
  }
  return {};
}

}  // namespace agentcage::oci
