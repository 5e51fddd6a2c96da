// SPDX-License-Identifier: Apache-2.0
// The daemon's fork server (daemon/run_forker.h).
#include "daemon/run_forker.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "run/options.h"
#include "run/policy_cache.h"
#include "run/runner.h"
#include "util/fd_passing.h"
#include "util/log.h"

namespace agentcage::daemon {
namespace {

// A request: "ARGC\0", the policy file to prepare ("" for none), then ARGC
// words of argv, then the environment's entries, each NUL-terminated. Bounded by the control protocol's
// request size (64 KiB) plus the daemon's own words, well under this.
constexpr size_t kMaxMessage = 192 * 1024;
// How long the daemon waits for the server to answer a request (it only
// clones: milliseconds).
constexpr int kAnswerSeconds = 10;
// What a request to the server carries: the runner's result pipe and notice
// channel (its 3 and 4), its go-ahead pipe, and its end of the pair its
// stdin, stdout and stderr come over from the daemon.
constexpr size_t kServerFds = 4;

int thread_count() {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return ec ? -1 : n;
}

// A message encode() made, checked before it is sent.
Status check_message(const std::string& msg) {
  if (msg.empty()) return Error{"a word of the run's command line holds a NUL byte", EINVAL};
  if (msg.size() > kMaxMessage) return Error{"the run's command line is too long", E2BIG};
  return {};
}

// "" when a word holds a NUL (it would shift the words that follow).
std::string encode(const std::string& policy_file, const std::vector<std::string>& argv,
                   const std::vector<std::string>& env) {
  for (const auto* list : {&argv, &env})
    for (const auto& s : *list)
      if (s.find('\0') != std::string::npos) return {};
  if (policy_file.find('\0') != std::string::npos) return {};
  std::string out = std::to_string(argv.size());
  out.push_back('\0');
  out += policy_file;
  out.push_back('\0');
  for (const auto* list : {&argv, &env})
    for (const auto& s : *list) {
      out += s;
      out.push_back('\0');
    }
  return out;
}

// A spare's words (instead of a runner's, which start with "agentcage"):
// kSpareWord, then the limits of the run it expects, "NAME=VALUE" each.
constexpr const char* kSpareWord = "spare";

std::vector<std::string> spare_words(const run::RunOptions& limits) {
  std::vector<std::string> words{kSpareWord};
  for (const auto& [name, value] : {std::pair{"memory", &limits.memory},
                                    {"pids", &limits.pids},
                                    {"cpu", &limits.cpu},
                                    {"disk", &limits.disk}})
    if (*value) words.push_back(std::string(name) + "=" + **value);
  return words;
}

// The limits of spare_words (a word it does not know is left out: the run
// writes what the spare did not).
run::RunOptions spare_limits(const std::vector<std::string>& words) {
  run::RunOptions limits;
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    const size_t eq = w.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = w.substr(0, eq), value = w.substr(eq + 1);
    if (name == "memory") limits.memory = value;
    if (name == "pids") limits.pids = value;
    if (name == "cpu") limits.cpu = value;
    if (name == "disk") limits.disk = value;
  }
  return limits;
}

bool decode(const char* data, size_t size, std::string& policy_file, std::vector<std::string>& argv,
            std::vector<std::string>& env) {
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t i = 0; i < size; ++i)
    if (data[i] == '\0') {
      words.emplace_back(data + start, i - start);
      start = i + 1;
    }
  if (start != size || words.empty()) return false;
  char* end = nullptr;
  const unsigned long argc = std::strtoul(words[0].c_str(), &end, 10);
  if (end == words[0].c_str() || *end != '\0' || words.size() < 2 || argc > words.size() - 2) return false;
  policy_file = words[1];
  argv.assign(words.begin() + 2, words.begin() + 2 + static_cast<long>(argc));
  env.assign(words.begin() + 2 + static_cast<long>(argc), words.end());
  for (const auto& e : env)
    if (e.find('=') == std::string::npos || e.front() == '=') return false;
  return true;
}

void answer(int sock, const std::string& text, int fd = -1) {
  // The daemon waits for this answer; a failed send is the daemon gone.
  if ((fd >= 0 ? send_with_fd(sock, text.data(), text.size(), fd)
               : ::send(sock, text.data(), text.size(), MSG_NOSIGNAL)) < 0)
    ::_exit(0);
}

// Closes every descriptor from `first` on except those in `keep`.
bool close_all_but(unsigned first, std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned from = first;
  for (int fd : keep) {
    if (fd < 0 || static_cast<unsigned>(fd) < from) continue;
    if (static_cast<unsigned>(fd) > from &&
        ::syscall(SYS_close_range, from, static_cast<unsigned>(fd) - 1, 0U) != 0)
      return false;
    from = static_cast<unsigned>(fd) + 1;
  }
  return ::syscall(SYS_close_range, from, ~0U, 0U) == 0;
}

// Resets what the runner inherits of the server: the daemon's child, with
// default signal handling, nothing blocked, only `fds` at 0..kRunnerFds-1
// and `also` (and the prepared program set) open, and the daemon's
// environment for runs.
void enter_runner(pid_t daemon, const int fds[kRunnerFds], std::vector<int> also,
                  const std::vector<std::string>& env) {
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != daemon) ::_exit(125);
  ::prctl(PR_SET_NAME, "agentcage", 0, 0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The prepared program set's descriptors stay open (the server keeps
  // 0..kRunnerFds-1 taken, so they are above); should one not be, the set
  // goes and the runner opens its own.
  std::vector<int> keep = run::prepared_enforcer_fds();
  if (std::any_of(keep.begin(), keep.end(), [](int fd) { return fd < kRunnerFds; })) {
    run::take_prepared_enforcer().reset();
    keep.clear();
  }
  // (The server keeps 0..kRunnerFds-1 taken: `also` is above them too.)
  for (int fd : also)
    if (fd < kRunnerFds) ::_exit(125);
  keep.insert(keep.end(), also.begin(), also.end());
  if (!install_runner_fds(fds) || !close_all_but(kRunnerFds, keep)) ::_exit(125);
  if (::clearenv() != 0) ::_exit(125);
  for (const auto& e : env) {
    const size_t eq = e.find('=');
    if (::setenv(e.substr(0, eq).c_str(), e.c_str() + eq + 1, 1) != 0) ::_exit(125);
  }
}

// agentcage's command line, then the runner's exit.
[[noreturn]] void run_command_line(std::vector<std::string> argv, const CommandLine& command_line) {
  int code = 125;
  try {
    code = command_line(std::move(argv));
  } catch (...) {
    // Never unwind into the daemon's frames this process was copied from.
    ::_exit(125);
  }
  // A command line that ended before its run waited (a usage error): what
  // it said goes out only with the go-ahead, as a run's would; a spare run
  // it never took goes.
  (void)run::discard_spare_run();
  if (!run::await_start_gate()) ::_exit(125);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

// The runner, in the clone: the daemon's child, with only 0..4 open (and the
// program set prepared for it: run/policy_cache.h), the daemon's words and
// environment, default signal handling. It creates nothing before the
// daemon's go-ahead (one byte on `go`), which the daemon gives once it
// holds the runner's pidfd: meanwhile it parses its command line and checks
// its request and policy, then waits (run::await_start_gate). A runner the
// daemon does not know of (its answer lost) reads end-of-file there and
// exits, never runs the command.
[[noreturn]] void become_runner(pid_t daemon, int go, int handover, int result, int notices,
                                std::vector<std::string> argv, const std::vector<std::string>& env,
                                const CommandLine& command_line) {
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != daemon) ::_exit(125);
  // The client's stdin, stdout and stderr come from the daemon itself, never
  // through the server: a close of a client's descriptor can wait as long as
  // the client likes (a FUSE file's FLUSH, daemon/closer.h), and the server
  // starts every run.
  std::vector<UniqueFd> stdio;
  int flags = 0;
  char byte = 0;
  if (recv_with_fds(handover, &byte, 1, stdio, &flags, false) != 1 || stdio.size() != 3 ||
      (flags & (MSG_CTRUNC | MSG_TRUNC)))
    ::_exit(125);
  const int fds[kRunnerFds] = {stdio[0].release(), stdio[1].release(), stdio[2].release(), result, notices};
  enter_runner(daemon, fds, {go}, env);
  run::set_start_gate(go);
  run_command_line(std::move(argv), command_line);
}

// A spare runner (RunForker::spare): the same start as a runner's, with
// /dev/null for stdin, stdout and stderr. Once the daemon, holding its
// pidfd, gives the go-ahead, it prepares its run (run::prepare_spare_run)
// and waits for the run's words and the client's stdin, stdout and stderr
// on `handover`; then it is a runner like any other. When the daemon closes
// `handover` instead, it removes what it prepared and exits.
[[noreturn]] void become_spare(pid_t daemon, int go, int handover, int result, int notices,
                               const std::vector<std::string>& env, const run::RunOptions& limits,
                               const CommandLine& command_line) {
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null) ::_exit(125);
  const int fds[kRunnerFds] = {null.get(), null.get(), null.get(), result, notices};
  enter_runner(daemon, fds, {go, handover}, env);
  null.release();  // closed by enter_runner (it was above kRunnerFds)
  char byte = 0;
  ssize_t got;
  while ((got = ::read(go, &byte, 1)) < 0 && errno == EINTR) {
  }
  ::close(go);
  if (got != 1) ::_exit(0);  // the daemon does not know this process
  // The signals that end a run (the daemon's death: PR_SET_PDEATHSIG) end
  // the spare too, once it has removed what it prepared.
  const sigset_t ending = run::run_ending_signals();
  if (::sigprocmask(SIG_BLOCK, &ending, nullptr) != 0) ::_exit(125);
  UniqueFd signals(::signalfd(-1, &ending, SFD_CLOEXEC));
  if (!signals) ::_exit(125);
  // A spare run that cannot be prepared is not: the run then makes its own
  // and says what fails.
  try {
    (void)run::prepare_spare_run(run::paths_from_env(environ), limits);
  } catch (...) {
    // (Nothing of it is held: a step's leftovers are the reaper's.)
  }
  const auto discard = [] {
    try {
      return run::discard_spare_run().empty();
    } catch (...) {
      return false;
    }
  };
  std::vector<char> buf(kMaxMessage);
  std::vector<UniqueFd> stdio;
  int flags = 0;
  pollfd waits[2] = {{handover, POLLIN, 0}, {signals.get(), POLLIN, 0}};
  while (::poll(waits, 2, -1) < 0)
    if (errno != EINTR) ::_exit(discard() ? 125 : 1);
  // A signal ends the spare, even with its run waiting (which is then
  // answered 125, never 0).
  if (waits[1].revents & POLLIN) {
    const bool run_waiting = waits[0].revents & POLLIN;
    const bool removed = discard();
    ::_exit(run_waiting ? 125 : removed ? 0 : 1);
  }
  const ssize_t n = recv_with_fds(handover, buf.data(), buf.size(), stdio, &flags, false);
  std::string policy_file;
  std::vector<std::string> argv, none;
  if (n <= 0 || (flags & (MSG_CTRUNC | MSG_TRUNC)) || stdio.size() != 3 ||
      !decode(buf.data(), static_cast<size_t>(n), policy_file, argv, none) || argv.empty() || !none.empty()) {
    // No run (the daemon stops, or let go of this spare: end of file), or
    // one that is not (125): what was prepared goes; what cannot is the
    // reaper's.
    const bool removed = discard();
    ::_exit(n != 0 ? 125 : removed ? 0 : 1);
  }
  ::close(handover);
  buf = {};
  // The signals stay blocked: one that comes now (the client hung up) is
  // the run's to take at its first look (run/steps.h: block_signals blocks
  // the same ones), so that the run removes its spare run itself.
  signals.reset();
  const int mine[kRunnerFds] = {stdio[0].get(), stdio[1].get(), stdio[2].get(), 3, 4};
  if (!install_runner_fds(mine)) ::_exit(discard() ? 125 : 1);
  stdio.clear();
  run_command_line(std::move(argv), command_line);
}

[[noreturn]] void serve(int sock, pid_t daemon, const CommandLine& command_line) {
  std::vector<char> buf(kMaxMessage);
  for (;;) {
    std::vector<UniqueFd> fds;
    int flags = 0;
    const ssize_t n = recv_with_fds(sock, buf.data(), buf.size(), fds, &flags, false);
    if (n == 0) ::_exit(0);  // the daemon closed its end
    if (n < 0) ::_exit(errno == EINTR ? 0 : 1);
    std::string policy_file;
    std::vector<std::string> argv, env;
    if ((flags & (MSG_TRUNC | MSG_CTRUNC)) || fds.size() != kServerFds ||
        !decode(buf.data(), static_cast<size_t>(n), policy_file, argv, env)) {
      answer(sock, "error malformed request");
      continue;
    }
    // A file that cannot be prepared is the runner's to report (it reads
    // the file itself); nothing is cached for it. Likewise the program set.
    try {
      if (!policy_file.empty()) (void)run::prepare_policy(policy_file);
      (void)run::prepare_enforcer();
    } catch (...) {
      // The runner parses the file and opens the set itself.
    }
    // The result pipe, the notice channel, the go-ahead, the handover of stdio.
    const int result = fds[0].get(), notices = fds[1].get(), go = fds[2].get(), handover = fds[3].get();
    int pidfd = -1;
    clone_args args{};
    args.flags = CLONE_PARENT | CLONE_PIDFD;
    args.pidfd = reinterpret_cast<uintptr_t>(&pidfd);
    const long pid = ::syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0 && !argv.empty() && argv[0] == kSpareWord)
      become_spare(daemon, go, handover, result, notices, env, spare_limits(argv), command_line);
    if (pid == 0) become_runner(daemon, go, handover, result, notices, std::move(argv), env, command_line);
    if (pid < 0) {
      // No clone3 here at all (an older kernel, a seccomp profile that
      // refuses it): the daemon execs its runners instead. Anything else
      // (EAGAIN at a pids limit, say) refuses this one run.
      const int err = errno;
      const bool unsupported = err == ENOSYS || err == EPERM || err == EINVAL;
      answer(sock, std::string(unsupported ? "unsupported clone3: " : "error clone3: ") + std::strerror(err));
      continue;
    }
    answer(sock, "pid " + std::to_string(pid), pidfd);
    ::close(pidfd);
  }
}

}  // namespace

Result<RunnerChannels> runner_channels() {
  RunnerChannels c;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Error::from_errno("pipe2 for the run's result");
  c.result.reset(pipe_fds[0]);
  c.result_runner.reset(pipe_fds[1]);
  int channel[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) != 0)
    return Error::from_errno("socketpair for the run's notices");
  c.notices.reset(channel[0]);
  c.notices_runner.reset(channel[1]);
  return c;
}

bool install_runner_fds(const int fds[kRunnerFds]) {
  // Out of the way first: one of them may sit at 0..kRunnerFds-1.
  int high[kRunnerFds];
  for (int i = 0; i < kRunnerFds; ++i)
    if ((high[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0) return false;
  for (int i = 0; i < kRunnerFds; ++i)
    if (::dup2(high[i], i) < 0) return false;  // dup2 clears close-on-exec
  for (int fd : high) ::close(fd);
  return true;
}

RunForker::~RunForker() { stop(); }

Status RunForker::start(CommandLine command_line) {
  if (const int threads = thread_count(); threads != 1)
    return Error{"the fork server must be started while the daemon has one thread (it has " +
                     std::to_string(threads) + ")",
                 EBUSY};
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return Error::from_errno("socketpair for the fork server");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  const pid_t daemon = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Error::from_errno("fork of the fork server");
  if (pid == 0) {
    // Dies with the daemon; its runners end their runs then (their own
    // PR_SET_PDEATHSIG), as exec'd runners do.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != daemon) ::_exit(1);
    ::prctl(PR_SET_NAME, "agentcage-fork", 0, 0, 0);
    // A terminal's Ctrl-C or hangup is the daemon's to handle: the server
    // ends with the daemon (PR_SET_PDEATHSIG) or at the end of its socket.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
    mine.reset();
    // 0..kRunnerFds-1 taken (by /dev/null where free), so that nothing the
    // server keeps for its runners (the program set) lands where a
    // runner's own descriptors go.
    for (;;) {
      const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      if (fd < 0) break;
      if (fd >= kRunnerFds) {
        ::close(fd);
        break;
      }
    }
    serve(theirs.get(), daemon, command_line);
  }
  theirs.reset();
  timeval tv{kAnswerSeconds, 0};
  ::setsockopt(mine.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // Room for the largest request in one datagram.
  const int sndbuf = static_cast<int>(2 * kMaxMessage);
  ::setsockopt(mine.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  sock_ = std::move(mine);
  pid_ = pid;
  log::info("fork server started (pid " + std::to_string(pid) + "): runs start without an exec");
  return {};
}

Result<RunForker::Cloned> RunForker::clone_runner(const std::string& msg, int result, int notices) {
  if (!sock_) return Error{"the fork server is not running", ESRCH};
  if (Status st = check_message(msg); !st) return st.error();
  // The go-ahead: the runner waits for one byte on this pipe.
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return Error::from_errno("pipe2 for the run's go-ahead");
  UniqueFd go_read(go[0]), go_write(go[1]);
  // The client's stdin, stdout and stderr go to the runner itself, over
  // this pair, once it exists: the server never holds them.
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return Error::from_errno("socketpair for the run's stdio");
  UniqueFd handover(pair[0]), handover_runner(pair[1]);
  const int all[kServerFds] = {result, notices, go_read.get(), handover_runner.get()};
  if (send_with_fds(sock_.get(), msg.data(), msg.size(), all, kServerFds) < 0) {
    const int err = errno;
    // A message the socket cannot take is this run's problem, not the
    // server's.
    if (err == EMSGSIZE || err == ENOBUFS || err == ENOMEM)
      return Error{std::string("the fork server: sending it the run: ") + std::strerror(err), err};
    lost(std::string("sending it a run: ") + std::strerror(err));
    return Error{"the fork server is gone", err};
  }
  go_read.reset();
  handover_runner.reset();
  char buf[512];
  UniqueFd pidfd;
  int flags = 0;
  const ssize_t n = recv_with_fd(sock_.get(), buf, sizeof buf - 1, pidfd, &flags);
  if (n <= 0) {
    // A runner it may have cloned gets no go-ahead: it exits once it has
    // checked its request, having created and written nothing.
    const int err = n == 0 ? EPIPE : errno;
    lost(n == 0 ? "it exited" : std::string("no answer: ") + std::strerror(err));
    return Error{"the fork server is gone", err};
  }
  // From here, a runner that does not get the go-ahead (go_write closed
  // unwritten on any return below) exits without running anything.
  const std::string text(buf, static_cast<size_t>(n));
  if (text.rfind("unsupported ", 0) == 0) {
    lost("it cannot start runners: " + text.substr(12));
    return Error{"the fork server is gone", ENOSYS};
  }
  if (text.rfind("error ", 0) == 0) return Error{"the fork server: " + text.substr(6), EIO};
  char* end = nullptr;
  const long pid = text.rfind("pid ", 0) == 0 ? std::strtol(text.c_str() + 4, &end, 10) : 0;
  if (pid <= 0 || !end || *end != '\0' || !pidfd) {
    if (pid > 0 && end && *end == '\0') {
      // A runner without its pidfd (the daemon out of descriptors): it
      // gets no go-ahead, and it is this process's child to reap.
      go_write.reset();
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
    }
    lost("an answer that is not one: " + text);
    return Error{"the fork server is gone", EPROTO};
  }
  return Cloned{Runner{std::move(pidfd), static_cast<pid_t>(pid)}, std::move(go_write), std::move(handover)};
}

namespace {

// Kills and reaps a runner the daemon gives up on before its run started.
void abandon(const Runner& r) {
  ::kill(r.pid, SIGKILL);
  ::waitpid(r.pid, nullptr, 0);
}

}  // namespace

Result<Runner> RunForker::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                const int fds[kRunnerFds], const std::string& policy_file) {
  if (argv.empty()) return Error{"a run without words", EINVAL};
  auto cloned = clone_runner(encode(policy_file, argv, env), fds[3], fds[4]);
  if (!cloned) return cloned.error();
  const char byte = 1;
  if (send_with_fds(cloned->handover.get(), &byte, 1, fds, 3) != 1) {
    const int err = errno;
    abandon(cloned->runner);
    return Error{std::string("handing the runner its stdio: ") + std::strerror(err), err};
  }
  cloned->handover.reset();
  if (::write(cloned->go.get(), &byte, 1) != 1) {
    const int err = errno;
    abandon(cloned->runner);
    return Error{std::string("the go-ahead to the runner: ") + std::strerror(err), err};
  }
  return std::move(cloned->runner);
}

Result<SpareRunner> RunForker::spare(const std::vector<std::string>& env, const std::string& policy_file,
                                     const run::RunOptions& limits) {
  auto channels = runner_channels();
  if (!channels) return channels.error();
  auto cloned = clone_runner(encode(policy_file, spare_words(limits), env), channels->result_runner.get(),
                             channels->notices_runner.get());
  if (!cloned) return cloned.error();
  // Room for the largest run's words in one message.
  const int sndbuf = static_cast<int>(2 * kMaxMessage);
  ::setsockopt(cloned->handover.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  const char byte = 1;
  if (::write(cloned->go.get(), &byte, 1) != 1) {
    const int err = errno;
    abandon(cloned->runner);
    return Error{std::string("the go-ahead to a spare runner: ") + std::strerror(err), err};
  }
  return SpareRunner{std::move(cloned->runner), std::move(cloned->handover), std::move(channels->result),
                     std::move(channels->notices)};
}

Status RunForker::hand_over(SpareRunner& spare, const std::vector<std::string>& argv, const int stdio[3]) {
  if (argv.empty()) return Error{"a run without words", EINVAL};
  const std::string msg = encode("", argv, {});
  if (Status st = check_message(msg); !st) return st;
  if (send_with_fds(spare.handover.get(), msg.data(), msg.size(), stdio, 3) < 0)
    return Error::from_errno("handing a spare runner its run");
  spare.handover.reset();
  return {};
}

void RunForker::lost(const std::string& why) {
  log::warn("fork server (pid " + std::to_string(pid_) + ") lost: " + why +
            "; runs start with fork + exec from now on");
  stop();
}

void RunForker::stop() {
  if (!sock_) return;
  sock_.reset();  // the server exits when it reads the end
  ::kill(pid_, SIGKILL);
  // Reaped if it goes within a second. A server held in a close that no
  // signal ends (a FUSE file's FLUSH, daemon/closer.h) is left to end when
  // it can (a zombie until the daemon exits): never a wait without end.
  for (int i = 0; i < 100; ++i) {
    const pid_t got = ::waitpid(pid_, nullptr, WNOHANG);
    if (got == pid_ || (got < 0 && errno != EINTR)) return;
    ::usleep(10000);
  }
  log::warn("fork server (pid " + std::to_string(pid_) + ") did not end within 1 s of SIGKILL; left behind");
}

}  // namespace agentcage::daemon
