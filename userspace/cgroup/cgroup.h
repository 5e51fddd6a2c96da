// SPDX-License-Identifier: Apache-2.0
// cgroup v2: locating the hierarchy, identifying cgroups, creating and
// removing them, and starting a process directly inside one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::cgroup {

namespace fs = std::filesystem;

// Mount points of cgroup2 filesystems in a /proc/self/mountinfo text, in
// order of appearance. Exposed for unit tests.
std::vector<fs::path> parse_cgroup2_mounts(std::string_view mountinfo);
// The cgroup v2 hierarchy of this process's mount namespace; prefers
// /sys/fs/cgroup when several are mounted.
Result<fs::path> find_cgroup2_root();

// The cgroup's 64-bit id (what bpf_get_current_cgroup_id() returns).
Result<uint64_t> cgroup_id(const fs::path& cgroup_dir);
// Depth below the hierarchy root (the root is level 0).
Result<unsigned> cgroup_level(const fs::path& root, const fs::path& cgroup_dir);

// A cgroup directory and its id.
struct CgroupNode {
  uint64_t id = 0;
  fs::path path;
};
// The `level` cgroups above `cgroup_dir` (a cgroup at that level), the
// hierarchy root included, nearest first.
Result<std::vector<CgroupNode>> cgroup_ancestors(const fs::path& cgroup_dir, unsigned level);
// Every cgroup below `cgroup_dir`, at any depth (not following symlinks;
// cgroupfs has none). A cgroup removed during the walk is skipped. A cgroup
// whose cgroup.stat counts no descendants is not listed at all (a run's
// fresh cgroup holds some 50 interface files and nothing below).
Result<std::vector<CgroupNode>> cgroup_descendants(const fs::path& cgroup_dir);

// Whitespace-separated controller names from cgroup.controllers or
// cgroup.subtree_control.
std::vector<std::string> parse_controllers(std::string_view text);
Result<std::vector<std::string>> read_controllers(const fs::path& file);

Status write_file(const fs::path& file, std::string_view content);
Result<std::string> read_file(const fs::path& file);

// The processes of the cgroup (cgroup.procs: in the reader's pid namespace;
// processes it cannot see are not listed).
Result<std::vector<pid_t>> cgroup_procs(const fs::path& cgroup_dir);

// A cgroup directory this process created and removes again. Movable.
class Cgroup {
 public:
  // mkdir <parent>/<name> and open it. Fails if it exists already.
  static Result<Cgroup> create(const fs::path& root, const fs::path& parent, const std::string& name);
  Cgroup() = default;
  Cgroup(Cgroup&&) noexcept;
  Cgroup& operator=(Cgroup&&) noexcept;
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;
  ~Cgroup();  // kill + remove, best effort; call remove() to see errors

  const fs::path& path() const { return path_; }
  uint64_t id() const { return id_; }
  unsigned level() const { return level_; }
  int fd() const { return dir_.get(); }

  // SIGKILL every process in the subtree (cgroup.kill, 5.14+; falls back to
  // signalling the pids in cgroup.procs, repeatedly, on older kernels).
  Status kill_all();
  // Kill, wait until the subtree is empty, remove child cgroups and this one.
  Status remove();

 private:
  fs::path path_;
  UniqueFd dir_;
  uint64_t id_ = 0;
  unsigned level_ = 0;
};

// Whether any process lives in the cgroup's subtree ("populated" in its
// cgroup.events); false when the cgroup is gone (ENOENT). Fails closed:
// true when cgroup.events cannot be read otherwise or says nothing of it.
bool populated(const fs::path& dir);
// The value of `key` in the text of a flat keyed cgroup file, "KEY VALUE"
// lines (cgroup.events, cgroup.stat, cpu.stat, memory.events); nothing
// when the key is missing or its value is not a number.
std::optional<uint64_t> keyed_value(std::string_view text, std::string_view key);

// How long the processes of a killed cgroup may take to disappear before
// kill_and_drain gives up. They are SIGKILLed, so this is not a grace period:
// it is slack for a loaded machine or an emulated CPU (the test VM), where
// exit and the cgroup's accounting of it can take seconds.
inline constexpr std::chrono::seconds kDrainLimit{30};

// SIGKILL every process in the subtree (again and again: forks racing the
// kill are caught too) until it is empty. EBUSY when processes survive
// kDrainLimit; they are still in the cgroup then.
Status kill_and_drain(const fs::path& dir);

// Remove a cgroup subtree (depth first), killing and draining it first.
Status remove_tree(const fs::path& dir);

// Start `child` in a new process placed in the cgroup open at `cgroup_fd`
// from its first instruction (clone3 + CLONE_INTO_CGROUP). Returns the pid.
// `child` runs in the new process and its return value is the exit status;
// it must only use async-signal-safe calls when the caller is multi-threaded.
// `clone_flags` are added to clone3's (e.g. CLONE_NEWIPC: the child starts in
// a new IPC namespace, which ends with its last process).
Result<pid_t> spawn_in_cgroup(int cgroup_fd, const std::function<int()>& child, uint64_t clone_flags = 0);

// Memory for a child's stack (spawn_in_cgroup_sharing_memory): a mapping
// with a guard page below it, unmapped when the object goes. The caller
// keeps it until the child has exec'd or exited.
class ChildStack {
 public:
  static Result<ChildStack> map(size_t size);
  ChildStack() = default;
  ChildStack(ChildStack&& o) noexcept;
  ChildStack& operator=(ChildStack&& o) noexcept;
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  ~ChildStack();
  // The usable part: from the guard page's end to the top.
  void* base() const;
  size_t size() const;

 private:
  void* map_ = nullptr;
  size_t len_ = 0;
};

// Whether spawn_in_cgroup_sharing_memory can work here (x86_64).
bool can_spawn_sharing_memory();

// spawn_in_cgroup, but the child shares the caller's memory until it execs
// or exits (CLONE_VM | CLONE_VFORK, as posix_spawn's child does): no page
// tables are copied and neither side takes copy-on-write faults. The
// calling thread waits until then (so the child never outlives what it
// reads, and the kernel never picks it as an out-of-memory victim, which
// would take the caller with it). `child(arg)` runs on `stack` with every
// signal blocked and must never return; until it execs it may make raw
// system calls only (util/raw_syscall.h): no allocation, no errno, nothing
// of the C library's state, and it must never wait for the caller. ENOSYS
// where the architecture is not supported (can_spawn_sharing_memory).
Result<pid_t> spawn_in_cgroup_sharing_memory(int cgroup_fd, const ChildStack& stack, void (*child)(void*),
                                             void* arg, uint64_t clone_flags = 0);

// waitpid until `pid` exits; returns the raw wait status.
Result<int> wait_for(pid_t pid);

}  // namespace agentcage::cgroup
