// SPDX-License-Identifier: Apache-2.0
// Which policy slot a policy goes into: the pure decision, from a snapshot of
// the policies and scopes maps (taken under the Enforcer's lock), so it is
// unit-tested without a kernel. scope.h applies it to the maps.
//
// The rules, for every caller (runs, attach, the daemon):
//   1. A slot some scope points at is never handed to another policy, even
//      when its policy was removed: that scope fails closed (no_policy) and
//      must keep failing closed, not inherit someone else's rules. A
//      binding (scope/bind.h) counts as such a scope: the kernel points the
//      next cgroup made at its path at its slot.
//   2. A named slot (the daemon's, AC_POLICY_OWNER_NAMED) is never replaced
//      or evicted here; the daemon alone installs and removes named policies.
//   3. A transient policy (a run's, an `agentcage attach`'s) is shared by
//      content: a transient slot holding the same name with the same digest is
//      reused as it is. A run (share_named) first looks for a named slot with
//      the same name and digest and runs on it, so the daemon's hot reloads
//      apply to the run.
//   4. Otherwise a transient policy is installed into the lowest free slot
//      (no policy, no scope), else it replaces the lowest unused cached
//      transient policy (no scope points at it), else ENOSPC.
//   5. A new named policy (the daemon's) goes into the lowest slot that holds
//      no policy, that no scope points at and that no other named policy of
//      the daemon has reserved; it never evicts a cached transient policy.
//   6. Unused transient policies stay cached for reuse (the next run of the
//      same policy only registers a scope), at most kCachedTransient of them;
//      beyond that the lowest slots go, never the one just released (it is
//      the most recently used). Memory stays bounded by distinct policies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "util/result.h"

namespace agentcage::scope {

inline constexpr size_t kCachedTransient = 16;

// What the maps hold.
struct SlotView {
  std::vector<bpf::PolicyInfo> policies;
  std::vector<bpf::ScopeInfo> scopes;
};

struct SlotChoice {
  uint32_t slot = 0;
  // Write the policy into the slot (a free slot, or one whose unused cached
  // transient policy it replaces); false: the slot already holds it.
  bool install = false;
  // The slot holds a transient policy (false: the daemon's named slot).
  bool transient = true;
};

// Rules 1-4. `digest` is bpf::policy_digest(name, compiled).
Result<SlotChoice> choose_transient_slot(const SlotView& view, const std::string& name, uint64_t digest,
                                         bool share_named);

// Rule 5. `reserved`: slots the daemon keeps for its named policies.
Result<uint32_t> choose_named_slot(const SlotView& view, const std::vector<uint32_t>& reserved);

// Rule 6: the slots whose transient policies to remove after `released` was
// released (by its last scope, or by a confinement that failed).
std::vector<uint32_t> transient_evictions(const SlotView& view, uint32_t released);

}  // namespace agentcage::scope
