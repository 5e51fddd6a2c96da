// SPDX-License-Identifier: Apache-2.0
// The run's process: spawned into the confined cgroup, then waited for
// until it exits, the timeout fires or agentcage is told to stop (run/steps.h).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "control/notify.h"
#include "run/runner.h"
#include "run/seccomp.h"
#include "run/steps.h"
#include "util/sys_names.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Failure internal(std::string reason, int err = 0) {
  return Failure{kExitSetup, std::move(reason), "", err, core::FailClosedReason::internal};
}

std::string describe_exec_failure(const std::string& command, int err, bool denied_by_policy,
                                  const std::string& policy_name) {
  std::string what = command + ": " + std::strerror(err);
  if (denied_by_policy) return what + " (exec denied by policy " + policy_name + ")";
  if (err == ENOENT) return what + " (not found in the sandbox PATH " + kSandboxPath + ")";
  if (err == ENOEXEC) return what + " (not an executable format; add a #! line)";
  return what;
}

// While COMMAND starts, the thread that spawns it waits in the kernel: in
// the clone (CLONE_VFORK: until the child has exec'd), or for the child's
// report (a fork). The exec may itself wait on a file system without end
// (a lookup of argv[0] on a FUSE mount whose server does not answer), so
// this watch takes the timeout and the signals that end a run meanwhile: it
// kills the run's cgroup (the exec's wait ends with the child) and says
// which came. It reads neither: the expired timer and the signal stay
// pending for the thread that spawns.
class StartWatch {
 public:
  enum class Ended { no, timeout, signal };
  // `timer`: the run's timerfd, or -1 without a timeout; `signals`: its
  // SignalGuard's signalfd (the signals are blocked in every thread).
  static Result<std::unique_ptr<StartWatch>> start(int timer, int signals, cgroup::Cgroup& cg) {
    auto watch = std::unique_ptr<StartWatch>(new StartWatch());
    watch->cancel_.reset(::eventfd(0, EFD_CLOEXEC));
    if (!watch->cancel_) return Error::from_errno("eventfd for the watch of COMMAND's start");
    try {
      watch->thread_ = std::thread([w = watch.get(), timer, signals, &cg] { w->watch(timer, signals, cg); });
    } catch (const std::system_error& e) {
      return Error{"starting the watch of COMMAND's start: " + std::string(e.what()), e.code().value()};
    }
    return watch;
  }
  ~StartWatch() { (void)stop(); }
  StartWatch(const StartWatch&) = delete;
  StartWatch& operator=(const StartWatch&) = delete;
  // Ends the watch; what it saw come first.
  Ended stop() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      (void)!::write(cancel_.get(), &one, sizeof one);
      thread_.join();
    }
    return ended_.load();
  }

 private:
  StartWatch() = default;
  void watch(int timer, int signals, cgroup::Cgroup& cg) {
    pollfd fds[3] = {{cancel_.get(), POLLIN, 0}, {timer, POLLIN, 0}, {signals, POLLIN, 0}};
    while (::poll(fds, 3, -1) < 0)
      if (errno != EINTR) return;  // (unwatched, as before)
    if (fds[0].revents) return;
    // A signal first, as wait_for_end takes it.
    ended_.store((fds[2].revents & POLLIN) ? Ended::signal : Ended::timeout);
    // Again and again until stopped: a kill while the cgroup is still
    // empty (before the clone) would miss the child.
    do (void)cg.kill_all();
    while (::poll(fds, 1, 50) <= 0);
  }

  UniqueFd cancel_;
  std::atomic<Ended> ended_{Ended::no};
  std::thread thread_;
};

// The child did not exec: it reported why (`got` bytes of `report`), or
// died trying, or the watch of its start ended it (`ended`). Tears the run
// down and reports; returns agentcage's status.
int report_unstarted(Run& run, ssize_t got, const ChildFailure& report, StartWatch::Ended ended) {
  RunResult& res = run.res;
  (void)cgroup::wait_for(*run.pid);
  auto left = teardown(run.resources, res, true, std::nullopt, run.opts.keep);
  for (const auto& p : left) run.err << "agentcage: cleanup: " << p << "\n";
  res.wall_time_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - run.started).count());
  if (ended != StartWatch::Ended::no) {
    // Not a failure of the sandbox: the run ended before COMMAND started,
    // as it would have after.
    if (ended == StartWatch::Ended::timeout) {
      res.timed_out = true;
      res.exit_code = kExitTimeout;
      res.error = "timed out after " + std::to_string(run.limits->timeout->count()) +
                  " ms while COMMAND was starting: killed the run";
    } else {
      const int sig = run.signals->take();
      res.interrupted_by = sig;
      res.exit_code = sig ? 128 + sig : kExitSetup;
      res.error = "interrupted by " + (sig ? signal_name(sig) : std::string("a signal")) +
                  " while COMMAND was starting: ended the run";
    }
    run.err << "agentcage: " << res.error << "\n";
    return res.exit_code;
  }
  if (got == static_cast<ssize_t>(sizeof report) && report.step == static_cast<int32_t>(ChildStep::exec)) {
    // The child did nothing but exec, so any denial in its scope is the
    // exec's: bprm_check_security (exec) or the open of the program file
    // (file_open, when the policy does not let it read the file).
    const bool denied = res.report && res.report->denied_total() > 0;
    int code = denied ? kExitCannotExec : exit_code_for_exec_errno(report.err);
    res.exit_code = code;
    res.error = describe_exec_failure(run.opts.command[0], report.err, denied, run.policy->name);
    res.error_errno = report.err;
    run.err << "agentcage: " << res.error << "\n";
    return code;
  }
  // The child could not take on its restrictions (identity, capabilities,
  // no_new_privs, ...): COMMAND never ran, and the refusal is counted.
  Failure f{kExitSetup, "sandbox setup failed", "", 0, core::FailClosedReason::sandbox};
  if (got == static_cast<ssize_t>(sizeof report)) {
    f.reason += " while " + std::string(describe(static_cast<ChildStep>(report.step))) + ": " +
                std::strerror(report.err);
    f.err = report.err;
  } else {
    f.reason += ": the child died before reporting";
  }
  res.exit_code = f.code;
  res.error = f.reason;
  res.error_errno = f.err;
  res.fail_closed_reason = f.closed;
  run.err << "agentcage: " << f.reason << "\n";
  return f.code;
}

std::optional<std::string> read_text(const fs::path& p) {
  auto r = cgroup::read_file(p);
  if (!r) return std::nullopt;
  return *r;
}

// child_main's frames are small; the rest is room to spare.
constexpr size_t kChildStackBytes = 64 * 1024;

}  // namespace

sigset_t run_ending_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  return set;
}

SignalGuard::SignalGuard() : set_(run_ending_signals()) {
  ::sigprocmask(SIG_BLOCK, &set_, &old_mask_);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old_pipe_);
  fd_.reset(::signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK));
}

SignalGuard::~SignalGuard() {
  // The run is over: ending signals still pending (a second ^C, a SIGHUP
  // after a SIGTERM) have nothing left to end, and unblocked they would
  // kill agentcage before it reports.
  signalfd_siginfo si{};
  while (fd_ && ::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
  }
  fd_.reset();
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

int SignalGuard::take() const {
  signalfd_siginfo si{};
  if (fd_ && ::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
    return static_cast<int>(si.ssi_signo);
  return 0;
}

Step spawn(Run& run, std::optional<int>& unstarted) {
  Resources& r = run.resources;
  RunResult& res = run.res;
  control::notify_run_start(res.run_id, res.policy_name, res.scope_id, res.labels);

  auto env = sandbox_environment(r.record.workspace, run.opts.env);
  if (!env) return internal(env.error().message);
  auto filter = run.seccomp_filter ? Result<std::vector<sock_filter>>(std::move(*run.seccomp_filter))
                                   : build_seccomp_filter(run.policy->syscalls_allow);
  if (!filter) return internal(filter.error().message);
  auto relay = StdioRelay::prepare(res.disk_max_bytes, run.identity->uid, run.identity->gid);
  if (!relay) return internal(relay.error().message, relay.error().code);
  run.stdio = std::move(*relay);
  // (The run's, not this function's: the child may read it in this
  // process's memory until it has exec'd or is gone.)
  const ChildPlan& plan =
      run.child_plan.emplace(run.identity->uid, run.identity->gid, r.record.workspace,
                             exec_candidates(run.opts.command[0], kSandboxPath), run.opts.command,
                             std::move(*env), std::move(*filter), run.stdio->child_fds());
  if (int sig = run.signals->take()) {
    res.interrupted_by = sig;
    return Failure{128 + sig, "interrupted by " + signal_name(sig) + " before COMMAND started", "", 0,
                   core::FailClosedReason::internal};
  }
  // The report channel: a socket, so that the child can pass the seccomp
  // listener over it; one message per report.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return internal("socketpair: " + std::string(std::strerror(errno)));
  UniqueFd report_rd(sv[0]), report_wr(sv[1]);
  const pid_t self = ::getpid();
  // The timeout counts from here, as the run's wall time does: the start is
  // the run's too.
  run.started = Clock::now();
  if (run.limits->timeout) {
    run.timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
    itimerspec its{};
    const auto ms = run.limits->timeout->count();
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (ms % 1000) * 1000000;
    if (!run.timer || ::timerfd_settime(run.timer.get(), 0, &its, nullptr) != 0)
      return internal("timerfd: " + std::string(std::strerror(errno)), errno);
  }
  auto watch = StartWatch::start(run.timer ? run.timer.get() : -1, run.signals->fd(), *r.cg);
  if (!watch) return internal(watch.error().message, watch.error().code);
  // A new IPC namespace: the run's System V IPC objects and message queues
  // are its own (the scope allows only those: AC_SCOPE_F_OWN_IPC, set by
  // confine) and go with the namespace when its last process ends.
  // Where it can, the child shares this process's memory until it execs,
  // and this thread waits meanwhile: no copy of this process's page
  // tables, no copy-on-write faults on either side (child_main makes raw
  // system calls only). Else a fork.
  Result<pid_t> pid = Error{"", 0};
  if (child_may_share_memory()) {
    auto stack = cgroup::ChildStack::map(kChildStackBytes);
    if (!stack) return internal(stack.error().message, stack.error().code);
    run.child_stack = std::move(*stack);
    ChildStart& start = run.child_start.emplace(ChildStart{&plan, report_wr.get(), self});
    pid = cgroup::spawn_in_cgroup_sharing_memory(r.cg->fd(), *run.child_stack, start_child, &start,
                                                 CLONE_NEWIPC);
  } else {
    pid = cgroup::spawn_in_cgroup(
        r.cg->fd(), [&]() -> int { child_main(plan, report_wr.get(), self); }, CLONE_NEWIPC);
  }
  if (!pid) {
    if ((*watch)->stop() == StartWatch::Ended::signal)
      if (int sig = run.signals->take()) {
        res.interrupted_by = sig;
        return Failure{128 + sig, "interrupted by " + signal_name(sig) + " before COMMAND started", "", 0,
                       core::FailClosedReason::internal};
      }
    return internal(pid.error().message, pid.error().code);
  }
  run.pid = *pid;
  report_wr.reset();
  run.stdio->close_child_ends();
  run.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, *pid, 0)));

  ChildFailure report{};
  ssize_t got;
  for (;;) {
    UniqueFd passed;
    report = ChildFailure{};
    got = receive_report(report_rd.get(), &report, sizeof report, passed);
    const bool listener_message = got == static_cast<ssize_t>(sizeof report) &&
                                  report.step == static_cast<int32_t>(ChildStep::seccomp_listener) &&
                                  report.err == 0;
    if (!listener_message) break;
    // The listener, exactly once. Else the run ends here: whatever of
    // COMMAND started meanwhile, its denied calls waited for the listener
    // (or fail with ENOSYS once it is gone with this socket).
    if (!passed || r.seccomp) {
      report = ChildFailure{static_cast<int32_t>(ChildStep::seccomp_listener), passed ? EPROTO : EBADMSG};
      got = sizeof report;
      (void)r.cg->kill_all();
      break;
    }
    r.seccomp.emplace(std::move(passed));
  }
  report_rd.reset();
  // What ended the start, unless the child's own report says (a failure it
  // met at the same moment is its to report).
  const StartWatch::Ended watched = (*watch)->stop();
  const StartWatch::Ended ended =
      got == static_cast<ssize_t>(sizeof report) ? StartWatch::Ended::no : watched;
  if (got == 0 && !r.seccomp) {
    // exec without a listener cannot happen (the child sends it first);
    // should it, the run ends here.
    (void)r.cg->kill_all();
    report = ChildFailure{static_cast<int32_t>(ChildStep::seccomp_listener), EPROTO};
    got = sizeof report;
  }
  if (got != 0 || ended != StartWatch::Ended::no) {
    // Not started, whatever was said: nothing of the run goes on without
    // agentcage watching it. A child that reported a failure exits anyway;
    // one whose report was lost (a receive error) may have exec'd: its
    // cgroup is killed before agentcage waits for it. So is the run the
    // watch ended: its exec had not finished when the timeout or the
    // signal came, or had only just (COMMAND killed at once).
    (void)r.cg->kill_all();
    unstarted = report_unstarted(run, got, report, ended);
  } else {
    res.started = true;
  }
  return {};
}

Step wait_for_end(Run& run) {
  Resources& r = run.resources;
  RunResult& res = run.res;
  const SignalGuard& signals = *run.signals;
  const pid_t pid = *run.pid;
  const UniqueFd& timer = run.timer;  // armed by spawn
  std::error_code peak_ec;
  const bool have_peak_file = fs::exists(r.cg->path() / "memory.peak", peak_ec);
  bool reaped = false;
  while (!reaped) {
    // The run's exit, signals, the timeout, the seccomp listener (index 3,
    // -1 when there is none: poll skips it), the recording (index 4, the
    // same), the run's resolver (index 5, the same), then the stdio relay's
    // pipes.
    std::vector<pollfd> fds = {{signals.fd(), POLLIN, 0},
                               {run.pidfd.get(), POLLIN, 0},
                               {timer.get(), POLLIN, 0},
                               {r.seccomp ? r.seccomp->poll_fd() : -1, POLLIN, 0},
                               {r.recording ? r.recording->poll_fd() : -1, POLLIN, 0},
                               {r.dns ? r.dns->poll_fd() : -1, POLLIN, 0}};
    if (run.stdio) run.stdio->add_poll_fds(fds);
    // Without a pidfd (kernel < 5.3) poll for the exit every 50 ms.
    int wait_ms = !run.pidfd ? 50 : have_peak_file ? -1 : 100;
    int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n > 0 && run.stdio) run.stdio->pump(fds);
    if (n < 0 && errno != EINTR) {
      (void)r.cg->kill_all();
    }
    // Each reason to end the run kills it first, then says so: the message
    // goes to a descriptor the caller holds (a full pipe, a stopped
    // terminal), where the write may wait; the run must not.
    if (fds[0].revents & POLLIN) {
      const int sig = signals.take();
      (void)r.cg->kill_all();
      if (sig && !res.timed_out && res.interrupted_by == 0) {
        res.interrupted_by = sig;
        run.err << "agentcage: " << signal_name(sig) << " received: ending the run\n";
      }
    }
    if (fds[3].revents && !r.seccomp->answer_pending()) {
      // The listener broke: the run's denied calls would go uncounted.
      const int err = errno;
      (void)r.cg->kill_all();
      run.err << "agentcage: the seccomp listener failed: " << std::strerror(err) << ": ending the run\n";
    }
    if (fds[4].revents && r.recording) {
      if (Status st = r.recording->drain(); !st) {
        // A recording that cannot be read would be silently incomplete.
        (void)r.cg->kill_all();
        run.err << "agentcage: reading the recording failed: " << st.error().message << ": ending the run\n";
      }
    }
    if (fds[5].revents && r.dns) r.dns->service();
    if (fds[2].revents & POLLIN) {
      uint64_t expirations = 0;
      (void)!::read(timer.get(), &expirations, sizeof expirations);
      if (res.interrupted_by == 0) res.timed_out = true;
      (void)r.cg->kill_all();
    }
    if (!have_peak_file) {
      if (auto cur = read_text(r.cg->path() / "memory.current")) {
        uint64_t v = 0;
        std::istringstream(*cur) >> v;
        if (!run.sampled_peak || v > *run.sampled_peak) run.sampled_peak = v;
      }
    }
    pid_t w = ::waitpid(pid, &run.wait_status, WNOHANG);
    if (w == pid)
      reaped = true;
    else if (w < 0 && errno != EINTR) {
      run.err << "agentcage: waitpid: " << std::strerror(errno) << "\n";
      break;
    }
  }
  return {};
}

}  // namespace agentcage::run
