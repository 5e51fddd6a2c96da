// SPDX-License-Identifier: Apache-2.0
// Bounded resources of a whole `agentcage run`: the workspace's disk limit (a
// per-run tmpfs: ENOSPC for the run, nothing on the host's disks), a kept
// workspace copied out of it, a caller's --workspace that must be bounded,
// and the defaults a policy without `limits` gets.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernel_env.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;

class Limits : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    char tmpl[] = "/tmp/ac-limits-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    for (const char* m : {"small", "bounded"}) (void)::umount2((dir_ / m).c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

// Writes 1 MiB blocks into the working directory until an error or `mib`
// MiB, then prints "<errno name or ok> <MiB written> <file system MiB>".
std::string fill_workspace(int mib) {
  return "import errno, os\n"
         "n, err = 0, 'ok'\n"
         "block = b'x' * (1 << 20)\n"
         "try:\n"
         "    with open('fill', 'wb') as f:\n"
         "        while n < " +
         std::to_string(mib) +
         ":\n"
         "            f.write(block)\n"
         "            f.flush()\n"
         "            n += 1\n"
         "except OSError as e:\n"
         "    err = errno.errorcode.get(e.errno, str(e.errno))\n"
         "st = os.statvfs('.')\n"
         "print(err, n, st.f_blocks * st.f_frsize >> 20)\n";
}

// The shipped python-sandbox's own limits.disk (256Mi): the run that writes
// more gets ENOSPC, and its workspace is a file system of that size. On a
// build without limits.disk the 300 MiB land on the host's file system.
TEST_F(Limits, WorkspaceWritesEndInEnospcAtThePolicysDiskLimit) {
  Ran r = run(py(fill_workspace(300)));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out.substr(0, 7), "ENOSPC ") << r.describe();
  std::istringstream words(r.out.substr(7));
  int written = 0, fs_mib = 0;
  words >> written >> fs_mib;
  EXPECT_LE(written, 256) << r.out;
  EXPECT_EQ(fs_mib, 256) << r.out;
  EXPECT_EQ(r.result["limits"]["disk_bytes"], 256u << 20);
}

TEST_F(Limits, DiskOptionOverridesThePolicy) {
  Ran r = run(py(fill_workspace(64), {"--disk", "16Mi"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out.substr(0, 7), "ENOSPC ") << r.describe();
  EXPECT_NE(r.out.find(" 16\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.result["limits"]["disk_bytes"], 16u << 20);
}

// --keep: the tmpfs is copied onto the disk after the run and unmounted;
// the copy keeps files, directories and links (as links), drops set-id bits.
TEST_F(Limits, KeptWorkspaceIsCopiedOutOfItsTmpfs) {
  Ran r =
      run(py("import os\n"
             "os.mkdir('sub')\n"
             "open('sub/a.txt', 'w').write('hello')\n"
             "os.symlink('/etc/passwd', 'link')\n"
             "open('tool', 'w').write('#!/bin/sh\\n')\n"
             "os.chmod('tool', 0o6755)\n"
             "print(oct(os.stat('tool').st_mode & 0o7777))\n",
             {"--keep", "--disk", "8Mi"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "0o6755\n");
  ASSERT_TRUE(r.result["workspace_kept"].get<bool>()) << r.result.dump(2);
  EXPECT_TRUE(r.result["workspace_error"].is_null()) << r.result.dump(2);
  const fs::path ws = r.result["workspace"].get<std::string>();
  struct stat self {
  }, parent{};
  ASSERT_EQ(::stat(ws.c_str(), &self), 0);
  ASSERT_EQ(::stat(ws.parent_path().c_str(), &parent), 0);
  EXPECT_EQ(self.st_dev, parent.st_dev) << ws << " is still a mount";
  EXPECT_EQ(self.st_mode & 07777, 0700u);
  // Root's now: the run's dynamic uid will be another run's.
  EXPECT_EQ(self.st_uid, 0u);
  struct stat sub {};
  ASSERT_EQ(::stat((ws / "sub/a.txt").c_str(), &sub), 0);
  EXPECT_EQ(sub.st_uid, 0u);
  EXPECT_EQ(slurp(ws / "sub/a.txt"), "hello");
  EXPECT_TRUE(fs::is_symlink(ws / "link"));
  EXPECT_EQ(fs::read_symlink(ws / "link"), "/etc/passwd");
  struct stat tool {};
  ASSERT_EQ(::stat((ws / "tool").c_str(), &tool), 0);
  EXPECT_EQ(tool.st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(ws.string() + ".kept"));
  EXPECT_EQ(slurp("/proc/self/mountinfo").find(" " + ws.string() + " "), std::string::npos);
  std::error_code ec;
  fs::remove_all(ws, ec);
}

// Hard links to one file would become many full copies on the disk: a copy
// larger than the disk limit is refused and the workspace removed.
TEST_F(Limits, KeptWorkspaceCannotGrowBeyondItsLimitOnTheDisk) {
  Ran r =
      run(py("import os\n"
             "open('big', 'wb').write(b'x' * (4 << 20))\n"
             "for i in range(64):\n"
             "    os.link('big', 'big%d' % i)\n",
             {"--keep", "--disk", "8Mi"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_FALSE(r.result["workspace_kept"].get<bool>()) << r.result.dump(2);
  ASSERT_TRUE(r.result["workspace_error"].is_string()) << r.result.dump(2);
  EXPECT_NE(r.result["workspace_error"].get<std::string>().find("disk limit"), std::string::npos);
  const std::string ws = r.result["workspace"].get<std::string>();
  EXPECT_FALSE(fs::exists(ws));
  EXPECT_FALSE(fs::exists(ws + ".kept"));
  EXPECT_NE(r.err.find("could not be kept"), std::string::npos) << r.err;
}

// A caller's directory on a file system larger than the limit is refused
// (the run could fill it); one on a small enough file system works and is
// bounded by it; --disk unlimited accepts the large one.
TEST_F(Limits, CallersWorkspaceMustBeBounded) {
  const fs::path big = dir_ / "big";
  fs::create_directories(big);
  Ran refused = run(py("print('ran')", {"--workspace", big.string()}));
  EXPECT_EQ(refused.code, 125) << refused.describe();
  EXPECT_EQ(refused.out, "");
  EXPECT_NE(refused.err.find("disk limit"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--disk unlimited"), std::string::npos) << refused.err;

  Ran unlimited = run(py("print('ran')", {"--workspace", big.string(), "--disk", "unlimited"}));
  EXPECT_EQ(unlimited.code, 0) << unlimited.describe();
  EXPECT_EQ(unlimited.out, "ran\n");
  EXPECT_TRUE(unlimited.result["limits"]["disk_bytes"].is_null());

  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  ASSERT_EQ(::mount("ac-test", small.c_str(), "tmpfs", 0, "size=8m"), 0) << std::strerror(errno);
  Ran bounded = run(py(fill_workspace(32), {"--workspace", small.string(), "--disk", "16Mi"}));
  EXPECT_EQ(bounded.code, 0) << bounded.describe();
  EXPECT_EQ(bounded.out.substr(0, 7), "ENOSPC ") << bounded.describe();
}

// A policy without `limits` still runs with agentcage run's defaults
// (core/limits.h): the kernel holds the run to them. --memory unlimited
// removes one, --pids overrides one.
TEST_F(Limits, PolicyWithoutLimitsGetsTheDefaults) {
  std::string text = slurp(kPythonSandbox);
  const auto at = text.find("\n  limits:");
  ASSERT_NE(at, std::string::npos);
  text.resize(at + 1);
  const std::string policy = (dir_ / "no-limits.yaml").string();
  std::ofstream(policy) << text;

  auto observe = [&](const std::vector<std::string>& options) {
    SpawnOptions o;
    o.policy = policy;
    std::vector<std::string> args = options;
    Started s = start(py("import os, time\n"
                         "st = os.statvfs('.')\n"
                         "print(st.f_blocks * st.f_frsize)\n"
                         "time.sleep(6)\n",
                         args),
                      o);
    std::string memory, pids;
    for (int i = 0; i < 300 && memory.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      // Limits are written before the process is spawned into the cgroup:
      // read them once it is there, never in between.
      for (const auto& cg : run_cgroups())
        if (!slurp(fs::path(cg) / "cgroup.procs").empty()) {
          memory = slurp(fs::path(cg) / "memory.max");
          pids = slurp(fs::path(cg) / "pids.max");
        }
    }
    Ran r = finish(s);
    return std::make_tuple(r, memory, pids);
  };

  auto [r, memory, pids] = observe({});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(memory, "1073741824\n");
  EXPECT_EQ(pids, "256\n");
  EXPECT_EQ(r.out, "1073741824\n") << "the workspace is a 1 GiB tmpfs";
  EXPECT_EQ(r.result["limits"]["memory_bytes"], 1u << 30);
  EXPECT_EQ(r.result["limits"]["pids"], 256);
  EXPECT_EQ(r.result["limits"]["timeout_ms"], 30 * 60 * 1000);
  EXPECT_EQ(r.result["limits"]["disk_bytes"], 1u << 30);

  auto [r2, memory2, pids2] = observe({"--memory", "unlimited", "--pids", "64"});
  ASSERT_EQ(r2.code, 0) << r2.describe();
  EXPECT_EQ(memory2, "max\n");
  EXPECT_EQ(pids2, "64\n");
  EXPECT_TRUE(r2.result["limits"]["memory_bytes"].is_null());
}

}  // namespace
}  // namespace agentcage::kt
