// SPDX-License-Identifier: Apache-2.0
// What the scope lifecycle (scope.h) does to the host: the Enforcer's policy
// and scope map operations, and whether a cgroup still has processes. An
// interface so the lifecycle's ordering is unit-tested with a recording fake;
// EnforcerBackend is the real one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "util/result.h"

namespace agentcage::scope {

class Backend {
 public:
  virtual ~Backend() = default;
  // Runs `fn` under the cross-process lock (re-entrant).
  virtual Status with_lock(const std::function<Status()>& fn) = 0;
  virtual Result<std::vector<bpf::PolicyInfo>> policies() = 0;
  virtual Result<std::vector<bpf::ScopeInfo>> scopes() = 0;
  // The slots bindings point at (slots.h, rule 1). None unless overridden.
  virtual Result<std::vector<uint32_t>> binding_slots() { return std::vector<uint32_t>{}; }
  virtual Status put_transient_policy(uint32_t slot, const std::string& name,
                                      const bpf::CompiledPolicy& policy) = 0;
  virtual Status remove_policy(uint32_t slot) = 0;
  // The cgroup at `path` (id `cgroup_id`, at `level`) becomes a scope, its
  // receive filter attached first (to its parent, agentcage's run parent,
  // with `filter_at_parent`: bpf::ScopeCgroup). `flags`: AC_SCOPE_F_* (abi.h);
  // `dns_port`: the resolver's port with AC_SCOPE_F_DNS; `arm_tgid`: 0, or
  // the pid whose exec arms the scope (pending until then: struct ac_scope).
  virtual Status add_scope(const std::filesystem::path& path, uint64_t cgroup_id, unsigned level,
                           bool filter_at_parent, uint64_t scope_id, uint32_t slot,
                           const std::string& workspace, uint16_t flags, uint16_t dns_port,
                           uint32_t arm_tgid) = 0;
  // The scope, then the filter (a cgroup already removed took it along).
  virtual Status remove_scope(const std::filesystem::path& path, uint64_t cgroup_id) = 0;
  virtual Result<bpf::ScopeReport> scope_report(uint64_t scope_id) = 0;
  // Any process left in the cgroup's subtree (false when it is gone).
  virtual bool populated(const std::filesystem::path& cgroup) = 0;
  // The cgroups above `path` (a cgroup at `level`), the root included, and
  // every cgroup below it: where a scope would nest with this one.
  virtual Result<std::vector<cgroup::CgroupNode>> ancestors(const std::filesystem::path& path,
                                                            unsigned level) = 0;
  virtual Result<std::vector<cgroup::CgroupNode>> descendants(const std::filesystem::path& path) = 0;
};

class EnforcerBackend final : public Backend {
 public:
  explicit EnforcerBackend(bpf::Enforcer& enforcer) : enf_(enforcer) {}
  Status with_lock(const std::function<Status()>& fn) override;
  Result<std::vector<bpf::PolicyInfo>> policies() override;
  Result<std::vector<bpf::ScopeInfo>> scopes() override;
  Result<std::vector<uint32_t>> binding_slots() override;
  Status put_transient_policy(uint32_t slot, const std::string& name,
                              const bpf::CompiledPolicy& policy) override;
  Status remove_policy(uint32_t slot) override;
  Status add_scope(const std::filesystem::path& path, uint64_t cgroup_id, unsigned level,
                   bool filter_at_parent, uint64_t scope_id, uint32_t slot, const std::string& workspace,
                   uint16_t flags, uint16_t dns_port, uint32_t arm_tgid) override;
  Status remove_scope(const std::filesystem::path& path, uint64_t cgroup_id) override;
  Result<bpf::ScopeReport> scope_report(uint64_t scope_id) override;
  bool populated(const std::filesystem::path& cgroup) override;
  Result<std::vector<cgroup::CgroupNode>> ancestors(const std::filesystem::path& path,
                                                    unsigned level) override;
  Result<std::vector<cgroup::CgroupNode>> descendants(const std::filesystem::path& path) override;

 private:
  bpf::Enforcer& enf_;
};

}  // namespace agentcage::scope
