// SPDX-License-Identifier: Apache-2.0
// Scopes registered *pending* (Enforcer::add_scope's arm_tgid; struct
// ac_scope in abi.h): how a container is confined from its entrypoint's
// first instruction. A container runtime's init sits in the container's
// cgroup, registered pending for its pid at the OCI createRuntime hook, and
// still mounts, pivots and opens what it likes; its exec of the entrypoint
// arms the scope and is itself decided under the policy, and from then on
// every process of the cgroup is confined. Nobody else arms it: not another
// process of the cgroup, not the same pid outside the cgroup.
//
// Each test's process is parked in the cgroup before the scope exists, so its
// pid is known when it is registered, then released to do its steps. It
// writes one word per step to a pipe the test reads ("name=ok|denied|errorN"),
// and the program it execs (agentcage-arm-probe) writes its own words there.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

std::string word(int rc) { return rc == 0 ? "ok" : errno == EACCES ? "denied" : "error" + std::to_string(errno); }

// Write "name=word " to the test's pipe (stdout of the parked process).
void say(const std::string& name, const std::string& w) {
  const std::string s = name + "=" + w + " ";
  static_cast<void>(::write(1, s.data(), s.size()));
}

std::string open_word(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
  return word(fd >= 0 ? 0 : -1);
}

// tests/kernel/arm_probe.cpp, built next to this binary.
std::string probe() { return (fs::read_symlink("/proc/self/exe").parent_path() / "agentcage-arm-probe").string(); }

// A process started in a cgroup (or, cgroup_fd -1, outside every scope as a
// plain child) that waits until go(), then runs `body` with its stdout on a
// pipe the test reads to the end in finish().
class Parked {
 public:
  Parked(int cgroup_fd, const std::function<int()>& body) {
    if (::pipe2(go_, O_CLOEXEC) != 0 || ::pipe2(out_, O_CLOEXEC) != 0) return;
    const int go_r = go_[0], go_w = go_[1], out_r = out_[0], out_w = out_[1];
    auto child = [=]() -> int {
      ::close(go_w);
      ::close(out_r);
      if (::dup2(out_w, 1) != 1) return 90;  // without O_CLOEXEC: the exec'd program writes here too
      char c;
      if (::read(go_r, &c, 1) != 1) return 91;
      return body();
    };
    if (cgroup_fd >= 0) {
      auto pid = cgroup::spawn_in_cgroup(cgroup_fd, child);
      if (pid) pid_ = *pid;
    } else {
      pid_ = ::fork();
      if (pid_ == 0) ::_exit(child());
    }
    ::close(go_r);
    ::close(out_w);
    go_[0] = out_[1] = -1;
  }
  ~Parked() {
    for (int fd : {go_[1], out_[0]})
      if (fd >= 0) ::close(fd);
    if (pid_ > 0 && !finished_) static_cast<void>(cgroup::wait_for(pid_));
  }
  Parked(const Parked&) = delete;
  Parked& operator=(const Parked&) = delete;

  pid_t pid() const { return pid_; }
  void go() {
    char c = 'g';
    EXPECT_EQ(::write(go_[1], &c, 1), 1);
  }
  // Everything it (and what it exec'd, and their children) wrote; waits for it.
  std::string finish() {
    std::string out;
    char buf[256];
    ssize_t n;
    while ((n = ::read(out_[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    auto st = cgroup::wait_for(pid_);
    finished_ = true;
    EXPECT_TRUE(st.ok());
    if (st) {
      EXPECT_EQ(exit_code(*st), 0) << out;
    }
    return out;
  }

 private:
  int go_[2] = {-1, -1}, out_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool finished_ = false;
};

class ArmTest : public PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 28;
  ArmTest() : PolicyScopeTest(kSlot, "arm") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(base_ / "allowed" / "mnt");
    std::ofstream(base_ / "allowed" / "ok.txt") << "ok\n";
    std::ofstream(base_ / "secret.txt") << "secret\n";
    secret_ = base("secret.txt");
    allowed_ = base("allowed/ok.txt");
    auto compiled = compile_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-arm\nspec:\n"
                                 "  exec:\n    allow: [" + probe() + "]\n"
                                 "  files:\n    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache, " + base("allowed") +
                                 "]\n");
    ASSERT_TRUE(compiled.has_value());
    auto st = enforcer()->put_policy(slot_, *compiled);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }

  // Register the cgroup's scope pending until `pid` execs.
  void register_pending(pid_t pid) {
    auto st = enforcer()->add_scope(scope_cgroup(cg_), cg_.id(), slot_, "", 0, 0, static_cast<uint32_t>(pid));
    ASSERT_TRUE(st.ok()) << st.error().message;
    scoped_ = true;
  }

  // The arm_tgid the kernel holds for the scope now (0: armed).
  uint32_t arm_tgid() {
    auto scopes = enforcer()->scopes();
    EXPECT_TRUE(scopes.ok());
    if (scopes)
      for (const auto& s : *scopes)
        if (s.cgroup_id == cg_.id()) return s.arm_tgid;
    ADD_FAILURE() << "no scope for the test's cgroup";
    return ~0u;
  }

  // Denials counted in the scope's report, all hooks.
  uint64_t report_denials() {
    auto r = enforcer()->scope_report(cg_.id());
    EXPECT_TRUE(r.ok());
    return r ? r->denied_total() : 0;
  }

  // Exec the probe (only returns when that failed).
  int exec_probe() const {
    const std::string p = probe();
    ::execl(p.c_str(), p.c_str(), secret_.c_str(), allowed_.c_str(), static_cast<char*>(nullptr));
    say("exec", word(-1));
    return 0;
  }

  std::string secret_, allowed_;
};

// What a runtime does before it execs the entrypoint (a mount namespace of
// its own, mounts and unmounts, opens the policy would deny) is allowed in a
// pending scope; the exec of an allowed program arms it: that program and
// its child are confined, and what the policy allows still works.
TEST_F(ArmTest, TheRuntimesSetupIsFreeAndTheEntrypointIsConfined) {
  const std::string mnt = base("allowed/mnt");
  Parked init(cg_.fd(), [&] {
    say("secret-before", open_word(secret_));
    const bool ns = ::unshare(CLONE_NEWNS) == 0 && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    say("private-ns", word(ns ? 0 : -1));
    say("mount", word(::mount("none", mnt.c_str(), "tmpfs", 0, nullptr)));
    say("umount", word(::umount2(mnt.c_str(), MNT_DETACH)));
    return exec_probe();
  });
  ASSERT_GT(init.pid(), 0);
  ASSERT_NO_FATAL_FAILURE(register_pending(init.pid()));
  EXPECT_EQ(arm_tgid(), static_cast<uint32_t>(init.pid()));
  const uint64_t denied_before = denied(AC_HOOK_FILE_OPEN);
  init.go();
  EXPECT_EQ(init.finish(), "secret-before=ok private-ns=ok mount=ok umount=ok "
                           "secret=denied child-secret=denied allowed=ok");
  EXPECT_EQ(arm_tgid(), 0u) << "armed for good";
  EXPECT_EQ(denied(AC_HOOK_FILE_OPEN), denied_before + 2);
  EXPECT_EQ(report_denials(), 2u);
  // Armed, the scope holds every process of the cgroup, not only that one.
  EXPECT_EQ(scoped([&] { return try_open(secret_, O_RDONLY); }), kDenied);
  EXPECT_EQ(scoped([&] { return try_open(allowed_, O_RDONLY); }), kOk);
}

// Another process of the cgroup (another tgid) execs: the scope stays
// pending, nothing is counted for it, and userspace does not rewrite it;
// then the pid it waits for execs and arms it.
TEST_F(ArmTest, AnotherProcessesExecLeavesItPending) {
  Parked init(cg_.fd(), [&] { return exec_probe(); });
  Parked sibling(cg_.fd(), [&] {
    say("secret-before", open_word(secret_));
    return exec_probe();
  });
  ASSERT_GT(init.pid(), 0);
  ASSERT_GT(sibling.pid(), 0);
  ASSERT_NO_FATAL_FAILURE(register_pending(init.pid()));
  const uint64_t denied_before = denied(AC_HOOK_FILE_OPEN);
  sibling.go();
  EXPECT_EQ(sibling.finish(), "secret-before=ok secret=ok child-secret=ok allowed=ok");
  EXPECT_EQ(arm_tgid(), static_cast<uint32_t>(init.pid()));
  EXPECT_EQ(scoped([&] { return try_open(secret_, O_RDONLY); }), kOk);
  EXPECT_EQ(denied(AC_HOOK_FILE_OPEN), denied_before);
  EXPECT_EQ(report_denials(), 0u) << "a pending scope decides nothing";
  // A pending element is not rewritten (an arming in the old one would be lost).
  auto moved = enforcer()->set_scope_slot(cg_.id(), AC_SLOT_NONE);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.error().code, EBUSY);
  EXPECT_NE(moved.error().message.find("arms at the exec of pid " + std::to_string(init.pid())), std::string::npos)
      << moved.error().message;

  init.go();
  EXPECT_EQ(init.finish(), "secret=denied child-secret=denied allowed=ok");
  EXPECT_EQ(arm_tgid(), 0u);
  EXPECT_EQ(scoped([&] { return try_open(secret_, O_RDONLY); }), kDenied);
  // Armed, a slot change is an ordinary one.
  EXPECT_TRUE(enforcer()->set_scope_slot(cg_.id(), slot_).ok());
}

// The entrypoint the policy does not allow: its exec fails with EACCES, and
// the scope is armed all the same (the failed exec does not leave the
// process unconfined).
TEST_F(ArmTest, ADeniedEntrypointFailsAndArmsTheScope) {
  Parked init(cg_.fd(), [&] {
    say("secret-before", open_word(secret_));
    ::execl("/usr/bin/true", "true", static_cast<char*>(nullptr));
    say("exec", word(-1));
    say("secret", open_word(secret_));
    say("allowed", open_word(allowed_));
    return 0;
  });
  ASSERT_GT(init.pid(), 0);
  ASSERT_NO_FATAL_FAILURE(register_pending(init.pid()));
  const uint64_t exec_denied = denied(AC_HOOK_EXEC);
  init.go();
  EXPECT_EQ(init.finish(), "secret-before=ok exec=denied secret=denied allowed=ok ");
  EXPECT_EQ(denied(AC_HOOK_EXEC), exec_denied + 1);
  EXPECT_EQ(arm_tgid(), 0u);
}

// The pid a scope waits for, outside its cgroup: its exec arms nothing (only a
// task inside the cgroup ever finds the scope).
TEST_F(ArmTest, TheSamePidOutsideTheCgroupDoesNotArmIt) {
  Parked outsider(-1, [&] { return exec_probe(); });
  ASSERT_GT(outsider.pid(), 0);
  ASSERT_NO_FATAL_FAILURE(register_pending(outsider.pid()));
  outsider.go();
  EXPECT_EQ(outsider.finish(), "secret=ok child-secret=ok allowed=ok");
  EXPECT_EQ(arm_tgid(), static_cast<uint32_t>(outsider.pid()));
  EXPECT_EQ(scoped([&] { return try_open(secret_, O_RDONLY); }), kOk);
}

void* exec_from_thread(void* arg) {
  const auto* self = static_cast<const std::function<int()>*>(arg);
  (*self)();
  return nullptr;
}

// Threads share the tgid: a thread other than the leader execs, and that
// arms the scope (the kernel makes the exec'ing thread the leader).
TEST_F(ArmTest, AThreadsExecArmsIt) {
  Parked init(cg_.fd(), [&] {
    say("secret-before", open_word(secret_));
    std::function<int()> exec = [&] { return exec_probe(); };
    pthread_t t;
    if (pthread_create(&t, nullptr, exec_from_thread, &exec) != 0) return 92;
    pthread_join(t, nullptr);  // returns only if the exec failed
    return 93;
  });
  ASSERT_GT(init.pid(), 0);
  ASSERT_NO_FATAL_FAILURE(register_pending(init.pid()));
  init.go();
  EXPECT_EQ(init.finish(), "secret-before=ok secret=denied child-secret=denied allowed=ok");
  EXPECT_EQ(arm_tgid(), 0u);
}

// Bad input changes nothing: a number no process can have.
TEST_F(ArmTest, APidNoProcessCanHaveIsRefused) {
  auto st = enforcer()->add_scope(scope_cgroup(cg_), cg_.id(), slot_, "", 0, 0, 1u << 30);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EINVAL);
  auto scopes = enforcer()->scopes();
  ASSERT_TRUE(scopes.ok());
  for (const auto& s : *scopes) EXPECT_NE(s.cgroup_id, cg_.id());
}

}  // namespace
}  // namespace agentcage
