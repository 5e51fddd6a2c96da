// SPDX-License-Identifier: Apache-2.0
// Run cgroups' layout (cgroup/delegation.h): the pure decisions, and
// prepare_parent's writes on a file tree shaped like a cgroup hierarchy (the
// kernel's own behaviour is the kernel test DaemonDelegation.*).
#include "cgroup/delegation.h"

#include <stdlib.h>

#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

namespace agentcage::cgroup {
namespace {

TEST(ProcCgroup, TakesTheUnifiedEntry) {
  EXPECT_EQ(parse_proc_cgroup("0::/system.slice/agentcage.service\n"), "system.slice/agentcage.service");
  EXPECT_EQ(parse_proc_cgroup("0::/\n"), "");
  // Hybrid hosts list v1 hierarchies first.
  EXPECT_EQ(parse_proc_cgroup("12:memory:/x\n1:name=systemd:/y\n0::/init.scope\n"), "init.scope");
  EXPECT_FALSE(parse_proc_cgroup("12:memory:/x\n").has_value());
  EXPECT_FALSE(parse_proc_cgroup("").has_value());
  EXPECT_FALSE(parse_proc_cgroup("0::relative\n").has_value());
}

TEST(CgroupLayout, SettingWords) {
  EXPECT_EQ(parse_layout_setting("auto"), LayoutSetting::automatic);
  EXPECT_EQ(parse_layout_setting("delegated"), LayoutSetting::delegated);
  EXPECT_EQ(parse_layout_setting("fixed"), LayoutSetting::fixed);
  EXPECT_FALSE(parse_layout_setting("Auto").has_value());
  for (auto s : {LayoutSetting::automatic, LayoutSetting::delegated, LayoutSetting::fixed})
    EXPECT_EQ(parse_layout_setting(layout_setting_name(s)), s);
}

const std::string kUnit = "system.slice/agentcage.service";

TEST(CgroupLayout, AutoTakesTheDaemonsOwnDelegatedCgroup) {
  auto l = choose_layout(LayoutSetting::automatic, "agentcage/runs", kUnit, kUnit);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->delegated);
  EXPECT_EQ(l->delegate, kUnit);
  EXPECT_EQ(l->parent, kUnit + "/runs");
  EXPECT_EQ(l->leaf, kUnit + "/daemon");
  // Started again from the leaf an earlier start made: the same layout.
  auto again = choose_layout(LayoutSetting::automatic, "agentcage/runs", kUnit + "/daemon", kUnit);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->delegated);
  EXPECT_EQ(again->parent, kUnit + "/runs");
  // "delegated" says the same when the cgroup is delegated.
  auto strict = choose_layout(LayoutSetting::delegated, "agentcage/runs", kUnit, kUnit);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict->parent, kUnit + "/runs");
}

TEST(CgroupLayout, AutoWithoutDelegationIsTheFixedLayout) {
  for (const std::string& own :
       {std::string(""), kUnit, std::string("user.slice/user-0.slice/session-3.scope")}) {
    auto l = choose_layout(LayoutSetting::automatic, "agentcage/runs", own, std::nullopt);
    ASSERT_TRUE(l.ok()) << own;
    EXPECT_FALSE(l->delegated);
    EXPECT_EQ(l->parent, "agentcage/runs");
    EXPECT_NE(l->reason.find("not delegated"), std::string::npos) << l->reason;
  }
}

TEST(CgroupLayout, AnotherManagersDelegationIsNotTheDaemons) {
  // A daemon started inside a user's systemd (whose user@.service is
  // delegated): moving that manager's processes would break it.
  const std::string user = "user.slice/user-1000.slice/user@1000.service";
  auto l =
      choose_layout(LayoutSetting::automatic, "agentcage/runs", user + "/app.slice/agentcage.service", user);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->delegated);
  EXPECT_EQ(l->parent, "agentcage/runs");
  EXPECT_NE(l->reason.find("another manager"), std::string::npos) << l->reason;
  auto strict =
      choose_layout(LayoutSetting::delegated, "agentcage/runs", user + "/app.slice/x.service", user);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message.find("another manager"), std::string::npos);
}

TEST(CgroupLayout, DelegatedRefusesACgroupThatIsNotDelegated) {
  auto l = choose_layout(LayoutSetting::delegated, "agentcage/runs", kUnit, std::nullopt);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(
      l.error().message,
      "cgroup_layout: delegated, but the daemon's cgroup /" + kUnit +
          " is not delegated to it (no trusted.delegate attribute): run the daemon as a systemd service "
          "with Delegate=yes (packaging/systemd/agentcage.service), or set cgroup_layout: auto");
  EXPECT_FALSE(choose_layout(LayoutSetting::delegated, "agentcage/runs", "", std::nullopt).ok());
}

TEST(CgroupLayout, FixedIgnoresDelegation) {
  auto l = choose_layout(LayoutSetting::fixed, "custom/runs", kUnit, kUnit);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->delegated);
  EXPECT_EQ(l->parent, "custom/runs");
}

// A directory tree with the cgroup interface files prepare_parent reads and
// writes; `marked` plays the trusted.delegate attribute.
class FakeHierarchy : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agentcage-delegation-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // A cgroup at `rel` offering `controllers`, with `enabled` for its children.
  void cgroup(const std::string& rel, const std::string& controllers, const std::string& enabled) {
    fs::path dir = rel.empty() ? root_ : root_ / rel;
    fs::create_directories(dir);
    std::ofstream(dir / "cgroup.controllers") << controllers << "\n";
    std::ofstream(dir / "cgroup.subtree_control") << enabled << "\n";
  }
  std::string subtree(const std::string& rel) {
    std::ifstream in((rel.empty() ? root_ : root_ / rel) / "cgroup.subtree_control");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  DelegationMark marks(std::set<std::string> rels) {
    return
        [this, rels](const fs::path& dir) { return rels.count(dir.lexically_relative(root_).string()) > 0; };
  }
  fs::path root_;
};

TEST_F(FakeHierarchy, NothingAboveTheDelegatedCgroupIsWritten) {
  // As systemd leaves it: the root and the slice enable what the unit got,
  // not cpu (no unit asked for it); the unit's own subtree is agentcage's.
  cgroup("", "cpuset cpu io memory pids", "memory pids");
  cgroup("system.slice", "memory pids", "memory pids");
  cgroup(kUnit, "memory pids", "");
  cgroup(kUnit + "/runs", "memory pids", "memory pids");  // what the kernel shows once the unit enabled them
  const std::string root_before = subtree(""), slice_before = subtree("system.slice");
  auto parent = prepare_parent(root_, kUnit + "/runs", {"memory", "pids"}, marks({kUnit}));
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  EXPECT_EQ(*parent, root_ / kUnit / "runs");
  EXPECT_EQ(subtree(""), root_before);  // no "+cpu" at the root, although it offers cpu
  EXPECT_EQ(subtree("system.slice"), slice_before);
  EXPECT_NE(subtree(kUnit), "\n");  // the unit's own: written
}

TEST_F(FakeHierarchy, AControllerTheUnitWasNotGivenFailsWithTheUnitSetting) {
  cgroup("", "cpu memory pids", "cpu memory pids");
  cgroup("system.slice", "cpu memory pids", "pids");
  cgroup(kUnit, "pids", "");
  const std::string root_before = subtree(""), slice_before = subtree("system.slice");
  auto parent = prepare_parent(root_, kUnit + "/runs", {"memory"}, marks({kUnit}));
  ASSERT_FALSE(parent.ok());
  EXPECT_EQ(parent.error().code, ENOTSUP);
  EXPECT_EQ(parent.error().message, "cgroup: the memory controller is not delegated to " +
                                        (root_ / kUnit).string() + " (needed for the memory limit)");
  EXPECT_EQ(subtree(""), root_before);
  EXPECT_EQ(subtree("system.slice"), slice_before);
  EXPECT_FALSE(fs::exists(root_ / kUnit / "runs"));
  const std::string fix = controller_fix(root_, kUnit + "/runs", marks({kUnit}));
  EXPECT_NE(fix.find("Delegate=yes (or at least Delegate=memory pids cpu)"), std::string::npos) << fix;
  EXPECT_NE(fix.find((root_ / kUnit).string()), std::string::npos) << fix;
}

TEST_F(FakeHierarchy, TheDeepestDelegatedCgroupIsTheBoundary) {
  cgroup("", "cpu memory pids", "cpu memory pids");
  cgroup("a", "cpu memory pids", "cpu memory pids");
  cgroup("a/b", "cpu memory pids", "memory");
  cgroup("a/b/c", "memory", "");
  cgroup("a/b/c/runs", "memory", "memory");
  EXPECT_EQ(delegation_boundary(root_, root_ / "a/b/c/runs", marks({"a", "a/b"})), root_ / "a/b");
  EXPECT_EQ(delegation_boundary(root_, root_ / "a/b/c", marks({"a/b/c"})), root_ / "a/b/c");
  EXPECT_FALSE(delegation_boundary(root_, root_ / "a/b", marks({})).has_value());
  EXPECT_FALSE(delegation_boundary(root_, root_, marks({""})).has_value());  // never the root
  EXPECT_FALSE(delegation_boundary(root_, "/elsewhere/a", marks({"a"})).has_value());
  // a/b's own subtree_control lacks cpu and pids, but a/b is not ours to write.
  const std::string b_before = subtree("a/b");
  auto parent = prepare_parent(root_, "a/b/c/runs", {"memory"}, marks({"a/b/c"}));
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  EXPECT_EQ(subtree("a/b"), b_before);
}

TEST_F(FakeHierarchy, TheFixedLayoutEnablesOnlyWhatIsMissing) {
  // No delegation (no systemd): agentcage creates its levels from the root.
  cgroup("", "cpu memory pids", "cpu memory pids");
  cgroup("agentcage", "cpu memory pids", "cpu memory pids");
  cgroup("agentcage/runs", "cpu memory pids", "cpu memory pids");
  const std::string root_before = subtree("");
  ASSERT_TRUE(prepare_parent(root_, "agentcage/runs", {"memory", "pids", "cpu"}, marks({})).ok());
  EXPECT_EQ(subtree(""), root_before);  // every controller was enabled: not written
  // A controller the root offers and has not enabled is enabled there (and
  // then, as the kernel would show it, below).
  cgroup("", "cpu memory pids", "memory pids");
  cgroup("agentcage", "memory pids", "memory pids");
  cgroup("agentcage/runs", "memory pids", "memory pids");
  ASSERT_TRUE(prepare_parent(root_, "agentcage/runs", {"memory"}, marks({})).ok());
  EXPECT_NE(subtree(""), "memory pids\n");
  // One the root does not offer: the fix is the root's, not a unit's.
  cgroup("", "memory pids", "memory pids");
  auto parent = prepare_parent(root_, "agentcage/runs", {"cpu"}, marks({}));
  ASSERT_FALSE(parent.ok());
  EXPECT_EQ(parent.error().message, "cgroup: the cpu controller is not available in " + root_.string() +
                                        " (needed for the cpu limit)");
  EXPECT_NE(controller_fix(root_, "agentcage/runs", marks({})).find("'s children (echo +memory"),
            std::string::npos);
}

TEST_F(FakeHierarchy, AParentThatEnablesEveryControllerIsUsedAsItIs) {
  // As after the first run: the parent enables all of them for its
  // children, which the kernel allows only when every level above does.
  // Nothing above it is read: its interface files are gone here.
  cgroup("agentcage/runs", "cpu memory pids", "cpu memory pids");
  auto parent = prepare_parent(root_, "agentcage/runs", {"memory", "pids", "cpu"}, marks({}));
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  EXPECT_EQ(*parent, root_ / "agentcage/runs");
  EXPECT_FALSE(fs::exists(root_ / "cgroup.controllers"));
  // One of them missing there: the levels are walked (and here fail).
  cgroup("agentcage/runs", "cpu memory pids", "memory pids");
  EXPECT_FALSE(prepare_parent(root_, "agentcage/runs", {"memory"}, marks({})).ok());
}

TEST_F(FakeHierarchy, ParentMustStayBelowTheRoot) {
  cgroup("", "memory", "memory");
  for (const char* bad : {"", "/abs", "../up", "a/../../up"})
    EXPECT_EQ(prepare_parent(root_, bad, {}, marks({})).error().code, EINVAL) << bad;
}

}  // namespace
}  // namespace agentcage::cgroup
