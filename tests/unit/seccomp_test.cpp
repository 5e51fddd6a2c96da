// SPDX-License-Identifier: Apache-2.0
// The run's seccomp filter, installed for real in a forked child (seccomp
// needs no BPF LSM, so this runs on any Linux host without root): denied
// groups fail with EPERM, answered and counted by the supervisor; allowed
// groups and ordinary calls do not reach it.
#include <gtest/gtest.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/audit.h>
#include <seccomp.h>

#include <cerrno>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "policy/syscalls.h"
#include "run/seccomp.h"
#include "run/seccomp_notify.h"

namespace agentcage::run {
namespace {

// Installs `filter` in a child with its listener, hands the listener over
// as `agentcage run` does (run/seccomp_notify.h), then runs fn there while
// this process answers as the supervisor. fn's exit code, or 99 when the
// filter could not be installed; the supervisor's report into *report.
int under_filter(const std::vector<sock_filter>& filter, const std::function<int()>& fn,
                 SyscallReport* report = nullptr) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 98;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    sock_fprog prog{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(99);
    long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) ::_exit(99);
    const int msg = 1;
    if (hand_over_listener(sv[1], static_cast<int>(listener), &msg, sizeof msg) != 0) ::_exit(99);
    ::close(sv[1]);
    ::_exit(fn());
  }
  ::close(sv[1]);
  int msg = 0;
  UniqueFd listener;
  std::optional<SyscallSupervisor> sup;
  if (receive_report(sv[0], &msg, sizeof msg, listener) == static_cast<ssize_t>(sizeof msg) && listener)
    sup.emplace(std::move(listener));
  ::close(sv[0]);
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (sup) {
      pollfd p{sup->poll_fd(), POLLIN, 0};
      ::poll(&p, 1, 10);
      EXPECT_TRUE(sup->answer_pending());
    } else {
      ::usleep(10000);
    }
  }
  if (sup && report) *report = sup->report();
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

TEST(SeccompNotify, EveryDeniedCallIsCountedByNameWithItsTask) {
  auto filter = build_seccomp_filter({});
  ASSERT_TRUE(filter.ok()) << filter.error().message;
  SyscallReport report;
  int rc = under_filter(
      *filter,
      [] {
        ::prctl(PR_SET_NAME, "denied-caller", 0, 0, 0);
        int bad = 0;
        for (int i = 0; i < 3; ++i) bad += eperm(::syscall(SYS_keyctl, 0, -3, 0));
        bad += eperm(::syscall(SYS_unshare, 0));
        bad += eperm(::syscall(SYS_getpid)) == 1 ? 0 : 1;  // allowed: not counted
        return bad;
      },
      &report);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(report.total, 4u);
  EXPECT_EQ(report.by_name["keyctl"], 3u);
  EXPECT_EQ(report.by_name["unshare"], 1u);
  EXPECT_EQ(report.by_name.size(), 2u);
  ASSERT_EQ(report.records.size(), 4u);
  EXPECT_EQ(report.records[0].name, "keyctl");
  EXPECT_EQ(report.records[0].comm, "denied-caller");
  EXPECT_EQ(report.records[0].uid, ::getuid());
  EXPECT_GT(report.records[0].pid, 0);
  EXPECT_EQ(report.records[0].pid, report.records[0].tid);
  EXPECT_EQ(report.records[3].name, "unshare");
}

TEST(SeccompNotify, ThreadsAndForkedChildrenAreCountedToo) {
  auto filter = build_seccomp_filter({});
  ASSERT_TRUE(filter.ok()) << filter.error().message;
  SyscallReport report;
  int rc = under_filter(
      *filter,
      [] {
        int bad = 0;
        std::thread t([&] { bad += eperm(::syscall(SYS_keyctl, 0, -3, 0)); });
        t.join();
        pid_t child = ::fork();
        if (child == 0) ::_exit(eperm(::syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0)));
        int st = 0;
        ::waitpid(child, &st, 0);
        return bad + (WIFEXITED(st) ? WEXITSTATUS(st) : 50);
      },
      &report);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(report.total, 2u);
  EXPECT_EQ(report.by_name["keyctl"], 1u);
  EXPECT_EQ(report.by_name["perf_event_open"], 1u);
  ASSERT_EQ(report.records.size(), 2u);
  EXPECT_NE(report.records[0].tid, report.records[0].pid) << "the call came from a second thread";
}

TEST(SeccompNotify, RecordsStopAtTheCapCountsDoNot) {
  auto filter = build_seccomp_filter({});
  ASSERT_TRUE(filter.ok()) << filter.error().message;
  SyscallReport report;
  constexpr int kCalls = 200;
  int rc = under_filter(
      *filter,
      [] {
        int bad = 0;
        for (int i = 0; i < kCalls; ++i) bad += eperm(::syscall(SYS_keyctl, 0, -3, 0));
        return bad;
      },
      &report);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(report.total, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(report.records_taken, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(report.records.size(), SyscallReport::kRecords);
}

// With the supervisor gone (agentcage died) a denied call still fails: the
// kernel answers ENOSYS for a filter without a listener. Never success.
TEST(SeccompNotify, WithoutTheSupervisorDeniedCallsStillFail) {
  auto filter = build_seccomp_filter({});
  ASSERT_TRUE(filter.ok()) << filter.error().message;
  pid_t pid = ::fork();
  if (pid == 0) {
    sock_fprog prog{static_cast<unsigned short>(filter->size()), filter->data()};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(99);
    long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) ::_exit(99);
    ::close(static_cast<int>(listener));  // the supervisor is gone
    long r = ::syscall(SYS_keyctl, 0, -3, 0);
    ::_exit(r == -1 && errno == ENOSYS ? 0 : r >= 0 ? 1 : 2);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(SeccompNotify, NamesOfOtherAbis) {
  EXPECT_EQ(syscall_display_name(seccomp_arch_native(), SYS_keyctl), "keyctl");
#if defined(__x86_64__)
  EXPECT_EQ(syscall_display_name(AUDIT_ARCH_I386, 288), "i386:keyctl");
  EXPECT_EQ(syscall_display_name(AUDIT_ARCH_X86_64, 0x40000000 | 39), "x32:getpid");
#endif
  EXPECT_EQ(syscall_display_name(seccomp_arch_native(), 99999), "syscall_99999");
}

}  // namespace
}  // namespace agentcage::run
