// SPDX-License-Identifier: Apache-2.0
#include "scope/bind.h"

#include <fcntl.h>

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include "cgroup/cgroup.h"
#include "util/unique_fd.h"

namespace agentcage::scope {

namespace fs = std::filesystem;

namespace {

// The cgroup now at a binding's path: its id (0: none) and level.
struct AtPath {
  uint64_t id = 0;
  unsigned level = 0;
  fs::path dir;
  bool unreadable = false;  // something is there whose id could not be read
};

AtPath cgroup_at(const fs::path& root, const std::string& path) {
  AtPath at;
  at.dir = root / path.substr(1);
  auto id = cgroup::cgroup_id(at.dir);
  if (!id) {
    std::error_code ec;
    at.unreadable = fs::exists(at.dir, ec) || ec;
    return at;
  }
  auto level = cgroup::cgroup_level(root, at.dir);
  if (!level) {
    at.unreadable = true;
    return at;
  }
  at.id = *id;
  at.level = *level;
  return at;
}

uint32_t slot_of(const BindingSpec& spec) { return spec.policy ? spec.policy->slot : AC_SLOT_NONE; }

// Step 2 or 3 for one binding whose cgroup exists.
void settle(bpf::Enforcer& enf, const BindingSpec& spec, const AtPath& at,
            const std::map<uint64_t, bpf::ScopeInfo>& scopes, BindingStatus& out) {
  out.cgroup_id = at.id;
  auto existing = scopes.find(at.id);
  if (existing != scopes.end()) {
    if (!(existing->second.flags & AC_SCOPE_F_BOUND)) {
      out.state = BindingState::refused;
      out.detail = "the cgroup is already confined by a run or an attachment (policy slot " +
                   std::to_string(existing->second.policy_slot) + "), not by its binding; detach it (agentcage "
                   "detach --cgroup " + at.dir.string() + ") and the binding confines it";
      return;
    }
    if (Status st = enf.set_scope_slot(at.id, slot_of(spec)); !st) {
      out.state = BindingState::refused;
      out.detail = st.error().message;
      return;
    }
    if (existing->second.flags & AC_SCOPE_F_INCOMPLETE) {
      UniqueFd dir(::open(at.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      Status st = dir ? enf.complete_scope({dir.get(), at.id, at.level})
                      : Status(Error::from_errno("opening cgroup " + at.dir.string()));
      if (!st) {
        // Still confined (the kernel's scope stays); only UDP sockets
        // are refused until this succeeds.
        out.state = BindingState::confined;
        out.detail = "the UDP receive filter is not attached yet (UDP sockets are refused meanwhile): " +
                     st.error().message;
        return;
      }
    }
    out.state = BindingState::confined;
    return;
  }
  // No scope: confine it now, and say whether anything ran unconfined.
  out.late = true;
  out.late_populated = cgroup::populated(at.dir);
  CgroupRef ref{at.id, at.level, at.dir};
  ref.bound = true;
  PolicyRef policy = spec.policy ? PolicyRef(*spec.policy) : PolicyRef(DenyAll{});
  auto confined = confine(enf, ref, policy, spec.workspace);
  if (!confined) {
    out.state = BindingState::refused;
    out.detail = confined.error().message;
    return;
  }
  out.state = BindingState::confined;
}

}  // namespace

Result<Reconciled> reconcile_bindings(bpf::Enforcer& enf, const fs::path& root,
                                      const std::vector<BindingSpec>& specs) {
  Reconciled out;
  Status st = enf.with_lock([&]() -> Status {
    // Step 1.
    std::set<std::string> wanted;
    for (const auto& spec : specs) wanted.insert(spec.path);
    auto present = enf.bindings();
    if (!present) return present.error();
    for (const auto& b : *present)
      if (!wanted.count(b.path))
        if (Status s = enf.remove_binding(b.path); !s) return s;
    for (const auto& spec : specs)
      if (Status s = enf.put_binding(spec.path, slot_of(spec), spec.workspace); !s)
        return s.error().wrap("binding " + spec.path);

    // The bound scopes before the cgroups at the paths: a scope seen here
    // whose cgroup is not at its path afterwards is gone for good (cgroup
    // ids are never reused, v2 cgroups are never renamed). The other way
    // round, a unit restarted in between would lose its new scope.
    auto before = enf.scopes();
    if (!before) return before.error();
    std::vector<AtPath> at;
    std::set<uint64_t> current;
    bool uncertain = false;
    for (const auto& spec : specs) {
      at.push_back(cgroup_at(root, spec.path));
      if (at.back().id) current.insert(at.back().id);
      uncertain = uncertain || at.back().unreadable;
    }
    auto now = enf.scopes();
    if (!now) return now.error();
    std::map<uint64_t, bpf::ScopeInfo> by_id;
    for (const auto& s : *now) by_id[s.cgroup_id] = s;

    // Steps 2 and 3.
    auto counts = enf.bindings();
    for (size_t i = 0; i < specs.size(); ++i) {
      BindingStatus status;
      status.path = specs[i].path;
      if (counts)
        for (const auto& b : *counts)
          if (b.path == specs[i].path) {
            status.kernel_confined = b.confined;
            status.kernel_failed = b.failed;
          }
      if (at[i].id) settle(enf, specs[i], at[i], by_id, status);
      out.bindings.push_back(std::move(status));
    }

    // Step 4: the cgroup is gone (or no longer bound); its report goes too.
    // Not while a bound path could not be read: its scope might be one of them.
    for (const auto& s : *before) {
      if (uncertain) break;
      if (!(s.flags & AC_SCOPE_F_BOUND) || current.count(s.cgroup_id)) continue;
      Confinement gone;
      gone.cgroup_id = s.cgroup_id;
      gone.slot = s.policy_slot;
      auto released = release(enf, gone, Ending::detach);
      if (!released) return released.error();
      ++out.scopes_removed;
    }
    return {};
  });
  if (!st) return st.error();
  return out;
}

}  // namespace agentcage::scope
