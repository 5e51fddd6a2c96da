// SPDX-License-Identifier: Apache-2.0
#include "run/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "run/options.h"
#include "run/seccomp_notify.h"

namespace agentcage::run {

const char* describe(ChildStep step) {
  switch (step) {
    case ChildStep::signals:
      return "resetting signal handling";
    case ChildStep::session:
      return "starting a new session (setsid)";
    case ChildStep::stdio:
      return "setting up stdin, stdout and stderr";
    case ChildStep::close_fds:
      return "closing inherited file descriptors";
    case ChildStep::chdir:
      return "entering the workspace";
    case ChildStep::rlimit_core:
      return "disabling core dumps";
    case ChildStep::bounding_set:
      return "dropping the capability bounding set";
    case ChildStep::ambient_caps:
      return "clearing ambient capabilities";
    case ChildStep::securebits:
      return "locking the securebits";
    case ChildStep::setgroups:
      return "dropping supplementary groups";
    case ChildStep::setgid:
      return "switching to the sandbox group";
    case ChildStep::setuid:
      return "switching to the sandbox user";
    case ChildStep::session_keyring:
      return "joining a new session keyring";
    case ChildStep::capabilities:
      return "dropping all capabilities";
    case ChildStep::no_new_privs:
      return "setting no_new_privs";
    case ChildStep::seccomp:
      return "installing the seccomp filter";
    case ChildStep::seccomp_listener:
      return "handing the seccomp listener to agentcage";
    case ChildStep::parent_death:
      return "arming the parent-death signal";
    case ChildStep::exec:
      return "executing the command";
  }
  return "setting up the sandbox";
}

ChildPlan::ChildPlan(uid_t uid, gid_t gid, std::string workdir, std::vector<std::string> exec_paths,
                     std::vector<std::string> argv, std::vector<std::string> envp,
                     std::vector<sock_filter> seccomp, std::array<int, 3> stdio)
    : uid_(uid),
      gid_(gid),
      workdir_(std::move(workdir)),
      exec_paths_(std::move(exec_paths)),
      argv_(std::move(argv)),
      envp_(std::move(envp)),
      seccomp_(std::move(seccomp)),
      stdio_(stdio) {
  seccomp_prog_.len = static_cast<unsigned short>(seccomp_.size());
  seccomp_prog_.filter = seccomp_.data();
  for (auto& s : exec_paths_) exec_ptrs_.push_back(s.c_str());
  for (auto& s : argv_) argv_ptrs_.push_back(s.c_str());
  argv_ptrs_.push_back(nullptr);
  for (auto& s : envp_) envp_ptrs_.push_back(s.c_str());
  envp_ptrs_.push_back(nullptr);
}

namespace {

// The report pipe's fixed place once every other descriptor is closed.
constexpr int kReportFd = 3;

[[noreturn]] void fail(int report_fd, ChildStep step, int err) {
  ChildFailure f{static_cast<int32_t>(step), err};
  // A short or failed write leaves the parent with a truncated report, which
  // it treats as a setup failure too.
  ssize_t n;
  do n = ::write(report_fd, &f, sizeof f);
  while (n < 0 && errno == EINTR);
  ::_exit(125);
}

}  // namespace

void child_main(const ChildPlan& plan, int report_fd, pid_t parent) {
  // Signals: the parent blocks the ones it takes through a signalfd, and the
  // mask and ignored dispositions would survive exec.
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(report_fd, ChildStep::signals, errno);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);  // EINVAL for libc-internal ones

  // A new session: no controlling terminal, not in the caller's process
  // group (a ^C reaches agentcage, which ends the run through cgroup.kill).
  if (::setsid() < 0) fail(report_fd, ChildStep::session, errno);

  // The relay pipes and the read-only stdin in place of the caller's files
  // (run/stdio.h). Their sources are all above 2, so none is overwritten.
  for (int i = 0; i < 3; ++i)
    if (plan.stdio()[static_cast<size_t>(i)] >= 0 && ::dup2(plan.stdio()[static_cast<size_t>(i)], i) < 0)
      fail(report_fd, ChildStep::stdio, errno);

  // Keep 0, 1, 2 and the report pipe (moved to fd 3, CLOEXEC), close the rest.
  if (report_fd != kReportFd) {
    if (::dup3(report_fd, kReportFd, O_CLOEXEC) < 0) fail(report_fd, ChildStep::close_fds, errno);
    report_fd = kReportFd;
  }
  if (::syscall(SYS_close_range, kReportFd + 1, ~0U, 0) != 0) {
    if (errno != ENOSYS) fail(report_fd, ChildStep::close_fds, errno);
    struct rlimit nofile {};
    if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) fail(report_fd, ChildStep::close_fds, errno);
    for (rlim_t fd = kReportFd + 1; fd < nofile.rlim_cur; ++fd) ::close(static_cast<int>(fd));
  }

  if (::chdir(plan.workdir()) != 0) fail(report_fd, ChildStep::chdir, errno);
  ::umask(077);
  struct rlimit no_core {};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0) fail(report_fd, ChildStep::rlimit_core, errno);

  // Capabilities. The bounding set can only shrink while we still hold
  // CAP_SETPCAP, so it goes first: afterwards not even a uid-0 identity or a
  // file with capabilities can regain any.
  for (unsigned long cap = 0; cap < 64; ++cap)
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the kernel's last capability
      fail(report_fd, ChildStep::bounding_set, errno);
    }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    fail(report_fd, ChildStep::ambient_caps, errno);
  // uid 0 gets no capabilities on exec (NOROOT), capabilities are not kept
  // across the uid change and ambient ones cannot be raised; all locked.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                             SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) fail(report_fd, ChildStep::securebits, errno);

  if (::setgroups(0, nullptr) != 0) fail(report_fd, ChildStep::setgroups, errno);
  if (::setresgid(plan.gid(), plan.gid(), plan.gid()) != 0) fail(report_fd, ChildStep::setgid, errno);
  if (::setresuid(plan.uid(), plan.uid(), plan.uid()) != 0) fail(report_fd, ChildStep::setuid, errno);

  // A session keyring of the run's own, owned by the sandbox user: the
  // inherited one is the caller's (its keys would be the run's to read), and
  // without one the kernel would hand out the uid's user-session keyring,
  // which outlives the run. This one goes with the run's last process; the
  // scope may not use the per-uid keyrings (bpf/ipc.bpf.h). No keys in the
  // kernel (ENOSYS): nothing to share.
  if (::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr) < 0 && errno != ENOSYS)
    fail(report_fd, ChildStep::session_keyring, errno);

  // Leaving uid 0 already cleared the permitted and effective sets; clear
  // them explicitly so that a uid-0 identity (--user root) has none either.
  struct __user_cap_header_struct hdr {};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &hdr, data) != 0) fail(report_fd, ChildStep::capabilities, errno);

  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(report_fd, ChildStep::no_new_privs, errno);

  // The kernel surface the run may reach (run/seccomp.h). Needs
  // no_new_privs, as the run has no CAP_SYS_ADMIN; the calls below it
  // (prctl, getppid, execve) are never in a denied group.
  // Denied calls go to a listener (run/seccomp_notify.h), which goes to
  // agentcage before anything of COMMAND runs: no listener, no run.
  if (plan.seccomp()->len == 0) fail(report_fd, ChildStep::seccomp, EINVAL);
  const long listener =
      ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, plan.seccomp());
  if (listener < 0) fail(report_fd, ChildStep::seccomp, errno);
  const ChildFailure handover{static_cast<int32_t>(ChildStep::seccomp_listener), 0};
  if (int err = hand_over_listener(report_fd, static_cast<int>(listener), &handover, sizeof handover))
    fail(report_fd, ChildStep::seccomp_listener, err);

  // Changing credentials clears the parent-death signal, so it is armed
  // last. If agentcage is already gone, do not start: the run is orphaned.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(report_fd, ChildStep::parent_death, errno);
  if (::getppid() != parent) fail(report_fd, ChildStep::parent_death, ESRCH);

  // execvp's search without its /bin/sh fallback for ENOEXEC: a file that
  // is not a valid executable is "not executable" (126).
  int first_eacces = 0, stop_err = 0;
  for (const char* path : plan.exec_paths()) {
    ::execve(path, plan.argv(), plan.envp());
    int err = errno;
    if (err == EACCES) first_eacces = err;
    if (exec_search_continues(err)) continue;
    stop_err = err;
    break;
  }
  fail(report_fd, ChildStep::exec, stop_err ? stop_err : first_eacces ? first_eacces : ENOENT);
}

}  // namespace agentcage::run
