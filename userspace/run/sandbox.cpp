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

#include "cgroup/cgroup.h"
#include "run/options.h"
#include "run/seccomp_notify.h"
#include "util/raw_syscall.h"

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

// The child makes raw system calls only (util/raw_syscall.h): it may share
// the parent's memory (cgroup::spawn_in_cgroup_sharing_memory), errno and
// the C library's state included. Each returns its result or -errno.
[[noreturn]] void child_exit(int code) {
  for (;;) (void)raw_syscall(SYS_exit_group, code);
}

[[noreturn]] void fail(int report_fd, ChildStep step, long err) {
  const ChildFailure f{static_cast<int32_t>(step), static_cast<int32_t>(err)};
  // A short or failed write leaves the parent with a truncated report, which
  // it treats as a setup failure too.
  long n;
  do n = raw_syscall(SYS_write, report_fd, sysarg(&f), sizeof f);
  while (n == -EINTR);
  child_exit(125);
}

// prlimit64's struct, whatever the size of the library's rlim_t.
struct Rlimit64 {
  uint64_t cur = 0, max = 0;
};

// A system call's result, or the end of the child with a report of `step`.
long must(long ret, int report_fd, ChildStep step) {
  if (ret < 0) fail(report_fd, step, -ret);
  return ret;
}

}  // namespace

void child_main(const ChildPlan& plan, int report_fd, pid_t parent) {
  // Signals: default handling for every one (a handler of the parent's must
  // never run here), then none blocked (the parent blocks the ones it takes
  // through a signalfd, or all of them around the clone; the mask and
  // ignored dispositions would survive exec). The kernel's sigaction with
  // SIG_DFL, no flags and no mask is all zeros.
  struct {
    unsigned long handler, flags, restorer, mask;
  } dfl{};
  for (long sig = 1; sig <= 64; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      (void)raw_syscall(SYS_rt_sigaction, sig, sysarg(&dfl), 0, sizeof dfl.mask);
  const unsigned long none = 0;
  must(raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, sysarg(&none), 0, sizeof none), report_fd,
       ChildStep::signals);

  // A new session: no controlling terminal, not in the caller's process
  // group (a ^C reaches agentcage, which ends the run through cgroup.kill).
  must(raw_syscall(SYS_setsid), report_fd, ChildStep::session);

  // The relay pipes and the read-only stdin in place of the caller's files
  // (run/stdio.h). Their sources are all above 2, so none is overwritten.
  for (int i = 0; i < 3; ++i)
    if (const int from = plan.stdio()[static_cast<size_t>(i)]; from >= 0 && from != i)
      must(raw_syscall(SYS_dup3, from, i, 0), report_fd, ChildStep::stdio);

  // Keep 0, 1, 2 and the report pipe (moved to fd 3, CLOEXEC), close the rest.
  if (report_fd != kReportFd) {
    must(raw_syscall(SYS_dup3, report_fd, kReportFd, O_CLOEXEC), report_fd, ChildStep::close_fds);
    report_fd = kReportFd;
  }
  if (const long closed = raw_syscall(SYS_close_range, kReportFd + 1, ~0U, 0); closed < 0) {
    if (closed != -ENOSYS) fail(report_fd, ChildStep::close_fds, -closed);
    Rlimit64 nofile{};
    must(raw_syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, sysarg(&nofile)), report_fd, ChildStep::close_fds);
    for (uint64_t fd = kReportFd + 1; fd < nofile.cur; ++fd)
      (void)raw_syscall(SYS_close, static_cast<long>(fd));
  }

  must(raw_syscall(SYS_chdir, sysarg(plan.workdir())), report_fd, ChildStep::chdir);
  (void)raw_syscall(SYS_umask, 077);
  const Rlimit64 no_core{};
  must(raw_syscall(SYS_prlimit64, 0, RLIMIT_CORE, sysarg(&no_core), 0), report_fd, ChildStep::rlimit_core);

  // Capabilities. The bounding set can only shrink while we still hold
  // CAP_SETPCAP, so it goes first: afterwards not even a uid-0 identity or a
  // file with capabilities can regain any.
  for (long cap = 0; cap < 64; ++cap)
    if (const long dropped = raw_syscall(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0); dropped < 0) {
      if (dropped == -EINVAL) break;  // past the kernel's last capability
      fail(report_fd, ChildStep::bounding_set, -dropped);
    }
  if (const long cleared = raw_syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
      cleared < 0 && cleared != -EINVAL)
    fail(report_fd, ChildStep::ambient_caps, -cleared);
  // uid 0 gets no capabilities on exec (NOROOT), capabilities are not kept
  // across the uid change and ambient ones cannot be raised; all locked.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                             SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  must(raw_syscall(SYS_prctl, PR_SET_SECUREBITS, static_cast<long>(bits), 0, 0, 0), report_fd,
       ChildStep::securebits);

  // Raw calls change this process alone (the library's wrappers would
  // signal every thread they know of: the parent's, with shared memory).
  must(raw_syscall(SYS_setgroups, 0, 0), report_fd, ChildStep::setgroups);
  must(raw_syscall(SYS_setresgid, plan.gid(), plan.gid(), plan.gid()), report_fd, ChildStep::setgid);
  must(raw_syscall(SYS_setresuid, plan.uid(), plan.uid(), plan.uid()), report_fd, ChildStep::setuid);

  // A session keyring of the run's own, owned by the sandbox user: the
  // inherited one is the caller's (its keys would be the run's to read), and
  // without one the kernel would hand out the uid's user-session keyring,
  // which outlives the run. This one goes with the run's last process; the
  // scope may not use the per-uid keyrings (bpf/ipc.bpf.h). No keys in the
  // kernel (ENOSYS): nothing to share.
  if (const long joined = raw_syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, 0);
      joined < 0 && joined != -ENOSYS)
    fail(report_fd, ChildStep::session_keyring, -joined);

  // Leaving uid 0 already cleared the permitted and effective sets; clear
  // them explicitly so that a uid-0 identity (--user root) has none either.
  struct __user_cap_header_struct hdr {};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  must(raw_syscall(SYS_capset, sysarg(&hdr), sysarg(data)), report_fd, ChildStep::capabilities);

  must(raw_syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), report_fd, ChildStep::no_new_privs);

  // The kernel surface the run may reach (run/seccomp.h). Needs
  // no_new_privs, as the run has no CAP_SYS_ADMIN; the calls below it
  // (prctl, getppid, execve) are never in a denied group.
  // Denied calls go to a listener (run/seccomp_notify.h), which is on its
  // way to agentcage before anything of COMMAND runs: no listener, no run.
  if (plan.seccomp()->len == 0) fail(report_fd, ChildStep::seccomp, EINVAL);
  const long listener = must(raw_syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                                         SECCOMP_FILTER_FLAG_NEW_LISTENER, sysarg(plan.seccomp())),
                             report_fd, ChildStep::seccomp);
  const ChildFailure handover{static_cast<int32_t>(ChildStep::seccomp_listener), 0};
  if (int err = hand_over_listener(report_fd, static_cast<int>(listener), &handover, sizeof handover))
    fail(report_fd, ChildStep::seccomp_listener, err);

  // Changing credentials clears the parent-death signal, so it is armed
  // last. If agentcage is already gone, do not start: the run is orphaned.
  must(raw_syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), report_fd, ChildStep::parent_death);
  if (raw_syscall(SYS_getppid) != parent) fail(report_fd, ChildStep::parent_death, ESRCH);

  // execvp's search without its /bin/sh fallback for ENOEXEC: a file that
  // is not a valid executable is "not executable" (126).
  long first_eacces = 0, stop_err = 0;
  for (const char* path : plan.exec_paths()) {
    const long err = -raw_syscall(SYS_execve, sysarg(path), sysarg(plan.argv()), sysarg(plan.envp()));
    if (err == EACCES) first_eacces = err;
    if (exec_search_continues(static_cast<int>(err))) continue;
    stop_err = err;
    break;
  }
  fail(report_fd, ChildStep::exec, stop_err ? stop_err : first_eacces ? first_eacces : ENOENT);
}

bool child_may_share_memory() {
  if (!cgroup::can_spawn_sharing_memory()) return false;
  char value[4] = {};
  const int fd = ::open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, value, sizeof value - 1);
  ::close(fd);
  return n >= 1 && (value[0] == '0' || value[0] == '2') && (n == 1 || value[1] == '\n');
}

void start_child(void* arg) {
  const auto* start = static_cast<const ChildStart*>(arg);
  child_main(*start->plan, start->report_fd, start->parent);
}

}  // namespace agentcage::run
