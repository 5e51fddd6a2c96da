// SPDX-License-Identifier: Apache-2.0
#include "bpf/lsm.h"

#include <gtest/gtest.h>

namespace agentcage::bpf {
namespace {

struct LsmCase {
  const char* content;
  bool bpf_active;
  const char* list;
};

class LsmListTest : public ::testing::TestWithParam<LsmCase> {};

TEST_P(LsmListTest, DetectsBpfAsAWholeName) {
  const auto& c = GetParam();
  LsmState st = parse_lsm_list(c.content);
  EXPECT_TRUE(st.readable);
  EXPECT_EQ(st.bpf_active, c.bpf_active) << c.content;
  EXPECT_EQ(st.list, c.list);
}

INSTANTIATE_TEST_SUITE_P(Lists, LsmListTest,
                         ::testing::Values(LsmCase{"lockdown,capability,landlock,bpf", true,
                                                   "lockdown,capability,landlock,bpf"},
                                           LsmCase{"capability,bpf,yama\n", true, "capability,bpf,yama"},
                                           LsmCase{"bpf", true, "bpf"},
                                           LsmCase{"capability,apparmor", false, "capability,apparmor"},
                                           // names that merely contain "bpf" are not the BPF LSM
                                           LsmCase{"capability,bpfx,xbpf", false, "capability,bpfx,xbpf"},
                                           LsmCase{"", false, ""}));

TEST(LsmState, UnreadableFileExplainsSecurityfs) {
  LsmState st = read_lsm_state("/nonexistent/agentcage/lsm");
  EXPECT_FALSE(st.readable);
  EXPECT_FALSE(st.bpf_active);
  EXPECT_NE(st.detail.find("securityfs"), std::string::npos) << st.detail;
}

TEST(LsmState, FixHintAppendsBpfToCurrentList) {
  LsmState st = parse_lsm_list("capability,apparmor");
  std::string hint = lsm_fix_hint(st);
  EXPECT_NE(hint.find("lsm=capability,apparmor,bpf"), std::string::npos) << hint;
  EXPECT_NE(hint.find("CONFIG_BPF_LSM"), std::string::npos) << hint;
}

}  // namespace
}  // namespace agentcage::bpf
