// SPDX-License-Identifier: Apache-2.0
// The run's seccomp filter, installed for real in a forked child (seccomp
// needs no BPF LSM, so this runs on any Linux host without root): denied
// groups fail with EPERM, allowed groups and ordinary calls do not.
#include <gtest/gtest.h>
#include <linux/seccomp.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>
#include <vector>

#include "policy/syscalls.h"
#include "run/seccomp.h"

namespace agentcage::run {
namespace {

// Installs `filter` in a child, then runs fn there; fn's exit code, or 99
// when the filter could not be installed.
int under_filter(const std::vector<sock_filter>& filter, const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    sock_fprog prog{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
      ::_exit(99);
    ::_exit(fn());
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

// 0 when the call failed with EPERM, 1 when it succeeded, 2 for other errors.
int eperm(long rc) { return rc == -1 && errno == EPERM ? 0 : rc >= 0 ? 1 : 2; }

TEST(Seccomp, EveryGroupNamesOnlyKnownCallsOfThisArchitecture) {
  auto all = build_seccomp_filter({});
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_GT(all->size(), 50u);
  std::vector<std::string> every;
  for (const auto& g : policy::syscall_groups()) every.emplace_back(g.name);
  auto none = build_seccomp_filter(every);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_LT(none->size(), all->size());
}

TEST(Seccomp, DeniedGroupsFailWithEpermAndTheRestWorks) {
  auto filter = build_seccomp_filter({});
  ASSERT_TRUE(filter.ok()) << filter.error().message;
  // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING) works without it.
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_keyctl, 0, -3, 0)); }), 0);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_unshare, 0)); }), 0);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_io_uring_setup, 0, nullptr)); }), 0);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, READ_IMPLIES_EXEC)); }), 0);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, ADDR_NO_RANDOMIZE)); }), 0);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, 0x80000000L)); }), 0);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, 0xfffffffeL)); }), 0);
#if defined(__x86_64__)
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(0x40000000L | SYS_getpid)); }), 0) << "x32";
#endif
  // Not denied: the persona query and the Linux personas, ordinary calls.
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, 0xffffffffL)); }), 1);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, 0)); }), 1);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_personality, 0x20008)); }), 1);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_getpid)); }), 1);
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::fork() >= 0 ? 0 : -1); }), 1);
}

TEST(Seccomp, AnAllowedGroupReachesTheKernel) {
  auto filter = build_seccomp_filter(std::vector<std::string>{"io_uring"});
  ASSERT_TRUE(filter.ok()) << filter.error().message;
  // io_uring_setup(0, NULL): EINVAL or EFAULT from the kernel (or EPERM
  // from kernel.io_uring_disabled, so also look at keyctl staying denied).
  EXPECT_EQ(under_filter(*filter, [] { return eperm(::syscall(SYS_keyctl, 0, -3, 0)); }), 0);
  int rc = under_filter(*filter, [] {
    long r = ::syscall(SYS_io_uring_setup, 0, nullptr);
    return r == -1 && (errno == EINVAL || errno == EFAULT) ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace agentcage::run
