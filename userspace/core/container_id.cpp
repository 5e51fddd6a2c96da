// SPDX-License-Identifier: Apache-2.0
#include "core/container_id.h"

namespace agentcage::core {

std::string container_id_error(std::string_view id) {
  if (id.empty() || id.size() > kMaxContainerIdBytes)
    return "a container id must be " + std::string(kContainerIdRule);
  if (id.front() == '.' || id.front() == '-')
    return "a container id must not start with '.' or '-' (" + std::string(kContainerIdRule) + ")";
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return "a container id must be " + std::string(kContainerIdRule);
  }
  return {};
}

}  // namespace agentcage::core
