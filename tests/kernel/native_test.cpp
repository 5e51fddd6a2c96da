// SPDX-License-Identifier: Apache-2.0
// No new native code in a scope. Every way for a process to turn bytes it
// wrote into executable memory (anonymous W+X, write then mprotect, shared
// anonymous memory, memfd, the stack, written private file pages,
// READ_IMPLIES_EXEC) is denied unless the policy says exec.native_code:
// allow, and every way to inject code into another process of the run
// (PTRACE_TRACEME, attach, process_vm_writev, /proc/PID/mem) is denied
// unless it says exec.debugging: allow. Across the scope's border ptrace
// stays denied whatever the policy says.
//
// Each trick first runs outside the scope, where it must work (so a test
// cannot pass because the trick is broken), then inside.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

constexpr int kSetupFailed = 51;  // the probe's preparation (not the trick) failed
constexpr size_t kPage = 4096;
// x86-64 "mov eax, 42; ret": run from memory the probe wrote, it proves the
// memory really is executable.
constexpr unsigned char kCode[] = {0xb8, 42, 0, 0, 0, 0xc3};

int mapped(void* p) { return p == MAP_FAILED ? classify(errno) : kOk; }

// Runs kCode at p; kOk when it returned 42.
int call_code(void* p) {
#if defined(__x86_64__)
  return reinterpret_cast<int (*)()>(p)() == 42 ? kOk : kOtherError;
#else
  (void)p;
  return kOk;
#endif
}

// ---- the ways to make written memory executable ------------------------------------

int anon_wx() {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return classify(errno);
  std::memcpy(p, kCode, sizeof kCode);
  return call_code(p);
}

int anon_rx() {
  return mapped(::mmap(nullptr, kPage, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
}

// Write, then make executable: the classic JIT pattern (W^X by switching).
int write_then_mprotect(int flags) {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return kSetupFailed;
  std::memcpy(p, kCode, sizeof kCode);
  if (::mprotect(p, kPage, PROT_READ | PROT_EXEC) != 0) return classify(errno);
  return call_code(p);
}

// mremap moves written anonymous pages elsewhere; they stay anonymous.
int mremap_then_mprotect() {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return kSetupFailed;
  std::memcpy(p, kCode, sizeof kCode);
  void* q = ::mremap(p, kPage, 2 * kPage, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) return kSetupFailed;
  if (::mprotect(q, kPage, PROT_READ | PROT_EXEC) != 0) return classify(errno);
  return call_code(q);
}

// The main thread's stack, with PROT_GROWSDOWN (what glibc does for
// libraries that ask for an executable stack).
int stack_exec() {
  unsigned char here[64];
  auto page = reinterpret_cast<uintptr_t>(here) & ~(kPage - 1);
  return result(
      ::mprotect(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_WRITE | PROT_EXEC | PROT_GROWSDOWN));
}

// A memfd written through its fd, then mapped executable. (Not sized with
// ftruncate: that is a path_truncate of "/memfd:jit", decided by file rules.)
int memfd_exec() {
  int fd = ::memfd_create("jit", MFD_CLOEXEC);
  std::string page(kPage, '\0');
  std::memcpy(page.data(), kCode, sizeof kCode);
  if (fd < 0 || ::pwrite(fd, page.data(), page.size(), 0) != static_cast<ssize_t>(page.size()))
    return kSetupFailed;
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return classify(errno);
  return call_code(p);
}

// A readable file mapped privately and writable, written (copy-on-write
// pages of its own), then made executable: "execmod".
int file_execmod(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kSetupFailed;
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return kSetupFailed;
  std::memcpy(p, kCode, sizeof kCode);
  if (::mprotect(p, kPage, PROT_READ | PROT_EXEC) != 0) return classify(errno);
  return call_code(p);
}

// A readable file mapped writable and executable at once.
int file_wx(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kSetupFailed;
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, fd, 0);
  ::close(fd);
  return mapped(p);
}

// What dlopen does: a readable file mapped read + execute.
int file_rx(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kSetupFailed;
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  ::close(fd);
  return mapped(p);
}

// READ_IMPLIES_EXEC turns every readable mapping executable.
int read_implies_exec() {
  if (::personality(READ_IMPLIES_EXEC) < 0) return kSetupFailed;
  return mapped(::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
}

// Ordinary memory use never asks for PROT_EXEC.
int anon_rw() {
  void* p = ::mmap(nullptr, 64 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return classify(errno);
  std::memset(p, 1, 64 * kPage);
  return result(::mprotect(p, kPage, PROT_READ));
}

// ---- code injection into another process -------------------------------------------

// A child that waits to be killed.
pid_t sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) ::pause();
  }
  return pid;
}

void reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// ptrace(PTRACE_ATTACH) and process_vm_writev turn the LSM's EACCES into
// EPERM (kernel/ptrace.c, mm/process_vm_access.c); the tests check the
// denial counters to know it was agentcage.
int classify_eperm(int err) { return err == EPERM ? kDenied : classify(err); }

// PTRACE_ATTACH to `pid`, then detach.
int attach(pid_t pid) {
  if (::ptrace(PTRACE_ATTACH, pid, nullptr, nullptr) != 0) return classify_eperm(errno);
  ::waitpid(pid, nullptr, __WALL);
  ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
  return kOk;
}

// PTRACE_ATTACH to a child of the probe (same scope as the probe).
int attach_child() {
  pid_t pid = sleeper();
  if (pid < 0) return kSetupFailed;
  int code = attach(pid);
  reap(pid);
  return code;
}

// Read access to another process (PTRACE_MODE_READ): kcmp of its address
// space with ours, and its robust futex list head (an address of its heap).
// The kernel returns EPERM for the LSM's EACCES here too.
int inspect(pid_t pid) {
  constexpr int kKcmpVm = 1;  // KCMP_VM, <linux/kcmp.h>
  if (::syscall(SYS_kcmp, ::getpid(), pid, kKcmpVm, 0, 0) < 0) return 10 + classify_eperm(errno);
  void* head = nullptr;
  size_t len = 0;
  if (::syscall(SYS_get_robust_list, pid, &head, &len) != 0) return 20 + classify_eperm(errno);
  return kOk;
}

// A child asks to be traced by the probe (PTRACE_TRACEME).
int traceme_in_child() {
  return in_child(false,
                  [] { return result(static_cast<int>(::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr))); });
}

// The probe itself asks to be traced by its parent (the test process).
int traceme() { return result(static_cast<int>(::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr))); }

// process_vm_writev into `pid` at `addr` (an address valid in the child).
int vm_write(pid_t pid, void* addr) {
  int value = 7;
  iovec local{&value, sizeof value}, remote{addr, sizeof value};
  return ::process_vm_writev(pid, &local, 1, &remote, 1, 0) == sizeof value ? kOk : classify_eperm(errno);
}

int vm_write_child() {
  static int target = 0;  // same address in the forked child
  pid_t pid = sleeper();
  if (pid < 0) return kSetupFailed;
  int code = vm_write(pid, &target);
  reap(pid);
  return code;
}

// Writes through /proc/self/mem into the probe's own text (FOLL_FORCE: the
// page is read-only and executable). Writes back the byte that is there, so
// the code stays the same.
int proc_self_mem_write() {
  int fd = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  if (fd < 0) return classify(errno);
  auto addr = reinterpret_cast<uintptr_t>(&anon_rw);
  unsigned char byte = 0;
  int code = ::pread(fd, &byte, 1, static_cast<off_t>(addr)) == 1 &&
                     ::pwrite(fd, &byte, 1, static_cast<off_t>(addr)) == 1
                 ? kOk
                 : kOtherError;
  ::close(fd);
  return code;
}

// ---- the fixture ---------------------------------------------------------------------

class NativeTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 11;
  NativeTest() : PolicyScopeTest(kSlot, "nat") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(base_ / "lib");
    std::ofstream(base_ / "lib" / "code.bin") << std::string(kPage, '\x90');
    std::ofstream(base_ / "workspace" / "mine.bin") << std::string(kPage, '\x90');
  }

  // Install a policy: read access to lib/ (and `also_read`), the workspace
  // writable, `exec` lines under exec:.
  void apply(const std::string& exec, const std::string& also_read = "") {
    apply_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-native\nspec:\n" +
                   (exec.empty() ? "" : "  exec:\n" + exec) + "  files:\n    read: [" + base("lib") +
                   (also_read.empty() ? "" : ", " + also_read) + "]\n    write: [\"${workspace}\"]\n",
               ws_.string());
  }

  std::string lib() const { return base("lib/code.bin"); }
  std::string mine() const { return ws("mine.bin"); }

  struct Trick {
    const char* name;
    std::function<int()> fn;
  };
  std::vector<Trick> wx_tricks() const {
    const std::string l = lib();
    return {{"anonymous W+X", anon_wx},
            {"anonymous R+X", anon_rx},
            {"anonymous write, then mprotect X", [] { return write_then_mprotect(MAP_PRIVATE); }},
            {"shared anonymous write, then mprotect X", [] { return write_then_mprotect(MAP_SHARED); }},
            {"mremap, then mprotect X", mremap_then_mprotect},
            {"stack mprotect X with PROT_GROWSDOWN", stack_exec},
            {"memfd mapped X", memfd_exec},
            {"private file pages written, then mprotect X", [l] { return file_execmod(l); }},
            {"readable file mapped W+X", [l] { return file_wx(l); }},
            {"READ_IMPLIES_EXEC anonymous mapping", read_implies_exec}};
  }
};

// ---- W^X -----------------------------------------------------------------------------

TEST_F(NativeTest, WrittenMemoryNeverBecomesExecutable) {
  for (const auto& t : wx_tricks()) {
    EXPECT_EQ(in_child(false, t.fn), kOk) << t.name << " does not work even outside the scope";
  }
  ASSERT_NO_FATAL_FAILURE(apply(""));
  const uint64_t before = denied(AC_HOOK_NATIVE_CODE);
  for (const auto& t : wx_tricks()) {
    EXPECT_EQ(scoped(t.fn), kDenied) << t.name;
  }
  EXPECT_EQ(denied(AC_HOOK_NATIVE_CODE) - before, wx_tricks().size());
  // What programs do every day keeps working: dlopen of a readable file,
  // plain read/write memory.
  EXPECT_EQ(scoped([this] { return file_rx(lib()); }), kOk);
  EXPECT_EQ(scoped(anon_rw), kOk);
  // A file the run may write stays unmappable for execution.
  EXPECT_EQ(scoped([this] { return file_rx(mine()); }), kDenied);
}

TEST_F(NativeTest, ExplicitDenyIsTheDefault) {
  ASSERT_NO_FATAL_FAILURE(apply("    native_code: deny\n"));
  EXPECT_EQ(scoped(anon_wx), kDenied);
  EXPECT_EQ(scoped([] { return write_then_mprotect(MAP_PRIVATE); }), kDenied);
}

// A JIT runtime's policy: executable anonymous memory and memfds work, and
// runs the code written there; files keep their path rules.
TEST_F(NativeTest, NativeCodeAllowLetsAJitWork) {
  ASSERT_NO_FATAL_FAILURE(apply("    native_code: allow\n"));
  const uint64_t before = denied(AC_HOOK_NATIVE_CODE);
  for (const auto& t : wx_tricks()) {
    EXPECT_EQ(scoped(t.fn), kOk) << t.name;
  }
  EXPECT_EQ(denied(AC_HOOK_NATIVE_CODE) - before, 0u);
  EXPECT_EQ(scoped([this] { return file_rx(mine()); }), kDenied) << "the workspace stays unmappable for exec";
}

TEST_F(NativeTest, AuditModeReportsWithoutDenying) {
  apply_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-native\nspec:\n  mode: audit\n",
             ws_.string());
  const uint64_t before = hook(AC_HOOK_NATIVE_CODE).decisions[AC_DECISION_AUDIT];
  EXPECT_EQ(scoped(anon_wx), kOk);
  EXPECT_EQ(hook(AC_HOOK_NATIVE_CODE).decisions[AC_DECISION_AUDIT] - before, 1u);
}

// ---- debugging -------------------------------------------------------------------------

TEST_F(NativeTest, DebuggingTheRunsOwnProcessesIsDeniedByDefault) {
  EXPECT_EQ(in_child(false, traceme_in_child), kOk) << "PTRACE_TRACEME does not work even outside the scope";
  EXPECT_EQ(in_child(false, attach_child), kOk) << "PTRACE_ATTACH does not work even outside the scope";
  EXPECT_EQ(in_child(false, vm_write_child), kOk) << "process_vm_writev does not work even outside";
  EXPECT_EQ(in_child(false, proc_self_mem_write), kOk) << "/proc/self/mem does not work even outside";

  // The policy may even write /proc: /proc/PID/mem is still not a file write.
  apply_yaml(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-native\nspec:\n  files:\n    "
      "write: [/proc]\n",
      ws_.string());
  const uint64_t before = denied(AC_HOOK_DEBUG);
  EXPECT_EQ(scoped(traceme_in_child), kDenied) << "PTRACE_TRACEME";
  EXPECT_EQ(scoped(attach_child), kDenied) << "PTRACE_ATTACH";
  EXPECT_EQ(scoped(vm_write_child), kDenied) << "process_vm_writev";
  EXPECT_EQ(scoped(proc_self_mem_write), kDenied) << "/proc/self/mem";
  EXPECT_EQ(denied(AC_HOOK_DEBUG) - before, 4u);
  // Reading one's own memory is not debugging.
  EXPECT_EQ(scoped([] { return try_open("/proc/self/mem", O_RDONLY); }), kOk);
}

TEST_F(NativeTest, NoProcessOutsideTheScopeIsInspected) {
  pid_t outside = sleeper();
  ASSERT_GT(outside, 0);
  EXPECT_EQ(in_child(false, [outside] { return inspect(outside); }), kOk)
      << "kcmp and get_robust_list do not work even outside the scope";
  ASSERT_NO_FATAL_FAILURE(apply(""));
  const uint64_t escapes = denied(AC_HOOK_SCOPE_ESCAPE), debug = denied(AC_HOOK_DEBUG);
  EXPECT_EQ(scoped([outside] { return inspect(outside); }), 10 + kDenied) << "kcmp across the border";
  EXPECT_EQ(scoped([outside] {
              void* head = nullptr;
              size_t len = 0;
              return ::syscall(SYS_get_robust_list, outside, &head, &len) == 0 ? kOk : classify_eperm(errno);
            }),
            kDenied)
      << "get_robust_list across the border";
  EXPECT_EQ(denied(AC_HOOK_SCOPE_ESCAPE) - escapes, 2u);
  // The run's own processes: reading is not debugging (no exec.debugging).
  EXPECT_EQ(scoped([] {
              pid_t own = sleeper();
              if (own <= 0) return kSetupFailed;
              int code = inspect(own);
              reap(own);
              return code;
            }),
            kOk);
  EXPECT_EQ(denied(AC_HOOK_DEBUG) - debug, 0u);
  reap(outside);
}

TEST_F(NativeTest, DebuggingAllowWorksInsideTheScopeOnly) {
  ASSERT_NO_FATAL_FAILURE(apply("    debugging: allow\n", "/proc"));
  const uint64_t before = denied(AC_HOOK_DEBUG);
  EXPECT_EQ(scoped(traceme_in_child), kOk) << "PTRACE_TRACEME";
  EXPECT_EQ(scoped(attach_child), kOk) << "PTRACE_ATTACH";
  EXPECT_EQ(scoped(vm_write_child), kOk) << "process_vm_writev";
  EXPECT_EQ(scoped(proc_self_mem_write), kOk) << "/proc/self/mem";
  EXPECT_EQ(denied(AC_HOOK_DEBUG) - before, 0u);

  // Outside the scope: a process of the test (not in the scope) and the
  // probe's own parent (the test process).
  pid_t outside = sleeper();
  ASSERT_GT(outside, 0);
  const uint64_t escapes = denied(AC_HOOK_SCOPE_ESCAPE);
  const uint64_t procs = denied(AC_HOOK_PROC);
  EXPECT_EQ(scoped([outside] { return attach(outside); }), kDenied) << "attach outside the scope";
  static int target = 0;
  EXPECT_EQ(scoped([outside] { return vm_write(outside, &target); }), kDenied) << "process_vm_writev outside";
  EXPECT_EQ(scoped(traceme), kDenied) << "PTRACE_TRACEME to a parent outside the scope";
  EXPECT_EQ(scoped([outside] { return try_open("/proc/" + std::to_string(outside) + "/mem", O_RDWR); }),
            kDenied)
      << "/proc/PID/mem of a process outside the scope";
  // Three crossings of the scope's border; the fourth never gets that far:
  // /proc/PID of a process outside the scope is not the run's to open at all.
  EXPECT_EQ(denied(AC_HOOK_SCOPE_ESCAPE) - escapes, 3u);
  EXPECT_EQ(denied(AC_HOOK_PROC) - procs, 1u);
  reap(outside);
}

}  // namespace
}  // namespace agentcage
