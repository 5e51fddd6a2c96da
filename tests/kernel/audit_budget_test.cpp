// SPDX-License-Identifier: Apache-2.0
// One run flooding denials cannot starve other runs' audit events (issue 11
// §3): each scope may put AC_SCOPE_EVENT_BUDGET records per second into the
// shared ring buffer; the rest are counted exactly, per scope (its report:
// the run's result) and in total (AC_STAT_EVENTS_SUPPRESSED). Decisions, the
// decision counters and the scope's own report are never limited.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "bpf/event_reader.h"
#include "policy_fixture.h"

namespace agentcage {
namespace {

class AuditBudgetTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 23;
  AuditBudgetTest() : PolicyScopeTest(kSlot, "budget") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto other =
        cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "budget-other-" + std::to_string(::getpid()));
    ASSERT_TRUE(other.ok()) << other.error().message;
    other_ = std::move(other).value();
  }

  void TearDown() override {
    if (other_scoped_) {
      EXPECT_TRUE(kt::enforcer()->remove_scope(kt::scope_cgroup(other_)).ok());
    }
    if (other_.fd() >= 0) {
      EXPECT_TRUE(other_.remove().ok());
    }
    PolicyScopeTest::TearDown();
  }

  // `n` opens of a file the policy does not allow, in a process of `cg`;
  // how many were denied.
  static int deny_n(const cgroup::Cgroup& cg, int n) {
    return kt::run_in_cgroup(cg.fd(), [n] {
      int denied = 0;
      for (int i = 0; i < n; ++i) {
        int fd = ::open("/etc/passwd", O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
          ::close(fd);
        else if (errno == EACCES)
          ++denied;
      }
      return denied == n ? 0 : 1;
    });
  }

  cgroup::Cgroup other_;
  bool other_scoped_ = false;
};

TEST_F(AuditBudgetTest, AFloodingScopeCannotStarveAnotherScopesEvents) {
  ASSERT_NO_FATAL_FAILURE(
      apply_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-budget\nspec:\n  files:\n    "
                 "read: [/usr]\n",
                 ws_.string()));
  auto st = kt::enforcer()->add_scope(kt::scope_cgroup(other_), other_.id(), slot_, "");
  ASSERT_TRUE(st.ok()) << st.error().message;
  other_scoped_ = true;

  const uint64_t flood_id = cg_.id(), quiet_id = other_.id();
  uint64_t flood_records = 0, quiet_records = 0;
  auto reader = bpf::EventReader::create(kt::enforcer()->events_fd(), [&](const ac_event_decision& e) {
    flood_records += e.scope_id == flood_id;
    quiet_records += e.scope_id == quiet_id;
  });
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  ASSERT_TRUE((*reader)->poll(0).ok());  // what earlier tests left
  flood_records = quiet_records = 0;

  const uint64_t lost0 = *kt::enforcer()->stat(AC_STAT_EVENTS_LOST);
  const uint64_t suppressed0 = *kt::enforcer()->stat(AC_STAT_EVENTS_SUPPRESSED);
  const uint64_t deny0 = reason(AC_HOOK_FILE_OPEN, AC_REASON_DEFAULT_DENY);

  // Far more denials than the 1 MiB ring buffer holds (about 2900 records),
  // with nobody draining it; then a few in the other scope. Without a
  // budget the flood fills the buffer and the quiet scope's records are lost.
  constexpr int kFlood = 6000, kQuiet = 5;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(deny_n(cg_, kFlood), 0) << "a decision was rate-limited: every open must be denied";
  EXPECT_EQ(deny_n(other_, kQuiet), 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE((*reader)->poll(0).ok());

  auto flood = kt::enforcer()->scope_report(flood_id);
  auto quiet = kt::enforcer()->scope_report(quiet_id);
  ASSERT_TRUE(flood.ok() && quiet.ok());
  // Decisions and counters are exact.
  EXPECT_EQ(reason(AC_HOOK_FILE_OPEN, AC_REASON_DEFAULT_DENY) - deny0, uint64_t{kFlood + kQuiet});
  EXPECT_EQ(flood->denied_total(), uint64_t{kFlood});
  EXPECT_EQ(flood->records_taken, uint32_t{kFlood});
  EXPECT_EQ(*kt::enforcer()->stat(AC_STAT_EVENTS_LOST) - lost0, 0u) << "the ring buffer overflowed";
  // The quiet scope's records all arrived.
  EXPECT_EQ(quiet_records, uint64_t{kQuiet});
  EXPECT_EQ(quiet->events_suppressed, 0u);
  // Every flood record was either delivered or counted as suppressed, per
  // scope and in total.
  EXPECT_EQ(flood_records + flood->events_suppressed, uint64_t{kFlood});
  EXPECT_EQ(*kt::enforcer()->stat(AC_STAT_EVENTS_SUPPRESSED) - suppressed0, flood->events_suppressed);
  // And the budget held: one window per started second, plus one place per
  // CPU racing for the last one.
  const uint64_t windows = static_cast<uint64_t>(seconds) + 2;
  const uint64_t cpus = std::thread::hardware_concurrency();
  EXPECT_LE(flood_records, windows * (AC_SCOPE_EVENT_BUDGET + cpus)) << seconds << " s";
  EXPECT_GE(flood_records, uint64_t{AC_SCOPE_EVENT_BUDGET});
  std::printf("flood: %lu delivered, %lu suppressed in %.2f s\n", static_cast<unsigned long>(flood_records),
              static_cast<unsigned long>(flood->events_suppressed), seconds);
}

}  // namespace
}  // namespace agentcage
