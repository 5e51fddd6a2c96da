// SPDX-License-Identifier: Apache-2.0
#include "run/workspace.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "run/artifacts.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;

// One inode per 16 KiB of the size, at least 1024: inodes cost kernel memory
// beyond the size (a tmpfs's default is half the host's RAM pages).
uint64_t inodes_for(uint64_t size_bytes) { return std::max<uint64_t>(size_bytes / 16384, 1024); }

bool is_mountpoint(const std::string& dir) {
  struct stat self {
  }, parent{};
  if (::lstat(dir.c_str(), &self) != 0 || !S_ISDIR(self.st_mode)) return false;
  if (::stat((dir + "/..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

std::string kept_copy_of(const std::string& dir) { return dir + ".kept"; }

}  // namespace

Status mount_workspace(const std::string& dir, uint64_t size_bytes, uid_t uid, gid_t gid) {
  const std::string data = "size=" + std::to_string(size_bytes) +
                           ",nr_inodes=" + std::to_string(inodes_for(size_bytes)) +
                           ",mode=0700,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  if (::mount("agentcage-workspace", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0)
    return Error::from_errno("workspace: mounting a tmpfs of " + std::to_string(size_bytes) + " bytes on " +
                             dir);
  return {};
}

Status unmount_workspace(const std::string& dir, bool keep, uint64_t max_bytes, std::string& not_kept) {
  const std::string copy = kept_copy_of(dir);
  std::error_code ec;
  if (!is_mountpoint(dir)) {
    // Unmounted before, but the copy was not yet moved into place (an
    // agentcage that died in between; the reaper finishes it).
    if (keep && fs::exists(copy, ec)) {
      (void)::rmdir(dir.c_str());
      if (::rename(copy.c_str(), dir.c_str()) != 0)
        return Error::from_errno("workspace: moving " + copy + " to " + dir);
    }
    return {};
  }
  if (keep) {
    (void)remove_tree(copy);
    if (Status st = copy_kept_tree(dir, copy, max_bytes); !st) {
      not_kept = st.error().message;
      (void)remove_tree(copy);
      keep = false;
    }
  }
  // Detached: a process of the caller's with its working directory in the
  // workspace must not keep the run's memory-backed storage alive.
  if (::umount2(dir.c_str(), MNT_DETACH) != 0) return Error::from_errno("workspace: unmounting " + dir);
  if (keep) {
    if (::rmdir(dir.c_str()) != 0) return Error::from_errno("workspace: removing the mountpoint " + dir);
    if (::rename(copy.c_str(), dir.c_str()) != 0)
      return Error::from_errno("workspace: moving " + copy + " to " + dir);
  }
  return {};
}

Result<UniqueFd> open_callers_workspace(const std::string& path, std::optional<uint64_t> dev,
                                        std::optional<uint64_t> ino) {
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how)));
  if (!fd) {
    const int err = errno;
    if (err == ELOOP)
      return Error{"the workspace " + path +
                       " has a symbolic link on its path now (it had none when the run "
                       "began): not followed",
                   ELOOP};
    return Error{"opening the workspace " + path + ": " + std::strerror(err), err};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error::from_errno("the workspace " + path);
  if ((dev && *dev != static_cast<uint64_t>(st.st_dev)) || (ino && *ino != static_cast<uint64_t>(st.st_ino)))
    return Error{"the workspace " + path + " is another directory now than the run's: not touched", ESTALE};
  return fd;
}

namespace {

// Nothing of the run runs any more: make what it left safe to hand back
// (run/artifacts.h). If that cannot be done, nobody but root may enter.
std::vector<std::string> make_safe(int fd, const std::string& path, const std::optional<GiveAway>& give) {
  Status st = hand_back_tree_at(fd, path, give);
  if (st) return {};
  if (::fchown(fd, 0, 0) != 0 || ::fchmod(fd, 0700) != 0)
    return {"workspace " + path + ": " + st.error().message +
            "; and restricting it to root: " + std::strerror(errno)};
  return {"workspace " + path + ": " + st.error().message +
          "; the workspace is left to root only (mode 0700)"};
}

}  // namespace

std::vector<std::string> hand_back_callers_workspace(int fd, const std::string& path,
                                                     const RunRecord& record) {
  // The run's files go to the directory's owner: the one it had before
  // the run (restored below), or the one it has (the run's identity was
  // not dynamic, or the directory already was the identity's).
  std::optional<GiveAway> give;
  struct stat st {};
  if (record.sandbox_uid) {
    if (record.restore_uid)
      give = GiveAway{*record.sandbox_uid, *record.restore_uid, *record.restore_gid};
    else if (::fstat(fd, &st) == 0 && st.st_uid != *record.sandbox_uid)
      give = GiveAway{*record.sandbox_uid, st.st_uid, st.st_gid};
  }
  auto problems = make_safe(fd, path, give);
  if (!problems.empty()) return problems;
  if (record.restore_uid && (::fchown(fd, *record.restore_uid, *record.restore_gid) != 0 ||
                             ::fchmod(fd, static_cast<mode_t>(*record.restore_mode)) != 0))
    problems.push_back("restoring owner and mode of " + path + ": " + std::strerror(errno));
  return problems;
}

std::vector<std::string> hand_back_kept_workspace(const std::string& path, const RunRecord& record) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const std::string why = std::strerror(errno);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return {"workspace " + path + ": opening it: " + why + "; not handed back"};
    if (::chown(path.c_str(), 0, 0) != 0 || ::chmod(path.c_str(), 0700) != 0)
      return {"workspace " + path + ": opening it: " + why +
              "; and restricting it to root: " + std::strerror(errno)};
    return {"workspace " + path + ": opening it: " + why +
            "; the workspace is left to root only (mode 0700)"};
  }
  std::optional<GiveAway> give;
  if (record.sandbox_uid) give = GiveAway{*record.sandbox_uid, 0, 0};
  return make_safe(fd.get(), path, give);
}

Status check_workspace_bound(int dir_fd, const std::string& dir, uint64_t limit_bytes) {
  struct statfs sf {};
  if (::fstatfs(dir_fd, &sf) != 0) return Error::from_errno("--workspace " + dir);
  const uint64_t unit = sf.f_frsize ? static_cast<uint64_t>(sf.f_frsize) : static_cast<uint64_t>(sf.f_bsize);
  const uint64_t total = static_cast<uint64_t>(sf.f_blocks) * unit;
  if (total > limit_bytes)
    return Error{"--workspace " + dir + " is on a file system of " + std::to_string(total) +
                     " bytes, more than the run's disk limit of " + std::to_string(limit_bytes) +
                     " bytes: the run could fill it",
                 EFBIG};
  return {};
}

}  // namespace agentcage::run
