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

#include <iosfwd>

#include "bpf/enforcer.h"

#include "run/options.h"
#include "run/result.h"

namespace agentcage::run {

// Runs opts.command; returns agentcage's exit status (options.h). Messages go
// to `err`; the command's stdin/stdout/stderr are agentcage's own. `result`
// is filled as far as the run got, also when it fails.
int run_command(const RunOptions& opts, RunResult& result, std::ostream& err);

// Kill and remove what runs whose agentcage died left behind (their record's
// lock is free): cgroup, scope, policy slot, workspace, record. Messages
// (one line each) go to `err`. Used at every run's start and by the daemon.
void reap_stale_runs(bpf::Enforcer& enforcer, const Paths& paths, std::ostream& err);

// run_command + writes --result FILE (atomically: a temporary file renamed).
int run_main(const RunOptions& opts, std::ostream& err);

}  // namespace agentcage::run
