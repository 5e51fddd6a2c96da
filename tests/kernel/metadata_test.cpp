// SPDX-License-Identifier: Apache-2.0
// What the host has, not just what it says: a run may not stat, readlink,
// read the extended attributes or ACLs of, or watch, host paths its policy
// does not let it read, nor change the timestamps, extended attributes or
// ACLs of files it may not write -- whatever the file's own permissions
// (the kernel tests run as root, so DAC would allow all of it). The
// directories on the way to an allowed path stay stat'able, or realpath()
// and every import would break.
//
// Each denial is checked next to the same operation on an allowed path, and
// the denied operation first outside the scope, where it must work.
#include <fcntl.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

// An operation that reached the file system without an LSM denial: the
// file system's own answer (no such attribute, not supported) counts as
// reached.
int reached(int rc) {
  if (rc >= 0) return kOk;
  if (errno == ENODATA || errno == EOPNOTSUPP) return kOk;
  return classify(errno);
}

int do_stat(const std::string& p) {
  struct stat st {};
  return result(::stat(p.c_str(), &st));
}
int do_lstat(const std::string& p) {
  struct stat st {};
  return result(::lstat(p.c_str(), &st));
}
int do_statx(const std::string& p) {
  struct statx stx {};
  return result(::statx(AT_FDCWD, p.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx));
}
int do_readlink(const std::string& p) {
  char buf[256];
  return ::readlink(p.c_str(), buf, sizeof buf) >= 0 ? kOk : classify(errno);
}
int do_getxattr(const std::string& p) {
  char buf[64];
  return reached(static_cast<int>(::getxattr(p.c_str(), "user.agentcage", buf, sizeof buf)));
}
int do_listxattr(const std::string& p) {
  char buf[256];
  return reached(static_cast<int>(::listxattr(p.c_str(), buf, sizeof buf)));
}
int do_get_acl(const std::string& p) {
  char buf[256];
  return reached(static_cast<int>(::getxattr(p.c_str(), "system.posix_acl_access", buf, sizeof buf)));
}
int do_inotify(const std::string& p) {
  int fd = ::inotify_init1(IN_CLOEXEC);
  if (fd < 0) return kOtherError;
  int rc = ::inotify_add_watch(fd, p.c_str(), IN_ALL_EVENTS) >= 0 ? kOk : classify(errno);
  ::close(fd);
  return rc;
}
int do_fanotify(const std::string& p, unsigned int mark) {
  int fd = ::fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDONLY);
  if (fd < 0) return kOtherError;
  int rc = result(::fanotify_mark(fd, FAN_MARK_ADD | mark, FAN_OPEN, AT_FDCWD, p.c_str()));
  ::close(fd);
  return rc;
}
int do_utimes(const std::string& p) { return result(::utimensat(AT_FDCWD, p.c_str(), nullptr, 0)); }
int do_futimens(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kOtherError;
  int rc = result(::futimens(fd, nullptr));
  ::close(fd);
  return rc;
}
int do_setxattr(const std::string& p) { return reached(::setxattr(p.c_str(), "user.agentcage", "x", 1, 0)); }
int do_removexattr(const std::string& p) { return reached(::removexattr(p.c_str(), "user.agentcage")); }
// A minimal access ACL (user::rw-, group::r--, other::r--), as setfacl
// writes it: version 2, then (tag, perm, id) entries.
int do_set_acl(const std::string& p) {
  struct __attribute__((packed)) {
    uint32_t version = 2;
    struct {
      uint16_t tag, perm;
      uint32_t id;
    } e[3] = {{0x01, 6, 0xffffffffu}, {0x04, 4, 0xffffffffu}, {0x20, 4, 0xffffffffu}};
  } acl;
  return reached(::setxattr(p.c_str(), "system.posix_acl_access", &acl, sizeof acl, 0));
}

class MetadataTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 14;
  MetadataTest() : PolicyScopeTest(kSlot, "md") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(base_ / "allowed" / "sub");
    std::ofstream(base_ / "allowed" / "ok.txt") << "ok\n";
    fs::create_symlink("ok.txt", base_ / "allowed" / "link");
    fs::create_directories(base_ / "secret" / "sub");
    std::ofstream(base_ / "secret" / "s.txt") << "secret\n";
    fs::create_symlink("s.txt", base_ / "secret" / "link");
    // Only the file at the bottom is allowed: a, a/b are on the way to it.
    fs::create_directories(base_ / "deep" / "a" / "b");
    fs::create_directories(base_ / "deep" / "a" / "other");
    std::ofstream(base_ / "deep" / "a" / "b" / "f.txt") << "f\n";
    std::ofstream(ws_ / "mine.txt") << "mine\n";
    apply_yaml(
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-metadata\nspec:\n"
        "  files:\n    read: [" +
            base("allowed") + ", " + base("deep/a/b/f.txt") +
            "]\n"
            "    write: [\"${workspace}\"]\n",
        ws_.string());
  }

  // op outside the scope must work, inside it must be denied.
  void expect_denied_only_inside(const std::function<int()>& op, const std::string& what) {
    EXPECT_EQ(op(), kOk) << what << " fails outside the scope: the test proves nothing";
    EXPECT_EQ(scoped(op), kDenied) << what;
  }
};

TEST_F(MetadataTest, StatOfUnreadablePathsIsDenied) {
  const std::string secret = base("secret/s.txt"), link = base("secret/link");
  auto before = denied(AC_HOOK_FILE_STAT);
  expect_denied_only_inside([&] { return do_stat(secret); }, "stat secret");
  expect_denied_only_inside([&] { return do_lstat(link); }, "lstat secret link");
  expect_denied_only_inside([&] { return do_statx(secret); }, "statx secret");
  expect_denied_only_inside([&] { return do_stat(base("secret")); }, "stat secret dir");
  // Beside an allowed path, not on the way to it.
  expect_denied_only_inside([&] { return do_stat(base("deep/a/other")); }, "stat sibling dir");
  EXPECT_GE(denied(AC_HOOK_FILE_STAT), before + 5);

  // What the policy allows, and the directories on the way to it.
  EXPECT_EQ(scoped([&] { return do_stat(base("allowed/ok.txt")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_lstat(base("allowed/link")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_stat(base("allowed/sub")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_stat(base("deep/a/b/f.txt")); }), kOk);
  for (const auto& dir : {std::string("/"), base_.parent_path().string(), base(""), base("deep"),
                          base("deep/a"), base("deep/a/b")})
    EXPECT_EQ(scoped([&] { return do_stat(dir); }), kOk) << "ancestor " << dir;
  // The workspace and the directories above it; inside it, everything.
  EXPECT_EQ(scoped([&] { return do_stat(ws_.string()); }), kOk);
  EXPECT_EQ(scoped([&] { return do_stat(ws("mine.txt")); }), kOk);
  // realpath() lstat()s every component on the way.
  EXPECT_EQ(scoped([&] {
              char out[PATH_MAX];
              return ::realpath(base("deep/a/b/f.txt").c_str(), out) ? kOk : classify(errno);
            }),
            kOk);
}

// fstat on the descriptors the run was started with (a terminal, a log file
// the caller redirected to) keeps working; those were handed in, not opened.
TEST_F(MetadataTest, StdioDescriptorsStayStatable) {
  int fd = ::open(base("secret/s.txt").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(scoped([&] {
              struct stat st {};
              if (::dup2(fd, 1) != 1) return kOtherError;
              return result(::fstat(1, &st));
            }),
            kOk);
  ::close(fd);
  // Pipes, sockets and other pseudo files have no host path to protect.
  EXPECT_EQ(scoped([] {
              int p[2];
              struct stat st {};
              if (::pipe(p) != 0) return kOtherError;
              return result(::fstat(p[0], &st));
            }),
            kOk);
}

TEST_F(MetadataTest, ReadlinkOfUnreadableLinksIsDenied) {
  auto before = denied(AC_HOOK_FILE_STAT);
  expect_denied_only_inside([&] { return do_readlink(base("secret/link")); }, "readlink secret link");
  EXPECT_GE(denied(AC_HOOK_FILE_STAT), before + 1);
  EXPECT_EQ(scoped([&] { return do_readlink(base("allowed/link")); }), kOk);
}

TEST_F(MetadataTest, AttributeReadsOfUnreadablePathsAreDenied) {
  const std::string secret = base("secret/s.txt");
  expect_denied_only_inside([&] { return do_getxattr(secret); }, "getxattr secret");
  expect_denied_only_inside([&] { return do_listxattr(secret); }, "listxattr secret");
  expect_denied_only_inside([&] { return do_get_acl(secret); }, "get ACL secret");
  expect_denied_only_inside([&] { return do_getxattr(base("secret")); }, "getxattr secret dir");
  EXPECT_EQ(scoped([&] { return do_getxattr(base("allowed/ok.txt")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_listxattr(base("allowed/ok.txt")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_get_acl(base("allowed/ok.txt")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_listxattr(base("deep/a")); }), kOk) << "ancestor";
  EXPECT_EQ(scoped([&] { return do_listxattr(ws("mine.txt")); }), kOk);
}

TEST_F(MetadataTest, WatchesOnUnreadablePathsAreDenied) {
  auto before = denied(AC_HOOK_FILE_WATCH);
  expect_denied_only_inside([&] { return do_inotify(base("secret")); }, "inotify secret dir");
  expect_denied_only_inside([&] { return do_inotify(base("secret/s.txt")); }, "inotify secret file");
  // Ancestors are stat'able, not watchable: a watch there would report the
  // names created next to the allowed path.
  expect_denied_only_inside([&] { return do_inotify(base("deep/a")); }, "inotify ancestor");
  expect_denied_only_inside([&] { return do_fanotify(base("secret/s.txt"), 0); }, "fanotify inode mark");
  expect_denied_only_inside([&] { return do_fanotify("/", FAN_MARK_MOUNT); }, "fanotify mount mark");
  expect_denied_only_inside([&] { return do_fanotify("/", FAN_MARK_FILESYSTEM); }, "fanotify fs mark");
  EXPECT_GE(denied(AC_HOOK_FILE_WATCH), before + 6);

  EXPECT_EQ(scoped([&] { return do_inotify(base("allowed")); }), kOk);
  EXPECT_EQ(scoped([&] { return do_inotify(ws_.string()); }), kOk);
  EXPECT_EQ(scoped([&] { return do_fanotify(base("allowed/ok.txt"), 0); }), kOk);
}

// Files under a read rule are as unwritable as host files outside every
// rule, for their attributes too.
TEST_F(MetadataTest, AttributeChangesOnUnwritableFilesAreDenied) {
  const std::string ro = base("allowed/ok.txt"), secret = base("secret/s.txt");
  auto before = denied(AC_HOOK_FILE_CHANGE);
  expect_denied_only_inside([&] { return do_utimes(ro); }, "utimensat read-only file");
  expect_denied_only_inside([&] { return do_utimes(secret); }, "utimensat host file");
  expect_denied_only_inside([&] { return do_futimens(ro); }, "futimens read-only file");
  expect_denied_only_inside([&] { return do_utimes(base("deep/a")); }, "utimensat ancestor");
  expect_denied_only_inside([&] { return do_setxattr(ro); }, "setxattr read-only file");
  expect_denied_only_inside([&] { return do_removexattr(ro); }, "removexattr read-only file");
  expect_denied_only_inside([&] { return do_set_acl(secret); }, "set ACL host file");
  EXPECT_GE(denied(AC_HOOK_FILE_CHANGE), before + 7);

  const std::string mine = ws("mine.txt");
  EXPECT_EQ(scoped([&] { return do_utimes(mine); }), kOk);
  EXPECT_EQ(scoped([&] { return do_futimens(mine); }), kOk);
  EXPECT_EQ(scoped([&] { return do_setxattr(mine); }), kOk);
  EXPECT_EQ(scoped([&] { return do_removexattr(mine); }), kOk);
  EXPECT_EQ(scoped([&] { return do_set_acl(mine); }), kOk);
  // Writing a file it may write keeps updating its times (no notify_change).
  EXPECT_EQ(scoped([&] {
              std::ofstream f(mine, std::ios::app);
              f << "more\n";
              return f.good() ? kOk : kOtherError;
            }),
            kOk);
}

}  // namespace
}  // namespace agentcage
