// SPDX-License-Identifier: Apache-2.0
// Decisions under preemption (issue 11 §5). BPF LSM programs run with
// migration disabled, not preemption: on a fully preemptible kernel
// (preempt=full) a task can be switched out in the middle of a hook, and
// another task on the same CPU runs the same hook meanwhile. A scratch
// buffer shared per CPU then carries the other task's path into the first
// task's decision. Here many tasks on one CPU open an allowed and a denied
// file as fast as they can; no decision and no record may mix them up.
// scripts/test runs this suite in a VM booted with preempt=full on both
// kernels (AGENTCAGE_EXPECT_PREEMPT=full makes it check that it was).
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>

#include "bpf/event_reader.h"
#include "policy_fixture.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

// The kernel's preemption model as /sys/kernel/debug/sched/preempt shows it
// ("none voluntary (full)": the one in parentheses), or "" when unknown.
std::string preempt_model() {
  std::ifstream in("/sys/kernel/debug/sched/preempt");
  std::string line;
  if (!std::getline(in, line)) return "";
  auto open = line.find('('), close = line.find(')');
  return open == std::string::npos || close == std::string::npos ? ""
                                                                 : line.substr(open + 1, close - open - 1);
}

// What the workers saw, in memory shared across fork.
struct Tally {
  std::atomic<uint64_t> allowed_ok, allowed_denied, allowed_other;
  std::atomic<uint64_t> denied_ok, denied_denied, denied_other;
};

class ScratchRaceTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 23;
  static constexpr int kWorkers = 16;
  static constexpr int kDepth = 40;  // components below allowed/ and denied/: a long walk
  static constexpr auto kDuration = std::chrono::seconds(6);
  ScratchRaceTest() : PolicyScopeTest(kSlot, "race") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    allowed_ = make_deep("allowed");
    denied_ = make_deep("denied");
  }

  // base/<top>/d00/d01/.../file, kDepth directories deep.
  std::string make_deep(const std::string& top) {
    fs::path p = base_ / top;
    for (int i = 0; i < kDepth; i++) p /= "d" + std::to_string(i);
    fs::create_directories(p);
    p /= "file";
    std::ofstream(p) << "x";
    return p.string();
  }

  // Every worker pinned to CPU 0, opening allowed and denied in turn until
  // the deadline. Returns the scoped process's exit code (0: all workers ran).
  int race(Tally* t) {
    return scoped([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(0, &one);
      auto deadline = std::chrono::steady_clock::now() + kDuration;
      // No allocation in here: this process was cloned from a multi-threaded one.
      pid_t pids[kWorkers];
      int started = 0;
      for (int w = 0; w < kWorkers; w++) {
        pid_t pid = ::fork();
        if (pid < 0) return 1;
        if (pid == 0) {
          ::sched_setaffinity(0, sizeof one, &one);
          while (std::chrono::steady_clock::now() < deadline) {
            for (int which = 0; which < 2; which++) {
              int fd = ::open(which ? denied_.c_str() : allowed_.c_str(), O_RDONLY | O_CLOEXEC);
              int err = fd < 0 ? errno : 0;
              if (fd >= 0) ::close(fd);
              auto& ok = which ? t->denied_ok : t->allowed_ok;
              auto& no = which ? t->denied_denied : t->allowed_denied;
              auto& other = which ? t->denied_other : t->allowed_other;
              (err == 0 ? ok : err == EACCES ? no : other).fetch_add(1);
            }
          }
          ::_exit(0);
        }
        pids[started++] = pid;
      }
      int bad = 0;
      for (int w = 0; w < started; w++) {
        int st = 0;
        if (::waitpid(pids[w], &st, 0) != pids[w] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
      }
      return bad ? 2 : 0;
    });
  }

  std::string allowed_, denied_;
};

TEST_F(ScratchRaceTest, PreemptedDecisionsKeepTheirOwnPath) {
  std::string model = preempt_model();
  if (const char* want = std::getenv("AGENTCAGE_EXPECT_PREEMPT"); want && *want) {
    ASSERT_EQ(model, want) << "the kernel does not run in the preemption model this run is for "
                              "(boot it with preempt="
                           << want << ")";
  }
  RecordProperty("preempt", model.empty() ? "unknown" : model);
  ASSERT_NO_FATAL_FAILURE(
      apply_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-race\nspec:\n"
                 "  files:\n    read: [" +
                     base("allowed") + "]\n",
                 ws_.string()));

  // Records of this scope (as many as the ring buffer and the scope's
  // budget let through: a sample is enough).
  const uint64_t scope_id = cg_.id();
  std::vector<ac_event_decision> records;
  auto reader = bpf::EventReader::create(kt::enforcer()->events_fd(), [&](const ac_event_decision& e) {
    if (e.scope_id == scope_id) records.push_back(e);
  });
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  ASSERT_TRUE((*reader)->poll(0).ok());  // what earlier tests left
  records.clear();

  auto* t = static_cast<Tally*>(
      ::mmap(nullptr, sizeof(Tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(t, MAP_FAILED);
  new (t) Tally{};
  const uint64_t scratch_before = reason(AC_HOOK_FILE_OPEN, AC_REASON_SCRATCH);
  const uint64_t default_before = reason(AC_HOOK_FILE_OPEN, AC_REASON_DEFAULT_DENY);

  int code = race(t);
  ASSERT_TRUE((*reader)->poll(0).ok());
  EXPECT_EQ(code, 0);

  const uint64_t scratch = reason(AC_HOOK_FILE_OPEN, AC_REASON_SCRATCH) - scratch_before;
  const uint64_t default_deny = reason(AC_HOOK_FILE_OPEN, AC_REASON_DEFAULT_DENY) - default_before;
  std::printf(
      "preempt=%s: allowed file %lu opened, %lu denied; denied file %lu denied; "
      "scratch_unavailable %lu; records %zu\n",
      model.empty() ? "unknown" : model.c_str(), static_cast<unsigned long>(t->allowed_ok.load()),
      static_cast<unsigned long>(t->allowed_denied.load()),
      static_cast<unsigned long>(t->denied_denied.load()), static_cast<unsigned long>(scratch),
      records.size());

  // Enough work to mean something, and no wrong decision: the denied file is
  // never opened; the allowed one is refused only when the task could not
  // have its scratch (fail closed, counted under its own reason).
  EXPECT_GT(t->allowed_ok.load(), 1000u);
  EXPECT_EQ(t->denied_ok.load(), 0u) << "a decision on the denied file used another task's path";
  EXPECT_EQ(t->allowed_other.load() + t->denied_other.load(), 0u);
  EXPECT_LE(t->allowed_denied.load(), scratch)
      << "the allowed file was denied by a rule: another task's path";
  // Every denial is accounted for: by the rules (the denied file) or for want of scratch.
  EXPECT_EQ(default_deny + scratch, t->allowed_denied.load() + t->denied_denied.load());

  // Every record names the file its decision was about.
  ASSERT_FALSE(records.empty());
  for (const auto& e : records) {
    std::string target(e.target, e.target_len);
    if (e.reason == AC_REASON_SCRATCH) {
      EXPECT_EQ(e.target_kind, AC_TARGET_NONE) << target;
    } else {
      EXPECT_EQ(e.reason, AC_REASON_DEFAULT_DENY);
      EXPECT_EQ(target, denied_) << "a record carries another decision's path";
    }
  }
  ::munmap(t, sizeof(Tally));
}

}  // namespace
}  // namespace agentcage
