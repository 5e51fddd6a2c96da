// SPDX-License-Identifier: Apache-2.0
// Host state of live runs, so a run whose agentcage was SIGKILLed is cleaned
// up by the next agentcage (the "reaper"):
//
//   <state_dir>/runs/<id>.lock   flock'ed (LOCK_EX) by the owning agentcage for
//                                the run's whole life; the kernel drops the lock
//                                when that process dies, however it dies
//   <state_dir>/runs/<id>.json   what the run created (RunRecord), replaced
//                                atomically (write + rename) as resources appear
//   <state_dir>/uids/<uid>.lock  flock'ed while a run uses that dynamic uid;
//                                names that run (UidLease)
//
// A record whose lock can be taken belongs to a dead agentcage: it is stale.
// Liveness is the lock, not the pid (pids are reused); the pid and start time
// in the record are for people reading it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::run {

struct RunRecord {
  std::string run_id;
  pid_t owner_pid = 0;
  uint64_t started_unix_ms = 0;
  std::string cgroup;                   // absolute path of the run's cgroup ("" before it exists)
  uint64_t cgroup_id = 0;               // also the scope id; 0 before the cgroup exists
  std::optional<uint32_t> policy_slot;  // set once a slot was acquired
  std::string workspace;
  bool remove_workspace = false;  // agentcage created it and --keep was not given
  // A caller's --workspace that agentcage chowned for the run: restored after.
  std::optional<uint32_t> restore_uid, restore_gid, restore_mode;
  // A caller's --workspace: the directory the run had (its path was
  // canonical then); a reaper touches only that one (run/workspace.h).
  std::optional<uint64_t> workspace_dev, workspace_ino;
  // Set once the workspace may be a tmpfs of this size (limits.disk): it is
  // unmounted (its contents copied out first when kept) before anything else
  // happens to the workspace (run/workspace.h).
  std::optional<uint64_t> workspace_tmpfs_bytes;
  // The run's dynamic uid (unset with --user): what it owns in a kept or
  // caller's workspace is given to the workspace's owner at the end
  // (run/workspace.h), never left to the next run that leases the uid.
  std::optional<uint32_t> sandbox_uid;
  // Prepared ahead by a spare runner of the daemon, no run has it yet
  // (run/runner.h: prepare_spare_run): an empty cgroup and workspace.
  bool spare = false;
};

nlohmann::json to_json(const RunRecord& r);
Result<RunRecord> record_from_json(const nlohmann::json& j);

// The record and lock of this process's run.
class RunLease {
 public:
  // Creates the state directories (0700, root) if needed and takes the lock.
  static Result<RunLease> create(const std::string& state_dir, const std::string& run_id);
  RunLease() = default;
  RunLease(RunLease&&) noexcept = default;
  RunLease& operator=(RunLease&&) noexcept = default;

  Status write(const RunRecord& record);
  // Deletes record and lock file (the run left nothing behind).
  void finish();

 private:
  std::string lock_path_, record_path_;
  UniqueFd lock_fd_;
  bool sync_ = true;  // fsync each record: the state directory is on disk (not tmpfs)
};

// A dynamic uid held for the run's life. Its lock file names the last run
// that held it: a uid whose lock is free is still not leased again while
// that run's own lock or record is there (its agentcage died and the reaper
// has not yet killed what it left, which may still run as that uid).
class UidLease {
 public:
  // Tries uids from [base, base + count), starting at base + (seed % count),
  // for the run `run_id` (its lock and record under state_dir/runs).
  static Result<UidLease> acquire(const std::string& state_dir, uid_t base, uint32_t count, uint64_t seed,
                                  const std::string& run_id);
  UidLease() = default;
  UidLease(UidLease&&) noexcept = default;
  UidLease& operator=(UidLease&&) noexcept = default;
  uid_t uid() const { return uid_; }

 private:
  uid_t uid_ = 0;
  UniqueFd lock_fd_;
};

// A run whose owner died: its lock is now held by the caller.
struct StaleRun {
  std::optional<RunRecord> record;  // unset when the record is missing or unreadable
  std::string run_id, lock_path, record_path;
  std::string problem;          // why `record` is unset
  bool record_missing = false;  // no record file: the run created nothing
  UniqueFd lock_fd;
  // Deletes record and lock file.
  void forget();
};
Result<std::vector<StaleRun>> find_stale_runs(const std::string& state_dir);

// Create `dir` and missing parents (mode for the last one; 0755 above it).
// Refuses a last component that is a symlink or not owned by this euid.
Status make_private_dir(const std::string& dir, mode_t mode);

}  // namespace agentcage::run
