// SPDX-License-Identifier: Apache-2.0
#include "scope/backend.h"

#include "cgroup/cgroup.h"

namespace agentcage::scope {

Status EnforcerBackend::with_lock(const std::function<Status()>& fn) { return enf_.with_lock(fn); }

Result<std::vector<bpf::PolicyInfo>> EnforcerBackend::policies() { return enf_.policies(); }

Result<std::vector<bpf::ScopeInfo>> EnforcerBackend::scopes() { return enf_.scopes(); }

Status EnforcerBackend::put_transient_policy(uint32_t slot, const std::string& name,
                                             const bpf::CompiledPolicy& policy) {
  return enf_.put_transient_policy(slot, name, policy);
}

Status EnforcerBackend::remove_policy(uint32_t slot) { return enf_.remove_policy(slot); }

Status EnforcerBackend::add_scope(uint64_t cgroup_id, unsigned level, uint64_t scope_id, uint32_t slot,
                                  const std::string& workspace, uint16_t flags) {
  return enf_.add_scope(cgroup_id, level, scope_id, slot, workspace, flags);
}

Status EnforcerBackend::remove_scope(uint64_t cgroup_id) { return enf_.remove_scope(cgroup_id); }

Result<bpf::ScopeReport> EnforcerBackend::scope_report(uint64_t scope_id) {
  return enf_.scope_report(scope_id);
}

bool EnforcerBackend::populated(const std::filesystem::path& cgroup) { return cgroup::populated(cgroup); }

Result<std::vector<cgroup::CgroupNode>> EnforcerBackend::ancestors(const std::filesystem::path& path,
                                                                   unsigned level) {
  return cgroup::cgroup_ancestors(path, level);
}

Result<std::vector<cgroup::CgroupNode>> EnforcerBackend::descendants(const std::filesystem::path& path) {
  return cgroup::cgroup_descendants(path);
}

}  // namespace agentcage::scope
