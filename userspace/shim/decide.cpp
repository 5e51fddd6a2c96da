// SPDX-License-Identifier: Apache-2.0
#include "shim/decide.h"

#include <cerrno>

#include "oci/annotations.h"

namespace agentcage::shim {

namespace fs = std::filesystem;

oci::HookEdit hook_edit(const fs::path& agentcage) {
  auto hook = [&](const char* stage) {
    return oci::Hook{agentcage.string(), {"agentcage", "oci-hook", "--stage", stage}, oci::kHookTimeoutSeconds};
  };
  return oci::HookEdit{hook("createRuntime"), hook("poststop"), std::nullopt};
}

Result<std::optional<oci::HookEdit>> decide(const oci::RuntimeArgs& args, const Result<oci::Bundle>* bundle,
                                            const fs::path& agentcage) {
  if (!oci::creates_container(args.subcommand)) return std::optional<oci::HookEdit>{};
  if (!bundle) return Error{"agentcage-runc: " + args.subcommand + " without its bundle", EINVAL};
  if (!*bundle) return bundle->error().wrap("agentcage-runc: cannot read the bundle");
  const oci::Bundle& b = **bundle;
  if (oci::is_sandbox_container(b.annotations)) return std::optional<oci::HookEdit>{};

  oci::HookEdit edit = hook_edit(agentcage);
  const auto annotated = b.annotations.find(std::string(oci::kPolicyAnnotation));
  if (args.policy) {
    edit.policy = *args.policy;
  } else if (annotated != b.annotations.end()) {
    if (annotated->second.empty())
      return Error{"agentcage-runc: the annotation " + std::string(oci::kPolicyAnnotation) +
                       " is empty: name a policy, or remove it to run the container unconfined",
                   EINVAL};
  } else if (args.default_policy) {
    edit.policy = *args.default_policy;
  } else {
    return std::optional<oci::HookEdit>{};
  }
  return std::optional<oci::HookEdit>{std::move(edit)};
}

}  // namespace agentcage::shim
