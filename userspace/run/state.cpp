// SPDX-License-Identifier: Apache-2.0
#include "run/state.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "control/protocol.h"
#include "util/file.h"

namespace agentcage::run {
namespace fs = std::filesystem;

namespace {

// Opens (creating) `path` and takes an exclusive flock without waiting.
// Returns an invalid fd when someone else holds it.
Result<UniqueFd> try_lock(const std::string& path, bool create) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600));
  if (!fd) return Error::from_errno("run state: opening " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return UniqueFd{};
    return Error::from_errno("run state: locking " + path);
  }
  // Someone may have deleted the file between our open and our lock (a
  // finished run, another reaper): a lock on an unlinked file guards nothing.
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error::from_errno("run state: stat " + path);
  if (st.st_nlink == 0) return UniqueFd{};
  return fd;
}

}  // namespace

Status make_private_dir(const std::string& dir, mode_t mode) {
  std::error_code ec;
  fs::path p(dir);
  if (p.has_parent_path() && p.parent_path() != p) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) return Error{"creating " + p.parent_path().string() + ": " + ec.message(), ec.value()};
  }
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return Error::from_errno("creating " + dir);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Error::from_errno("stat " + dir);
  if (!S_ISDIR(st.st_mode)) return Error{dir + " is not a directory (a symlink?); remove it", ENOTDIR};
  if (st.st_uid != ::geteuid())
    return Error{dir + " is owned by uid " + std::to_string(st.st_uid) + ", not by agentcage (uid " +
                     std::to_string(::geteuid()) + "); remove it",
                 EPERM};
  if ((st.st_mode & 07777) != mode && ::chmod(dir.c_str(), mode) != 0)
    return Error::from_errno("chmod " + dir);
  return {};
}

nlohmann::json to_json(const RunRecord& r) {
  nlohmann::json j = {{"run_id", r.run_id},
                      {"owner_pid", r.owner_pid},
                      {"started_unix_ms", r.started_unix_ms},
                      {"cgroup", r.cgroup},
                      {"cgroup_id", r.cgroup_id},
                      {"workspace", r.workspace},
                      {"remove_workspace", r.remove_workspace}};
  if (r.policy_slot) j["policy_slot"] = *r.policy_slot;
  if (r.restore_uid) j["restore_uid"] = *r.restore_uid;
  if (r.restore_gid) j["restore_gid"] = *r.restore_gid;
  if (r.restore_mode) j["restore_mode"] = *r.restore_mode;
  if (r.workspace_tmpfs_bytes) j["workspace_tmpfs_bytes"] = *r.workspace_tmpfs_bytes;
  if (r.workspace_dev) j["workspace_dev"] = *r.workspace_dev;
  if (r.workspace_ino) j["workspace_ino"] = *r.workspace_ino;
  if (r.sandbox_uid) j["sandbox_uid"] = *r.sandbox_uid;
  if (r.spare) j["spare"] = true;
  return j;
}

Result<RunRecord> record_from_json(const nlohmann::json& j) {
  try {
    RunRecord r;
    r.run_id = j.at("run_id").get<std::string>();
    r.owner_pid = j.at("owner_pid").get<pid_t>();
    r.started_unix_ms = j.at("started_unix_ms").get<uint64_t>();
    r.cgroup = j.at("cgroup").get<std::string>();
    r.cgroup_id = j.at("cgroup_id").get<uint64_t>();
    r.workspace = j.at("workspace").get<std::string>();
    r.remove_workspace = j.at("remove_workspace").get<bool>();
    if (j.contains("policy_slot")) r.policy_slot = j["policy_slot"].get<uint32_t>();
    if (j.contains("restore_uid")) r.restore_uid = j["restore_uid"].get<uint32_t>();
    if (j.contains("restore_gid")) r.restore_gid = j["restore_gid"].get<uint32_t>();
    if (j.contains("restore_mode")) r.restore_mode = j["restore_mode"].get<uint32_t>();
    if (j.contains("workspace_tmpfs_bytes"))
      r.workspace_tmpfs_bytes = j["workspace_tmpfs_bytes"].get<uint64_t>();
    if (j.contains("workspace_dev")) r.workspace_dev = j["workspace_dev"].get<uint64_t>();
    if (j.contains("sandbox_uid")) r.sandbox_uid = j["sandbox_uid"].get<uint32_t>();
    if (j.contains("workspace_ino")) r.workspace_ino = j["workspace_ino"].get<uint64_t>();
    if (j.contains("spare")) r.spare = j["spare"].get<bool>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("run record: ") + e.what(), EINVAL};
  }
}

Result<RunLease> RunLease::create(const std::string& state_dir, const std::string& run_id) {
  if (Status st = make_private_dir(state_dir, 0755); !st) return st.error().wrap("run state");
  const std::string runs = state_dir + "/runs";
  if (Status st = make_private_dir(runs, 0700); !st) return st.error().wrap("run state");
  RunLease lease;
  // On a tmpfs (the default /run) a record cannot outlive the host and
  // fsync is only a cost; on disk a crash must not leave a torn record.
  struct statfs sfs {};
  lease.sync_ =
      !(::statfs(runs.c_str(), &sfs) == 0 && (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC));
  lease.lock_path_ = runs + "/" + run_id + ".lock";
  lease.record_path_ = runs + "/" + run_id + ".json";
  // The lock file appears already locked: made unnamed (O_TMPFILE), locked,
  // then linked in place (failing if the name exists, as O_EXCL). A reaper
  // that probes every lock file (find_stale_runs) can then never take it
  // between our creating and our locking it, which would make this flock
  // fail, or a young run look stale.
  UniqueFd fd(::open(runs.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
      return Error::from_errno("run state: locking a new lock file");
    const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, lease.lock_path_.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return Error::from_errno("run state: creating " + lease.lock_path_);
  } else {
    // A file system without O_TMPFILE: create, then lock, retrying while a
    // reaper holds the new file for a moment (it leaves young ones alone).
    fd.reset(::open(lease.lock_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return Error::from_errno("run state: creating " + lease.lock_path_);
    int tries = 0;
    while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK || ++tries > 500) {
        Error e = Error::from_errno("run state: locking " + lease.lock_path_);
        ::unlink(lease.lock_path_.c_str());
        return e;
      }
      ::usleep(2000);
    }
  }
  lease.lock_fd_ = std::move(fd);
  return lease;
}

Status RunLease::write(const RunRecord& record) {
  const std::string tmp = record_path_ + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Error::from_errno("run state: creating " + tmp);
  if (Status st = write_all_to(fd.get(), to_json(record).dump() + "\n"); !st)
    return Error::from_errno("run state: writing " + tmp, st.error().code);
  // A run saves its record five times: on the default tmpfs (/run) without
  // fsync, as a record there cannot outlive the host anyway.
  if (sync_ && ::fsync(fd.get()) != 0) return Error::from_errno("run state: fsync " + tmp);
  if (::rename(tmp.c_str(), record_path_.c_str()) != 0)
    return Error::from_errno("run state: renaming " + tmp);
  return {};
}

void RunLease::finish() {
  if (!lock_fd_) return;
  ::unlink(record_path_.c_str());
  ::unlink((record_path_ + ".tmp").c_str());
  ::unlink(lock_path_.c_str());
  lock_fd_.reset();
}

Result<UidLease> UidLease::acquire(const std::string& state_dir, uid_t base, uint32_t count, uint64_t seed,
                                   const std::string& run_id) {
  if (Status st = make_private_dir(state_dir, 0755); !st) return st.error().wrap("run state");
  const std::string dir = state_dir + "/uids";
  if (Status st = make_private_dir(dir, 0700); !st) return st.error().wrap("run state");
  if (!control::valid_run_id(run_id))
    return Error{"run state: a dynamic uid for the malformed run id " + run_id, EINVAL};
  const std::string runs = state_dir + "/runs/";
  // Bounded probing: the chance that 256 probes all hit uids in use is nil
  // unless nearly all of the range is taken by live runs.
  uint32_t unreaped = 0;
  for (uint32_t i = 0; i < 256 && i < count; ++i) {
    uid_t uid = base + static_cast<uid_t>((seed + i) % count);
    const std::string path = dir + "/" + std::to_string(uid) + ".lock";
    auto fd = try_lock(path, true);
    if (!fd) return fd.error();
    if (!*fd) continue;
    // The run that held it last: until its lock and record are gone (it
    // finished, or the reaper killed its cgroup), something of it may run
    // as this uid. A name that is not a run id is not trusted to be free.
    char last[64];
    const ssize_t n = ::pread(fd->get(), last, sizeof last, 0);
    if (n < 0) return Error::from_errno("run state: reading " + path);
    const std::string holder(last, static_cast<size_t>(n));
    if (!holder.empty()) {
      struct stat st {};
      if (!control::valid_run_id(holder) || ::lstat((runs + holder + ".lock").c_str(), &st) == 0 ||
          ::lstat((runs + holder + ".json").c_str(), &st) == 0) {
        ++unreaped;
        continue;
      }
    }
    if (::ftruncate(fd->get(), 0) != 0 ||
        ::pwrite(fd->get(), run_id.data(), run_id.size(), 0) != static_cast<ssize_t>(run_id.size()))
      return Error::from_errno("run state: writing " + path);
    UidLease lease;
    lease.uid_ = uid;
    lease.lock_fd_ = std::move(*fd);
    return lease;
  }
  return Error{"run state: no free dynamic uid in " + std::to_string(base) + ".." +
                   std::to_string(base + count - 1) + " after 256 tries (too many concurrent runs?" +
                   (unreaped ? " " + std::to_string(unreaped) +
                                   " of them were left by runs not yet reaped: `agentcage status` lists them)"
                             : ")"),
               EAGAIN};
}

void StaleRun::forget() {
  ::unlink(record_path.c_str());
  ::unlink((record_path + ".tmp").c_str());
  ::unlink(lock_path.c_str());
  lock_fd.reset();
}

Result<std::vector<StaleRun>> find_stale_runs(const std::string& state_dir) {
  std::vector<StaleRun> out;
  const std::string runs = state_dir + "/runs";
  std::error_code ec;
  fs::directory_iterator it(runs, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    return Error{"run state: listing " + runs + ": " + ec.message(), ec.value()};
  }
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 5 || name.substr(name.size() - 5) != ".lock") continue;
    auto fd = try_lock(entry.path().string(), false);
    if (!fd) {
      if (fd.error().code == ENOENT) continue;  // finished meanwhile
      return fd.error();
    }
    if (!*fd) continue;  // its owner is alive
    StaleRun s;
    s.run_id = name.substr(0, name.size() - 5);
    s.lock_path = entry.path().string();
    s.record_path = runs + "/" + s.run_id + ".json";
    s.lock_fd = std::move(*fd);
    std::error_code rec_ec;
    if (!fs::exists(s.record_path, rec_ec)) {
      // A run creates its lock file, then locks it, then writes its record:
      // a young lock without a record may be a run between the first two
      // steps (its flock would fail if we held or removed the file). Leave
      // it for a later reaper.
      struct stat st {};
      if (::stat(s.lock_path.c_str(), &st) == 0 && ::time(nullptr) - st.st_mtime < 10) continue;
      s.record_missing = true;
      s.problem = "no record (agentcage died before creating anything)";
    } else {
      try {
        std::ifstream in(s.record_path);
        auto rec = record_from_json(nlohmann::json::parse(in));
        if (rec)
          s.record = *rec;
        else
          s.problem = rec.error().message;
      } catch (const nlohmann::json::exception& e) {
        s.problem = std::string("unreadable record: ") + e.what();
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace agentcage::run
