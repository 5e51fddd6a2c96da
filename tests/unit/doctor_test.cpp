// SPDX-License-Identifier: Apache-2.0
#include "doctor/doctor.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace agentcage::doctor {
namespace {

TEST(KernelRelease, ParsesDistributionReleases) {
  KernelVersion v;
  ASSERT_TRUE(parse_kernel_release("6.1.0-28-amd64", v));
  EXPECT_EQ(v.major, 6u);
  EXPECT_EQ(v.minor, 1u);
  ASSERT_TRUE(parse_kernel_release("6.12.48+deb13-amd64", v));
  EXPECT_EQ(v.minor, 12u);
  ASSERT_TRUE(parse_kernel_release("5.17", v));
  EXPECT_FALSE(parse_kernel_release("", v));
  EXPECT_FALSE(parse_kernel_release("linux", v));
  EXPECT_FALSE(parse_kernel_release("6", v));
}

TEST(CheckKernel, EnforcesMinimumVersion) {
  EXPECT_EQ(check_kernel("6.1.0-28-amd64").status, Outcome::ok);
  EXPECT_EQ(check_kernel("5.17.0").status, Outcome::ok);
  EXPECT_EQ(check_kernel("5.16.9").status, Outcome::fail);
  EXPECT_EQ(check_kernel("4.19.0").status, Outcome::fail);
  EXPECT_EQ(check_kernel("garbage").status, Outcome::fail);
  EXPECT_FALSE(check_kernel("5.10.0").fix.empty());
}

TEST(CheckLsm, FailsWithBootParameterFixWhenBpfMissing) {
  Check c = check_lsm(bpf::parse_lsm_list("lockdown,capability,apparmor"));
  EXPECT_EQ(c.status, Outcome::fail);
  EXPECT_NE(c.fix.find("lsm=lockdown,capability,apparmor,bpf"), std::string::npos) << c.fix;
  EXPECT_EQ(check_lsm(bpf::parse_lsm_list("capability,bpf")).status, Outcome::ok);
  bpf::LsmState unreadable;
  unreadable.detail = "not mounted";
  Check u = check_lsm(unreadable);
  EXPECT_EQ(u.status, Outcome::fail);
  EXPECT_NE(u.fix.find("securityfs"), std::string::npos);
}

TEST(CheckCgroup, NeedsMemoryPidsAndCpu) {
  EXPECT_EQ(check_cgroup("/sys/fs/cgroup", "", {"cpuset", "cpu", "io", "memory", "pids"}).status,
            Outcome::ok);
  Check missing = check_cgroup("/sys/fs/cgroup/unified", "", {"hugetlb"});
  EXPECT_EQ(missing.status, Outcome::fail);
  EXPECT_NE(missing.detail.find("memory, pids, cpu"), std::string::npos) << missing.detail;
  Check none = check_cgroup("", "cgroup: no cgroup v2 hierarchy is mounted", {});
  EXPECT_EQ(none.status, Outcome::fail);
  EXPECT_NE(none.fix.find("mount -t cgroup2"), std::string::npos);
}

TEST(CheckPrivileges, NamesEachMissingCapability) {
  constexpr uint64_t kAll = (1ULL << 21) | (1ULL << 38) | (1ULL << 39);
  EXPECT_EQ(check_privileges(0, kAll).status, Outcome::ok);
  Check c = check_privileges(1000, 1ULL << 21);
  EXPECT_EQ(c.status, Outcome::fail);
  EXPECT_NE(c.detail.find("CAP_BPF"), std::string::npos);
  EXPECT_NE(c.detail.find("CAP_PERFMON"), std::string::npos);
  EXPECT_EQ(c.detail.find("CAP_SYS_ADMIN"), std::string::npos);
}

TEST(CheckBpffs, NeedsBpffsAtSysFsBpf) {
  Check ok = check_bpffs("50 22 0:40 / /sys/fs/bpf rw,nosuid shared:20 - bpf bpf rw,mode=700\n");
  EXPECT_EQ(ok.status, Outcome::ok);
  EXPECT_NE(ok.detail.find("/sys/fs/bpf"), std::string::npos);
  EXPECT_EQ(check_bpffs("22 1 0:21 / / rw - ext4 /dev/vda rw\n").status, Outcome::fail);
  Check other = check_bpffs("50 22 0:40 / /mnt/bpf rw - bpf bpf rw\n");
  EXPECT_EQ(other.status, Outcome::fail);
  EXPECT_NE(other.detail.find("/mnt/bpf"), std::string::npos);
}

TEST(Report, ReadyOnlyWithoutFailures) {
  Report r;
  EXPECT_FALSE(r.ready()) << "an empty report proves nothing";
  r.checks.push_back({"a", Outcome::ok, "", ""});
  r.checks.push_back({"b", Outcome::warn, "", "do x"});
  EXPECT_TRUE(r.ready());
  r.checks.push_back({"c", Outcome::fail, "broken", "fix it"});
  EXPECT_FALSE(r.ready());
  std::string text = format_text(r);
  EXPECT_NE(text.find("[FAIL] c: broken"), std::string::npos) << text;
  EXPECT_NE(text.find("fix: fix it"), std::string::npos) << text;
  EXPECT_NE(text.find("NOT available (1 check failed)"), std::string::npos) << text;
  auto j = nlohmann::json::parse(format_json(r));
  EXPECT_EQ(j["ready"], false);
  ASSERT_EQ(j["checks"].size(), 3u);
  EXPECT_EQ(j["checks"][2]["status"], "fail");
}

}  // namespace
}  // namespace agentcage::doctor
