// SPDX-License-Identifier: Apache-2.0
#include "scope/backend.h"

#include <fcntl.h>

#include "cgroup/cgroup.h"
#include "util/unique_fd.h"

namespace agentcage::scope {

Status EnforcerBackend::with_lock(const std::function<Status()>& fn) { return enf_.with_lock(fn); }

Result<std::vector<bpf::PolicyInfo>> EnforcerBackend::policies() { return enf_.policies(); }

Result<std::vector<bpf::ScopeInfo>> EnforcerBackend::scopes() { return enf_.scopes(); }

Result<std::vector<uint32_t>> EnforcerBackend::binding_slots() {
  auto bindings = enf_.bindings();
  if (!bindings) return bindings.error();
  std::vector<uint32_t> out;
  for (const auto& b : *bindings) out.push_back(b.policy_slot);
  return out;
}

Status EnforcerBackend::put_transient_policy(uint32_t slot, const std::string& name,
                                             const bpf::CompiledPolicy& policy) {
  return enf_.put_transient_policy(slot, name, policy);
}

Status EnforcerBackend::remove_policy(uint32_t slot) { return enf_.remove_policy(slot); }

Status EnforcerBackend::add_scope(const std::filesystem::path& path, uint64_t cgroup_id, unsigned level,
                                  bool filter_at_parent, uint64_t scope_id, uint32_t slot,
                                  const std::string& workspace, uint16_t flags, uint16_t dns_port,
                                  uint32_t arm_tgid) {
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return Error::from_errno("opening cgroup " + path.string());
  return enf_.add_scope({dir.get(), cgroup_id, level, filter_at_parent}, scope_id, slot, workspace, flags,
                        dns_port, arm_tgid);
}

Status EnforcerBackend::remove_scope(const std::filesystem::path& path, uint64_t cgroup_id) {
  // Gone (a stale run's cgroup, removed already): nothing to detach.
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return enf_.remove_scope({dir.get(), cgroup_id, 0});
}

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
