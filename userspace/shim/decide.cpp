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

namespace {

// The edit for a container that is not a pod's sandbox: its policy, if any.
Result<std::optional<oci::HookEdit>> confinement(const oci::RuntimeArgs& args, const oci::Bundle& b,
                                                 const fs::path& agentcage) {
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

}  // namespace

Result<std::optional<oci::HookEdit>> decide(const oci::RuntimeArgs& args, const Result<oci::Bundle>* bundle,
                                            const fs::path& agentcage) {
  if (!oci::starts_from_bundle(args.subcommand)) return std::optional<oci::HookEdit>{};
  if (!bundle) return Error{"agentcage-runc: " + args.subcommand + " without its bundle", EINVAL};
  if (!*bundle) return bundle->error().wrap("agentcage-runc: cannot read the bundle");
  const oci::Bundle& b = **bundle;
  if (oci::is_sandbox_container(b.annotations, args.container_id)) return std::optional<oci::HookEdit>{};
  auto edit = confinement(args, b, agentcage);
  if (edit && *edit && !oci::creates_container(args.subcommand))
    return Error{"agentcage-runc: " + args.subcommand + " of container " + args.container_id +
                     " refused: it would be confined by agentcage, whose scope arms at the container's first "
                     "exec, and a container restored from a checkpoint never execs; start it afresh instead",
                 EPERM};
  return edit;
}

}  // namespace agentcage::shim
