// SPDX-License-Identifier: Apache-2.0
// The steps of one `agentcage run` (run/runner.cpp runs them in order) and
// the state they share. Internal to run/.
//
//   check_request -> check_root -> block_signals -> open_enforcement ->
//   create_record -> choose_identity -> prepare_workspace -> create_cgroup
//   -> fill_workspace -> confine -> spawn -> wait_for_end -> teardown -> result
//
// A step either succeeds or returns a Failure: agentcage's exit status, the
// message, the fix, the errno and, for a refusal to run unconfined (125),
// the fail-closed reason. Everything a step creates goes into Resources,
// which teardown() (run/teardown.cpp) releases in one place.
#pragma once

#include <linux/filter.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bpf/compiled.h"
#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "core/fail_closed.h"
#include "policy/policy.h"
#include "run/artifacts.h"
#include "run/options.h"
#include "run/recording.h"
#include "run/result.h"
#include "run/sandbox.h"
#include "run/seccomp_notify.h"
#include "run/state.h"
#include "run/stdio.h"
#include "scope/scope.h"
#include "util/unique_fd.h"

namespace agentcage::run {

// Why a run stops before its command ran to its end.
struct Failure {
  int code = kExitSetup;
  std::string reason;  // printed as "agentcage: REASON"
  std::string fix;     // printed as "agentcage: fix: FIX" (when not empty)
  int err = 0;         // errno, for the result's error_errno
  // Set for refusals to run unconfined (agentcage_fail_closed_total{reason});
  // unset for usage errors.
  std::optional<core::FailClosedReason> closed;
};

// A step's result: success, or the Failure that ends the run.
class [[nodiscard]] Step {
 public:
  Step() = default;
  Step(Failure f) : failure_(std::move(f)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return !failure_; }
  explicit operator bool() const { return ok(); }
  const Failure& failure() const { return *failure_; }

 private:
  std::optional<Failure> failure_;
};

// Blocks the signals that end a run (taken through a signalfd) for the
// lifetime of the object and ignores SIGPIPE, so agentcage always gets to
// clean up. The child restores everything before exec.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  int fd() const { return fd_.get(); }
  // The first pending signal, or 0.
  int take() const;

 private:
  sigset_t set_{}, old_mask_{};
  struct sigaction old_pipe_ {};
  UniqueFd fd_;
};

// Everything a run creates, released in reverse order by teardown().
struct Resources {
  std::unique_ptr<bpf::Enforcer> enforcer;
  std::optional<RunLease> lease;
  RunRecord record;
  // The record's file is an adopted spare run's (run/runner.h), which
  // differs from `record` only in saying that the run started (spare,
  // started_unix_ms): everything in it is removed the same way. Saved
  // once COMMAND is on its way (save_started_record).
  bool record_start_unsaved = false;
  std::optional<UidLease> uid_lease;
  bool workspace_created = false;  // by agentcage (else: the caller's --workspace)
  // The caller's --workspace, opened when the run began: handed back through
  // this descriptor, never by a path that may lead elsewhere by then.
  UniqueFd callers_workspace;
  // teardown with `defer_removal` left the workspace to remove afterwards.
  bool workspace_removal_deferred = false;
  std::optional<cgroup::Cgroup> cg;
  std::optional<scope::Confinement> confinement;
  // The run's seccomp listener: answers and counts its denied calls until
  // teardown has killed the cgroup (run/seccomp_notify.h).
  std::optional<SyscallSupervisor> seccomp;
  // --record: every decision record of the run (run/recording.h), drained
  // while it runs and once more by teardown.
  std::unique_ptr<Recording> recording;
  // A policy with domain rules: the run's own resolver and its pins
  // (run/dns.h), serviced by the wait loop; its pins go with the scope.
  std::unique_ptr<RunDns> dns;
  // --io-dir: the caller's directory (opened as its owner) the workspace is
  // copied back into by teardown.
  UniqueFd io_dir;
  IoOwner io_owner;
};

// The state the steps share.
struct Run {
  Run(const RunOptions& o, RunResult& r, std::ostream& e) : opts(o), res(r), err(e) {}

  const RunOptions& opts;
  RunResult& res;
  std::ostream& err;
  Resources resources;

  // check_request
  std::string policy_path;
  std::optional<policy::Policy> policy;
  std::optional<policy::Limits> limits;
  std::optional<bpf::CompiledPolicy> compiled;
  std::optional<std::vector<sock_filter>> seccomp_filter;  // when prepared ahead; else spawn builds it
  // block_signals
  std::optional<SignalGuard> signals;
  // create_record, choose_identity
  uint64_t seed = 0;
  std::optional<Identity> identity;
  // create_cgroup: the cgroup2 mount (found once)
  std::optional<std::filesystem::path> cgroup_root;
  // The limits an adopted spare run (run/runner.h) wrote ahead to the
  // cgroup; the workspace's tmpfs is in the record (workspace_tmpfs_bytes).
  std::optional<policy::Limits> spare_limits;
  // spawn
  std::optional<StdioRelay> stdio;
  std::optional<pid_t> pid;
  // What COMMAND's process reads in this process's memory until it execs
  // or is gone (cgroup::spawn_in_cgroup_sharing_memory): its plan, its
  // arguments and its stack. Kept as long as the run.
  std::optional<ChildPlan> child_plan;
  std::optional<ChildStart> child_start;
  std::optional<cgroup::ChildStack> child_stack;
  UniqueFd pidfd;
  // The timeout's timerfd (none without one): armed before the clone, the
  // run's start counts (spawn in run/wait.cpp).
  UniqueFd timer;
  std::chrono::steady_clock::time_point started{};
  // wait_for_end
  int wait_status = 0;
  std::optional<uint64_t> sampled_peak;
  // finish: the last removals follow the result (run_command_then_remove).
  bool defer_removal = false;
};

// ---- setup (run/steps.cpp) --------------------------------------------------
// What to run, checked before anything is created: COMMAND, the policy,
// limits, --env, the compiled rules.
Step check_request(Run& run);
// A runner of the daemon's fork server waits here, after check_request
// whatever it found, for the daemon's go-ahead (run/policy_cache.h);
// without it, it exits 125 having created and written nothing.
Step await_go_ahead(Run& run);
Step check_root(Run& run);
Step block_signals(Run& run);
// The shared program set (the one prepared ahead when there is one:
// run/policy_cache.h); otherwise opens it and reaps stale runs.
Step open_enforcement(Run& run);
// The run id and its record (for the reaper, should agentcage die).
Step create_record(Run& run);
Step choose_identity(Run& run);
Step prepare_workspace(Run& run);
// The run's cgroup below the cgroup parent, with its limits.
Step create_cgroup(Run& run);
// --io-dir: the caller's directory copied into the workspace, by a child in
// the run's cgroup (run/artifacts.h).
Step fill_workspace(Run& run);
// The cgroup under the run's policy (scope/scope.h).
Step confine(Run& run);
// The record, when only its start is not saved yet (record_start_unsaved):
// off the way to COMMAND's start. A failure is a warning on `run.err`: the
// record on file still names everything the run holds.
void save_started_record(Run& run);

// ---- the process (run/wait.cpp) -------------------------------------------
// Tells the daemon the run started, then spawns COMMAND into the cgroup.
// When the child did not exec, the run is over: `unstarted` holds its exit
// status (already reported and torn down).
Step spawn(Run& run, std::optional<int>& unstarted);
// Waits for the main process to exit, the timeout or a signal to agentcage.
Step wait_for_end(Run& run);

// ---- teardown (run/teardown.cpp) ------------------------------------------
// Undo everything in `r`, newest first. With `collect`, first gather the
// measurements and the denial report into `res`. With `defer_removal`, stop
// before what the result does not depend on: the scope of the drained
// cgroup (its report read), the empty cgroup's directory, a fresh workspace
// that is not kept, the record and the uid stay for a later call. Returns what could not be removed (empty:
// nothing left behind but what was deferred). Safe to call again.
std::vector<std::string> teardown(Resources& r, RunResult& res, bool collect,
                                  std::optional<uint64_t> sampled_peak, bool keep_workspace,
                                  bool defer_removal = false);

}  // namespace agentcage::run
