// SPDX-License-Identifier: Apache-2.0
// Section `seccomp`: what the run's seccomp filter costs, side by side in one
// process (needs no BPF LSM and no root):
//   per run   fork + exec /usr/bin/true + wait, bare (A) vs with the run's
//             filter built, installed with its listener and handed over as
//             `agentcage run` does (B), interleaved round by round;
//   per call  an allowed call (getpid) without (A) and under the filter (B);
//             a denied call (keyctl) answered by the supervisor with EPERM
//             (notification, what runs do) vs the same call under a filter
//             that fails it in the kernel (SECCOMP_RET_ERRNO).
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench.h"
#include "run/seccomp.h"
#include "run/seccomp_notify.h"

namespace agentcage::bench {
namespace {

// A filter that denies like the run's but with SECCOMP_RET_ERRNO (no
// listener): the baseline for the cost of a notified denial.
std::vector<sock_filter> errno_filter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  std::vector<sock_filter> out;
  if (!ctx) return out;
  seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(keyctl), 0) == 0) {
    int fd = ::memfd_create("bench-seccomp", MFD_CLOEXEC);
    if (fd >= 0 && seccomp_export_bpf(ctx, fd) == 0) {
      off_t size = ::lseek(fd, 0, SEEK_END);
      out.resize(static_cast<size_t>(size) / sizeof(sock_filter));
      if (::pread(fd, out.data(), static_cast<size_t>(size), 0) != size) out.clear();
    }
    if (fd >= 0) ::close(fd);
  }
  seccomp_release(ctx);
  return out;
}

// The child: optionally installs `filter` (with a listener handed over on
// `sock` when `listen`), then runs `body`; exits with body's status.
[[noreturn]] void child(const std::vector<sock_filter>* filter, bool listen, int sock,
                        const std::function<int()>& body) {
  if (filter) {
    sock_fprog prog{static_cast<unsigned short>(filter->size()), const_cast<sock_filter*>(filter->data())};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(90);
    long fd =
        ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, listen ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
    if (fd < 0) ::_exit(91);
    if (listen) {
      const int msg = 1;
      if (run::hand_over_listener(sock, static_cast<int>(fd), &msg, sizeof msg) != 0) ::_exit(92);
    }
  }
  ::_exit(body());
}

// Forks `body` under the filter (none: bare) and, when it listens, answers
// its notifications until it exits. Returns its exit status (-1: not run).
int supervised(const std::vector<sock_filter>* filter, bool listen, const std::function<int()>& body) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(sv[0]);
    child(filter, listen, sv[1], body);
  }
  ::close(sv[1]);
  std::optional<run::SyscallSupervisor> sup;
  if (filter && listen) {
    int msg = 0;
    UniqueFd listener;
    const char go = 1;
    if (run::receive_report(sv[0], &msg, sizeof msg, listener) == static_cast<ssize_t>(sizeof msg) &&
        listener && ::write(sv[0], &go, 1) == 1)
      sup.emplace(std::move(listener));
  }
  ::close(sv[0]);
  // As agentcage waits (run/wait.cpp): for the child's end (its pidfd) and
  // its notifications, whichever comes first, without a polling interval
  // that would be timed as part of the run.
  if (sup) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd) return -1;
    pollfd p[2] = {{pidfd.get(), POLLIN, 0}, {sup->poll_fd(), POLLIN, 0}};
    for (;;) {
      if (::poll(p, 2, -1) < 0 && errno != EINTR) return -1;
      if (p[1].revents & POLLIN) (void)sup->answer_pending();
      if (p[1].revents & (POLLHUP | POLLERR)) p[1].fd = -1;  // no task uses the filter any more
      if (p[0].revents & POLLIN) break;
    }
  }
  int st = 0;
  pid_t w;
  while ((w = ::waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
  }
  if (w != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int exec_true() {
  char arg0[] = "/usr/bin/true";
  char* argv[] = {arg0, nullptr};
  char* envp[] = {nullptr};
  ::execve(arg0, argv, envp);
  return 127;
}

}  // namespace

int seccomp_section(const Options& opts) {
  const unsigned rounds = opts.run_rounds;
  const unsigned calls = opts.iterations * 10;
  say("\n5. The seccomp filter: per run and per call, with (B) and without (A), side by side\n");
  say("   per run: %u rounds of fork + exec /usr/bin/true + wait, A and B alternated;\n"
      "   B builds the run's filter (libseccomp), installs it with its listener and hands the\n"
      "   listener over as agentcage run does. Per call: %u calls per sample, %u samples\n\n",
      rounds, calls, rounds);

  std::vector<double> a_run, b_run;
  for (unsigned r = 0; r < rounds; ++r) {
    for (int phase : r % 2 ? std::vector<int>{1, 0} : std::vector<int>{0, 1}) {
      const double t0 = static_cast<double>(now_ns());
      int rc;
      if (phase == 0) {
        rc = supervised(nullptr, false, exec_true);
      } else {
        auto filter = run::build_seccomp_filter({});
        if (!filter) {
          say("   NOT MEASURED: %s\n", filter.error().message.c_str());
          return 1;
        }
        rc = supervised(&*filter, true, exec_true);
      }
      if (rc != 0) {
        say("   NOT MEASURED: /usr/bin/true exited %d (%s)\n", rc, phase ? "with the filter" : "bare");
        return 1;
      }
      (phase ? b_run : a_run).push_back(static_cast<double>(now_ns()) - t0);
    }
  }

  auto filter = run::build_seccomp_filter({});
  if (!filter) return 1;
  const std::vector<sock_filter> errno_only = errno_filter();
  if (errno_only.empty()) {
    say("   NOT MEASURED: the SECCOMP_RET_ERRNO baseline filter could not be built\n");
    return 1;
  }
  // Each sample runs `calls` calls in a fresh child and reports ns/call
  // through a pipe.
  auto per_call = [&](const std::vector<sock_filter>* f, bool listen, long nr, long arg,
                      bool expect_eperm) -> std::optional<double> {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return std::nullopt;
    int rc = supervised(f, listen, [&] {
      const double t0 = static_cast<double>(now_ns());
      for (unsigned i = 0; i < calls; ++i) {
        long r = ::syscall(nr, arg, -3, 0);
        if (expect_eperm != (r == -1 && errno == EPERM)) return 3;
      }
      double ns = (static_cast<double>(now_ns()) - t0) / calls;
      return ::write(p[1], &ns, sizeof ns) == static_cast<ssize_t>(sizeof ns) ? 0 : 4;
    });
    ::close(p[1]);
    double ns = 0;
    bool ok = rc == 0 && ::read(p[0], &ns, sizeof ns) == static_cast<ssize_t>(sizeof ns);
    ::close(p[0]);
    return ok ? std::optional<double>(ns) : std::nullopt;
  };
  std::vector<double> allow_a, allow_b, deny_errno, deny_notify;
  for (unsigned r = 0; r < rounds; ++r) {
    auto aa = per_call(nullptr, false, SYS_getpid, 0, false);
    auto ab = per_call(&*filter, true, SYS_getpid, 0, false);
    auto de = per_call(&errno_only, false, SYS_keyctl, 0, true);
    auto dn = per_call(&*filter, true, SYS_keyctl, 0, true);
    if (!aa || !ab || !de || !dn) {
      say("   NOT MEASURED: a per-call sample failed (round %u)\n", r + 1);
      return 1;
    }
    allow_a.push_back(*aa);
    allow_b.push_back(*ab);
    deny_errno.push_back(*de);
    deny_notify.push_back(*dn);
  }

  say("  %-56s %10s %10s %10s %7s\n", "what", "A median", "B median", "B - A", "B/A");
  say("  %s\n", std::string(97, '-').c_str());
  auto row = [&](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
    const double ma = median(a), mb = median(b);
    say("  %-56s %10s %10s %10s %6.2fx\n", what, fmt_ns(ma).c_str(), fmt_ns(mb).c_str(),
        ((mb >= ma ? "+" : "-") + fmt_ns(mb >= ma ? mb - ma : ma - mb)).c_str(), mb / ma);
  };
  row("per run: fork+exec true+wait (A bare, B filter+listener)", a_run, b_run);
  row("allowed call getpid (A no filter, B the run's filter)", allow_a, allow_b);
  row("denied call keyctl (A RET_ERRNO, B notified, EPERM)", deny_errno, deny_notify);
  say("\n   per run B - A: building the filter (libseccomp, in agentcage), installing it, and the\n"
      "   listener handover (one message and one go-ahead byte on the report socket)\n"
      "   a denied call costs a round trip to agentcage (two context switches); allowed calls\n"
      "   pay only the filter program\n");
  return 0;
}

}  // namespace agentcage::bench
