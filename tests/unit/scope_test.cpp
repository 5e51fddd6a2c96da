// SPDX-License-Identifier: Apache-2.0
// The scope lifecycle without a kernel: the slot choice (scope/slots.h) on
// snapshots of the maps, and confine/release (scope/scope.h) against a fake
// backend that records the order of every map operation.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "scope/attach.h"
#include "scope/scope.h"
#include "scope/slots.h"

namespace agentcage::scope {
namespace {

bpf::PolicyInfo transient(uint32_t slot, const std::string& name, uint64_t digest = 1) {
  return bpf::PolicyInfo{slot, name, AC_POLICY_OWNER_TRANSIENT, 0, digest};
}

bpf::PolicyInfo named(uint32_t slot, const std::string& name, uint64_t digest = 1) {
  return bpf::PolicyInfo{slot, name, AC_POLICY_OWNER_NAMED, 0, digest};
}

bpf::ScopeInfo scope_on(uint32_t slot, uint64_t cgroup_id = 0) {
  if (!cgroup_id) cgroup_id = 1000 + slot;
  return bpf::ScopeInfo{cgroup_id, cgroup_id, slot, 2, ""};
}

// Every slot holds a policy: named ones from `first_named` on, transient
// ones below.
SlotView full(uint32_t first_named) {
  SlotView v;
  for (uint32_t s = 0; s < AC_MAX_POLICIES; ++s)
    v.policies.push_back(s < first_named ? transient(s, "t" + std::to_string(s))
                                         : named(s, "n" + std::to_string(s)));
  return v;
}

// ---- the slot choice ----------------------------------------------------------

TEST(SlotChoice, ReusesATransientSlotWithTheSameNameAndRules) {
  SlotView v;
  v.policies = {transient(0, "other", 7), transient(3, "p", 7), transient(4, "p", 8)};
  v.scopes = {scope_on(3)};  // shared with a running scope: still reused
  auto c = choose_transient_slot(v, "p", 7, false);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->slot, 3u);
  EXPECT_FALSE(c->install);
  EXPECT_TRUE(c->transient);
}

TEST(SlotChoice, OtherRulesOrAnotherNameGetAFreshSlot) {
  SlotView v;
  v.policies = {transient(0, "p", 7), transient(1, "q", 8)};
  auto c = choose_transient_slot(v, "p", 8, false);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->slot, 2u);
  EXPECT_TRUE(c->install);
}

TEST(SlotChoice, ANamedSlotIsSharedOnlyByRunsAndOnlyWithTheSameRules) {
  SlotView v;
  v.policies = {named(5, "p", 7), transient(6, "p", 7)};
  auto run = choose_transient_slot(v, "p", 7, true);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->slot, 5u);
  EXPECT_FALSE(run->install);
  EXPECT_FALSE(run->transient);
  auto attach = choose_transient_slot(v, "p", 7, false);
  ASSERT_TRUE(attach);
  EXPECT_EQ(attach->slot, 6u) << "attach keeps a transient slot";
  auto changed = choose_transient_slot(v, "p", 9, true);
  ASSERT_TRUE(changed);
  EXPECT_NE(changed->slot, 5u) << "the daemon's slot holds other rules";
  EXPECT_TRUE(changed->install);
}

TEST(SlotChoice, NeverASlotAScopePointsAt) {
  // Slot 0 lost its policy (the daemon's file was deleted) but a scope still
  // points at it and fails closed: it must not inherit the next policy.
  SlotView v;
  v.scopes = {scope_on(0)};
  auto c = choose_transient_slot(v, "p", 7, false);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->slot, 1u);
  auto n = choose_named_slot(v, {});
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u);
}

TEST(SlotChoice, WhenFullAnUnusedCachedTransientIsReplaced) {
  SlotView v = full(8);
  for (uint32_t s = 0; s < 5; ++s) v.scopes.push_back(scope_on(s));  // transient 0..4 in use
  auto c = choose_transient_slot(v, "new", 7, false);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->slot, 5u) << "the lowest transient slot no scope points at";
  EXPECT_TRUE(c->install);
  EXPECT_TRUE(c->transient);
}

TEST(SlotChoice, NamedPoliciesAreNeverReplaced) {
  SlotView v = full(0);  // every slot named, none in use
  auto c = choose_transient_slot(v, "new", 7, false);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ENOSPC);
  EXPECT_NE(c.error().message.find("policy slots are in use"), std::string::npos) << c.error().message;
}

TEST(SlotChoice, AllInUseIsAnError) {
  SlotView v = full(AC_MAX_POLICIES);                                              // every slot transient ...
  for (uint32_t s = 0; s < AC_MAX_POLICIES; ++s) v.scopes.push_back(scope_on(s));  // ... and in use
  auto c = choose_transient_slot(v, "new", 7, false);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ENOSPC);
  auto n = choose_named_slot(v, {});
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().code, ENOSPC);
}

TEST(SlotChoice, NamedAllocationSkipsPoliciesScopesAndReservations) {
  SlotView v;
  v.policies = {transient(0, "cached"), named(1, "a")};
  v.scopes = {scope_on(2)};  // a scope on a slot without a policy
  auto n = choose_named_slot(v, {3});
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 4u);
}

TEST(SlotChoice, NamedAllocationNeverEvictsACachedTransient) {
  SlotView v = full(AC_MAX_POLICIES);  // all transient, none in use
  auto n = choose_named_slot(v, {});
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().code, ENOSPC);
}

TEST(SlotEvictions, KeepsAtMostTheCacheBoundAndTheOneJustReleased) {
  SlotView v;
  const uint32_t n = kCachedTransient + 3;
  for (uint32_t s = 0; s < n; ++s) v.policies.push_back(transient(s, "t" + std::to_string(s)));
  v.policies.push_back(named(40, "daemon"));
  v.scopes = {scope_on(1)};  // in use: not a candidate, not counted
  auto victims = transient_evictions(v, 0);
  // n transient, one in use: n - 1 unused, kCachedTransient of them stay.
  ASSERT_EQ(victims.size(), n - 1 - kCachedTransient);
  EXPECT_EQ(std::count(victims.begin(), victims.end(), 0u), 0) << "the one just released stays";
  EXPECT_EQ(std::count(victims.begin(), victims.end(), 1u), 0) << "a slot in use is never evicted";
  EXPECT_EQ(std::count(victims.begin(), victims.end(), 40u), 0) << "a named slot is never evicted";
  EXPECT_EQ(victims, (std::vector<uint32_t>{2, 3}));
}

TEST(SlotEvictions, NothingBelowTheBound) {
  SlotView v;
  for (uint32_t s = 0; s < kCachedTransient; ++s) v.policies.push_back(transient(s, "t" + std::to_string(s)));
  EXPECT_TRUE(transient_evictions(v, 3).empty());
}

// ---- confine and release, in order ----------------------------------------------

// The maps as plain containers; every operation is logged.
class FakeBackend : public Backend {
 public:
  Status with_lock(const std::function<Status()>& fn) override {
    ++depth;
    Status st = fn();
    --depth;
    return st;
  }
  Result<std::vector<bpf::PolicyInfo>> policies() override {
    std::vector<bpf::PolicyInfo> out;
    for (const auto& [slot, p] : pols) out.push_back(p);
    return out;
  }
  Result<std::vector<bpf::ScopeInfo>> scopes() override {
    std::vector<bpf::ScopeInfo> out;
    for (const auto& [id, s] : scps) out.push_back(s);
    return out;
  }
  Status put_transient_policy(uint32_t slot, const std::string& name,
                              const bpf::CompiledPolicy& policy) override {
    log("put " + std::to_string(slot));
    pols[slot] = transient(slot, name, bpf::policy_digest(name, policy));
    return {};
  }
  Status remove_policy(uint32_t slot) override {
    log("remove_policy " + std::to_string(slot));
    pols.erase(slot);
    return {};
  }
  Status add_scope(const std::filesystem::path& path, uint64_t cgroup_id, unsigned level,
                   bool filter_at_parent, uint64_t scope_id, uint32_t slot, const std::string& workspace,
                   uint16_t flags, uint16_t dns_port, uint32_t arm_tgid) override {
    log("add_scope " + std::to_string(cgroup_id) + (flags ? " flags " + std::to_string(flags) : "") +
        (filter_at_parent ? " filter at parent" : "") + (dns_port ? " dns " + std::to_string(dns_port) : "") +
        (arm_tgid ? " arm " + std::to_string(arm_tgid) : ""));
    paths[cgroup_id] = path;
    if (fail_add_scope) return Error{"add_scope failed", ENOMEM};
    scps[cgroup_id] = bpf::ScopeInfo{cgroup_id, scope_id, slot, level, workspace, flags, arm_tgid};
    workspaces[cgroup_id] = workspace;
    reports[scope_id] = bpf::ScopeReport{};
    return {};
  }
  Status remove_scope(const std::filesystem::path& path, uint64_t cgroup_id) override {
    log("remove_scope " + std::to_string(cgroup_id));
    removed_paths[cgroup_id] = path;
    if (auto it = scps.find(cgroup_id); it != scps.end()) {
      reports.erase(it->second.scope_id);
      scps.erase(it);
    }
    return {};
  }
  Result<bpf::ScopeReport> scope_report(uint64_t scope_id) override {
    log("report " + std::to_string(scope_id));
    auto it = reports.find(scope_id);
    if (it == reports.end()) return Error{"no report", ENOENT};
    return it->second;
  }
  bool populated(const std::filesystem::path& cgroup) override { return busy.count(cgroup.string()) > 0; }
  Result<std::vector<cgroup::CgroupNode>> ancestors(const std::filesystem::path& path, unsigned) override {
    auto it = above.find(path.string());
    return it == above.end() ? std::vector<cgroup::CgroupNode>{} : it->second;
  }
  Result<std::vector<cgroup::CgroupNode>> descendants(const std::filesystem::path& path) override {
    auto it = below.find(path.string());
    return it == below.end() ? std::vector<cgroup::CgroupNode>{} : it->second;
  }

  void log(const std::string& op) {
    EXPECT_GT(depth, 0) << op << " outside the lock";
    ops.push_back(op);
  }
  // Index of `op` in the log (ops.size() when absent).
  size_t at(const std::string& op) const {
    return static_cast<size_t>(std::find(ops.begin(), ops.end(), op) - ops.begin());
  }

  std::map<uint32_t, bpf::PolicyInfo> pols;
  std::map<uint64_t, bpf::ScopeInfo> scps;
  std::map<uint64_t, bpf::ScopeReport> reports;
  std::map<uint64_t, std::string> workspaces;
  std::set<std::string> busy;                                           // populated cgroups
  std::map<std::string, std::vector<cgroup::CgroupNode>> above, below;  // by cgroup path
  std::vector<std::string> ops;
  bool fail_add_scope = false;
  // The cgroup directory each scope was added and removed with (where the
  // receive filter is attached and detached).
  std::map<uint64_t, std::filesystem::path> paths, removed_paths;
  int depth = 0;
};

bpf::CompiledPolicy usr_only() {
  bpf::CompiledPolicy p;
  p.paths.push_back({"/usr", AC_ACCESS_READ, bpf::RuleSpace::absolute});
  return p;
}

CgroupRef cgroup_ref(uint64_t id) { return CgroupRef{id, 3, "/sys/fs/cgroup/test/" + std::to_string(id)}; }

TEST(Confine, InstallsATransientPolicyAndRegistersTheScope) {
  FakeBackend b;
  auto c = confine(b, cgroup_ref(77), TransientPolicy{"p", usr_only(), false}, "/ws");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cgroup_id, 77u);
  EXPECT_EQ(c->slot, 0u);
  EXPECT_TRUE(c->transient);
  EXPECT_EQ(c->policy_name, "p");
  EXPECT_LT(b.at("put 0"), b.at("add_scope 77")) << "the policy is in its slot before a scope points at it";
  EXPECT_EQ(b.scps.at(77).scope_id, 77u) << "the scope id is the cgroup id";
  EXPECT_EQ(b.workspaces.at(77), "/ws");
  EXPECT_EQ(b.paths.at(77), "/sys/fs/cgroup/test/77") << "the receive filter goes on the confined cgroup";
}

// A run's cgroup, right below the run parent: confine passes on that the
// receive filter may be kept on that parent (the Enforcer decides where it
// goes: bpf::ScopeCgroup); for any other cgroup, it does not.
TEST(Confine, AsksForTheReceiveFilterOnTheParentOnlyForARunsCgroup) {
  FakeBackend b;
  CgroupRef run = cgroup_ref(77);
  run.filter_at_parent = true;
  ASSERT_TRUE(confine(b, run, TransientPolicy{"p", usr_only(), false}, "/ws"));
  ASSERT_TRUE(confine(b, cgroup_ref(78), TransientPolicy{"p", usr_only(), false}, "/ws"));
  EXPECT_LT(b.at("add_scope 77 filter at parent"), b.ops.size()) << testing::PrintToString(b.ops);
  EXPECT_LT(b.at("add_scope 78"), b.ops.size()) << testing::PrintToString(b.ops);
}

// A container's init at the OCI createRuntime hook: the scope is registered
// pending for its pid (the kernel arms it at that process's exec), on the
// named slot like any daemon attach; without a pid it is armed at once.
TEST(Confine, RegistersAScopePendingUntilTheExecOfAPid) {
  FakeBackend b;
  b.pols[3] = named(3, "box");
  auto c = confine(b, cgroup_ref(77), NamedPolicy{"box", 3}, "/ws", 4242);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->arm_tgid, 4242u);
  EXPECT_EQ(b.scps.at(77).arm_tgid, 4242u);
  EXPECT_EQ(b.scps.at(77).policy_slot, 3u);
  EXPECT_LT(b.at("add_scope 77 arm 4242"), b.ops.size());
  auto armed = confine(b, cgroup_ref(78), NamedPolicy{"box", 3}, "/ws");
  ASSERT_TRUE(armed) << armed.error().message;
  EXPECT_EQ(armed->arm_tgid, 0u);
  EXPECT_EQ(b.scps.at(78).arm_tgid, 0u);
  // Pending or not, it is a scope: a second confine of the cgroup is refused.
  auto again = confine(b, cgroup_ref(77), NamedPolicy{"box", 3}, "/ws", 4243);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EEXIST);
  EXPECT_NE(again.error().message.find("(policy box, slot 3; pending until pid 4242 execs)"), std::string::npos)
      << again.error().message;
  EXPECT_EQ(b.scps.at(77).arm_tgid, 4242u) << "left as it was";
}

// Every file of a workspace that lies under a denied name would be denied:
// refused before anything is written, with the pattern and the fix.
TEST(Confine, RefusesAWorkspaceANameRuleDeniesWhole) {
  FakeBackend b;
  bpf::CompiledPolicy p = usr_only();
  p.names = {{bpf::NameRule::Kind::exact, ".cache"}, {bpf::NameRule::Kind::suffix, ".d"}};
  p.flags |= AC_POLICY_F_NAMES;
  auto c = confine(b, cgroup_ref(77), TransientPolicy{"p", p, false}, "/home/u/.cache/agent/ws");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EINVAL);
  EXPECT_NE(c.error().message.find("files.deny '**/.cache' of policy p denies"), std::string::npos)
      << c.error().message;
  EXPECT_TRUE(b.ops.empty()) << "nothing written";
  EXPECT_FALSE(confine(b, cgroup_ref(77), TransientPolicy{"p", p, false}, "/srv/conf.d/ws"));
  EXPECT_TRUE(confine(b, cgroup_ref(77), TransientPolicy{"p", p, false}, "/srv/.cached/ws"));
}

// The run writes its workspace: a program in it, or a directory of
// programs around it, would run what the run wrote.
TEST(Confine, RefusesAWorkspaceThatOverlapsAnAllowedProgram) {
  FakeBackend b;
  bpf::CompiledPolicy p = usr_only();
  p.paths.push_back({"/srv/tools", AC_ACCESS_READ | AC_ACCESS_EXEC, bpf::RuleSpace::absolute});
  auto under = confine(b, cgroup_ref(77), TransientPolicy{"p", p, false}, "/srv/tools/ws");
  ASSERT_FALSE(under);
  EXPECT_NE(
      under.error().message.find("the workspace /srv/tools/ws and exec.allow /srv/tools of policy p overlap"),
      std::string::npos)
      << under.error().message;
  EXPECT_FALSE(confine(b, cgroup_ref(77), TransientPolicy{"p", p, false}, "/srv"));
  EXPECT_TRUE(b.ops.empty()) << "nothing written";
  EXPECT_TRUE(confine(b, cgroup_ref(77), TransientPolicy{"p", p, false}, "/srv/toolsmith"));
}

TEST(Confine, RefusesAnAlreadyConfinedCgroupAndChangesNothing) {
  FakeBackend b;
  ASSERT_TRUE(confine(b, cgroup_ref(77), TransientPolicy{"p", usr_only(), false}, ""));
  b.ops.clear();
  auto again = confine(b, cgroup_ref(77), TransientPolicy{"q", usr_only(), false}, "");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EEXIST);
  EXPECT_NE(again.error().message.find(
                "/sys/fs/cgroup/test/77 is already confined by agentcage (policy p, slot 0)"),
            std::string::npos)
      << again.error().message;
  EXPECT_NE(again.error().message.find("agentcage detach --cgroup /sys/fs/cgroup/test/77"),
            std::string::npos);
  EXPECT_TRUE(b.ops.empty()) << "nothing written";
  EXPECT_EQ(b.pols.size(), 1u);

  // The same for the daemon's named policies.
  b.pols[9] = named(9, "daemon");
  auto named_again = confine(b, cgroup_ref(77), NamedPolicy{"daemon", 9}, "");
  ASSERT_FALSE(named_again);
  EXPECT_EQ(named_again.error().code, EEXIST);
}

// The kernel applies a task's outermost scope: a scope above a confined
// cgroup would replace its policy, one below an attached cgroup would be
// ignored. Both are refused, and nothing is written.
TEST(Confine, RefusesToNestScopesEitherWay) {
  FakeBackend b;
  ASSERT_TRUE(confine(b, cgroup_ref(77), TransientPolicy{"run", usr_only(), false}, ""));
  b.ops.clear();

  // Above the run's cgroup.
  CgroupRef parent{70, 2, "/sys/fs/cgroup/test"};
  b.below[parent.path.string()] = {{77, "/sys/fs/cgroup/test/77"}, {78, "/sys/fs/cgroup/test/78"}};
  auto outer = confine(b, parent, TransientPolicy{"loose", bpf::CompiledPolicy{}, false}, "");
  ASSERT_FALSE(outer);
  EXPECT_EQ(outer.error().code, EEXIST);
  EXPECT_NE(outer.error().message.find("/sys/fs/cgroup/test contains /sys/fs/cgroup/test/77, which agentcage "
                                       "confines (policy run)"),
            std::string::npos)
      << outer.error().message;
  EXPECT_NE(outer.error().message.find("agentcage detach --cgroup /sys/fs/cgroup/test/77"),
            std::string::npos);

  // Below it.
  CgroupRef child{79, 4, "/sys/fs/cgroup/test/77/sub"};
  b.above[child.path.string()] = {{77, "/sys/fs/cgroup/test/77"}, {70, "/sys/fs/cgroup/test"}};
  auto inner = confine(b, child, TransientPolicy{"other", usr_only(), false}, "");
  ASSERT_FALSE(inner);
  EXPECT_EQ(inner.error().code, EEXIST);
  EXPECT_NE(inner.error().message.find("/sys/fs/cgroup/test/77/sub is inside /sys/fs/cgroup/test/77, which "
                                       "agentcage confines (policy run)"),
            std::string::npos)
      << inner.error().message;

  EXPECT_TRUE(b.ops.empty()) << "nothing written";
  EXPECT_EQ(b.scps.size(), 1u);
  EXPECT_EQ(b.pols.size(), 1u);

  // A sibling is no nesting.
  CgroupRef sibling{78, 3, "/sys/fs/cgroup/test/78"};
  b.above[sibling.path.string()] = {{70, "/sys/fs/cgroup/test"}};
  EXPECT_TRUE(confine(b, sibling, TransientPolicy{"other", usr_only(), false}, ""));
}

TEST(Confine, ANamedPolicyMustStillBeInItsSlot) {
  FakeBackend b;
  b.pols[4] = named(4, "other");
  auto c = confine(b, cgroup_ref(5), NamedPolicy{"daemon", 4}, "");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ENOENT);
  EXPECT_TRUE(b.scps.empty());
}

TEST(Confine, ARunSharesTheDaemonsSlotWithTheSameRules) {
  FakeBackend b;
  b.pols[6] = named(6, "p", bpf::policy_digest("p", usr_only()));
  auto c = confine(b, cgroup_ref(5), TransientPolicy{"p", usr_only(), true}, "");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->slot, 6u);
  EXPECT_FALSE(c->transient);
  EXPECT_EQ(b.at("put 6"), b.ops.size()) << "the daemon's policy is not rewritten";
}

TEST(Confine, AFailedRegistrationLeavesNoScope) {
  FakeBackend b;
  b.fail_add_scope = true;
  auto c = confine(b, cgroup_ref(5), TransientPolicy{"p", usr_only(), false}, "");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ENOMEM);
  EXPECT_TRUE(b.scps.empty());
}

TEST(Release, ReadsTheReportThenRemovesTheScopeThenReleasesTheSlot) {
  FakeBackend b;
  // A full cache of unused transient policies, so releasing this slot evicts one.
  for (uint32_t s = 10; s < 10 + kCachedTransient; ++s)
    b.pols[s] = transient(s, "cached" + std::to_string(s));
  auto c = confine(b, cgroup_ref(5), TransientPolicy{"p", usr_only(), false}, "");
  ASSERT_TRUE(c);
  b.reports[5].denied[AC_HOOK_FILE_OPEN] = 2;
  b.reports[5].audited[AC_HOOK_EXEC] = 1;
  b.ops.clear();

  auto r = release(b, *c, Ending::drained);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->report);
  EXPECT_EQ(r->report->denied_total(), 2u);
  EXPECT_EQ(r->report->audited_total(), 1u);
  EXPECT_EQ(r->policy_name, "p");
  EXPECT_EQ(r->slot, c->slot);
  EXPECT_FALSE(r->kept);
  EXPECT_LT(b.at("report 5"), b.at("remove_scope 5")) << "the report goes with the scope";
  EXPECT_LT(b.at("remove_scope 5"), b.at("remove_policy 10")) << "the scope goes before its slot is released";
  EXPECT_EQ(b.removed_paths.at(5), "/sys/fs/cgroup/test/5") << "the receive filter comes off the same cgroup";
  EXPECT_TRUE(b.scps.empty());
  EXPECT_TRUE(b.pols.count(c->slot)) << "the slot just released stays cached";
  EXPECT_EQ(b.pols.size(), kCachedTransient);
}

TEST(Release, SurvivorsStayConfined) {
  FakeBackend b;
  auto c = confine(b, cgroup_ref(5), TransientPolicy{"p", usr_only(), false}, "");
  ASSERT_TRUE(c);
  b.busy.insert(c->cgroup.string());
  b.ops.clear();
  auto r = release(b, *c, Ending::drained);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->kept);
  EXPECT_TRUE(r->report) << "the report is read all the same";
  EXPECT_EQ(b.at("remove_scope 5"), b.ops.size()) << "not removed from a populated cgroup";
  EXPECT_TRUE(b.scps.count(5));
  EXPECT_TRUE(b.pols.count(c->slot));

  // Drained later: released then.
  b.busy.clear();
  auto again = release(b, *c, Ending::drained);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->kept);
  EXPECT_TRUE(b.scps.empty());
}

TEST(Release, DetachLetsRunningProcessesGo) {
  FakeBackend b;
  auto c = confine(b, cgroup_ref(5), TransientPolicy{"p", usr_only(), false}, "");
  ASSERT_TRUE(c);
  b.busy.insert(c->cgroup.string());
  auto r = release(b, cgroup_ref(5), Ending::detach);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->kept);
  EXPECT_EQ(r->policy_name, "p");
  EXPECT_TRUE(b.scps.empty());
}

TEST(Release, ACgroupThatIsNotConfinedIsAnErrorForDetachButNotForARetry) {
  FakeBackend b;
  auto r = release(b, cgroup_ref(5), Ending::detach);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOENT);
  EXPECT_NE(r.error().message.find("/sys/fs/cgroup/test/5 is not confined by agentcage"), std::string::npos);

  auto c = confine(b, cgroup_ref(6), TransientPolicy{"p", usr_only(), false}, "");
  ASSERT_TRUE(c);
  ASSERT_TRUE(release(b, *c, Ending::drained));
  auto twice = release(b, *c, Ending::drained);
  ASSERT_TRUE(twice) << twice.error().message;
  EXPECT_FALSE(twice->report);
}

TEST(Release, TheDaemonsNamedSlotIsNeverEvicted) {
  FakeBackend b;
  b.pols[6] = named(6, "p", bpf::policy_digest("p", usr_only()));
  for (uint32_t s = 10; s < 11 + kCachedTransient; ++s)
    b.pols[s] = transient(s, "cached" + std::to_string(s));
  auto c = confine(b, cgroup_ref(5), TransientPolicy{"p", usr_only(), true}, "");
  ASSERT_TRUE(c);
  ASSERT_TRUE(release(b, *c, Ending::drained));
  EXPECT_TRUE(b.pols.count(6));
}

TEST(AllocateNamedSlot, InstallsUnderTheSameLock) {
  FakeBackend b;
  b.pols[0] = transient(0, "cached");
  b.scps[9] = scope_on(1, 9);
  int depth_at_install = 0;
  auto slot = allocate_named_slot(b, {2}, [&](uint32_t s) -> Status {
    depth_at_install = b.depth;
    b.pols[s] = named(s, "d");
    return {};
  });
  ASSERT_TRUE(slot) << slot.error().message;
  EXPECT_EQ(*slot, 3u);
  EXPECT_GT(depth_at_install, 0);
  auto failed = allocate_named_slot(b, {}, [](uint32_t) -> Status { return Error{"disk on fire", EIO}; });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, EIO);
}

}  // namespace
}  // namespace agentcage::scope

// `agentcage attach` has no resolver to give a cgroup: a policy with domain
// rules is refused with the rule's place, before anything is looked up or
// changed (the cgroup named does not even exist).
TEST(Attach, RefusesAPolicyWithDomainRules) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("agentcage-attach-dns-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "named.yaml";
  std::ofstream(file) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: named\nspec:\n"
                         "  network:\n    allow:\n      - {domain: api.example.com, ports: [443]}\n";
  std::vector<std::string> diagnostics;
  auto attached =
      agentcage::scope::attach({"/nonexistent/cgroup", file.string(), "", "", std::nullopt}, diagnostics);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(attached.ok());
  EXPECT_EQ(attached.error().code, EINVAL);
  EXPECT_NE(attached.error().message.find("allows destinations by name (" + file.string() + ":8:"),
            std::string::npos)
      << attached.error().message;
  EXPECT_NE(attached.error().message.find("agentcage run"), std::string::npos) << attached.error().message;
}
