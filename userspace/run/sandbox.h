// SPDX-License-Identifier: Apache-2.0
// The child side of `agentcage run`: what happens between clone3 (the new
// process is already in the scoped cgroup) and exec of COMMAND.
//
// Everything the child needs is prepared by the parent (ChildPlan) so that the
// child only makes system calls: no allocation, no locks, no name lookups.
// Failures are reported to the parent as a ChildFailure on a CLOEXEC socket
// (SOCK_SEQPACKET: one message each); an EOF on it means exec succeeded.
// Before that, the child sends the seccomp listener on it
// (run/seccomp_notify.h).
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace agentcage::run {

// Steps of the child's setup, in the order they run. Values go over the report socket.
enum class ChildStep : int32_t {
  signals = 1,
  session,
  stdio,
  close_fds,
  chdir,
  rlimit_core,
  bounding_set,
  ambient_caps,
  securebits,
  setgroups,
  setgid,
  setuid,
  session_keyring,
  capabilities,
  no_new_privs,
  seccomp,
  // Also the message that carries the listener (err 0, SCM_RIGHTS).
  seccomp_listener,
  parent_death,
  exec,
};
const char* describe(ChildStep step);

struct ChildFailure {
  int32_t step = 0;  // ChildStep
  int32_t err = 0;   // errno
};

// Owns the strings; argv()/envp() point into them (valid while the plan lives).
class ChildPlan {
 public:
  ChildPlan(uid_t uid, gid_t gid, std::string workdir, std::vector<std::string> exec_paths,
            std::vector<std::string> argv, std::vector<std::string> envp, std::vector<sock_filter> seccomp,
            std::array<int, 3> stdio = {-1, -1, -1});
  ChildPlan(const ChildPlan&) = delete;
  ChildPlan& operator=(const ChildPlan&) = delete;

  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  const char* workdir() const { return workdir_.c_str(); }
  const std::vector<const char*>& exec_paths() const { return exec_ptrs_; }
  char* const* argv() const { return const_cast<char* const*>(argv_ptrs_.data()); }
  char* const* envp() const { return const_cast<char* const*>(envp_ptrs_.data()); }
  // The seccomp filter (run/seccomp.h), ready for SECCOMP_SET_MODE_FILTER.
  const sock_fprog* seccomp() const { return &seccomp_prog_; }
  // What the child makes its 0, 1, 2 (run/stdio.h), or -1 to keep its own.
  const std::array<int, 3>& stdio() const { return stdio_; }

 private:
  uid_t uid_;
  gid_t gid_;
  std::string workdir_;
  std::vector<std::string> exec_paths_, argv_, envp_;
  std::vector<const char*> exec_ptrs_, argv_ptrs_, envp_ptrs_;
  std::vector<sock_filter> seccomp_;
  sock_fprog seccomp_prog_{};
  std::array<int, 3> stdio_;
};

// Runs in the child; never returns. `report_fd` is the child's end of the
// CLOEXEC report socket, `parent` the parent's pid (for the parent-death check).
// Raw system calls only (util/raw_syscall.h): the child may share the
// parent's memory until it execs (cgroup::spawn_in_cgroup_sharing_memory).
[[noreturn]] void child_main(const ChildPlan& plan, int report_fd, pid_t parent);

// Whether COMMAND's process may start in agentcage's memory
// (cgroup::spawn_in_cgroup_sharing_memory): where the architecture allows
// it, and unless fs.suid_dumpable is 1. The identity change sets the
// child's dumpable flag to that value; 1 would leave it, and agentcage's
// memory, open to the sandbox user's ptrace until the exec (0 and 2 need
// CAP_SYS_PTRACE). A fork then; also when the value cannot be read.
bool child_may_share_memory();

// child_main's arguments for a child started with one pointer.
struct ChildStart {
  const ChildPlan* plan;
  int report_fd;
  pid_t parent;
};
// child_main(*start->plan, start->report_fd, start->parent); `arg` is a
// ChildStart, which must outlive the child's exec or exit.
[[noreturn]] void start_child(void* arg);

}  // namespace agentcage::run
