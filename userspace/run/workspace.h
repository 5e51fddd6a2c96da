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
#include <string>

#include "util/result.h"

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

// A caller's --workspace DIR: accepted only when its file system (statfs,
// which reports an XFS project quota for a directory under one) holds no
// more than `limit_bytes`.
Status check_workspace_bound(const std::string& dir, uint64_t limit_bytes);

}  // namespace agentcage::run
