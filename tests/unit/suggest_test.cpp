// SPDX-License-Identifier: Apache-2.0
// The one "did you mean" rule (util/suggest.h), and that the policy parser
// and the daemon's configuration give the same suggestion for the same kind
// of typo.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <string_view>

#include "daemon/config.h"
#include "policy/policy.h"
#include "util/suggest.h"

namespace agentcage {
namespace {

constexpr std::array<std::string_view, 4> kModes = {"enforce", "audit", "read", "ready"};

TEST(Suggest, EditDistanceCountsTranspositionsAsOne) {
  EXPECT_EQ(edit_distance("read", "read"), 0u);
  EXPECT_EQ(edit_distance("raed", "read"), 1u);
  EXPECT_EQ(edit_distance("red", "read"), 1u);
  EXPECT_EQ(edit_distance("plociy_dir", "policy_dir"), 2u);
  EXPECT_EQ(edit_distance(std::string(kMaxSuggestLength + 1, 'a'), "a"), SIZE_MAX);
}

TEST(Suggest, ClosestWordWithinTwoEdits) {
  EXPECT_EQ(closest_word("enforc", kModes), "enforce");
  EXPECT_EQ(closest_word("audti", kModes), "audit");
  EXPECT_EQ(closest_word("xyzzy", kModes), std::nullopt);  // too far from all
  EXPECT_EQ(closest_word("audit", kModes), std::nullopt);  // not a typo
  EXPECT_EQ(closest_word(std::string(200, 'a'), kModes), std::nullopt);
  // Ties go to the first candidate; "reat" is one edit from both.
  EXPECT_EQ(closest_word("reat", kModes), "read");
}

TEST(Suggest, CaseOnlyDifferenceWinsOverRealEdits) {
  EXPECT_EQ(closest_word("Audit", kModes), "audit");
  EXPECT_EQ(closest_word("READY", kModes), "ready");  // not "read" (one real edit)
  EXPECT_EQ(did_you_mean("Enforce", kModes), " (did you mean 'enforce'?)");
  EXPECT_EQ(did_you_mean("nothing-like-it", kModes), "");
}

// The same typo class gets the same answer in a policy and in the daemon's
// configuration (they once used two distance functions with different caps).
TEST(Suggest, PolicyAndDaemonConfigAgree) {
  policy::ParseOptions po;
  po.check_exec_exists = false;
  auto pol = policy::parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n  mode: enforce\n  fiels: {}\n",
      "p.yaml", po);
  ASSERT_FALSE(pol.ok());
  EXPECT_NE(pol.errors.at(0).message.find("(did you mean 'files'?)"), std::string::npos)
      << pol.errors[0].message;

  // Two transpositions: two edits, so suggested (plain Levenshtein counts 4).
  auto cfg = daemon::parse_config("plociy_dir: /srv/p\n", "d.yaml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.errors.at(0).format(),
            "d.yaml:1:1: unknown setting 'plociy_dir' (did you mean 'policy_dir'?)");
  auto upper = daemon::parse_config("Policy_Dir: /srv/p\n", "d.yaml");
  ASSERT_FALSE(upper.ok());
  EXPECT_EQ(upper.errors.at(0).format(),
            "d.yaml:1:1: unknown setting 'Policy_Dir' (did you mean 'policy_dir'?)");
}

}  // namespace
}  // namespace agentcage
