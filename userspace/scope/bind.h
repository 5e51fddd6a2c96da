// SPDX-License-Identifier: Apache-2.0
// Bindings: a cgroup path (a systemd unit's or slice's) kept under a policy
// whenever a cgroup exists there, across restarts of the unit, the daemon
// and the host. The kernel does the part that cannot wait: the cgroup_mkdir
// program (bpf/binding.bpf.h) registers the scope inside the mkdir that makes
// the cgroup, before any process can be put in it. This module does the rest,
// the daemon calling it at start, on reload and every second:
//   1. write each binding into the kernel (Enforcer::put_binding), with its
//      policy's named slot, or AC_SLOT_NONE (deny all) while the policy is
//      not loaded; remove the bindings no longer wanted;
//   2. finish the scopes the kernel made (the UDP receive filter:
//      Enforcer::complete_scope) and keep them on the binding's slot;
//   3. confine a bound cgroup that has no scope (it existed before the
//      binding, or the kernel could not register it): LATE, and said so,
//      with whether processes already ran in it;
//   4. remove the bound scopes (AC_SCOPE_F_BOUND) whose cgroup is no longer
//      at a bound path: the unit was stopped or restarted (a new cgroup, a
//      new scope), or its binding was removed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "scope/scope.h"
#include "util/result.h"

namespace agentcage::scope {

struct BindingSpec {
  std::string path;                   // below the cgroup2 root: "/system.slice/agent.service"
  std::optional<NamedPolicy> policy;  // unset: not loaded, the cgroup is denied everything
  std::string workspace;              // absolute directory for ${workspace} rules ("" : none)
};

enum class BindingState {
  absent,    // no cgroup at the path (the unit is not running): the kernel confines it when made
  confined,  // the cgroup at the path is confined by its binding
  refused,   // the cgroup could not be confined (detail says why): NOT confined by its binding
};

struct BindingStatus {
  std::string path;
  BindingState state = BindingState::absent;
  uint64_t cgroup_id = 0;
  // Confined by this pass, not by the kernel at its mkdir (it existed
  // before the binding, or the kernel could not register it).
  bool late = false;
  // ... and processes were already running in it: they ran unconfined
  // until now.
  bool late_populated = false;
  std::string detail;       // refused: why
  uint64_t kernel_confined = 0;  // cgroups the kernel confined at their mkdir (ac_binding.confined)
  uint64_t kernel_failed = 0;    // ... and could not (ac_binding.failed)
};

struct Reconciled {
  std::vector<BindingStatus> bindings;  // one per spec, in order
  size_t scopes_removed = 0;            // bound scopes whose cgroup left its bound path
};

// Steps 1-4 for `specs` (every binding wanted; others are removed), in the
// cgroup v2 hierarchy at `cgroup_root`. An error only when the maps cannot be
// read or written; a binding that cannot be applied says so in its status.
Result<Reconciled> reconcile_bindings(bpf::Enforcer& enforcer, const std::filesystem::path& cgroup_root,
                                      const std::vector<BindingSpec>& specs);

}  // namespace agentcage::scope
