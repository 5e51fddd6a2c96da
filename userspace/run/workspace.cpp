// SPDX-License-Identifier: Apache-2.0
#include "run/workspace.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
    fs::remove_all(copy, ec);
    if (Status st = copy_kept_tree(dir, copy, max_bytes); !st) {
      not_kept = st.error().message;
      fs::remove_all(copy, ec);
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

Status check_workspace_bound(const std::string& dir, uint64_t limit_bytes) {
  struct statfs sf {};
  if (::statfs(dir.c_str(), &sf) != 0) return Error::from_errno("--workspace " + dir);
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
