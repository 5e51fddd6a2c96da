// SPDX-License-Identifier: Apache-2.0
// What the policy directory (policy_dir.h) does to the kernel's policy map:
// list the policies and scopes, install a compiled policy in a named slot
// (a new slot chosen by scope/slots.h rule 5, under the cross-process lock),
// and remove a slot. An interface so the directory's reload logic is
// unit-tested on the host with a fake; EnforcerNamedSlots is the real one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bpf/compiled.h"
#include "bpf/enforcer.h"
#include "util/result.h"

namespace agentcage::daemon {

class NamedSlots {
 public:
  virtual ~NamedSlots() = default;
  virtual Result<std::vector<bpf::PolicyInfo>> policies() = 0;
  virtual Result<std::vector<bpf::ScopeInfo>> scopes() = 0;
  // A new named policy: choose a free slot (not in `reserved`, not pointed at
  // by any scope) and run `install(slot)` under the lock that chose it.
  virtual Result<uint32_t> allocate(const std::vector<uint32_t>& reserved,
                                    const std::function<Status(uint32_t)>& install) = 0;
  // Install (or replace in place) the named policy `name` in `slot`.
  virtual Status put(uint32_t slot, const std::string& name, const bpf::CompiledPolicy& policy) = 0;
  virtual Status remove(uint32_t slot) = 0;
};

class EnforcerNamedSlots final : public NamedSlots {
 public:
  explicit EnforcerNamedSlots(bpf::Enforcer& enforcer) : enf_(enforcer) {}
  Result<std::vector<bpf::PolicyInfo>> policies() override;
  Result<std::vector<bpf::ScopeInfo>> scopes() override;
  Result<uint32_t> allocate(const std::vector<uint32_t>& reserved,
                            const std::function<Status(uint32_t)>& install) override;
  Status put(uint32_t slot, const std::string& name, const bpf::CompiledPolicy& policy) override;
  Status remove(uint32_t slot) override;

 private:
  bpf::Enforcer& enf_;
};

}  // namespace agentcage::daemon
