// SPDX-License-Identifier: Apache-2.0
// A run cannot inspect host processes: /proc/<pid> of a process outside its
// scope is denied (open, stat, readlink, listing the directory), even when
// the policy reads /proc, while the run's own processes stay readable
// without any rule (/proc/self, a child's /proc/<pid>/status). The numbers
// in a /proc listing stay visible to a run that may read /proc: hiding them
// needs a PID namespace (documented in the README).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

using namespace kt;

int do_stat(const std::string& p) {
  struct stat st {};
  return result(::stat(p.c_str(), &st));
}
int do_readlink(const std::string& p) {
  char buf[256];
  return ::readlink(p.c_str(), buf, sizeof buf) >= 0 ? kOk : classify(errno);
}
int do_read(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return classify(errno);
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n > 0 ? kOk : kOtherError;
}
int do_list(const std::string& p) {
  DIR* d = ::opendir(p.c_str());
  if (!d) return classify(errno);
  int n = 0;
  while (::readdir(d)) ++n;
  ::closedir(d);
  return n > 2 ? kOk : kOtherError;
}
// Whether a listing of /proc shows the entry `name`.
int proc_lists(const std::string& name) {
  DIR* d = ::opendir("/proc");
  if (!d) return classify(errno);
  int found = kOtherError;
  while (auto* e = ::readdir(d))
    if (name == e->d_name) found = kOk;
  ::closedir(d);
  return found;
}

class ProcTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 16;
  ProcTest() : PolicyScopeTest(kSlot, "proc") {}

  void apply(const std::string& files) {
    apply_yaml(
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-proc\nspec:\n  files:\n" + files,
        ws_.string());
  }
};

TEST_F(ProcTest, HostProcessesAreDeniedEvenWhenProcIsReadable) {
  ASSERT_NO_FATAL_FAILURE(apply("    read: [/proc]\n"));
  // pid 1 and the (unscoped) test process itself.
  for (const std::string& pid : {std::string("1"), std::to_string(::getpid())}) {
    const std::string dir = "/proc/" + pid;
    for (const auto& [what, op] : std::initializer_list<std::pair<const char*, std::function<int()>>>{
             {"read status", [&] { return do_read(dir + "/status"); }},
             {"read environ", [&] { return do_read(dir + "/environ"); }},
             {"read task status", [&] { return do_read(dir + "/task/" + pid + "/status"); }},
             {"stat dir", [&] { return do_stat(dir); }},
             {"readlink exe", [&] { return do_readlink(dir + "/exe"); }},
             {"readlink cwd", [&] { return do_readlink(dir + "/cwd"); }},
             {"list dir", [&] { return do_list(dir); }},
             {"list fds", [&] { return do_list(dir + "/fd"); }},
         }) {
      EXPECT_EQ(op(), kOk) << what << " " << dir << " fails outside the scope: the test proves nothing";
      auto before = denied(AC_HOOK_PROC);
      EXPECT_EQ(scoped(op), kDenied) << what << " " << dir;
      EXPECT_EQ(denied(AC_HOOK_PROC), before + 1) << what << " " << dir;
    }
  }
  // What is not a process stays under the path rules.
  EXPECT_EQ(scoped([] { return do_read("/proc/meminfo"); }), kOk);
  // The decision documented in the README: the numbers stay visible.
  EXPECT_EQ(scoped([] { return proc_lists("1"); }), kOk);
}

TEST_F(ProcTest, OwnProcessesStayReadableWithoutARule) {
  ASSERT_NO_FATAL_FAILURE(apply("    write: [\"${workspace}\"]\n"));
  EXPECT_EQ(scoped([] { return do_read("/proc/self/status"); }), kOk);
  EXPECT_EQ(scoped([] { return do_read("/proc/self/stat"); }), kOk);
  EXPECT_EQ(scoped([] { return do_read("/proc/thread-self/status"); }), kOk);
  EXPECT_EQ(scoped([] { return do_stat("/proc/self/"); }), kOk);
  EXPECT_EQ(scoped([] { return do_readlink("/proc/self/exe"); }), kOk);
  EXPECT_EQ(scoped([] { return do_list("/proc/self/fd"); }), kOk);
  EXPECT_EQ(scoped([] { return do_read("/proc/" + std::to_string(::getpid()) + "/status"); }), kOk);
  // A child of the run (multiprocessing's workers, psutil on a child).
  EXPECT_EQ(scoped([] {
              int pipefd[2];
              if (::pipe(pipefd) != 0) return kOtherError;
              pid_t child = ::fork();
              if (child == 0) {
                char c;
                static_cast<void>(::read(pipefd[0], &c, 1));  // wait until the parent looked
                _exit(0);
              }
              std::string dir = "/proc/" + std::to_string(child);
              int rc = do_read(dir + "/status");
              if (rc == kOk) rc = do_stat(dir);
              if (rc == kOk) rc = do_readlink(dir + "/exe");
              static_cast<void>(::write(pipefd[1], "x", 1));
              ::waitpid(child, nullptr, 0);
              return rc;
            }),
            kOk);
  // Not a process of the run: still denied, and /proc itself needs a rule.
  EXPECT_EQ(scoped([] { return do_read("/proc/1/status"); }), kDenied);
  EXPECT_EQ(scoped([] { return do_list("/proc"); }), kDenied);
}

TEST_F(ProcTest, OwnPipesAndPidfdsReopenWithoutARule) {
  // Files that no path names: /dev/stdin on a pipe and a shell's <(...)
  // reopen a pipe through /proc/self/fd; a pidfd of the run's own process
  // (asyncio, Go's os/exec) is a pidfs file on 6.12. A host process's
  // descriptors stay out of reach (its /proc/PID links are not followed).
  ASSERT_NO_FATAL_FAILURE(apply("    write: [\"${workspace}\"]\n"));
  EXPECT_EQ(scoped([] {
              int p[2];
              if (::pipe(p) != 0 || ::write(p[1], "x", 1) != 1) return kOtherError;
              return do_read("/proc/self/fd/" + std::to_string(p[0]));
            }),
            kOk)
      << "a pipe reopened through /proc/self/fd";
  EXPECT_EQ(scoped([] {
              int fd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
              return fd >= 0 ? kOk : classify(errno);
            }),
            kOk)
      << "pidfd_open of itself";
  // A namespace file is not among them: a pidfd's PIDFD_GET_*_NAMESPACE
  // would open another process's that way.
  EXPECT_EQ(scoped([] { return try_open("/proc/self/ns/net", O_RDONLY); }), kDenied);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(::write(p[1], "x", 1), 1);
  const std::string host_fd = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(p[0]);
  EXPECT_EQ(do_read(host_fd), kOk) << "fails outside the scope: the test proves nothing";
  ASSERT_EQ(::write(p[1], "x", 1), 1);
  const uint64_t before = denied(AC_HOOK_PROC);
  EXPECT_EQ(scoped([&] { return do_read(host_fd); }), kDenied) << "the host's pipe";
  EXPECT_EQ(denied(AC_HOOK_PROC) - before, 1u);
  ::close(p[0]);
  ::close(p[1]);
}

}  // namespace
}  // namespace agentcage
