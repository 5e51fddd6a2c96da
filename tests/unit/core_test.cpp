// SPDX-License-Identifier: Apache-2.0
// core/: the closed sets' names are metric labels and protocol values (a
// contract with dashboards and clients), and each name maps back to its value.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string>

#include "core/fail_closed.h"
#include "core/run_outcome.h"
#include "util/file.h"
#include "util/raw_syscall.h"
#include "util/text.h"

namespace agentcage {
namespace {

TEST(CoreRunOutcome, NamesAreTheContract) {
  std::set<std::string> names;
  for (auto o : core::kRunOutcomes) {
    names.insert(std::string(core::name(o)));
    EXPECT_EQ(core::parse_run_outcome(core::name(o)), o);
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"ok", "error", "timeout", "oom", "signal", "denied", "setup_failed"}));
  EXPECT_FALSE(core::parse_run_outcome("OK"));
  EXPECT_FALSE(core::parse_run_outcome(""));
}

TEST(CoreFailClosedReason, NamesAreTheContract) {
  std::set<std::string> names;
  for (auto r : core::kFailClosedReasons) {
    names.insert(std::string(core::name(r)));
    EXPECT_EQ(core::parse_fail_closed_reason(core::name(r)), r);
  }
  EXPECT_EQ(names, (std::set<std::string>{"bpf_unavailable", "lsm_inactive", "cgroup", "scope",
                                          "policy_invalid", "sandbox", "internal"}));
  EXPECT_FALSE(core::parse_fail_closed_reason("nope"));
}

// read_up_to takes at most `max` bytes, across the reads and buffer sizes it
// grows through, and no more than the source has.
// Audit lines (nanoseconds) and results (milliseconds) stamp their times so.
TEST(UtilText, Rfc3339InUtc) {
  EXPECT_EQ(rfc3339_utc(0, 9), "1970-01-01T00:00:00.000000000Z");
  EXPECT_EQ(rfc3339_utc(1000000001, 9), "1970-01-01T00:00:01.000000001Z");
  EXPECT_EQ(rfc3339_utc(951782400LL * 1000000000, 9), "2000-02-29T00:00:00.000000000Z");
  // Milliseconds (a run's result) are cut, not rounded; before the epoch is the epoch.
  EXPECT_EQ(rfc3339_utc(1795762199999999999LL, 3), "2026-11-27T06:49:59.999Z");
  EXPECT_EQ(rfc3339_utc(4107542399123456789LL, 3), "2100-02-28T23:59:59.123Z");
  EXPECT_EQ(rfc3339_utc(-5, 3), "1970-01-01T00:00:00.000Z");
}

TEST(UtilReadUpTo, ReadsAtMostMaxBytesWhateverTheSourceHolds) {
  std::string data;
  for (size_t i = 0; i < 20000; ++i) data.push_back(static_cast<char>('a' + i % 26));
  for (size_t max : {size_t{0}, size_t{1}, size_t{4096}, size_t{4097}, size_t{12288}, size_t{19999},
                     size_t{20000}, size_t{20001}, size_t{1} << 20}) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    // 20000 bytes fit a pipe's 64 KiB buffer: written whole before reading.
    ASSERT_EQ(::write(fds[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ::close(fds[1]);
    auto got = read_up_to(fds[0], max);
    ::close(fds[0]);
    ASSERT_TRUE(got) << got.error().message;
    EXPECT_EQ(*got, data.substr(0, std::min(max, data.size()))) << "max " << max;
  }
}

}  // namespace
}  // namespace agentcage

TEST(UtilRawSyscall, ReturnsTheErrorAndLeavesErrnoAlone) {
  // A child sharing its parent's memory must not write errno (the parent's).
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  errno = 1234;
  EXPECT_EQ(agentcage::raw_syscall(SYS_close, fds[0]), 0);
  EXPECT_EQ(agentcage::raw_syscall(SYS_close, fds[0]), -EBADF);
  EXPECT_EQ(
      agentcage::raw_syscall(SYS_openat, AT_FDCWD, agentcage::sysarg("/nonexistent/agentcage"), O_RDONLY),
      -ENOENT);
  if (agentcage::kRawSyscalls) {
    EXPECT_EQ(errno, 1234);
  }
  EXPECT_EQ(agentcage::raw_syscall(SYS_getpid), ::getpid());
  ::close(fds[1]);
}
