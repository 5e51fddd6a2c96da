// SPDX-License-Identifier: Apache-2.0
#include "scope/scope.h"

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>

#include "bpf/compile.h"

namespace agentcage::scope {
namespace {

Result<SlotView> snapshot(Backend& b) {
  auto policies = b.policies();
  if (!policies) return policies.error();
  auto scopes = b.scopes();
  if (!scopes) return scopes.error();
  // A binding points the next cgroup made at its path at its slot: for the
  // slot rules it is a scope on that slot (cgroup id 0: no cgroup's).
  auto bound = b.binding_slots();
  if (!bound) return bound.error();
  for (uint32_t slot : *bound) scopes->push_back(bpf::ScopeInfo{0, 0, slot, 0, "", 0});
  return SlotView{std::move(*policies), std::move(*scopes)};
}

const bpf::ScopeInfo* scope_of(const SlotView& view, uint64_t cgroup_id) {
  for (const auto& s : view.scopes)
    if (s.cgroup_id == cgroup_id) return &s;
  return nullptr;
}

const bpf::PolicyInfo* policy_in(const SlotView& view, uint32_t slot) {
  for (const auto& p : view.policies)
    if (p.slot == slot) return &p;
  return nullptr;
}

Error already_confined(const SlotView& view, const CgroupRef& cg, const bpf::ScopeInfo& scope) {
  const bpf::PolicyInfo* p = policy_in(view, scope.policy_slot);
  std::string by = p ? "policy " + p->name + ", slot " + std::to_string(scope.policy_slot)
                     : "policy slot " + std::to_string(scope.policy_slot) + ", whose policy was removed";
  if (scope.arm_tgid) by += "; pending until pid " + std::to_string(scope.arm_tgid) + " execs";
  return Error{cg.path.string() + " is already confined by agentcage (" + by +
                   "); detach it first: agentcage detach --cgroup " + cg.path.string(),
               EEXIST};
}

std::string confined_by(const SlotView& view, const bpf::ScopeInfo& scope) {
  const bpf::PolicyInfo* p = policy_in(view, scope.policy_slot);
  return p ? "policy " + p->name : "policy slot " + std::to_string(scope.policy_slot);
}

// Scopes do not nest: the kernel applies the outermost scope of a task, so a
// scope above `cg` would silently govern it instead of its own policy, and a
// new scope above a confined cgroup would replace that one's policy.
Status refuse_nesting(Backend& b, const SlotView& view, const CgroupRef& cg) {
  auto above = b.ancestors(cg.path, cg.level);
  if (!above) return above.error();
  for (const auto& node : *above)
    if (const bpf::ScopeInfo* outer = scope_of(view, node.id))
      return Error{cg.path.string() + " is inside " + node.path.string() + ", which agentcage confines (" +
                       confined_by(view, *outer) +
                       "); scopes do not nest (the outer policy would govern both): confine a cgroup "
                       "outside it, or detach it first: agentcage detach --cgroup " +
                       node.path.string(),
                   EEXIST};
  auto below = b.descendants(cg.path);
  if (!below) return below.error();
  for (const auto& node : *below)
    if (const bpf::ScopeInfo* inner = scope_of(view, node.id))
      return Error{cg.path.string() + " contains " + node.path.string() + ", which agentcage confines (" +
                       confined_by(view, *inner) +
                       "); scopes do not nest (this policy would replace that one): confine a cgroup "
                       "that contains no confined cgroup, or detach it first: agentcage detach --cgroup " +
                       node.path.string(),
                   EEXIST};
  return {};
}

// acquire_slot under the lock, with `view` the slots as they are.
Result<SlotChoice> acquire_slot_in(Backend& b, const SlotView& view, const TransientPolicy& policy) {
  auto chosen = choose_transient_slot(view, policy.name, bpf::policy_digest(policy.name, policy.compiled),
                                      policy.share_named);
  if (!chosen) return chosen.error();
  if (chosen->install)
    if (Status s = b.put_transient_policy(chosen->slot, policy.name, policy.compiled); !s) return s.error();
  return *chosen;
}

}  // namespace

Result<SlotChoice> acquire_slot(Backend& b, const TransientPolicy& policy) {
  SlotChoice choice;
  Status st = b.with_lock([&]() -> Status {
    auto view = snapshot(b);
    if (!view) return view.error();
    auto chosen = acquire_slot_in(b, *view, policy);
    if (!chosen) return chosen.error();
    choice = *chosen;
    return {};
  });
  if (!st) return st.error();
  return choice;
}

Status release_slot(Backend& b, uint32_t slot) {
  return b.with_lock([&]() -> Status {
    auto view = snapshot(b);
    if (!view) return view.error();
    for (uint32_t victim : transient_evictions(*view, slot))
      if (Status s = b.remove_policy(victim); !s) return s;
    return {};
  });
}

Result<Confinement> confine(Backend& b, const CgroupRef& cg, const PolicyRef& policy,
                            const std::string& workspace, uint32_t arm_tgid) {
  Confinement out;
  out.cgroup_id = cg.id;
  out.cgroup = cg.path;
  out.arm_tgid = arm_tgid;
  // A workspace the policy denies whole, or where the run could write a
  // program it may run: refused before anything is written. (The daemon
  // asks the same of its named policies before it confines.)
  if (const auto* transient = std::get_if<TransientPolicy>(&policy))
    if (auto problem = bpf::workspace_problem(transient->compiled, transient->name, workspace))
      return Error{*problem, EINVAL};
  Status st = b.with_lock([&]() -> Status {
    auto view = snapshot(b);
    if (!view) return view.error();
    if (const bpf::ScopeInfo* existing = scope_of(*view, cg.id))
      return already_confined(*view, cg, *existing);
    if (Status s = refuse_nesting(b, *view, cg); !s) return s;

    SlotChoice choice;
    if (const auto* named = std::get_if<NamedPolicy>(&policy)) {
      const bpf::PolicyInfo* p = policy_in(*view, named->slot);
      if (!p || p->owner != AC_POLICY_OWNER_NAMED || p->name != named->name)
        return Error{
            "policy " + named->name + " is no longer installed in slot " + std::to_string(named->slot),
            ENOENT};
      choice = SlotChoice{named->slot, false, false};
      out.policy_name = named->name;
    } else if (std::holds_alternative<DenyAll>(policy)) {
      choice = SlotChoice{AC_SLOT_NONE, false, false};
    } else {
      const auto& transient = std::get<TransientPolicy>(policy);
      auto acquired = acquire_slot_in(b, *view, transient);
      if (!acquired) return acquired.error();
      choice = *acquired;
      out.policy_name = transient.name;
    }
    uint16_t flags = cg.own_ipc_namespace ? AC_SCOPE_F_OWN_IPC : 0;
    if (cg.dns_port) flags |= AC_SCOPE_F_DNS | (cg.dns_ipv6 ? AC_SCOPE_F_DNS6 : 0);
    if (cg.bound) flags |= AC_SCOPE_F_BOUND;
    if (Status s = b.add_scope(cg.path, cg.id, cg.level, cg.filter_at_parent, cg.id, choice.slot, workspace,
                               flags, cg.dns_port, arm_tgid);
        !s) {
      if (choice.transient) static_cast<void>(release_slot(b, choice.slot));
      return s;
    }
    out.slot = choice.slot;
    out.transient = choice.transient;
    return {};
  });
  if (!st) return st.error();
  return out;
}

Result<Released> release(Backend& b, const Confinement& c, Ending ending) {
  Released out;
  out.slot = c.slot;
  out.policy_name = c.policy_name;
  Status st = b.with_lock([&]() -> Status {
    auto view = snapshot(b);
    if (!view) return view.error();
    const bpf::ScopeInfo* scope = c.cgroup_id ? scope_of(*view, c.cgroup_id) : nullptr;
    if (!scope) {
      // Gone already (a retry, or a run that died before its scope was
      // added): only the transient slot it may have acquired is left.
      return c.transient ? release_slot(b, c.slot) : Status{};
    }
    out.slot = scope->policy_slot;
    if (const bpf::PolicyInfo* p = policy_in(*view, out.slot)) out.policy_name = p->name;
    // Rule 1: the report first; it goes with the scope.
    if (auto report = b.scope_report(scope->scope_id))
      out.report = std::move(*report);
    else
      out.report_error = report.error().message;
    // Rule 4: survivors of the kill stay confined.
    if (ending == Ending::drained && b.populated(c.cgroup)) {
      out.kept = true;
      return {};
    }
    // Rule 2: the scope before its slot.
    if (Status s = b.remove_scope(c.cgroup, c.cgroup_id); !s) return s;
    return release_slot(b, out.slot);
  });
  if (!st) return st.error();
  return out;
}

Result<Released> release(Backend& b, const CgroupRef& cg, Ending ending) {
  Result<Released> out = Released{};
  Status st = b.with_lock([&]() -> Status {
    auto scopes = b.scopes();
    if (!scopes) return scopes.error();
    auto it = std::find_if(scopes->begin(), scopes->end(),
                           [&](const bpf::ScopeInfo& s) { return s.cgroup_id == cg.id; });
    if (it == scopes->end()) return Error{cg.path.string() + " is not confined by agentcage", ENOENT};
    Confinement c;
    c.cgroup_id = cg.id;
    c.cgroup = cg.path;
    c.slot = it->policy_slot;
    out = release(b, c, ending);
    return {};
  });
  if (!st) return st.error();
  return out;
}

Result<uint32_t> allocate_named_slot(Backend& b, const std::vector<uint32_t>& reserved,
                                     const std::function<Status(uint32_t)>& install) {
  uint32_t chosen = 0;
  Status st = b.with_lock([&]() -> Status {
    auto view = snapshot(b);
    if (!view) return view.error();
    auto slot = choose_named_slot(*view, reserved);
    if (!slot) return slot.error();
    chosen = *slot;
    return install(chosen);
  });
  if (!st) return st.error();
  return chosen;
}

Result<Confinement> confine(bpf::Enforcer& enforcer, const CgroupRef& cgroup, const PolicyRef& policy,
                            const std::string& workspace, uint32_t arm_tgid) {
  EnforcerBackend b(enforcer);
  return confine(b, cgroup, policy, workspace, arm_tgid);
}

Result<Released> release(bpf::Enforcer& enforcer, const Confinement& confinement, Ending ending) {
  EnforcerBackend b(enforcer);
  return release(b, confinement, ending);
}

Result<bpf::ScopeReport> report(bpf::Enforcer& enforcer, const Confinement& confinement) {
  return enforcer.scope_report(confinement.cgroup_id);
}

Result<UniqueFd> record(bpf::Enforcer& enforcer, const Confinement& confinement) {
  return enforcer.record_scope(confinement.cgroup_id);
}

Result<Released> release(bpf::Enforcer& enforcer, const CgroupRef& cgroup, Ending ending) {
  EnforcerBackend b(enforcer);
  return release(b, cgroup, ending);
}

Result<uint32_t> allocate_named_slot(bpf::Enforcer& enforcer, const std::vector<uint32_t>& reserved,
                                     const std::function<Status(uint32_t)>& install) {
  EnforcerBackend b(enforcer);
  return allocate_named_slot(b, reserved, install);
}

}  // namespace agentcage::scope
