// SPDX-License-Identifier: Apache-2.0
// Mount-table tricks by a privileged process inside a scope (a root
// service confined with `agentcage attach`; the kernel tests run as root).
// Path rules match the path the kernel walks from a file up to the root of
// the task's mount namespace, so whoever can change the mount table could
// make a denied file walk as an allowed path: bind it over an allowed one,
// attach a copy of another tree, unmount what covers a directory, switch
// roots. Every such change is denied in a scope (hook scope_escape, reason
// protected), and a file reached through a mount tree that is not attached
// to the task's namespace is denied by the walk (reason path_detached).
//
// Each trick first runs outside the scope, where it must work (so a test
// cannot pass because the trick is broken), then inside. All mount changes
// happen in children that first move to a private mount namespace: neither
// the VM nor a real host running these tests sees any of them.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "bpf/compile.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "policy/policy.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

// Exit code of a child that could not set up its private mount namespace.
constexpr int kNoPrivateNs = 50;
// Exit code of a probe whose preparation (not the trick) failed.
constexpr int kSetupFailed = 51;

// Probe codes written by forked children into memory the test can read:
// one test step per slot, -1 until a child writes it.
class Codes {
 public:
  static constexpr int kSlots = 16;
  Codes() {
    void* p =
        ::mmap(nullptr, sizeof(int) * kSlots, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    codes_ = p == MAP_FAILED ? nullptr : static_cast<int*>(p);
    for (int i = 0; codes_ && i < kSlots; ++i) codes_[i] = -1;
  }
  ~Codes() {
    if (codes_) ::munmap(codes_, sizeof(int) * kSlots);
  }
  Codes(const Codes&) = delete;
  Codes& operator=(const Codes&) = delete;
  bool ok() const { return codes_ != nullptr; }
  int& operator[](int i) { return codes_[i]; }

 private:
  int* codes_ = nullptr;
};

// Run fn in a child that has its own mount namespace with every mount
// private, so nothing it (or its children) mounts propagates back.
int in_private_ns(const std::function<int()>& fn) {
  return in_child(false, [&] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return kNoPrivateNs;
    return fn();
  });
}

// The first line of a file, or "<unreadable>" when it cannot be opened.
std::string first_line(const std::string& file) {
  std::ifstream in(file);
  if (!in) return "<unreadable>";
  std::string s;
  std::getline(in, s);
  return s;
}

int open_at(int dirfd, const char* rel) {
  int fd = ::openat(dirfd, rel, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return classify(errno);
  ::close(fd);
  return kOk;
}

int pivot_root(const std::string& new_root, const std::string& put_old) {
  return result(static_cast<int>(::syscall(SYS_pivot_root, new_root.c_str(), put_old.c_str())));
}

class MountTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 5;
  MountTest() : PolicyScopeTest(kSlot, "mnt") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_TRUE(codes_.ok());
    fs::create_directories(base_ / "allowed" / "mnt");
    std::ofstream(base_ / "allowed" / "ok.txt") << "ok\n";
    std::ofstream(base_ / "secret.txt") << "secret\n";
    fs::create_directories(base_ / "secretdir");
    std::ofstream(base_ / "secretdir" / "s.txt") << "secret\n";
    // A tree shaped like the host's: walked from its own root, home/usr/lib/f.txt reads "/usr/lib/f.txt".
    fs::create_directories(base_ / "home" / "usr" / "lib");
    std::ofstream(base_ / "home" / "usr" / "lib" / "f.txt") << "fake\n";
  }

  // Install a policy `spec` (no workspace), then scope the cgroup.
  void apply(const std::string& spec) {
    apply_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-mount\nspec:\n" + spec, "");
  }

  Codes codes_;
};

// mount(2) in all its forms: a bind mount of a denied file over an allowed
// one (the allowed name would then read the secret), a new filesystem over
// an allowed directory, a propagation change; also after the scoped
// process made itself a new mount namespace.
TEST_F(MountTest, MountIsDeniedInAScope) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  const std::string secret = base("secret.txt"), ok = base("allowed/ok.txt"), mnt = base("allowed/mnt");
  auto bind_secret = [&] { return result(::mount(secret.c_str(), ok.c_str(), nullptr, MS_BIND, nullptr)); };
  auto new_tmpfs = [&] { return result(::mount("none", mnt.c_str(), "tmpfs", 0, nullptr)); };

  // Outside the scope the bind works and the allowed name reads the secret.
  EXPECT_EQ(in_private_ns([&] {
              codes_[0] = bind_secret();
              codes_[1] = first_line(ok) == "secret" ? kOk : kOtherError;
              codes_[2] = new_tmpfs();
              return kOk;
            }),
            kOk);
  EXPECT_EQ(codes_[0], kOk);
  EXPECT_EQ(codes_[1], kOk) << "the bind mount did not put the secret under the allowed name";
  EXPECT_EQ(codes_[2], kOk);

  auto before = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(in_private_ns([&] {
              codes_[3] = scoped(bind_secret);
              // Had the bind succeeded, this would read "secret" (and be allowed).
              codes_[4] = scoped([&] { return first_line(ok) == "ok" ? kOk : kOtherError; });
              codes_[5] = scoped(new_tmpfs);
              codes_[6] =
                  scoped([] { return result(::mount(nullptr, "/", nullptr, MS_REC | MS_SHARED, nullptr)); });
              codes_[7] = scoped([&] {
                if (::unshare(CLONE_NEWNS) != 0) return kSetupFailed;  // no hook: a copy changes nothing
                return bind_secret();
              });
              return kOk;
            }),
            kOk);
  EXPECT_EQ(codes_[3], kDenied) << "bind mount";
  EXPECT_EQ(codes_[4], kOk) << "the allowed file no longer reads as itself";
  EXPECT_EQ(codes_[5], kDenied) << "new tmpfs";
  EXPECT_EQ(codes_[6], kDenied) << "propagation change";
  EXPECT_EQ(codes_[7], kDenied) << "bind mount in a new mount namespace";
  auto after = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(after.decisions[AC_DECISION_DENY], before.decisions[AC_DECISION_DENY] + 4);
  EXPECT_EQ(after.reasons[AC_REASON_PROTECTED], before.reasons[AC_REASON_PROTECTED] + 4);
}

// umount2, plain and lazy: unmounting what covers a directory would
// uncover what lies beneath it under the same path.
TEST_F(MountTest, UmountIsDeniedInAScope) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  const std::string mnt = base("allowed/mnt");
  auto before = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(in_private_ns([&] {
              if (::mount("none", mnt.c_str(), "tmpfs", 0, nullptr) != 0) return kSetupFailed;
              std::ofstream(mnt + "/m.txt") << "mounted\n";
              codes_[0] = scoped([&] { return result(::umount2(mnt.c_str(), 0)); });
              codes_[1] = scoped([&] { return result(::umount2(mnt.c_str(), MNT_DETACH)); });
              codes_[2] = fs::exists(mnt + "/m.txt") ? kOk : kOtherError;
              codes_[3] = result(::umount2(mnt.c_str(), 0));  // the control: unscoped, it works
              return kOk;
            }),
            kOk);
  EXPECT_EQ(codes_[0], kDenied) << "umount";
  EXPECT_EQ(codes_[1], kDenied) << "lazy umount";
  EXPECT_EQ(codes_[2], kOk) << "the mount is gone";
  EXPECT_EQ(codes_[3], kOk) << "umount outside the scope";
  auto after = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(after.decisions[AC_DECISION_DENY], before.decisions[AC_DECISION_DENY] + 2);
  EXPECT_EQ(after.reasons[AC_REASON_PROTECTED], before.reasons[AC_REASON_PROTECTED] + 2);
}

// The new mount API: attaching a clone of another tree with move_mount,
// creating a filesystem with fsopen/fsconfig; and the root switches,
// pivot_root and chroot (for root, capable(CAP_SYS_CHROOT) denies chroot
// before path_chroot is asked).
TEST_F(MountTest, MoveMountNewFilesystemsAndRootChangesAreDeniedInAScope) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  const std::string mnt = base("allowed/mnt"), secretdir = base("secretdir");
  const std::string newroot = base("newroot");
  auto attach_clone = [&] {
    int tree = ::open_tree(AT_FDCWD, secretdir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) return kSetupFailed;
    int r = result(::move_mount(tree, "", AT_FDCWD, mnt.c_str(), MOVE_MOUNT_F_EMPTY_PATH));
    ::close(tree);
    return r;
  };
  auto create_fs = [] {
    int fsfd = ::fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fsfd < 0) return kSetupFailed;
    int r = result(::fsconfig(fsfd, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0));
    if (r == kOk) {
      int m = ::fsmount(fsfd, FSMOUNT_CLOEXEC, 0);
      r = m < 0 ? kOtherError : kOk;
      if (m >= 0) ::close(m);
    }
    ::close(fsfd);
    return r;
  };
  // pivot_root in a mount namespace of its own, so the caller keeps its root.
  auto switch_root = [&] {
    if (::unshare(CLONE_NEWNS) != 0) return kSetupFailed;
    return pivot_root(newroot, newroot + "/old");
  };
  // A failed capability check (ours: capable(CAP_SYS_CHROOT)) is EPERM; the counters below show it was ours.
  auto chroot_allowed = [&] {
    if (::chroot(base("allowed").c_str()) == 0) return kOk;
    return errno == EPERM ? kDenied : classify(errno);
  };

  fs::create_directories(newroot);
  auto before = hook(AC_HOOK_SCOPE_ESCAPE);  // the controls run unscoped: never counted
  EXPECT_EQ(in_private_ns([&] {
              if (::mount("none", newroot.c_str(), "tmpfs", 0, nullptr) != 0 ||
                  ::mkdir((newroot + "/old").c_str(), 0700) != 0)
                return kSetupFailed;
              // Outside the scope every one of them works.
              codes_[0] = attach_clone();
              codes_[1] = first_line(mnt + "/s.txt") == "secret" ? kOk : kOtherError;
              codes_[2] = ::umount2(mnt.c_str(), 0) == 0 ? kOk : kSetupFailed;
              codes_[3] = create_fs();
              codes_[4] = in_child(false, switch_root);
              codes_[5] = in_child(false, chroot_allowed);
              // Inside it, none.
              codes_[6] = scoped(attach_clone);
              codes_[7] = fs::exists(mnt + "/s.txt") ? kOtherError : kOk;
              codes_[8] = scoped(create_fs);
              codes_[9] = scoped(switch_root);
              codes_[10] = scoped(chroot_allowed);
              return kOk;
            }),
            kOk);
  EXPECT_EQ(codes_[0], kOk) << "move_mount outside the scope";
  EXPECT_EQ(codes_[1], kOk) << "the attached clone did not show the secret under the allowed name";
  EXPECT_EQ(codes_[2], kOk);
  EXPECT_EQ(codes_[3], kOk) << "fsopen/fsconfig/fsmount outside the scope";
  EXPECT_EQ(codes_[4], kOk) << "pivot_root outside the scope";
  EXPECT_EQ(codes_[5], kOk) << "chroot outside the scope";
  EXPECT_EQ(codes_[6], kDenied) << "move_mount of a cloned tree";
  EXPECT_EQ(codes_[7], kOk) << "the clone got attached";
  EXPECT_EQ(codes_[8], kDenied) << "fsconfig(FSCONFIG_CMD_CREATE)";
  EXPECT_EQ(codes_[9], kDenied) << "pivot_root";
  EXPECT_EQ(codes_[10], kDenied) << "chroot";
  auto after = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(after.decisions[AC_DECISION_DENY], before.decisions[AC_DECISION_DENY] + 4);
  EXPECT_EQ(after.reasons[AC_REASON_PROTECTED], before.reasons[AC_REASON_PROTECTED] + 4);
}

// Another process's mount namespace, where a denied tree sits under an
// allowed path: joining it (setns with a pidfd; no LSM hook, but it needs
// CAP_SYS_CHROOT) would make the walk resolve in that namespace, where the
// denied file's path is the allowed one. The pidfd comes from outside the
// scope: on 6.9+ a pidfd is a pidfs file, and opening one in the scope is a
// file_open of a pseudo file ("/"), which this policy does not allow.
TEST_F(MountTest, JoiningAnotherMountNamespaceIsDenied) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  const std::string mnt = base("allowed/mnt"), secretdir = base("secretdir");
  int ready[2], release[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(release, O_CLOEXEC), 0);
  pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {  // keeps a namespace with secretdir bound over allowed/mnt alive
    char c = 0;
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(secretdir.c_str(), mnt.c_str(), nullptr, MS_BIND, nullptr) != 0)
      c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    (void)::read(release[0], &c, 1);
    ::_exit(0);
  }
  char state = 1;
  ASSERT_EQ(::read(ready[0], &state, 1), 1);
  ASSERT_EQ(state, 0) << "the holder could not set up its namespace";
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, holder, 0));
  ASSERT_GE(pidfd, 0);
  auto join_and_read = [&] {
    if (::setns(pidfd, CLONE_NEWNS) != 0) return errno == EPERM ? kDenied : kOtherError;
    return first_line(mnt + "/s.txt") == "secret" ? kOk : kOtherError;
  };
  EXPECT_EQ(in_child(false, join_and_read), kOk) << "outside the scope: joins and reads the secret";
  auto before = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(scoped(join_and_read), kDenied) << "setns (EPERM: a capability check fails)";
  auto after = hook(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(after.decisions[AC_DECISION_DENY], before.decisions[AC_DECISION_DENY] + 1);
  EXPECT_EQ(after.reasons[AC_REASON_PROTECTED], before.reasons[AC_REASON_PROTECTED] + 1);
  (void)::write(release[1], "x", 1);
  int st = 0;
  ::waitpid(holder, &st, 0);
  for (int fd : {pidfd, ready[0], ready[1], release[0], release[1]}) ::close(fd);
}

// A mount tree that is not attached to the task's mount namespace has its
// own root: walked from there, <dir>/usr/lib/f.txt reads "/usr/lib/f.txt".
// open_tree(OPEN_TREE_CLONE) makes such a tree without mounting anything
// (no hook sees it), and so does a lazy unmount of a directory the process
// still holds. Files reached through either are denied, even ones the
// policy allows by their real path; the same files by their real path are
// decided as usual.
TEST_F(MountTest, FilesInDetachedTreesAreDenied) {
  const std::string lib_file = "/usr/lib/os-release";
  ASSERT_TRUE(fs::exists(lib_file)) << "pick another file under /usr/lib for this host";
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [/usr/lib, " + base("allowed") + "]\n"));
  const std::string home = base("home"), allowed = base("allowed"), lazy = base("allowed/mnt");
  auto through_clone = [](const std::string& dir, const char* rel) {
    int tree = ::open_tree(AT_FDCWD, dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) return kSetupFailed;
    int r = open_at(tree, rel);
    ::close(tree);
    return r;
  };
  // Outside the scope the clone reads fine.
  EXPECT_EQ(in_child(false, [&] { return through_clone(home, "usr/lib/f.txt"); }), kOk);

  auto before = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(scoped([&] { return try_open(lib_file, O_RDONLY); }), kOk);  // the rule works
  EXPECT_EQ(scoped([&] { return try_open(base("home/usr/lib/f.txt"), O_RDONLY); }), kDenied);  // default deny
  EXPECT_EQ(scoped([&] { return through_clone(home, "usr/lib/f.txt"); }), kDenied);
  EXPECT_EQ(scoped([&] { return through_clone(allowed, "ok.txt"); }), kDenied);
  EXPECT_EQ(scoped([&] { return through_clone("/usr/lib", "os-release"); }), kDenied);
  auto mid = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(mid.reasons[AC_REASON_DEFAULT_DENY], before.reasons[AC_REASON_DEFAULT_DENY] + 1);
  EXPECT_EQ(mid.reasons[AC_REASON_PATH_DETACHED], before.reasons[AC_REASON_PATH_DETACHED] + 3);

  // A lazily unmounted tmpfs shaped like /usr/lib, held by a directory fd
  // that the scoped child inherits.
  EXPECT_EQ(in_private_ns([&] {
              if (::mount("none", lazy.c_str(), "tmpfs", 0, nullptr) != 0) return kSetupFailed;
              fs::create_directories(lazy + "/usr/lib");
              std::ofstream(lazy + "/usr/lib/f.txt") << "fake\n";
              int dir = ::open(lazy.c_str(), O_PATH | O_DIRECTORY);  // inherited by the scoped child
              if (dir < 0 || ::umount2(lazy.c_str(), MNT_DETACH) != 0) return kSetupFailed;
              codes_[0] = open_at(dir, "usr/lib/f.txt");
              codes_[1] = scoped([&] { return open_at(dir, "usr/lib/f.txt"); });
              codes_[2] = scoped(
                  [&] { return ::fchdir(dir) == 0 ? try_open("usr/lib/f.txt", O_RDONLY) : kSetupFailed; });
              return kOk;
            }),
            kOk);
  EXPECT_EQ(codes_[0], kOk) << "outside the scope";
  EXPECT_EQ(codes_[1], kDenied) << "by directory fd";
  EXPECT_EQ(codes_[2], kDenied) << "relative to the working directory";
  auto after = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(after.reasons[AC_REASON_PATH_DETACHED], mid.reasons[AC_REASON_PATH_DETACHED] + 2);
}

// The walk still crosses ordinary mounts: a file on a tmpfs mounted (from
// outside the scope) inside an allowed directory is decided by its full
// path, in the scope's namespace and in a copy of it.
TEST_F(MountTest, FilesOnAttachedMountsKeepTheirPaths) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  const std::string mnt = base("allowed/mnt"), hidden = base("secretdir/mnt");
  fs::create_directories(hidden);
  auto before = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(in_private_ns([&] {
              if (::mount("none", mnt.c_str(), "tmpfs", 0, nullptr) != 0 ||
                  ::mount("none", hidden.c_str(), "tmpfs", 0, nullptr) != 0)
                return kSetupFailed;
              std::ofstream(mnt + "/m.txt") << "m\n";
              std::ofstream(hidden + "/m.txt") << "m\n";
              codes_[0] = scoped([&] { return try_open(mnt + "/m.txt", O_RDONLY); });
              codes_[1] = scoped([&] { return try_open(hidden + "/m.txt", O_RDONLY); });
              codes_[2] = scoped([&] {
                if (::unshare(CLONE_NEWNS) != 0) return kSetupFailed;
                return try_open(mnt + "/m.txt", O_RDONLY);
              });
              return kOk;
            }),
            kOk);
  EXPECT_EQ(codes_[0], kOk);
  EXPECT_EQ(codes_[1], kDenied);
  EXPECT_EQ(codes_[2], kOk) << "in a copy of the namespace";
  auto after = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(after.reasons[AC_REASON_DEFAULT_DENY], before.reasons[AC_REASON_DEFAULT_DENY] + 1);
  EXPECT_EQ(after.reasons[AC_REASON_PATH_DETACHED], before.reasons[AC_REASON_PATH_DETACHED]);
}

}  // namespace
}  // namespace agentcage
