// SPDX-License-Identifier: Apache-2.0
// The workspace's storage bound (limits.disk). A generated workspace is a
// tmpfs of its own of that size: the run sees ENOSPC when it is full, the
// host's disks never see its writes, and its pages are charged to the run's
// memory cgroup. A tmpfs rather than a disk quota because it needs nothing
// of the host's file systems (project quotas exist on XFS and ext4 only, and
// only when mounted with them) and leaves nothing behind when unmounted.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "run/state.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::run {

// Mounts a tmpfs of `size_bytes` (and a proportional number of inodes) on the
// empty directory `dir`: nosuid, nodev, mode 0700, owned by uid:gid.
Status mount_workspace(const std::string& dir, uint64_t size_bytes, uid_t uid, gid_t gid);

// Ends the tmpfs at `dir` once nothing of the run runs. With `keep`, its
// contents are first copied onto the host's disk (copy_kept_tree, at most
// `max_bytes`, through DIR.kept beside it) and end up as an ordinary directory
// at `dir`; otherwise `dir` is left an empty directory for the caller to
// remove. A workspace that cannot be copied is not kept: `not_kept` says why.
// Idempotent: a `dir` that is not a mountpoint any more (a retry, the reaper)
// only gets a finished copy moved into place.
Status unmount_workspace(const std::string& dir, bool keep, uint64_t max_bytes, std::string& not_kept);

// A caller's --workspace by its canonical path (`path`), as an O_DIRECTORY
// descriptor, with no symbolic link anywhere on the way (openat2
// RESOLVE_NO_SYMLINKS): the path was canonical when the run began, so a
// link in it now is someone's swap (the owner of a directory on the way can
// rename), which root must not follow. With `dev` and `ino`, only the very
// directory the run had. An error names what changed.
Result<UniqueFd> open_callers_workspace(const std::string& path, std::optional<uint64_t> dev = std::nullopt,
                                        std::optional<uint64_t> ino = std::nullopt);

// Hands a caller's --workspace back after its run, through `fd` (from
// open_callers_workspace when the run began: the directory itself, wherever
// it is now): made safe (run/artifacts.h: set-id bits stripped, what the
// run's dynamic uid owns given to the directory's owner), then, with
// `restore_uid`, its owner and mode restored. One that cannot be made safe
// is left to root only (mode 0700). What failed, as messages (none: done).
// `path` names it.
std::vector<std::string> hand_back_callers_workspace(int fd, const std::string& path,
                                                     const RunRecord& record);

// The same for a workspace agentcage made and --keep kept (below its own
// root-owned directory, so reached by `path`): what the run's dynamic uid
// owns there goes to root. One that cannot be opened or made safe is left
// to root only (mode 0700).
std::vector<std::string> hand_back_kept_workspace(const std::string& path, const RunRecord& record);

// A caller's --workspace DIR (open at `dir_fd`, the descriptor the run
// keeps; `dir` names it): accepted only when its file system (statfs,
// which reports an XFS project quota for a directory under one) holds no
// more than `limit_bytes`.
Status check_workspace_bound(int dir_fd, const std::string& dir, uint64_t limit_bytes);

}  // namespace agentcage::run
