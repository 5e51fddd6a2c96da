// SPDX-License-Identifier: Apache-2.0
// What a run leaves in a kept workspace (--keep, --workspace DIR), made safe
// to hand back: the files are the run's, so nothing in them may grant
// privileges to whoever touches them next.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::run {

// What a run's own (dynamic) uid owns in a workspace that outlives the run
// goes to whoever the workspace goes back to: left to that uid, it would
// belong to the next run that leases it.
struct GiveAway {
  uid_t from = 0;  // the run's uid
  uid_t uid = 0;   // the new owner
  gid_t gid = 0;
};

// Makes the tree at the open directory `dir_fd` (`dir`: its name in
// messages) safe to hand back. Clears the set-user-ID and set-group-ID bits
// of every regular file and directory (dir included). With `give`, every
// entry owned by give->from goes to give->uid:gid, except a file of more
// than one link (the same file is elsewhere too: it keeps its owner); the
// directory itself last, so nobody else may enter before the walk is done.
// Never follows a symbolic link and never leaves the tree: each entry is
// opened relative to its directory's descriptor with O_NOFOLLOW, checked to
// be the entry that was listed, and changed through that descriptor (a link,
// FIFO or socket by its name, AT_SYMLINK_NOFOLLOW). Call it only when
// nothing of the run is left running (the tree must not change meanwhile).
// Fails on a tree deeper than kMaxArtifactDepth levels or an entry it
// cannot open or change: the caller then must not hand the directory back
// as is.
inline constexpr int kMaxArtifactDepth = 256;
Status hand_back_tree_at(int dir_fd, const std::string& dir, const std::optional<GiveAway>& give);

// The same for one entry `name` of the open directory `dirfd` that is not a
// directory, as it was listed (`listed`: fstatat, AT_SYMLINK_NOFOLLOW;
// `shown`: its name in messages). An entry that is no longer the one listed
// (someone renamed another file into its place) is not touched: EAGAIN.
Status hand_back_entry(int dirfd, const char* name, const struct stat& listed, const std::string& shown,
                       const std::optional<GiveAway>& give);

// Removes the tree at `path` (a directory, or anything else in its place,
// never followed), however deep: it holds two descriptors at most, going
// down into a directory that is not yet empty and back up through "..",
// where a recursive removal holds one per level and stops at the limit of
// open files (a run can make a tree thousands of levels deep). Only for a
// tree nothing changes any more (nothing of the run runs). Gone already is
// not an error.
Status remove_tree(const std::string& path);

// Copies the tree `from` into the new directory `to` (which must not exist):
// directories, regular files and symbolic links (as links, never followed),
// with their owners and permission bits but no set-id bits; device files,
// FIFOs and sockets are left out. Entries are opened as hand_back_tree_at
// does (relative, O_NOFOLLOW, checked). The same depth bound applies, and at
// most `max_bytes` of file contents are written (EFBIG beyond: hard links
// and sparse files are copied out in full). Used for a kept tmpfs workspace
// (run/workspace.h), after the run; on an error `to` is left partial.
Status copy_kept_tree(const std::string& from, const std::string& to, uint64_t max_bytes);

// ---- the io directory (agentcage run --io-dir DIR) --------------------------
// A directory of a caller that is not root (a client of the daemon) never
// becomes the workspace itself: its contents are copied into the run's own
// workspace before the run and the workspace's contents back after it, with
// the caller's permissions and ownership. So a run never gets write access
// anywhere its caller could not write, and its writes stay bounded by the
// workspace's tmpfs.

inline constexpr uint64_t kIoEntryBytes = 512;

struct IoOwner {
  uid_t uid = 0;
  gid_t gid = 0;
};

// Opens the directory `path` with the permissions of `who` (a child process
// with that uid and gid and no supplementary groups resolves it: no symbolic
// link anywhere in the path, no magic links) and checks that `who` owns it
// and may write and search it. A descriptor (O_PATH) of the directory.
Result<UniqueFd> open_io_dir(const std::string& path, const IoOwner& who);

// What the copies did; `skipped` names the first entries left out and why.
struct IoCopy {
  uint64_t entries = 0, bytes = 0;
  std::vector<std::string> skipped;
  uint64_t skipped_total = 0;
};

// Copies the entries of the io directory `src` that `who` owns (directories,
// regular files, symbolic links as links; nothing else) into the workspace
// `dst` (a descriptor of its directory), owned there by uid:gid (the sandbox
// identity), at most `max_bytes` of contents (EFBIG beyond).
Status copy_in(int src, const IoOwner& who, int dst, uid_t uid, gid_t gid, uint64_t max_bytes, IoCopy& done);

// Copies the workspace `src` back into the io directory `dst`, owned there
// by `who`, without set-id bits and without write permission for group and
// others, at most `max_bytes` (each entry counts kIoEntryBytes too): a file replaces the file
// of the same name (a new file renamed over it), a directory is entered when
// `who` owns the one already there; anything else in the way, devices,
// FIFOs and sockets are skipped (listed in `done`). Call it only when
// nothing of the run is left running.
Status copy_out(int src, int dst, const IoOwner& who, uint64_t max_bytes, IoCopy& done);

// How a copy runs: in a child process of its own, so that what it costs and
// whose rights it uses are the right ones. copy_in runs inside the run's
// cgroup (the workspace's tmpfs pages count against the run's memory limit,
// not the runner's), copy_out as the caller (become_io_owner: every write is
// the caller's own). The child gets at most `timeout`, and ends when
// `signal_fd` (a signalfd, -1: none) has a signal; then it is SIGKILLed.
struct CopyChild {
  int cgroup_fd = -1;  // -1: the runner's own cgroup
  int signal_fd = -1;
  std::chrono::seconds timeout{600};
  std::function<Status()> become;  // run first in the child; may be empty
  // The descriptors `work` uses (at most 7; more fails the copy): the child closes every other
  // one above 2 before anything else (the runner's result pipe and notice
  // channel included).
  std::vector<int> keep;
};
// Runs `work` as `how` says; its Status and IoCopy come back over a pipe.
Status run_copy_child(const CopyChild& how, const std::function<Status(IoCopy&)>& work, IoCopy& done);

// The caller's identity for copy_out: uid and gid `who`, no supplementary
// groups, and only CAP_DAC_READ_SEARCH (to read the run's files, which the
// run's own uid owns): files are created as the caller, in directories the
// caller may write, within the caller's quotas.
Status become_io_owner(const IoOwner& who);

}  // namespace agentcage::run
