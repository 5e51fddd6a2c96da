// SPDX-License-Identifier: Apache-2.0
// The scope lifecycle: put a cgroup (and everything below it) under a policy,
// and take it out again with its report. The one owner of the Enforcer's
// scope and slot operations: runs (run/runner.cpp), `agentcage attach` /
// `detach` (scope/attach.h) and the daemon's attach/detach and named slots
// all go through here.
//
// The ordering rules that keep enforcement closed (slot choice: slots.h):
//   1. Read the scope's report before removing the scope: the report goes
//      with the scope.
//   2. Remove the scope before releasing its policy slot: a released
//      transient slot may be evicted or replaced at once.
//   3. Never hand a slot a scope still points at to another policy (slots.h,
//      rule 1): that scope would be governed by someone else's rules.
//   4. Remove a scope only from a drained (empty) cgroup, unless the caller
//      lets its processes go on purpose (detach): processes that survived a
//      kill stay confined, and the scope with them.
// Each operation runs under the Enforcer's cross-process lock, so another
// agentcage process never sees half of it.
//
// A scope is confined from its registration, or, registered *pending*
// (confine's arm_tgid), from the exec of one given process in its cgroup
// on: a container runtime's init has to mount, pivot_root and write /proc
// after its cgroup is final, all of which a scope denies; its exec of the
// entrypoint is the first act decided under the policy. Pending is a state
// of the kernel's entry (struct ac_scope): confine, release and nesting
// treat a pending scope like any other, and the kernel arms it for good.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bpf/enforcer.h"
#include "scope/backend.h"
#include "scope/slots.h"
#include "util/result.h"

namespace agentcage::scope {

// The cgroup to confine: its id (also the scope id in audit events), its
// level below the cgroup2 root, and its path (for messages and the drain
// check).
struct CgroupRef {
  uint64_t id = 0;
  unsigned level = 0;
  std::filesystem::path path;
  // Every process of the cgroup runs in an IPC namespace made for it (a
  // run: its command starts with CLONE_NEWIPC), so its System V IPC and
  // message queues are its own and allowed (AC_SCOPE_F_OWN_IPC). Attached
  // cgroups share an IPC namespace with others: all of it is denied.
  bool own_ipc_namespace = false;
  // The scope's DNS is answered by a resolver of the run's own listening on
  // 127.0.0.1:dns_port (and [::1]:dns_port with dns_ipv6): a policy with
  // domain rules (AC_SCOPE_F_DNS, dns.bpf.h). 0: none.
  uint16_t dns_port = 0;
  bool dns_ipv6 = false;
  // A binding's cgroup (AC_SCOPE_F_BOUND, scope/bind.h): the daemon removes
  // the scope once the cgroup is no longer at the bound path.
  bool bound = false;
  // The cgroup is a run's, made right below agentcage's run parent, where
  // only runs live: the UDP receive filter is attached to that parent once
  // and kept there (bpf::ScopeCgroup), not to each run's cgroup.
  bool filter_at_parent = false;
};

// A policy the daemon installed in a named slot (attach through the daemon).
struct NamedPolicy {
  std::string name;
  uint32_t slot = 0;
};

// A policy its caller compiled (a run, `agentcage attach`).
struct TransientPolicy {
  std::string name;
  bpf::CompiledPolicy compiled;
  // Run on the daemon's named slot when it holds this name with the same
  // rules, so hot reloads apply (slots.h, rule 3). Runs set it; `agentcage
  // attach` keeps a transient slot of its own.
  bool share_named = false;
};

// No policy at all (AC_SLOT_NONE): every operation of the scope is denied
// (no_policy). A binding whose policy is not loaded confines this way.
struct DenyAll {};

using PolicyRef = std::variant<NamedPolicy, TransientPolicy, DenyAll>;

// What confine() set up.
struct Confinement {
  uint64_t cgroup_id = 0;  // also the scope id
  std::filesystem::path cgroup;
  uint32_t slot = 0;
  bool transient = false;  // a transient slot (false: the daemon's named slot)
  std::string policy_name;
  uint32_t arm_tgid = 0;  // registered pending until this pid's exec (0: armed at once)
};

enum class Ending {
  // The cgroup's processes were killed (a run's end, a stale run): the scope
  // goes only when the cgroup is indeed empty (rule 4).
  drained,
  // `detach`: the processes keep running, unconfined from now on.
  detach,
};

// What release() took down.
struct Released {
  std::string policy_name;  // "" when unknown (the slot's policy was removed)
  uint32_t slot = 0;
  std::optional<bpf::ScopeReport> report;  // unset: no scope, or report_error
  std::string report_error;
  // Ending::drained, but processes remain: the scope (and its slot) stays.
  bool kept = false;
};

// Confine `cgroup` under `policy`. `workspace`: the absolute directory the
// policy's ${workspace} rules mean for this scope ("" : none). EEXIST when the
// cgroup is confined already, or when a cgroup above or below it is: scopes
// do not nest, because the kernel applies a task's outermost scope, so one
// would silently override the other. Nothing is changed then, or on any
// failure.
// `arm_tgid` non-zero registers the scope *pending*: nothing in the cgroup
// is confined until the process with that pid (as the host sees it, in the
// cgroup) execs, and that exec is decided under the policy (a container's
// init at the OCI createRuntime hook: the runtime's own setup runs
// unconfined, the entrypoint and everything after it does not). An exec of
// any other process leaves it pending. The caller makes sure the pid is the
// one it means (alive, in the cgroup) and that nothing else in the cgroup
// runs code it does not trust before that exec.
Result<Confinement> confine(Backend& backend, const CgroupRef& cgroup, const PolicyRef& policy,
                            const std::string& workspace, uint32_t arm_tgid = 0);
Result<Confinement> confine(bpf::Enforcer& enforcer, const CgroupRef& cgroup, const PolicyRef& policy,
                            const std::string& workspace, uint32_t arm_tgid = 0);

// Record every decision record of a confined scope into a ring buffer of
// its own from now on (Enforcer::record_scope; `agentcage run --record`),
// returned for its one reader. Call before the scope's first process
// starts; the recording goes with the scope.
Result<UniqueFd> record(bpf::Enforcer& enforcer, const Confinement& confinement);

// Take down what confine() set up (or what a stale run's record says it set
// up). A scope already gone is not an error: the slot is released anyway, so
// this can be retried.
Result<Released> release(Backend& backend, const Confinement& confinement, Ending ending);
Result<Released> release(bpf::Enforcer& enforcer, const Confinement& confinement, Ending ending);

// The report of a confinement's scope as it stands, nothing removed (looked
// up by the cgroup's id, the scope id confine() registers): a run
// answers its client with it once its cgroup is drained and releases the
// scope afterwards (the report cannot change in between: nothing is left
// in the scope to decide on).
Result<bpf::ScopeReport> report(bpf::Enforcer& enforcer, const Confinement& confinement);

// Take down the scope registered for `cgroup` (detach). ENOENT when the
// cgroup is not confined.
Result<Released> release(Backend& backend, const CgroupRef& cgroup, Ending ending);
Result<Released> release(bpf::Enforcer& enforcer, const CgroupRef& cgroup, Ending ending);

// The slot steps of confine() and release(), for tests of the slot cache:
// choose (and if needed install) a transient policy's slot; release a slot
// (evicting cached transient policies beyond kCachedTransient).
Result<SlotChoice> acquire_slot(Backend& backend, const TransientPolicy& policy);
Status release_slot(Backend& backend, uint32_t slot);

// The daemon's new named policy: choose its slot (slots.h, rule 5) and run
// `install(slot)` under the same lock, so no other agentcage process can take
// the slot in between. `reserved`: the daemon's other named slots.
Result<uint32_t> allocate_named_slot(Backend& backend, const std::vector<uint32_t>& reserved,
                                     const std::function<Status(uint32_t)>& install);
Result<uint32_t> allocate_named_slot(bpf::Enforcer& enforcer, const std::vector<uint32_t>& reserved,
                                     const std::function<Status(uint32_t)>& install);

}  // namespace agentcage::scope
