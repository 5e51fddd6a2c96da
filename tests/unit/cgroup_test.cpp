// SPDX-License-Identifier: Apache-2.0
#include "cgroup/cgroup.h"

#include <gtest/gtest.h>

namespace agentcage::cgroup {
namespace {

constexpr const char* kHybridMountinfo =
    "25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "31 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 "
    "rw,nsdelegate\n"
    "33 31 0:28 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory\n";

constexpr const char* kUnifiedMountinfo =
    "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
    "40 22 0:35 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n"
    "41 22 0:36 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

TEST(Mountinfo, FindsCgroup2InHybridLayout) {
  auto mounts = parse_cgroup2_mounts(kHybridMountinfo);
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0], "/sys/fs/cgroup/unified");
}

TEST(Mountinfo, IgnoresCgroupV1AndTmpfs) {
  auto mounts = parse_cgroup2_mounts(
      "33 31 0:28 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory\n"
      "31 25 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro\n");
  EXPECT_TRUE(mounts.empty());
}

TEST(Mountinfo, UnescapesOctalAndHandlesOptionalFields) {
  auto mounts = parse_cgroup2_mounts(kUnifiedMountinfo);
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_EQ(mounts[0], "/mnt/with space");
  EXPECT_EQ(mounts[1], "/sys/fs/cgroup");
}

TEST(Mountinfo, SkipsTruncatedLines) {
  EXPECT_TRUE(parse_cgroup2_mounts("41 22 0:36 / /sys/fs/cgroup\n- cgroup2\n\n").empty());
}

TEST(CgroupLevel, CountsComponentsBelowRoot) {
  EXPECT_EQ(*cgroup_level("/sys/fs/cgroup", "/sys/fs/cgroup/agentcage"), 1u);
  EXPECT_EQ(*cgroup_level("/sys/fs/cgroup", "/sys/fs/cgroup/agentcage/run-1"), 2u);
  EXPECT_EQ(*cgroup_level("/sys/fs/cgroup/", "/sys/fs/cgroup/a/b/c/"), 3u);
  EXPECT_EQ(*cgroup_level("/sys/fs/cgroup", "/sys/fs/cgroup/a/./b"), 2u);
}

TEST(CgroupLevel, RejectsPathsOutsideTheHierarchy) {
  EXPECT_FALSE(cgroup_level("/sys/fs/cgroup", "/tmp/x").ok());
  EXPECT_FALSE(cgroup_level("/sys/fs/cgroup", "/sys/fs/cgroup/../x").ok());
}

TEST(CgroupLevel, RootIsLevelZero) {
  EXPECT_EQ(*cgroup_level("/sys/fs/cgroup", "/sys/fs/cgroup"), 0u);
  EXPECT_EQ(*cgroup_level("/sys/fs/cgroup", "/sys/fs/cgroup/"), 0u);
}

TEST(Controllers, SplitsOnWhitespace) {
  auto c = parse_controllers("cpuset cpu io memory hugetlb pids rdma misc\n");
  ASSERT_EQ(c.size(), 8u);
  EXPECT_EQ(c[1], "cpu");
  EXPECT_EQ(c[5], "pids");
  EXPECT_TRUE(parse_controllers("\n").empty());
}

TEST(CgroupEvents, PopulatedIsTheKeyedValue) {
  EXPECT_TRUE(events_say_populated("populated 1\nfrozen 0\n"));
  EXPECT_FALSE(events_say_populated("populated 0\nfrozen 0\n"));
  EXPECT_TRUE(events_say_populated("frozen 0\npopulated 1\n"));
  EXPECT_FALSE(events_say_populated("frozen 1\n"));
  EXPECT_FALSE(events_say_populated(""));
  EXPECT_FALSE(populated("/nonexistent/cgroup")) << "a cgroup that is gone has no processes";
}

TEST(CgroupCreate, RejectsNamesThatEscapeTheParent) {
  for (const char* bad : {"", ".", "..", "a/b", "../x"}) {
    auto cg = Cgroup::create("/sys/fs/cgroup", "/sys/fs/cgroup/agentcage", bad);
    EXPECT_FALSE(cg.ok()) << bad;
    if (!cg.ok()) {
      EXPECT_EQ(cg.error().code, EINVAL) << bad;
    }
  }
}

}  // namespace
}  // namespace agentcage::cgroup
