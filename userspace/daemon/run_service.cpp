// SPDX-License-Identifier: Apache-2.0
#include "daemon/run_service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "policy/locate.h"
#include "policy/values.h"
#include "run/options.h"
#include "util/log.h"
#include "util/mountinfo.h"

namespace agentcage::daemon {
namespace {

using nlohmann::json;

// waitid()'s P_PIDFD (Linux 5.4), which not every libc names.
constexpr int kPidfdIdType = 3;

// A result document larger than this is not a result (the runner's are a few KiB).
constexpr size_t kMaxResultBytes = 4u << 20;
// A notice larger than this is not one (they are a few hundred bytes, labels included).
constexpr size_t kMaxNoticeBytes = 64u << 10;

json refusal(const std::string& why) { return {{"ok", false}, {"error", why}, {"exit_code", 125}}; }

std::string bytes_text(uint64_t v) { return std::to_string(v); }
std::string pids_text(uint32_t v) { return std::to_string(v); }
std::string timeout_text(std::chrono::milliseconds v) { return std::to_string(v.count()) + "ms"; }
std::string cpus_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// One limit: the effective value lowered to the cap, as text (or "unlimited").
template <class T, class Format>
Status cap_one(const char* name, const char* key, std::optional<T> effective, const std::optional<T>& cap,
               const std::optional<std::string>& asked, Format format, std::optional<std::string>& out) {
  if (cap && (!effective || *effective > *cap)) {
    if (asked)
      return Error{"limit " + std::string(name) + " " + *asked + " is over this daemon's cap of " +
                       format(*cap) + " (" + key + " in its configuration)",
                   EPERM};
    effective = cap;
  }
  out = effective ? format(*effective) : std::string(policy::kUnlimited);
  return {};
}

// What the client passes as the run's stdin, stdout and stderr must be
// descriptions it may use that way: the runner (root) reopens a regular
// file stdin read-only (run/stdio.h), which must grant nothing the client's
// own description does not. So no O_PATH descriptor (no read right at all),
// stdin readable, stdout and stderr writable, nothing of procfs or sysfs
// (files whose open checks the opener, root here), and no FUSE file.
std::string stdio_refusal(const std::vector<UniqueFd>& stdio) {
  static const char* const kNames[] = {"stdin", "stdout", "stderr"};
  std::optional<std::vector<MountEntry>> mounts;  // read once, if a file needs it
  for (size_t i = 0; i < stdio.size() && i < 3; ++i) {
    const int flags = ::fcntl(stdio[i].get(), F_GETFL);
    const std::string name = kNames[i];
    if (flags < 0) return "the descriptor passed as " + name + " is not open";
    if (flags & O_PATH)
      return "the descriptor passed as " + name + " is an O_PATH descriptor: pass one open for " +
             (i == 0 ? "reading" : "writing");
    const int mode = flags & O_ACCMODE;
    if (i == 0 && mode == O_WRONLY) return "the descriptor passed as stdin is not open for reading";
    if (i > 0 && mode == O_RDONLY) return "the descriptor passed as " + name + " is not open for writing";
    // Nothing here may ask a file system anything: a FUSE server answers
    // when it likes (fstatfs and a stat that refreshes its attributes ask
    // it, when the daemon may reach it: allow_other), and this is the loop.
    // statx answers from the cache; with no field asked for, a FUSE file
    // system that does not let the daemon in answers too (the type and the
    // mount are filled in all the same).
    struct statx sx {};
    if (::statx(stdio[i].get(), "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, 0, &sx) != 0)
      return "the descriptor passed as " + name + " cannot be examined: " + std::strerror(errno);
    // A pipe, socket or device node is its own, on whatever file system.
    if (!S_ISREG(sx.stx_mode) && !S_ISDIR(sx.stx_mode)) continue;
    if (!(sx.stx_mask & STATX_MNT_ID))
      return "the descriptor passed as " + name + " cannot be examined: the kernel gave no mount id";
    if (!mounts) {
      auto table = read_mountinfo();
      if (!table) return "the descriptor passed as " + name + " cannot be examined: " + table.error().message;
      mounts = std::move(*table);
    }
    const std::optional<std::string> type = fs_type_of_mount(*mounts, sx.stx_mnt_id);
    // Detached, or mounted in another mount namespace: its file system is
    // not known without asking it.
    if (!type)
      return "the descriptor passed as " + name +
             " is a file of a mount the daemon does not see (detached, or of another mount namespace): pass "
             "a "
             "pipe, or a file of a file system mounted in the daemon's namespace";
    if (*type == "proc" || *type == "sysfs")
      return "the descriptor passed as " + name +
             " is a file of /proc or /sys: pass a file, pipe or terminal";
    // Each close of a FUSE file waits for its server's answer to FLUSH,
    // in any process: the daemon's closes and the run's start would wait.
    if (*type == "fuse" || *type == "fuseblk" || *type == "virtiofs" || type->rfind("fuse.", 0) == 0 ||
        type->rfind("fuseblk.", 0) == 0)
      return "the descriptor passed as " + name +
             " is a file of a FUSE file system, whose server decides how long closing it takes: pass a pipe, "
             "or a file of another file system";
  }
  return "";
}

pid_t pidfd_open(pid_t pid) { return static_cast<pid_t>(::syscall(SYS_pidfd_open, pid, 0)); }

// A runner by fork + exec of this binary (when there is no fork server):
// the same words, environment and descriptors as the fork server's.
Result<Runner> exec_runner(std::vector<std::string> args, std::vector<std::string> env,
                           const int fds[kRunnerFds], const rlimit& nofile) {
  // Everything the child needs is built before fork: after it, only system calls.
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Error::from_errno("fork");
  if (pid == 0) {
    // The runner ends its run when the daemon dies.
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(125);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setrlimit(RLIMIT_NOFILE, &nofile);  // the daemon's own is raised (daemon/closer.h)
    if (!install_runner_fds(fds)) ::_exit(125);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    ::_exit(125);
  }
  UniqueFd pidfd(pidfd_open(pid));
  if (!pidfd) {
    const int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return Error{std::string("pidfd_open: ") + std::strerror(err), err};
  }
  return Runner{std::move(pidfd), pid};
}

}  // namespace

namespace {

// Limits as text (a request's, or capped ones) as a run's options take them.
run::RunOptions limit_options(const control::RunLimits& limits) {
  run::RunOptions o;
  o.timeout = limits.timeout;
  o.memory = limits.memory;
  o.pids = limits.pids;
  o.cpu = limits.cpu;
  o.disk = limits.disk;
  return o;
}

}  // namespace

Result<control::RunLimits> capped_limits(const policy::Limits& policy_limits, const control::RunLimits& asked,
                                         const policy::Limits& caps) {
  auto eff = run::effective_limits(policy_limits, limit_options(asked));
  if (!eff) return eff.error();
  control::RunLimits out;
  if (Status s = cap_one("memory", "run_max_memory", eff->memory_bytes, caps.memory_bytes, asked.memory,
                         bytes_text, out.memory);
      !s)
    return s.error();
  if (Status s = cap_one("pids", "run_max_pids", eff->pids, caps.pids, asked.pids, pids_text, out.pids); !s)
    return s.error();
  if (Status s = cap_one("cpu", "run_max_cpu", eff->cpus, caps.cpus, asked.cpu, cpus_text, out.cpu); !s)
    return s.error();
  if (Status s = cap_one("timeout", "run_max_timeout", eff->timeout, caps.timeout, asked.timeout,
                         timeout_text, out.timeout);
      !s)
    return s.error();
  if (Status s =
          cap_one("disk", "run_max_disk", eff->disk_bytes, caps.disk_bytes, asked.disk, bytes_text, out.disk);
      !s)
    return s.error();
  return out;
}

RunService::RunService(const Config& cfg, EventLoop& loop, Finish finish, Notice notice, Closer& closer,
                       RunForker* forker)
    : cfg_(cfg),
      loop_(loop),
      finish_(std::move(finish)),
      notice_(std::move(notice)),
      closer_(closer),
      forker_(forker) {
  ::getrlimit(RLIMIT_NOFILE, &nofile_);
}

size_t RunService::active() const { return runs_.size(); }

std::optional<std::string> RunService::over_cap(uid_t uid, bool count_removing) const {
  size_t all = 0, mine = 0;
  for (const auto& [fd, r] : runs_) {
    if (r.answered && !count_removing) continue;
    ++all;
    mine += r.uid == uid;
  }
  if (all >= cfg_.max_runs)
    return "too many runs through the daemon (max_runs " + std::to_string(cfg_.max_runs) +
           "): try again when one has ended";
  if (mine >= cfg_.max_runs_per_client)
    return "too many runs of uid " + std::to_string(uid) + " (max_runs_per_client " +
           std::to_string(cfg_.max_runs_per_client) + "): try again when one has ended";
  return std::nullopt;
}

RunService::~RunService() {
  for (Parked& p : parked_) closer_.close(p.peer.uid, p.stdio);
  if (spare_) drop_spare(std::chrono::seconds(1), false);
  for (auto& [fd, r] : runs_) {
    ::kill(r.pid, SIGKILL);
    // Reaped if it has gone; never waited for (one may be held: stop_all).
    siginfo_t info{};
    (void)::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(fd), &info, WEXITED | WNOHANG);
  }
}

std::optional<json> RunService::start(const control::Request& req, const Peer& peer,
                                      std::vector<UniqueFd>& stdio,
                                      const std::optional<policy::Limits>& limits) {
  if (!limits)
    return refusal("no policy named '" + req.policy + "' is loaded by the daemon (policy dir " +
                   cfg_.policy_dir + "; `agentcage status` lists them)");
  if (auto why = over_cap(peer.uid, true)) {
    size_t removing = 0;
    for (const auto& [fd, r] : runs_) removing += r.answered;
    if (!over_cap(peer.uid, false) && parked_.size() < removing) {
      parked_.push_back(Parked{req, peer, std::move(stdio), limits});
      return std::nullopt;
    }
    return refusal(*why);
  }
  return launch(req, peer, stdio, *limits);
}

void RunService::retry_parked() {
  std::deque<Parked> waiting;
  waiting.swap(parked_);
  for (Parked& p : waiting) {
    const uint64_t client = p.peer.id;
    if (auto reply = start(p.request, p.peer, p.stdio, p.limits)) finish_(client, *reply);
    closer_.close(p.peer.uid, p.stdio);
  }
}

std::optional<json> RunService::launch(const control::Request& req, const Peer& peer,
                                       const std::vector<UniqueFd>& stdio, const policy::Limits& limits) {
  auto capped = capped_limits(limits, req.limits, cfg_.run_caps);
  if (!capped) return refusal(capped.error().message);
  if (std::string why = stdio_refusal(stdio); !why.empty()) return refusal(why);

  // Each option with its value in one "--name=value" word, so that
  // no value a client chose (an env entry "--user", say) can be read as an
  // option; COMMAND and its arguments come after "--".
  for (const auto& e : req.env)
    if (auto kv = run::parse_env_assignment(e); !kv) return refusal("env: " + kv.error().message);
  std::vector<std::string> args = {"agentcage", "run", "--policy=" + req.policy,
                                   "--policy-dir=" + cfg_.policy_dir};
  auto limit = [&args](const char* flag, const std::optional<std::string>& v) {
    if (v) args.push_back(std::string(flag) + "=" + *v);
  };
  limit("--memory", capped->memory);
  limit("--pids", capped->pids);
  limit("--cpu", capped->cpu);
  limit("--timeout", capped->timeout);
  limit("--disk", capped->disk);
  for (const auto& e : req.env) args.push_back("--env=" + e);
  for (const auto& [k, v] : req.labels) args.push_back("--label=" + k + "=" + v);
  if (!req.workspace.empty()) {
    args.push_back("--io-dir=" + req.workspace);
    args.push_back("--io-owner=" + std::to_string(peer.uid) + ":" + std::to_string(peer.gid));
  }
  args.insert(args.end(), {"--result-fd=3", "--"});
  args.insert(args.end(), req.argv.begin(), req.argv.end());
  const std::vector<std::string> env = runner_env();
  // The server prepares the policy (run/policy_cache.h) for the runner
  // to inherit; the runner resolves --policy and --policy-dir the same way.
  auto resolved = policy::resolve_policy(req.policy, cfg_.policy_dir);
  const std::string policy_file = resolved ? *resolved : std::string();
  Result<Runner> runner = Error{"", 0};
  UniqueFd result_read, notices;
  if (spare_) {
    // The spare, prepared ahead, takes this run; one that cannot (gone
    // meanwhile) is let go, and a runner is started as below.
    SpareRunner spare = std::move(*spare_);
    spare_.reset();
    loop_.remove(spare.runner.pidfd.get());
    const int mine[3] = {stdio[0].get(), stdio[1].get(), stdio[2].get()};
    if (Status st = RunForker::hand_over(spare, args, mine); st) {
      runner = std::move(spare.runner);
      result_read = std::move(spare.result);
      notices = std::move(spare.notices);
    } else {
      // (A spare that is gone failed to prepare its run, as in
      // spare_exited: no spare for a while.)
      log::warn("spare runner pid " + std::to_string(spare.runner.pid) + ": " + st.error().message +
                "; starting a runner instead, and runs start without a spare for " +
                std::to_string(kSparePause.count()) + " s");
      spares_paused_until_ = std::chrono::steady_clock::now() + kSparePause;
      ::kill(spare.runner.pid, SIGKILL);
      // Reaped by the loop once it has gone (never a wait here), then what
      // it made is reaped.
      const int key = spare.runner.pidfd.get();
      dying_[key] = std::move(spare.runner.pidfd);
      loop_.add(key, EPOLLIN, [this, key](uint32_t) {
        siginfo_t info{};
        if (::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(key), &info, WEXITED | WNOHANG) !=
                0 ||
            info.si_pid == 0)
          return;
        loop_.remove(key);
        dying_.erase(key);
        if (left_behind_) left_behind_();
      });
    }
  }
  if (!runner) {
    auto channels = runner_channels();
    if (!channels) return refusal("the daemon could not start the run: " + channels.error().message);
    result_read = std::move(channels->result);
    notices = std::move(channels->notices);
    const int fds[kRunnerFds] = {stdio[0].get(), stdio[1].get(), stdio[2].get(),
                                 channels->result_runner.get(), channels->notices_runner.get()};
    if (forker_ && forker_->running()) {
      runner = forker_->spawn(args, env, fds, policy_file);
      if (!runner && forker_->running())
        return refusal("the daemon could not start the run: " + runner.error().message);
    }
    if (!runner) runner = exec_runner(args, env, fds, nofile_);  // no fork server (any more)
    if (!runner) return refusal("the daemon could not start the run: " + runner.error().message);
  }
  const pid_t pid = runner->pid;
  UniqueFd pidfd = std::move(runner->pidfd);
  ::fcntl(result_read.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(notices.get(), F_SETFL, O_NONBLOCK);
  const int key = pidfd.get();
  Running& r = runs_[key];
  r.client = peer.id;
  r.uid = peer.uid;
  r.pid = pid;
  r.pidfd = std::move(pidfd);
  r.result = std::move(result_read);
  r.notices = std::move(notices);
  loop_.add(r.notices.get(), EPOLLIN, [this, key](uint32_t) {
    if (auto it = runs_.find(key); it != runs_.end()) read_notices(it->second);
  });
  loop_.add(r.result.get(), EPOLLIN, [this, key](uint32_t) {
    if (auto it = runs_.find(key); it != runs_.end()) read_result(it->second);
  });
  loop_.add(key, EPOLLIN, [this, key](uint32_t) { reaped(key); });
  log::info("run for uid " + std::to_string(peer.uid) + " (pid " + std::to_string(peer.pid) +
            ") under policy " + req.policy + ": runner pid " + std::to_string(pid));
  // The next run's spare (made once this run is answered: answer()), with
  // this run's policy prepared and its limits written (a client calls again
  // as it did).
  spare_policy_file_ = policy_file;
  spare_limits_ = limit_options(*capped);
  return std::nullopt;
}

std::vector<std::string> RunService::runner_env() const {
  std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "AGENTCAGE_POLICY_DIR=" + cfg_.policy_dir,
                                  "AGENTCAGE_CGROUP_PARENT=" + cfg_.run_parent(),
                                  "AGENTCAGE_STATE_DIR=" + cfg_.state_dir,
                                  "AGENTCAGE_CONTROL_SOCKET=" + cfg_.control_socket,
                                  "AGENTCAGE_NOTIFY_FD=" + std::to_string(kRunnerFds - 1)};
  if (const char* root = std::getenv("AGENTCAGE_WORKSPACE_ROOT"); root && *root)
    env.push_back(std::string("AGENTCAGE_WORKSPACE_ROOT=") + root);
  return env;
}

void RunService::prepare_spare() {
  if (spare_ || stopping_ || !forker_ || !forker_->running() ||
      std::chrono::steady_clock::now() < spares_paused_until_)
    return;
  auto spare = forker_->spare(runner_env(), spare_policy_file_, spare_limits_);
  if (!spare) {
    if (forker_->running()) {
      log::warn("no spare runner: " + spare.error().message + "; trying again in " +
                std::to_string(kSparePause.count()) + " s");
      spares_paused_until_ = std::chrono::steady_clock::now() + kSparePause;
    }
    return;
  }
  spare_ = std::move(*spare);
  loop_.add(spare_->runner.pidfd.get(), EPOLLIN, [this](uint32_t) { spare_exited(); });
}

// A spare that exits before it has a run failed to prepare it (or was
// killed): what it made is the reaper's, and no spare for a while.
void RunService::spare_exited() {
  if (!spare_) return;
  siginfo_t info{};
  if (::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(spare_->runner.pidfd.get()), &info,
               WEXITED | WNOHANG) != 0 ||
      info.si_pid == 0)
    return;
  log::warn("spare runner pid " + std::to_string(spare_->runner.pid) + " " +
            (info.si_code == CLD_EXITED ? "exited with status " + std::to_string(info.si_status)
                                        : "was killed by signal " + std::to_string(info.si_status)) +
            " before it had a run; runs start without a spare for " + std::to_string(kSparePause.count()) +
            " s");
  loop_.remove(spare_->runner.pidfd.get());
  spare_.reset();
  spares_paused_until_ = std::chrono::steady_clock::now() + kSparePause;
  if (left_behind_) left_behind_();
}

void RunService::drop_spare(std::chrono::milliseconds wait, bool in_loop) {
  if (!spare_) return;
  SpareRunner spare = std::move(*spare_);
  spare_.reset();
  if (in_loop) loop_.remove(spare.runner.pidfd.get());
  spare.handover.reset();  // the spare removes what it prepared and exits
  pollfd p{spare.runner.pidfd.get(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) {
    log::warn("spare runner pid " + std::to_string(spare.runner.pid) + " did not end in time: killed");
    ::kill(spare.runner.pid, SIGKILL);
    (void)::poll(&p, 1, static_cast<int>(kKilledWait.count() * 1000));
  }
  siginfo_t info{};
  (void)::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(spare.runner.pidfd.get()), &info,
                 WEXITED | WNOHANG);
}

void RunService::read_result(Running& r) {
  if (!r.result) return;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(r.result.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0 || errno != EAGAIN) {
        loop_.remove(r.result.get());
        r.result.reset();
        // The whole document: the client's answer need not wait for the
        // runner's exit (it has removed the run and only exits now).
        answer(r, std::nullopt);
      }
      return;
    }
    if (r.document.size() + static_cast<size_t>(n) > kMaxResultBytes) {
      loop_.remove(r.result.get());
      r.result.reset();
      r.document.clear();
      return;
    }
    r.document.append(buf, static_cast<size_t>(n));
  }
}

void RunService::read_notices(Running& r) {
  if (!r.notices) return;
  std::vector<char>& buf = notice_buf_;
  if (buf.size() < kMaxNoticeBytes) buf.resize(kMaxNoticeBytes);
  for (;;) {
    const ssize_t n = ::recv(r.notices.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      // The runner has exited (or the channel broke): nothing more comes.
      loop_.remove(r.notices.get());
      r.notices.reset();
      return;
    }
    if (static_cast<size_t>(n) > buf.size()) {
      log::warn("runner pid " + std::to_string(r.pid) + " sent a notice of " + std::to_string(n) +
                " bytes: ignored");
      continue;
    }
    auto notice = control::parse_request(std::string_view(buf.data(), static_cast<size_t>(n)));
    if (!notice || (notice->op != control::Op::run_start && notice->op != control::Op::run_end)) {
      log::warn("runner pid " + std::to_string(r.pid) + " sent a notice that is not one: " +
                (notice ? "op " + std::string(control::op_name(notice->op)) : notice.error().message));
      continue;
    }
    // One run per channel: its start once, then its end once, same id (a
    // run that failed before it had an id ends without a start).
    const bool start = notice->op == control::Op::run_start;
    const bool fits = start ? !r.start_noticed && !r.end_noticed
                            : !r.end_noticed && (!r.start_noticed || notice->run_id == r.noticed_run_id);
    if (!fits) {
      log::warn("runner pid " + std::to_string(r.pid) + " sent a " +
                std::string(control::op_name(notice->op)) + " notice out of turn (run " + notice->run_id +
                "): ignored");
      continue;
    }
    (start ? r.start_noticed : r.end_noticed) = true;
    if (start) r.noticed_run_id = notice->run_id;
    notice_(*notice, r.uid);
  }
}

void RunService::read_all_notices() {
  // Only the starts matter before decision records; a run's end is read
  // before its answer (answer()).
  for (auto& [fd, r] : runs_)
    if (!r.start_noticed && !r.end_noticed) read_notices(r);
}

// The client's answer, once: when the result document is complete (its
// exit_code is the run's exit status) or, without one, when the runner has
// exited (`runner_status`). The run's notices go first, so that its end is
// counted before its client hears of it.
void RunService::answer(Running& r, std::optional<int> runner_status) {
  if (r.answered) return;
  json doc = json::parse(r.document, nullptr, false);
  int code = 0;
  if (runner_status) {
    code = *runner_status;
  } else {
    const auto it = doc.is_object() ? doc.find("exit_code") : doc.end();
    if (!doc.is_object() || it == doc.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > 255)
      return;  // not a result: the runner's own exit status answers
    code = it->get<int>();
  }
  read_notices(r);
  json reply;
  if (r.stopping)
    reply = {{"ok", false}, {"error", "the daemon is stopping: the run was ended"}, {"exit_code", code}};
  else if (!doc.is_object())
    reply = {{"ok", false},
             {"error", "the run ended without a result document (its runner exited with status " +
                           std::to_string(code) + ")"},
             {"exit_code", code}};
  else
    reply = {{"ok", true}, {"exit_code", code}};
  if (doc.is_object()) reply["result"] = std::move(doc);
  r.answered = true;
  r.document.clear();
  if (!r.abandoned) finish_(r.client, reply);
  // The next spare, now: made while a run starts, it would take from that
  // run's start what it gives the next one.
  prepare_spare();
}

void RunService::reaped(int key) {
  auto it = runs_.find(key);
  if (it == runs_.end()) return;
  Running& r = it->second;
  // Only a runner that has exited is reaped: never a blocking wait in the loop.
  siginfo_t info{};
  if (::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(key), &info, WEXITED | WNOHANG) != 0 ||
      info.si_pid == 0)
    return;
  // Answered with its result, the runner then removed the rest of its run:
  // its exit status says whether all of it went (run/runner.h).
  const bool exited = info.si_code == CLD_EXITED;
  const bool left_behind = r.answered && !(exited && info.si_status == 0);
  // Without an answer it may have created anything and removed nothing (it
  // was killed): the reaper looks at once.
  const bool unanswered = !r.answered;
  if (left_behind)
    log::warn("runner pid " + std::to_string(r.pid) + " (run " +
              (r.noticed_run_id.empty() ? std::string("without an id") : r.noticed_run_id) + ") " +
              (exited ? "exited with status " + std::to_string(info.si_status)
                      : "was killed by signal " + std::to_string(info.si_status)) +
              " after its answer: it could not remove everything of its run; its record in " + cfg_.state_dir +
              "/runs is left to the reaper");
  read_result(r);
  if (r.result) {
    loop_.remove(r.result.get());
    r.result.reset();
  }
  answer(r, info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status);
  if (r.notices) {
    loop_.remove(r.notices.get());
    r.notices.reset();
  }
  loop_.remove(key);
  runs_.erase(it);
  if ((left_behind || unanswered) && left_behind_) left_behind_();
  // A place under the caps is free now.
  retry_parked();
}

void RunService::client_gone(uint64_t client) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->peer.id != client) {
      ++it;
      continue;
    }
    closer_.close(it->peer.uid, it->stdio);
    it = parked_.erase(it);
  }
  for (auto& [fd, r] : runs_)
    if (r.client == client && !r.abandoned && !r.answered) {
      r.abandoned = true;
      r.kill_at = std::chrono::steady_clock::now() + kAbandonedGrace;
      log::info("the client of runner pid " + std::to_string(r.pid) + " hung up: ending its run");
      ::kill(r.pid, SIGTERM);
    }
}

void RunService::tick() {
  const auto now = std::chrono::steady_clock::now();
  if (!spare_ && !spare_policy_file_.empty()) prepare_spare();
  for (auto& [fd, r] : runs_)
    if (r.kill_at && *r.kill_at <= now && !r.killed) {
      r.killed = true;
      log::warn("runner pid " + std::to_string(r.pid) + " did not end within " +
                std::to_string(kAbandonedGrace.count()) +
                " s after its client hung up: killed (its run is reaped when it is gone)");
      (void)::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0U);
    }
}

void RunService::stop_all(int grace_ms) {
  for (Parked& p : parked_) {
    finish_(p.peer.id, refusal("the daemon is stopping: the run was not started"));
    closer_.close(p.peer.uid, p.stdio);
  }
  parked_.clear();
  stopping_ = true;
  if (!runs_.empty()) log::info("stopping: ending " + std::to_string(runs_.size()) + " run(s) in flight");
  for (auto& [fd, r] : runs_) {
    r.stopping = true;
    ::kill(r.pid, SIGTERM);
  }
  // The spare meanwhile (it only removes what it made: milliseconds).
  drop_spare(std::chrono::milliseconds(std::min(grace_ms, 2000)));
  if (runs_.empty()) return;
  // Reaps runners as they exit until none is left or `deadline` passes;
  // with `results`, reads what they write on the way.
  const auto reap_until = [this](std::chrono::steady_clock::time_point deadline, bool results) {
    while (!runs_.empty()) {
      std::vector<pollfd> fds;
      for (auto& [fd, r] : runs_) fds.push_back({fd, POLLIN, 0});
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
              .count();
      if (left <= 0) break;
      if (::poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
      for (auto& p : fds) {
        if (auto it = runs_.find(p.fd); results && it != runs_.end()) read_result(it->second);
        if (p.revents & POLLIN) reaped(p.fd);
      }
    }
  };
  reap_until(std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms), true);
  for (auto& [fd, r] : runs_) {
    log::warn("runner pid " + std::to_string(r.pid) +
              " did not end in time: killed (the next run reaps its run)");
    ::kill(r.pid, SIGKILL);
  }
  // A runner held in a close that no signal ends (a FUSE file's FLUSH,
  // daemon/closer.h) does not go even so: after kKilledWait it is left, and
  // the daemon stops without it.
  reap_until(std::chrono::steady_clock::now() + kKilledWait, false);
  for (auto& [fd, r] : runs_)
    log::warn("runner pid " + std::to_string(r.pid) + " did not end after SIGKILL: left behind");
}

}  // namespace agentcage::daemon
