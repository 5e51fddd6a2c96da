// SPDX-License-Identifier: Apache-2.0
// Atomic policy swap under load: a scoped process hammers opens that both
// policies allow and opens that both deny while the test swaps the slot
// between the two policies as fast as it can. A swap must never leave a
// moment in which the scope is governed by neither policy (a fail-closed
// denial of an allowed file, NO_POLICY) or by a mix of the two (a denied
// file allowed because half of a policy's rules were already gone).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "bpf/compile.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "policy/policy.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

// Shared between the test and the scoped process (MAP_SHARED survives the
// clone3 the scoped process is started with).
struct Hammer {
  std::atomic<int> go;
  std::atomic<int> stop;
  std::atomic<uint64_t> iterations;
  std::atomic<uint64_t> wrong_allowed;  // a file both policies deny was opened
  std::atomic<uint64_t> wrong_denied;   // a file both policies allow was refused (EACCES)
  std::atomic<uint64_t> other_errors;   // any other errno
};

class SwapTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 4;
  SwapTest() : PolicyScopeTest(kSlot, "sw") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(base_ / "workspace" / ".git" / "hooks");
    fs::create_directories(base_ / "shared" / "secret");
    std::ofstream(base_ / "workspace" / "w.txt") << "w\n";
    std::ofstream(base_ / "workspace" / ".git" / "hooks" / "pre-commit") << "hook\n";
    std::ofstream(base_ / "shared" / "ok.txt") << "ok\n";
    std::ofstream(base_ / "shared" / "secret" / "s.txt") << "s\n";
    std::ofstream(base_ / "other.txt") << "other\n";
  }

  bpf::CompiledPolicy compile(const std::string& spec) {
    auto compiled =
        compile_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-swap\nspec:\n" + spec);
    return compiled ? *compiled : bpf::CompiledPolicy{};
  }
};

TEST_F(SwapTest, HammeredDecisionsNeverSeeAGapOrAMix) {
  // Both policies: the shared tree readable except its secret, the workspace
  // writable except .git/hooks. They differ in everything else, so every
  // swap writes a different set of rules under a fresh rules id.
  const std::string common = "    read: [" + base("shared") +
                             "]\n    write: [\"${workspace}\"]\n    deny: [" + base("shared/secret") +
                             ", \"${workspace}/.git/hooks\"]\n";
  auto a = compile("  files:\n" + common +
                   "  network:\n    allow:\n"
                   "      - {cidr: 10.1.0.0/16, ports: [443], protocol: tcp}\n");
  auto b =
      compile("  mode: enforce\n  exec:\n    allow: [/usr/bin/true]\n  files:\n" + common +
              "  network:\n    allow:\n      - {cidr: 10.2.0.0/16, ports: [80, 8000-8100], protocol: any}\n"
              "      - {unix: /run/kt-swap.sock}\n");
  ASSERT_FALSE(a.paths.empty());
  ASSERT_FALSE(b.paths.empty());
  ASSERT_TRUE(kt::enforcer()->put_policy(kSlot, a).ok());
  auto st = kt::enforcer()->add_scope(kt::scope_cgroup(cg_), 4000 + static_cast<uint64_t>(::getpid()), kSlot,
                                      (base_ / "workspace").string());
  ASSERT_TRUE(st.ok()) << st.error().message;
  scoped_ = true;
  auto before = kt::enforcer()->counters(kSlot);
  ASSERT_TRUE(before.ok());

  void* mem = ::mmap(nullptr, sizeof(Hammer), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* h = new (mem) Hammer{};

  const std::vector<std::string> allowed = {base("shared/ok.txt"), base("workspace/w.txt")};
  const std::vector<std::string> denied = {base("shared/secret/s.txt"),
                                           base("workspace/.git/hooks/pre-commit"), base("other.txt")};
  auto pid = cgroup::spawn_in_cgroup(cg_.fd(), [&] {
    while (!h->go.load()) {
    }
    while (!h->stop.load()) {
      for (const auto& p : allowed) {
        int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
          ::close(fd);
        else if (errno == EACCES)
          h->wrong_denied++;
        else
          h->other_errors++;
      }
      for (const auto& p : denied) {
        int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          ::close(fd);
          h->wrong_allowed++;
        } else if (errno != EACCES) {
          h->other_errors++;
        }
      }
      h->iterations++;
    }
    return 0;
  });
  ASSERT_TRUE(pid.ok()) << pid.error().message;

  // Swap until both the swap count and the scoped process's iterations are
  // large, so thousands of decisions overlap hundreds of swaps.
  constexpr int kMinSwaps = 400;
  constexpr uint64_t kMinIterations = 3000;
  int swaps = 0;
  bool swap_failed = false;
  h->go = 1;
  while (swaps < kMinSwaps || h->iterations.load() < kMinIterations) {
    if (!kt::enforcer()->put_policy(kSlot, swaps % 2 == 0 ? b : a).ok()) {
      swap_failed = true;
      break;
    }
    ++swaps;
    if (swaps > 200000) break;  // the scoped process stopped making progress
  }
  uint64_t during_swaps = h->iterations.load();
  h->stop = 1;
  auto status = cgroup::wait_for(*pid);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(exit_code(*status), 0);
  EXPECT_FALSE(swap_failed);
  EXPECT_GE(swaps, kMinSwaps);
  EXPECT_GE(during_swaps, kMinIterations) << "the scoped process barely ran while the policy was swapped";

  EXPECT_EQ(h->wrong_allowed.load(), 0u) << "a file both policies deny was opened during a swap";
  EXPECT_EQ(h->wrong_denied.load(), 0u) << "a file both policies allow was denied during a swap";
  EXPECT_EQ(h->other_errors.load(), 0u);

  auto after = kt::enforcer()->counters(kSlot);
  ASSERT_TRUE(after.ok());
  for (int hk = 0; hk < AC_HOOK_COUNT; ++hk) {
    EXPECT_EQ(after->hooks[hk].reasons[AC_REASON_NO_POLICY], before->hooks[hk].reasons[AC_REASON_NO_POLICY])
        << "hook " << hk << " saw the slot without a policy";
    EXPECT_EQ(after->hooks[hk].reasons[AC_REASON_INTERNAL], before->hooks[hk].reasons[AC_REASON_INTERNAL])
        << "hook " << hk;
  }
  // The hammer really ran through the hook: every denied open was counted.
  const auto& fo_a = after->hooks[AC_HOOK_FILE_OPEN];
  const auto& fo_b = before->hooks[AC_HOOK_FILE_OPEN];
  EXPECT_GE(fo_a.decisions[AC_DECISION_DENY] - fo_b.decisions[AC_DECISION_DENY], 3 * during_swaps);
  EXPECT_GE(fo_a.decisions[AC_DECISION_ALLOW] - fo_b.decisions[AC_DECISION_ALLOW], 2 * during_swaps);
  std::printf("swap hammer: %d swaps, %llu iterations (%llu during swaps)\n", swaps,
              static_cast<unsigned long long>(h->iterations.load()),
              static_cast<unsigned long long>(during_swaps));
  ::munmap(mem, sizeof(Hammer));
}

}  // namespace
}  // namespace agentcage
