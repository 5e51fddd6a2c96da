// SPDX-License-Identifier: Apache-2.0
// cgroup::spawn_in_cgroup_sharing_memory, how a run starts COMMAND's
// process on x86_64: in the cgroup from its first instruction, in the
// caller's memory (CLONE_VM) on a stack of its own, with every signal
// blocked, while the caller waits (CLONE_VFORK), and the caller's own
// signal mask untouched.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "run/sandbox.h"
#include "util/raw_syscall.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

// What the child reports, in the caller's memory: plain (not MAP_SHARED)
// memory, which a child that does not share it cannot write.
struct Probe {
  const char* stack_lo = nullptr;
  const char* stack_hi = nullptr;
  volatile int done = 0;
  volatile int on_its_stack = 0;
  volatile unsigned long blocked = 0;
  char cgroup[256] = {};
};

// The child: raw system calls only (it runs in the caller's memory), and
// no wait for the caller (which waits for it).
void probe_child(void* arg) {
  auto* p = static_cast<Probe*>(arg);
  unsigned long mask = 0;
  (void)raw_syscall(SYS_rt_sigprocmask, SIG_BLOCK, 0, sysarg(&mask), sizeof mask);
  p->blocked = mask;
  const char here = 0;
  p->on_its_stack = &here >= p->stack_lo && &here < p->stack_hi;
  const long fd = raw_syscall(SYS_openat, AT_FDCWD, sysarg("/proc/self/cgroup"), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)raw_syscall(SYS_read, fd, sysarg(p->cgroup), sizeof p->cgroup - 1);
    (void)raw_syscall(SYS_close, fd);
  }
  p->done = 1;
  for (;;) (void)raw_syscall(SYS_exit_group, 7);
}

TEST(SpawnSharingMemory, TheChildStartsInTheCgroupInTheCallersMemoryOnItsOwnStackWhileTheCallerWaits) {
  if (!cgroup::can_spawn_sharing_memory()) GTEST_SKIP() << "not on this architecture: runs fork";
  if (!::agentcage::kt::kernel_required() && ::geteuid() != 0) GTEST_SKIP() << "needs root and cgroup v2";
  auto root = cgroup::find_cgroup2_root();
  ASSERT_TRUE(root.ok()) << root.error().message;
  fs::create_directories(*root / "agentcage-kt");
  const std::string name = "spawn-" + std::to_string(::getpid());
  auto cg = cgroup::Cgroup::create(*root, *root / "agentcage-kt", name);
  ASSERT_TRUE(cg.ok()) << cg.error().message;

  auto stack = cgroup::ChildStack::map(64 * 1024);
  ASSERT_TRUE(stack.ok()) << stack.error().message;
  Probe probe;
  probe.stack_lo = static_cast<const char*>(stack->base());
  probe.stack_hi = probe.stack_lo + stack->size();

  sigset_t before, after;
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &before), 0);
  auto pid = cgroup::spawn_in_cgroup_sharing_memory(cg->fd(), *stack, probe_child, &probe);
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  // The caller went on only once the child was done: what it wrote is here
  // already, in this memory (not a copy).
  EXPECT_EQ(probe.done, 1);
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &after), 0);
  for (int sig = 1; sig < NSIG; ++sig) EXPECT_EQ(sigismember(&before, sig), sigismember(&after, sig)) << sig;
  auto status = cgroup::wait_for(*pid);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 7) << *status;
  EXPECT_EQ(probe.on_its_stack, 1);
  // In the cgroup from the clone on.
  EXPECT_EQ(std::string(probe.cgroup), "0::/agentcage-kt/" + name + "\n");
  // Every signal but the two that cannot be blocked, the C library's own
  // two included.
  const unsigned long unblockable = (1UL << (SIGKILL - 1)) | (1UL << (SIGSTOP - 1));
  EXPECT_EQ(probe.blocked, ~unblockable) << std::hex << probe.blocked;

  // No stack, no child.
  cgroup::ChildStack none;
  auto refused = cgroup::spawn_in_cgroup_sharing_memory(cg->fd(), none, probe_child, &probe);
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(cg->remove().ok());
}

TEST(SpawnSharingMemory, NotWhileTheIdentityChangeLeavesTheChildDumpableByItsUser) {
  if (!cgroup::can_spawn_sharing_memory()) GTEST_SKIP() << "not on this architecture: runs fork";
  if (!::agentcage::kt::kernel_required() && ::geteuid() != 0) GTEST_SKIP() << "needs root";
  // setresuid sets a process's dumpable flag to fs.suid_dumpable. At 1 the
  // sandbox user could ptrace COMMAND's process while it is still in
  // agentcage's memory: a run forks then. 0 and 2 leave it to CAP_SYS_PTRACE.
  const fs::path sysctl = "/proc/sys/fs/suid_dumpable";
  std::string was;
  std::ifstream(sysctl) >> was;
  ASSERT_FALSE(was.empty());
  struct Restore {
    const fs::path& file;
    const std::string& value;
    ~Restore() { std::ofstream(file) << value; }
  } restore{sysctl, was};
  const std::pair<const char*, bool> cases[] = {{"1", false}, {"2", true}, {"0", true}};
  for (const auto& [value, shares] : cases) {
    std::ofstream(sysctl) << value;
    EXPECT_EQ(run::child_may_share_memory(), shares) << "fs.suid_dumpable " << value;
  }
}

}  // namespace
}  // namespace agentcage
