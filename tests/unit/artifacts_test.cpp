// SPDX-License-Identifier: Apache-2.0
// The io directory (run/artifacts.h): opened with its owner's permissions,
// copied into a workspace and back. What a hostile run leaves in its
// workspace must come back as the caller's plain files and nothing more.
// Needs root (it changes owners); skipped otherwise.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "run/artifacts.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kCaller = 65534;
constexpr gid_t kCallerGid = 65534;
constexpr uid_t kSandbox = 0x70000123;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class IoDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (changes owners)";
    char tmpl[] = "/tmp/ac-iodir-XXXXXX";
    base_ = ::mkdtemp(tmpl);
    ::chmod(base_.c_str(), 0755);
    io_ = base_ / "io";
    ws_ = base_ / "ws";
    fs::create_directories(io_);
    fs::create_directories(ws_);
    ASSERT_EQ(::chown(io_.c_str(), kCaller, kCallerGid), 0);
  }
  void TearDown() override {
    std::error_code ec;
    if (!base_.empty()) fs::remove_all(base_, ec);
  }
  void caller_file(const fs::path& p, const std::string& text) {
    std::ofstream(p) << text;
    ASSERT_EQ(::lchown(p.c_str(), kCaller, kCallerGid), 0);
  }
  UniqueFd dir_fd(const fs::path& p) {
    return UniqueFd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }

  fs::path base_, io_, ws_;
};

// A workspace handed back after its run: what the run's uid made goes to
// the workspace's owner, the directory itself last; what others own, a file
// of several links, and whatever a link points to keep their owners.
TEST_F(IoDir, AHandedBackTreeGivesTheRunsEntriesToTheOwnerAndNothingElse) {
  const fs::path outside = base_ / "outside";
  std::ofstream(outside) << "host";
  ASSERT_EQ(::chown(outside.c_str(), 0, 0), 0);
  fs::create_directories(ws_ / "sub" / "deeper");
  std::ofstream(ws_ / "sub" / "deeper" / "f") << "f";
  std::ofstream(ws_ / "top") << "t";
  std::ofstream(ws_ / "pair") << "p";
  ASSERT_EQ(::link((ws_ / "pair").c_str(), (ws_ / "pair2").c_str()), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (ws_ / "link").c_str()), 0);
  ASSERT_EQ(::mkfifo((ws_ / "fifo").c_str(), 0600), 0);
  for (const char* p : {"", "sub", "sub/deeper", "sub/deeper/f", "top", "pair", "link", "fifo"})
    ASSERT_EQ(::lchown((ws_ / p).c_str(), kSandbox, kSandbox), 0) << p;
  std::ofstream(ws_ / "roots") << "r";  // someone else's (root's)
  ASSERT_EQ(::chmod((ws_ / "top").c_str(), 04755), 0);

  UniqueFd fd = dir_fd(ws_);
  ASSERT_TRUE(fd);
  ASSERT_TRUE(hand_back_tree_at(fd.get(), ws_.string(), GiveAway{kSandbox, kCaller, kCallerGid}));
  auto owner = [](const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return std::make_pair(st.st_uid, st.st_gid);
  };
  const auto caller = std::make_pair(kCaller, kCallerGid);
  for (const char* p : {"", "sub", "sub/deeper", "sub/deeper/f", "top", "link", "fifo"})
    EXPECT_EQ(owner(ws_ / p), caller) << p;
  EXPECT_EQ(owner(ws_ / "pair").first, kSandbox) << "a file of two links was given away";
  EXPECT_EQ(owner(ws_ / "roots").first, 0u);
  EXPECT_EQ(owner(outside).first, 0u) << "the link was followed";
  struct stat st {};
  ASSERT_EQ(::stat((ws_ / "top").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  // Without `give` nothing changes owner.
  ASSERT_EQ(::lchown((ws_ / "top").c_str(), kSandbox, kSandbox), 0);
  ASSERT_TRUE(hand_back_tree_at(fd.get(), ws_.string(), std::nullopt));
  EXPECT_EQ(owner(ws_ / "top").first, kSandbox);
}

// The workspace's owner may hold a descriptor of a directory in it from
// before the run, and rename there while root walks. An entry swapped for a
// hard link to someone else's file after it was listed is never given away:
// each is changed through a descriptor checked to be the entry listed (by
// name, root gave the victim to the workspace's owner).
TEST_F(IoDir, AnEntrySwappedAfterItWasListedIsNotGivenAway) {
  constexpr uid_t kVictim = 65533;
  const fs::path victim = base_ / "victim";
  std::ofstream(victim) << "v";
  ASSERT_EQ(::chown(victim.c_str(), kVictim, kVictim), 0);
  ::chmod(victim.c_str(), 0666);
  std::ofstream(ws_ / "f") << "x";
  ASSERT_EQ(::chown((ws_ / "f").c_str(), kSandbox, kSandbox), 0);
  ASSERT_EQ(::mkfifo((ws_ / "p").c_str(), 0600), 0);
  ASSERT_EQ(::chown((ws_ / "p").c_str(), kSandbox, kSandbox), 0);
  UniqueFd fd = dir_fd(ws_);
  const GiveAway give{kSandbox, kCaller, kCallerGid};
  for (const char* name : {"f", "p"}) {
    struct stat listed {};
    ASSERT_EQ(::fstatat(fd.get(), name, &listed, AT_SYMLINK_NOFOLLOW), 0);
    // Between the listing and the change: a link to the victim in its place.
    ASSERT_EQ(::link(victim.c_str(), (ws_ / ".l").c_str()), 0);
    ASSERT_EQ(::rename((ws_ / ".l").c_str(), (ws_ / name).c_str()), 0);
    Status st = hand_back_entry(fd.get(), name, listed, name, give);
    ASSERT_FALSE(st) << name;
    EXPECT_EQ(st.error().code, EAGAIN) << st.error().message;
    struct stat after {};
    ASSERT_EQ(::stat(victim.c_str(), &after), 0);
    EXPECT_EQ(after.st_uid, kVictim) << name << ": the victim was given away";
    EXPECT_EQ(after.st_mode & 07777, 0666u) << name;
  }
  // The entry as listed is given.
  std::ofstream(ws_ / "g") << "x";
  ASSERT_EQ(::chown((ws_ / "g").c_str(), kSandbox, kSandbox), 0);
  struct stat listed {};
  ASSERT_EQ(::fstatat(fd.get(), "g", &listed, AT_SYMLINK_NOFOLLOW), 0);
  ASSERT_TRUE(hand_back_entry(fd.get(), "g", listed, "g", give));
  struct stat g {};
  ASSERT_EQ(::stat((ws_ / "g").c_str(), &g), 0);
  EXPECT_EQ(g.st_uid, kCaller);
}

// What the run leaves is handed back as the owner's plain files: no write
// permission for group and others (the group becomes the owner's), no ACL
// entry that names the run's uid (the next run to lease it).
TEST_F(IoDir, GivenEntriesLoseGroupAndOtherWriteAndTheirAcls) {
  fs::create_directories(ws_ / "open");
  std::ofstream(ws_ / "open" / "f") << "f";
  for (const char* p : {"", "open", "open/f"}) ASSERT_EQ(::lchown((ws_ / p).c_str(), kSandbox, kSandbox), 0);
  ASSERT_EQ(::chmod((ws_ / "open").c_str(), 0777), 0);
  ASSERT_EQ(::chmod((ws_ / "open" / "f").c_str(), 0666), 0);
  // user::rw- user:kSandbox:rwx group::r-- mask::rwx other::r--
  struct {
    uint32_t version = 2;
    struct {
      uint16_t tag, perm;
      uint32_t id;
    } e[5] = {{0x01, 6, ~0u}, {0x02, 7, kSandbox}, {0x04, 4, ~0u}, {0x10, 7, ~0u}, {0x20, 4, ~0u}};
  } acl;
  const bool acls =
      ::setxattr((ws_ / "open" / "f").c_str(), "system.posix_acl_access", &acl, sizeof acl, 0) == 0;
  UniqueFd fd = dir_fd(ws_);
  ASSERT_TRUE(hand_back_tree_at(fd.get(), ws_.string(), GiveAway{kSandbox, kCaller, kCallerGid}));
  struct stat st {};
  ASSERT_EQ(::stat((ws_ / "open").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((ws_ / "open" / "f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0022, 0u) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_mode & 0600, 0600u) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_uid, kCaller);
  if (acls) {
    char buf[256];
    EXPECT_LT(::getxattr((ws_ / "open" / "f").c_str(), "system.posix_acl_access", buf, sizeof buf), 0)
        << "the run's ACL survived";
  }
}

TEST_F(IoDir, OpensOnlyTheOwnersDirectoryByARealPath) {
  EXPECT_TRUE(open_io_dir(io_.string(), {kCaller, kCallerGid}).ok());
  // Root's directory, not the caller's.
  auto roots = open_io_dir(base_.string(), {kCaller, kCallerGid});
  ASSERT_FALSE(roots.ok());
  EXPECT_EQ(roots.error().code, EPERM);
  // A symbolic link anywhere in the path.
  fs::create_directory_symlink(io_, base_ / "link");
  auto linked = open_io_dir((base_ / "link").string(), {kCaller, kCallerGid});
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.error().code, ELOOP);
  // A directory the caller owns but cannot reach (a parent it may not search).
  fs::create_directories(base_ / "closed" / "mine");
  ::chmod((base_ / "closed").c_str(), 0700);
  ASSERT_EQ(::chown((base_ / "closed" / "mine").c_str(), kCaller, kCallerGid), 0);
  auto closed = open_io_dir((base_ / "closed" / "mine").string(), {kCaller, kCallerGid});
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.error().code, EACCES);
  // The caller's, but not writable by it (mode 0500): refused too.
  ::chmod(io_.c_str(), 0500);
  EXPECT_FALSE(open_io_dir(io_.string(), {kCaller, kCallerGid}).ok());
}

// A copy child holds only what it works on: not the runner's result pipe
// or notice channel (any descriptor it was not given).
TEST_F(IoDir, ACopyChildHoldsOnlyTheDescriptorsItWasGiven) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd other(p[0]), kept(p[1]);
  const int other_fd = other.get(), kept_fd = kept.get();
  IoCopy done;
  CopyChild how;
  how.keep = {kept_fd};
  Status st = run_copy_child(
      how,
      [&](IoCopy&) -> Status {
        if (::fcntl(kept_fd, F_GETFD) < 0) return Error{"the kept descriptor is closed", EBADF};
        if (::fcntl(other_fd, F_GETFD) >= 0) return Error{"another descriptor is still open", EEXIST};
        return Status{};
      },
      done);
  EXPECT_TRUE(st.ok()) << st.error().message;
}

TEST_F(IoDir, ACopyChildThatOverrunsIsKilled) {
  IoCopy done;
  CopyChild how;
  how.timeout = std::chrono::seconds(1);
  Status st = run_copy_child(
      how,
      [](IoCopy&) {
        ::pause();
        return Status{};
      },
      done);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ETIMEDOUT);
}

TEST_F(IoDir, CopiesInOnlyTheCallersEntriesAsTheSandboxs) {
  caller_file(io_ / "in.txt", "input");
  fs::create_directories(io_ / "sub");
  ASSERT_EQ(::chown((io_ / "sub").c_str(), kCaller, kCallerGid), 0);
  caller_file(io_ / "sub" / "deep.txt", "deep");
  std::ofstream(io_ / "roots.txt") << "root's";  // root's file in the caller's directory
  fs::create_symlink("/etc/shadow", io_ / "link");
  ASSERT_EQ(::lchown((io_ / "link").c_str(), kCaller, kCallerGid), 0);
  auto io = open_io_dir(io_.string(), {kCaller, kCallerGid});
  ASSERT_TRUE(io.ok()) << io.error().message;
  IoCopy done;
  ASSERT_TRUE(
      copy_in(io->get(), {kCaller, kCallerGid}, dir_fd(ws_).get(), kSandbox, kSandbox, 1 << 20, done).ok());
  EXPECT_EQ(slurp(ws_ / "in.txt"), "input");
  EXPECT_EQ(slurp(ws_ / "sub" / "deep.txt"), "deep");
  EXPECT_FALSE(fs::exists(ws_ / "roots.txt"));
  EXPECT_TRUE(fs::is_symlink(ws_ / "link"));  // as a link, never followed
  struct stat st {};
  ASSERT_EQ(::stat((ws_ / "in.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kSandbox);
  EXPECT_EQ(done.skipped_total, 1u);
  // Over the budget: EFBIG.
  fs::remove_all(ws_);
  fs::create_directories(ws_);
  IoCopy small;
  auto over = copy_in(io->get(), {kCaller, kCallerGid}, dir_fd(ws_).get(), kSandbox, kSandbox, 3, small);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, EFBIG);
}

TEST_F(IoDir, CopiesBackPlainFilesOfTheCallerAndNothingElse) {
  // What the caller had: a file the run rewrites, a directory where the run
  // made a file of the same name, a root-owned directory in its way.
  caller_file(io_ / "out.txt", "old");
  fs::create_directories(io_ / "taken");
  ASSERT_EQ(::chown((io_ / "taken").c_str(), kCaller, kCallerGid), 0);
  fs::create_directories(io_ / "rootdir");
  // What a hostile run left.
  std::ofstream(ws_ / "out.txt") << "new";
  std::ofstream(ws_ / "suid") << "x";
  ::chmod((ws_ / "suid").c_str(), 04755);
  ASSERT_EQ(::mkfifo((ws_ / "fifo").c_str(), 0644), 0);
  std::ofstream(ws_ / "taken") << "file in place of the caller's directory";
  fs::create_directories(ws_ / "rootdir");
  std::ofstream(ws_ / "rootdir" / "planted") << "x";
  fs::create_symlink("/etc/passwd", ws_ / "link");
  fs::create_directories(ws_ / "new" / "deeper");
  std::ofstream(ws_ / "new" / "deeper" / "f") << "f";
  std::ofstream(ws_ / "name\nwith newline") << "n";
  for (const auto& e : fs::recursive_directory_iterator(ws_))
    ASSERT_EQ(::lchown(e.path().c_str(), kSandbox, kSandbox), 0);

  std::ofstream(ws_ / "open.txt") << "o";
  ::chmod((ws_ / "open.txt").c_str(), 0666);
  for (const auto& e : fs::recursive_directory_iterator(ws_))
    ASSERT_EQ(::lchown(e.path().c_str(), kSandbox, kSandbox), 0);
  ::chmod(ws_.c_str(), 0700);

  auto io = open_io_dir(io_.string(), {kCaller, kCallerGid});
  ASSERT_TRUE(io.ok()) << io.error().message;
  IoCopy done;
  // As the runner does it: in a child that is the caller (and may read the run's files).
  UniqueFd ws = dir_fd(ws_);
  const int src = ws.get(), dst = io->get();
  CopyChild how;
  how.become = [] { return become_io_owner({kCaller, kCallerGid}); };
  how.keep = {src, dst};
  Status st = run_copy_child(
      how,
      [&](IoCopy& mine) {
        return copy_out(src, dst, {kCaller, kCallerGid}, 1 << 20, mine);
      },
      done);
  ASSERT_TRUE(st.ok()) << st.error().message;

  EXPECT_EQ(slurp(io_ / "out.txt"), "new");
  EXPECT_EQ(slurp(io_ / "new" / "deeper" / "f"), "f");
  EXPECT_EQ(slurp(io_ / "name\nwith newline"), "n");
  struct stat s {};
  for (const char* name : {"out.txt", "suid", "new", "new/deeper", "new/deeper/f", "link"}) {
    ASSERT_EQ(::lstat((io_ / name).c_str(), &s), 0) << name;
    EXPECT_EQ(s.st_uid, kCaller) << name;
    EXPECT_EQ(s.st_gid, kCallerGid) << name;
    EXPECT_EQ(s.st_mode & (S_ISUID | S_ISGID), 0u) << name;
  }
  EXPECT_TRUE(fs::is_symlink(io_ / "link"));
  ASSERT_EQ(::stat((io_ / "open.txt").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0644u);                    // the run makes nothing group- or world-writable
  EXPECT_FALSE(fs::exists(io_ / "fifo"));                 // never a FIFO, device or socket
  EXPECT_TRUE(fs::is_directory(io_ / "taken"));           // the caller's directory stays
  EXPECT_FALSE(fs::exists(io_ / "rootdir" / "planted"));  // not into a directory that is not the caller's
  EXPECT_EQ(done.skipped_total, 3u);
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(io_))
    EXPECT_EQ(e.path().filename().string().rfind(".agentcage-", 0), std::string::npos) << e.path();
}

}  // namespace
}  // namespace agentcage::run
