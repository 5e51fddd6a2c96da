// SPDX-License-Identifier: Apache-2.0
#include "run/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>

#include "bpf/names.h"
#include "bpf/record.h"
#include "control/notify.h"
#include "run/result_sink.h"
#include "run/steps.h"
#include "util/unique_fd.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;

// What the run wrote last is still in the relay pipes (run/stdio.h) once its
// processes are gone (teardown); it goes out before agentcage's own lines.
void drain_stdio(Run& run) {
  if (!run.stdio) return;
  run.stdio->drain();
  run.res.output_truncated = run.stdio->truncated();
  for (const auto& p : run.stdio->problems()) run.err << "agentcage: warning: " << p << "\n";
  run.stdio.reset();
}

// Ends a run that failed before or instead of running its command: records
// and prints the failure and its fix, then removes what the run created.
int fail(Run& run, const Failure& f) {
  RunResult& res = run.res;
  if (f.code == kExitSetup) res.fail_closed_reason = f.closed;
  res.exit_code = f.code;
  res.error = f.reason;
  res.error_errno = f.err;
  run.err << "agentcage: " << f.reason << "\n";
  if (!f.fix.empty()) run.err << "agentcage: fix: " << f.fix << "\n";
  auto left = teardown(run.resources, res, false, std::nullopt, run.opts.keep);
  drain_stdio(run);
  for (const auto& p : left) run.err << "agentcage: cleanup: " << p << "\n";
  return f.code;
}

// After the main process ended: kill what remains, measure, report, remove
// everything; returns agentcage's exit status.
int finish(Run& run) {
  RunResult& res = run.res;
  std::ostream& err = run.err;
  auto left = teardown(run.resources, res, true, run.sampled_peak, run.opts.keep, run.defer_removal);
  drain_stdio(run);
  res.wall_time_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - run.started)
          .count());
  for (const auto& p : left) err << "agentcage: cleanup: " << p << "\n";
  if (res.workspace_error) err << "agentcage: warning: " << *res.workspace_error << "\n";
  if (res.io && res.io->error) err << "agentcage: warning: " << *res.io->error << "\n";
  if (!left.empty())
    err << "agentcage: the run was not fully removed; the next agentcage run retries (record in "
        << run.opts.paths.state_dir << "/runs)\n";

  res.exit_status = exited_code(run.wait_status);
  res.signal = killed_by(run.wait_status);
  res.exit_code = exit_code(Outcome{run.wait_status, res.timed_out, res.interrupted_by});
  if (res.timed_out)
    err << "agentcage: timed out after " << run.limits->timeout->count() << " ms: killed the run\n";
  else if (res.oom_killed && res.signal && *res.signal == SIGKILL)
    err << "agentcage: out of memory (limit "
        << (res.memory_max_bytes ? std::to_string(*res.memory_max_bytes) : "none")
        << " bytes): the run was OOM-killed\n";
  std::error_code ec;
  res.workspace_kept = !run.resources.workspace_removal_deferred && fs::exists(res.workspace, ec);
  return res.exit_code;
}

// What prepare_spare_run made, for the first run of this process.
struct SpareRun {
  RunOptions opts;
  RunResult res;
  Resources resources;
  uint64_t seed = 0;
  Identity identity;
  std::filesystem::path cgroup_root;
  policy::Limits limits;  // written to the cgroup and the workspace
};

std::unique_ptr<SpareRun>& spare_run() {
  static std::unique_ptr<SpareRun> spare;
  return spare;
}

// The spare run's record, uid, workspace and cgroup become this run's,
// before create_record; removed instead for a run that names its own
// workspace or identity.
Step adopt_spare(Run& run) {
  std::unique_ptr<SpareRun> spare = std::move(spare_run());
  if (!spare) return {};
  if (run.opts.workspace || run.opts.user) {
    auto left = teardown(spare->resources, spare->res, false, std::nullopt, false);
    for (const auto& p : left) run.err << "agentcage: cleanup: " << p << "\n";
    return {};
  }
  Resources& from = spare->resources;
  Resources& r = run.resources;
  r.lease = std::move(from.lease);
  r.record = std::move(from.record);
  r.uid_lease = std::move(from.uid_lease);
  r.workspace_created = from.workspace_created;
  r.cg = std::move(from.cg);
  run.seed = spare->seed;
  run.identity = spare->identity;
  run.cgroup_root = spare->cgroup_root;
  run.spare_limits = spare->limits;
  return {};
}

// The run, from its first step to its result (with run.defer_removal, up to
// the last removals).
int run_steps(Run& run) {
  // Each step creates what it needs in run.resources; the first failure
  // ends the run with its exit status, message, fix and fail-closed reason.
  using StepFn = Step (*)(Run&);
  // A runner of the daemon checks its request while the daemon takes its
  // pidfd; what it says meanwhile, even why its request fails, is held
  // until the go-ahead (run/policy_cache.h).
  Step checked = check_request(run);
  (void)await_go_ahead(run);
  // Whatever happens next, the spare run is this run's to use or remove.
  (void)adopt_spare(run);
  if (!checked) return fail(run, checked.failure());
  for (StepFn step : {check_root, block_signals, open_enforcement, create_record, choose_identity,
                      prepare_workspace, create_cgroup, fill_workspace, confine})
    if (Step st = step(run); !st) return fail(run, st.failure());

  std::optional<int> unstarted;
  int code;
  if (Step st = spawn(run, unstarted); !st) {
    code = fail(run, st.failure());
  } else if (unstarted) {
    code = *unstarted;
  } else {
    // While COMMAND starts (this process only waits for it).
    save_started_record(run);
    Step wst = wait_for_end(run);
    code = wst ? finish(run) : fail(run, wst.failure());
  }
  drain_stdio(run);  // after a child that never exec'd
  return code;
}

// The client's descriptors (0, 1, 2) are let go: /dev/null from here.
void release_stdio(std::ostream& err) {
  err.flush();
  std::cout.flush();
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) {
    for (int fd = 0; fd <= 2; ++fd) ::close(fd);
    return;
  }
  for (int fd = 0; fd <= 2; ++fd) (void)::dup2(null, fd);
  if (null > 2) ::close(null);
}

}  // namespace

Status prepare_spare_run(const Paths& paths, const RunOptions& limits) {
  auto spare = std::make_unique<SpareRun>();
  spare->opts.paths = paths;
  std::ostream quiet(nullptr);
  Run run(spare->opts, spare->res, quiet);
  run.resources.record.spare = true;
  // Limits that are not valid: none (no tmpfs, no controller); the run
  // writes its own. Each one the daemon states (a value or `unlimited`):
  // no policy's default applies.
  auto expected = effective_limits(policy::Limits{}, limits);
  run.limits = expected ? *expected : policy::Limits{};
  for (auto step : {check_root, create_record, choose_identity, prepare_workspace, create_cgroup})
    if (Step st = step(run); !st) {
      (void)teardown(run.resources, spare->res, false, std::nullopt, false);
      return Error{st.failure().reason, st.failure().err};
    }
  spare->resources = std::move(run.resources);
  spare->seed = run.seed;
  spare->identity = *run.identity;
  spare->cgroup_root = *run.cgroup_root;
  spare->limits = *run.limits;
  spare_run() = std::move(spare);
  return {};
}

std::vector<std::string> discard_spare_run() {
  std::unique_ptr<SpareRun> spare = std::move(spare_run());
  if (!spare) return {};
  return teardown(spare->resources, spare->res, false, std::nullopt, false);
}

int run_command(const RunOptions& opts, RunResult& res, std::ostream& err) {
  res.started_at = std::chrono::system_clock::now();
  res.labels = opts.labels;
  Run run(opts, res, err);
  return run_steps(run);
}

std::vector<std::string> run_command_then_remove(const RunOptions& opts, RunResult& res, std::ostream& err,
                                                 const std::function<void(int)>& deliver) {
  res.started_at = std::chrono::system_clock::now();
  res.labels = opts.labels;
  Run run(opts, res, err);
  run.defer_removal = true;
  deliver(run_steps(run));
  // What was left for after the result (teardown is safe to call again);
  // the run's signals stay blocked until it is done.
  return teardown(run.resources, res, false, std::nullopt, opts.keep);
}

int run_main(const RunOptions& opts, std::ostream& err) {
  // 0, 1 and 2 must be open: otherwise a pipe or lock agentcage opens could
  // land there and be handed to COMMAND as its stdin/stdout/stderr.
  if (!open_standard_fds()) return kExitSetup;
  // Where the result goes is settled before anything runs: a run whose
  // result cannot be delivered does not start.
  auto opened = ResultSink::for_options(opts.result_file, opts.result_fd);
  if (!opened) {
    err << "agentcage: " << opened.error().message << "\n";
    return kExitSetup;
  }
  ResultSink sink = std::move(*opened);
  control::adopt_notify_channel();
  RunResult res;
  bool delivered = false;
  auto deliver = [&](int code) {
    res.exit_code = code;
    res.ended_at = std::chrono::system_clock::now();
    control::notify_run_end(run_end_notice(res));
    // The result first: stderr is the caller's descriptor, where a write
    // may wait (a full pipe); the daemon's client is answered regardless.
    std::string problem;
    if (opts.result_file || opts.result_fd) {
      if (Status st = sink.write(result_text(res)); !st)
        problem = "agentcage: writing the result to " + sink.name() + ": " + st.error().message + "\n";
      else
        delivered = true;
    }
    err << denial_summary(res) << problem;
  };
  if (!control::notify_channel_adopted() || !opts.result_fd) {
    const int code = run_command(opts, res, err);
    deliver(code);
    return code;
  }
  // A runner of the daemon: its client is answered as soon as the result is
  // written, and its stdout and stderr end then, before the last removals.
  int code = kExitSetup;
  auto left = run_command_then_remove(opts, res, err, [&](int c) {
    code = c;
    deliver(c);
    release_stdio(err);
  });
  // Without a result the daemon answers with this exit status.
  if (!delivered) return code;
  return left.empty() ? 0 : kExitLeftBehind;
}

}  // namespace agentcage::run
