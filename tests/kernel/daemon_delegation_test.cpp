// SPDX-License-Identifier: Apache-2.0
// Runs through the daemon in a cgroup systemd delegated to it
// (cgroup/delegation.h), with systemd's part emulated as systemd 252 does it
// for a service with Delegate= in a slice: the controllers enabled from the
// root down to the slice, the unit's cgroup created and marked with the
// trusted.delegate attribute, the main process started in it. The test VM's
// init is not systemd; the unit file itself is checked by
// `systemd-analyze verify` (tests/package/run). Needs root and a kernel that
// enforces (the VM: tests/vm/run --kernel 6.1|6.12).
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cgroup/cgroup.h"
#include "daemon_run_env.h"

namespace agentcage::kt {
namespace {

const std::string kUnitCgroup = "test-agentcage.slice/agentcage.service";

class DaemonDelegation : public DaemonRun {
 protected:
  void SetUp() override {
    DaemonRun::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    slice_ = root_ / "test-agentcage.slice";
    unit_ = root_ / kUnitCgroup;
    (void)cgroup::remove_tree(slice_);  // an earlier attempt's
  }

  void TearDown() override {
    DaemonRun::TearDown();  // stops the daemon
    if (!slice_.empty()) {
      Status st = cgroup::remove_tree(slice_);
      EXPECT_TRUE(st.ok()) << st.error().message;
    }
  }

  // What systemd does for a service with Delegate=CONTROLLERS in a slice:
  // enable them in the root's and the slice's cgroup.subtree_control, create
  // the unit's cgroup and (systemd's mark of delegation) set trusted.delegate.
  void emulate_systemd(const std::string& controllers, bool mark) {
    std::istringstream words(controllers);
    std::vector<std::string> cs;
    for (std::string c; words >> c;) cs.push_back(c);
    for (const fs::path& dir : {root_, slice_}) {
      fs::create_directories(dir);
      for (const auto& c : cs) {
        Status st = cgroup::write_file(dir / "cgroup.subtree_control", "+" + c);
        ASSERT_TRUE(st.ok()) << st.error().message;
      }
    }
    fs::create_directories(unit_);
    if (mark) {
      ASSERT_EQ(::setxattr(unit_.c_str(), "trusted.delegate", "1", 1, 0), 0) << std::strerror(errno);
    }
    root_before_ = slurp(root_ / "cgroup.subtree_control");
    slice_before_ = slurp(slice_ / "cgroup.subtree_control");
  }

  // systemd starts the service's main process in the unit's cgroup.
  std::function<void()> in_unit() {
    const std::string procs = (unit_ / "cgroup.procs").string();
    return [procs] {
      int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(97);
      ::close(fd);
    };
  }

  // Nothing above the unit's cgroup was written.
  void expect_above_untouched() {
    EXPECT_EQ(slurp(root_ / "cgroup.subtree_control"), root_before_);
    EXPECT_EQ(slurp(slice_ / "cgroup.subtree_control"), slice_before_);
  }

  std::vector<fs::path> runs_in_unit() {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(unit_ / "runs", ec))
      if (e.is_directory(ec) && !is_spare_run(e.path())) out.push_back(e.path());
    return out;
  }

  static std::string cgroup_of(pid_t pid) { return slurp("/proc/" + std::to_string(pid) + "/cgroup"); }

  fs::path slice_, unit_;
  std::string root_before_, slice_before_;
};

TEST_F(DaemonDelegation, RunsLiveInTheDelegatedCgroupAndNothingAboveIsWritten) {
  emulate_systemd("cpu memory pids", true);
  start(in_unit());
  // The daemon and its fork server left the unit's cgroup for the leaf
  // before anything was enabled in it; the unit itself holds no process.
  const std::string leaf = "0::/" + kUnitCgroup + "/daemon\n";
  EXPECT_EQ(cgroup_of(daemon_.pid), leaf);
  pid_t server = 0;
  for (const auto& [pid, comm] : children_of(daemon_.pid))
    if (comm == "agentcage-fork") server = pid;
  ASSERT_GT(server, 0) << log();
  EXPECT_EQ(cgroup_of(server), leaf);
  EXPECT_EQ(slurp(unit_ / "cgroup.procs"), "");
  const auto enabled = cgroup::parse_controllers(slurp(unit_ / "cgroup.subtree_control"));
  for (const char* c : {"memory", "pids", "cpu"})
    EXPECT_NE(std::find(enabled.begin(), enabled.end(), c), enabled.end()) << c;
  EXPECT_NE(log().find("runs through the daemon live in " + kUnitCgroup + "/runs"), std::string::npos)
      << log();

  // A run through the daemon: in <unit>/runs/<id>, under its limits.
  const auto fixed_before = run_cgroups();
  Proc sleeper = client_run("sleeper", {}, {"sleep", "300"});
  ASSERT_TRUE(
      wait_until([&] { return runs_in_unit().size() == 1 && !processes_of_dynamic_uids().empty(); }, 30s))
      << out("sleeper") << log();
  const fs::path run_cg = runs_in_unit().front();
  EXPECT_EQ(slurp(run_cg / "memory.max"), std::to_string(256u << 20) + "\n");  // the policy's limit
  EXPECT_NE(slurp(run_cg / "cgroup.procs"), "");
  EXPECT_EQ(run_cgroups(), fixed_before);        // nothing in the fixed layout
  EXPECT_EQ(slurp(unit_ / "cgroup.procs"), "");  // the runner is in the leaf too
  // ... and under its policy.
  Proc denied = client_run("denied", {}, {"cat", "/etc/passwd"});
  EXPECT_EQ(wait_exit(denied.pid), 1) << out("denied");
  json d = result("denied");
  ASSERT_TRUE(d.is_object()) << out("denied");
  EXPECT_EQ(d["cgroup"].get<std::string>().rfind((unit_ / "runs").string() + "/", 0), 0u) << d["cgroup"];
  EXPECT_GE(d["denials"]["by_hook"].value("file_open", 0), 1) << d.dump(2);

  // A stop ends the run in flight; nothing is left under runs/.
  stop_daemon(SIGTERM);
  EXPECT_EQ(wait_exit(sleeper.pid), 143) << out("sleeper");
  EXPECT_TRUE(runs_in_unit().empty());
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
  expect_above_untouched();
}

// The unit dies whole with a run in flight (a crash, then systemd's final
// SIGKILL of what is left: KillMode=mixed): the runner is killed before it
// can end its run, then the daemon. systemd then removes the unit's cgroup
// and (Restart=on-failure) starts the daemon in a fresh one. The new daemon
// reaps what the run left outside the cgroup (its record, scope and
// workspace) and runs again in <unit>/runs.
TEST_F(DaemonDelegation, ARestartedDaemonReapsWhatThePreviousOneLeft) {
  emulate_systemd("cpu memory pids", true);
  start(in_unit());
  Proc crash = client_run("crash", {}, {"sleep", "300"});
  ASSERT_TRUE(
      wait_until([&] { return runs_in_unit().size() == 1 && !processes_of_dynamic_uids().empty(); }, 30s))
      << out("crash") << log();
  const fs::path run_cg = runs_in_unit().front();
  const std::string run_id = run_cg.filename().string();
  auto scope_id = cgroup::cgroup_id(run_cg);
  ASSERT_TRUE(scope_id.ok());
  const fs::path record = fs::path("/run/agentcage/runs") / (run_id + ".json");
  ASSERT_TRUE(fs::exists(record));
  pid_t runner = 0;
  ASSERT_TRUE(wait_until([&] { return spare_pids().size() == 1; }, 15s)) << log();
  const std::vector<pid_t> spares = spare_pids();
  for (const auto& [pid, comm] : children_of(daemon_.pid))
    if (comm == "agentcage" && std::find(spares.begin(), spares.end(), pid) == spares.end()) runner = pid;
  ASSERT_GT(runner, 0) << log();
  ASSERT_EQ(::kill(runner, SIGKILL), 0);
  stop_daemon(SIGKILL);
  wait_exit(crash.pid);  // its connection closed
  // The fork server and the run's sandbox follow (PR_SET_PDEATHSIG); the
  // run's record, cgroup and scope stay.
  ASSERT_TRUE(wait_until([&] { return slurp(unit_ / "daemon" / "cgroup.procs").empty(); }, 30s));
  EXPECT_TRUE(fs::exists(record));
  EXPECT_TRUE(fs::exists(run_cg));
  // systemd's part: the rest of the unit killed, its cgroup removed, a fresh one.
  Status gone = cgroup::remove_tree(unit_);
  ASSERT_TRUE(gone.ok()) << gone.error().message;
  fs::create_directories(unit_);
  ASSERT_EQ(::setxattr(unit_.c_str(), "trusted.delegate", "1", 1, 0), 0) << std::strerror(errno);
  start(in_unit());
  EXPECT_NE(log().find("reaped stale run " + run_id), std::string::npos) << log();
  EXPECT_FALSE(fs::exists(record));
  for (const auto& sc : status().value("scopes", json::array()))
    EXPECT_NE(sc.value("scope_id", uint64_t{0}), *scope_id) << sc.dump();
  Proc next = client_run("next", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(next.pid), 0) << out("next") << log();
  EXPECT_EQ(result("next")["cgroup"].get<std::string>().rfind((unit_ / "runs").string() + "/", 0), 0u);
  expect_above_untouched();
}

TEST_F(DaemonDelegation, AControllerNotDelegatedRefusesTheRunWithTheUnitSetting) {
  // Delegate=pids: the unit's cgroup offers pids only; the run policy has a
  // memory limit.
  emulate_systemd("pids", true);
  start(in_unit());
  EXPECT_NE(log().find("are not delegated to " + unit_.string()), std::string::npos) << log();
  Proc p = client_run("nomem", {}, {"true"});
  EXPECT_EQ(wait_exit(p.pid), 125) << out("nomem");
  EXPECT_NE(out("nomem").find("the memory controller is not delegated to " + unit_.string()),
            std::string::npos)
      << out("nomem");
  EXPECT_NE(out("nomem").find("Delegate=yes (or at least Delegate=memory pids cpu)"), std::string::npos)
      << out("nomem");
  EXPECT_TRUE(runs_in_unit().empty());
  expect_above_untouched();
}

// The legitimate case beside it: a cgroup without the mark is not the
// daemon's to manage (cgroup_layout: auto), so runs stay in the fixed layout.
TEST_F(DaemonDelegation, WithoutTheMarkRunsStayInTheFixedLayout) {
  emulate_systemd("cpu memory pids", false);
  start(in_unit());
  EXPECT_EQ(cgroup_of(daemon_.pid), "0::/" + kUnitCgroup + "\n");  // not moved
  EXPECT_FALSE(fs::exists(unit_ / "daemon"));
  EXPECT_NE(log().find("is not delegated to it"), std::string::npos) << log();
  Proc sleeper = client_run("sleeper", {}, {"sleep", "300"});
  ASSERT_TRUE(
      wait_until([&] { return !runs_in_flight().empty() && !processes_of_dynamic_uids().empty(); }, 30s))
      << out("sleeper") << log();
  EXPECT_FALSE(fs::exists(unit_ / "runs"));
  stop_daemon(SIGTERM);
  EXPECT_EQ(wait_exit(sleeper.pid), 143) << out("sleeper");
  EXPECT_TRUE(nothing_left());
  // Every controller was enabled already: the root was not written either.
  expect_above_untouched();
}

TEST_F(DaemonDelegation, DelegatedWithoutTheMarkDoesNotStart) {
  emulate_systemd("cpu memory pids", false);
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "cgroup_layout: delegated\n";
  daemon_ = spawn({agentcage_bin(), "daemon", "--config", (dir_ / "daemon.yaml").string()},
                  dir_ / "daemon.log", {}, in_unit());
  EXPECT_EQ(wait_exit(daemon_.pid), 1) << log();
  daemon_.pid = -1;
  EXPECT_NE(log().find("cgroup_layout: delegated, but the daemon's cgroup /" + kUnitCgroup +
                       " is not delegated to it (no trusted.delegate attribute): run the daemon as a systemd "
                       "service with Delegate=yes"),
            std::string::npos)
      << log();
  EXPECT_FALSE(fs::exists(unit_ / "daemon"));
  expect_above_untouched();
}

}  // namespace
}  // namespace agentcage::kt
