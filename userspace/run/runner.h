// SPDX-License-Identifier: Apache-2.0
// `agentcage run`: one execution in its own cgroup v2, confined by its policy
// from the first instruction, with limits, a timeout and nothing left behind.
//
// Lifecycle (see docs/run.md):
//   reap stale runs -> run record -> sandbox identity -> workspace -> cgroup
//   + limits -> policy slot + scope -> spawn into the cgroup (clone3
//   CLONE_INTO_CGROUP) -> child drops privileges and execs -> wait for the
//   main process, the timeout or a signal -> cgroup.kill -> wait until empty
//   -> stats + scope report -> remove scope, release policy, remove cgroup,
//   workspace and record -> result.
#pragma once

#include <signal.h>

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "bpf/enforcer.h"

#include "run/options.h"
#include "run/result.h"
#include "util/result.h"

namespace agentcage::run {

// Runs opts.command; returns agentcage's exit status (options.h). Messages go
// to `err`; the command's stdin/stdout/stderr are agentcage's own. `result`
// is filled as far as the run got, also when it fails.
int run_command(const RunOptions& opts, RunResult& result, std::ostream& err);

// run_command for a caller that is answered before the run's last removals
// (the daemon's runner): `deliver` is called once with agentcage's exit
// status as soon as the result is final -- COMMAND ended, the cgroup killed
// and drained, the measurements and reports taken, --io-dir copied back,
// the scope released. Then the run's empty cgroup, a fresh workspace that is
// not kept, its record and its uid go. Returns what could not be removed
// (empty: nothing is left; otherwise the record stays for the reaper).
std::vector<std::string> run_command_then_remove(const RunOptions& opts, RunResult& result, std::ostream& err,
                                                 const std::function<void(int code)>& deliver);

// The exit status of a runner of the daemon that was answered with its
// result (run_main) when something of the run could not be removed after
// the answer (0 when everything went).
inline constexpr int kExitLeftBehind = 1;

// Kill and remove what runs whose agentcage died left behind (their record's
// lock is free): cgroup, scope, policy slot, workspace, record. Messages
// (one line each) go to `err`. Used at every run's start and by the daemon.
void reap_stale_runs(bpf::Enforcer& enforcer, const Paths& paths, std::ostream& err);

// A spare run: what every run through the daemon needs, whatever it asks
// for, made by a spare runner of the daemon's fork server before its
// request arrives (daemon/run_forker.h): the run id and its record, a
// dynamic uid, an empty fresh workspace of that uid and an empty cgroup
// below the cgroup parent, with no scope and no process. `limits`: the
// limits (--memory, --pids, --cpu, --disk as a run's options) the run the
// daemon expects will have, written ahead: the cgroup's, and the
// workspace's tmpfs. The first run of this process takes it over (for a
// run that names its own --workspace or --user it is removed instead);
// what of the limits differs from its own it writes again (create_cgroup,
// prepare_workspace), and its policy and scope are its own, as always.
// Limits that are not valid are none (the run writes its own). An error
// (nothing is left then) when a step fails.
Status prepare_spare_run(const Paths& paths, const RunOptions& limits = {});
// Removes the spare run that no run took (the daemon stops, say); what
// could not be removed is left to the reaper (its record stays).
std::vector<std::string> discard_spare_run();
// The signals that end a run (SIGINT, SIGTERM, SIGHUP): a run blocks them
// and takes them through a signalfd, so that it removes what it made
// (run/steps.h: SignalGuard); a spare runner keeps them blocked into its run.
sigset_t run_ending_signals();

// run_command + writes --result FILE (atomically: a temporary file renamed)
// or --result-fd. A runner of the daemon (its notice channel adopted:
// control/notify.h, and --result-fd) uses run_command_then_remove: once
// its result is written it lets go of its stdin, stdout and stderr (the
// client's) and removes the rest; it then exits 0, or kExitLeftBehind.
int run_main(const RunOptions& opts, std::ostream& err);

}  // namespace agentcage::run
