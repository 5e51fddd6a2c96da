// SPDX-License-Identifier: Apache-2.0
#include "daemon/named_slots.h"

#include "scope/scope.h"

namespace agentcage::daemon {

Result<std::vector<bpf::PolicyInfo>> EnforcerNamedSlots::policies() { return enf_.policies(); }

Result<std::vector<bpf::ScopeInfo>> EnforcerNamedSlots::scopes() { return enf_.scopes(); }

Result<uint32_t> EnforcerNamedSlots::allocate(const std::vector<uint32_t>& reserved,
                                              const std::function<Status(uint32_t)>& install) {
  return scope::allocate_named_slot(enf_, reserved, install);
}

Status EnforcerNamedSlots::put(uint32_t slot, const std::string& name, const bpf::CompiledPolicy& policy) {
  return enf_.put_policy(slot, name, policy);
}

Status EnforcerNamedSlots::remove(uint32_t slot) { return enf_.remove_policy(slot); }

}  // namespace agentcage::daemon
