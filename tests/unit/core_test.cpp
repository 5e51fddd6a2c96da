// SPDX-License-Identifier: Apache-2.0
// core/: the closed sets' names are metric labels and protocol values (a
// contract with dashboards and clients), and each name maps back to its value.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/fail_closed.h"
#include "core/run_outcome.h"

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

}  // namespace
}  // namespace agentcage
