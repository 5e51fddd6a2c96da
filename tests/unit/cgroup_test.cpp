// SPDX-License-Identifier: Apache-2.0
#include "cgroup/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "util/mountinfo.h"

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

// The table's mounts and types (util/mountinfo.h): a file's file system is
// found from its mount id without asking the file system.
TEST(Mountinfo, EachMountHasItsIdDeviceAndType) {
  auto all = parse_mountinfo(kHybridMountinfo);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[1].id, 31u);
  EXPECT_EQ(all[1].major, 0u);
  EXPECT_EQ(all[1].minor, 26u);
  EXPECT_EQ(all[1].mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(all[1].fs_type, "tmpfs");
  EXPECT_EQ(fs_type_of_mount(all, 32), "cgroup2");
  EXPECT_EQ(fs_type_of_mount(all, 99), std::nullopt);
  EXPECT_TRUE(parse_mountinfo("41 22 x:36 / /a rw - ext4 /dev/x rw\nx 22 0:36 / /b rw - ext4 /dev/x rw\n"
                              "41 22 0:36 / /b rw - \n")
                  .empty());
  // This process's own table: /proc is proc.
  auto mine = read_mountinfo();
  ASSERT_TRUE(mine) << mine.error().message;
  struct statx sx {};
  ASSERT_EQ(::statx(AT_FDCWD, "/proc/self/status", AT_STATX_DONT_SYNC, STATX_MNT_ID, &sx), 0);
  ASSERT_TRUE(sx.stx_mask & STATX_MNT_ID);
  EXPECT_EQ(fs_type_of_mount(*mine, sx.stx_mnt_id), "proc");
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

TEST(CgroupKeyedFiles, ValueOfAKey) {
  const char* stat = "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\nnr_periods 0\n";
  EXPECT_EQ(*keyed_value(stat, "usage_usec"), 1234u);
  EXPECT_EQ(*keyed_value(stat, "system_usec"), 234u);
  EXPECT_FALSE(keyed_value(stat, "user")) << "a prefix of a key is not the key";
  EXPECT_EQ(*keyed_value("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 1", "oom_kill"), 1u);
  EXPECT_EQ(*keyed_value("frozen 0\npopulated 1", "populated"), 1u) << "the last line has no newline";
  EXPECT_EQ(*keyed_value("nr_descendants 0\nnr_dying_descendants 3\n", "nr_descendants"), 0u);
  EXPECT_FALSE(keyed_value("populated x\n", "populated"));
  EXPECT_FALSE(keyed_value("populated \n", "populated"));
  EXPECT_FALSE(keyed_value("populated 1 2\n", "populated"));
  EXPECT_FALSE(keyed_value("", "populated"));
  EXPECT_FALSE(populated("/nonexistent/cgroup")) << "a cgroup that is gone has no processes";
}

// What cannot be read as "populated 0" is not an empty cgroup: a caller
// (kill_and_drain, a scope's release) must assume survivors.
TEST(CgroupPopulated, FailsClosed) {
  char tmpl[] = "/tmp/agentcage-populated-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  std::ofstream(dir / "cgroup.events") << "populated 0\nfrozen 0\n";
  EXPECT_FALSE(populated(dir));
  std::ofstream(dir / "cgroup.events") << "populated 1\nfrozen 0\n";
  EXPECT_TRUE(populated(dir));
  std::ofstream(dir / "cgroup.events") << "frozen 0\n";
  EXPECT_TRUE(populated(dir)) << "no populated line";
  fs::remove(dir / "cgroup.events");
  fs::create_directory(dir / "cgroup.events");  // opens, but reads nothing
  EXPECT_TRUE(populated(dir)) << "unreadable";
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(CgroupDescendants, ListsEveryDirectoryBelowWithoutACgroupStat) {
  // Not cgroupfs (no cgroup.stat): the walk lists every directory below.
  char tmpl[] = "/tmp/agentcage-cgroup-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  fs::create_directories(root / "a" / "b");
  fs::create_directories(root / "c");
  std::ofstream(root / "a" / "file") << "x";
  auto below = cgroup_descendants(root);
  ASSERT_TRUE(below.ok()) << below.error().message;
  std::vector<std::string> names;
  for (const auto& n : *below) names.push_back(n.path.lexically_relative(root).string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "a/b", "c"}));
  // A cgroup.stat that counts no descendants ends the walk before it starts.
  std::ofstream(root / "cgroup.stat") << "nr_descendants 0\nnr_dying_descendants 0\n";
  below = cgroup_descendants(root);
  ASSERT_TRUE(below.ok());
  EXPECT_TRUE(below->empty());
  std::ofstream(root / "cgroup.stat") << "nr_descendants 3\nnr_dying_descendants 0\n";
  below = cgroup_descendants(root);
  ASSERT_TRUE(below.ok());
  EXPECT_EQ(below->size(), 3u);
  fs::remove_all(root);
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
