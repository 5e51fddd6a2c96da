// SPDX-License-Identifier: Apache-2.0
#include "run/seccomp_notify.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/fd_passing.h"
#include "util/raw_syscall.h"

namespace agentcage::run {
namespace {

// Notifications answered per answer_pending(): a run flooding denied calls
// cannot keep agentcage from its timer and signals.
constexpr int kBatch = 256;
constexpr uint32_t kX32Bit = 0x40000000u;

std::string read_small(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s;
  std::getline(in, s, '\0');
  return s;
}

// Tgid and real uid of thread `tid` from /proc (agentcage shares the run's
// pid namespace).
void fill_task(SyscallDenial& d, pid_t tid) {
  d.tid = tid;
  d.pid = tid;
  std::istringstream status(read_small("/proc/" + std::to_string(tid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Tgid:", 0) == 0) d.pid = static_cast<pid_t>(std::strtol(line.c_str() + 5, nullptr, 10));
    if (line.rfind("Uid:", 0) == 0)
      d.uid = static_cast<uint32_t>(std::strtoul(line.c_str() + 4, nullptr, 10));
  }
  // comm is up to 15 bytes and a newline, and may itself hold a newline.
  std::string comm = read_small("/proc/" + std::to_string(tid) + "/comm");
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  d.comm = comm.substr(0, 15);
}

}  // namespace

std::string syscall_display_name(uint32_t arch, int nr) {
  std::string prefix;
  uint32_t token = arch;
  if (arch == AUDIT_ARCH_X86_64 && (static_cast<uint32_t>(nr) & kX32Bit)) {
    prefix = "x32:";
    token = SCMP_ARCH_X32;
  } else if (arch == AUDIT_ARCH_I386) {
    prefix = "i386:";
  } else if (arch != seccomp_arch_native()) {
    std::ostringstream o;
    o << "arch_0x" << std::hex << arch << ":";
    prefix = o.str();
  }
  char* name = seccomp_syscall_resolve_num_arch(token, nr);
  if (!name && !prefix.empty() && prefix == "x32:")
    name = seccomp_syscall_resolve_num_arch(token, static_cast<int>(static_cast<uint32_t>(nr) & ~kX32Bit));
  std::string out = prefix + (name ? std::string(name) : "syscall_" + std::to_string(nr));
  std::free(name);
  return out;
}

SyscallSupervisor::SyscallSupervisor(UniqueFd listener) : listener_(std::move(listener)) {}

bool SyscallSupervisor::answer_pending() {
  for (int i = 0; i < kBatch && !done_; ++i) {
    pollfd p{listener_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    if (!(p.revents & POLLIN)) {
      // POLLHUP: every task that used the filter is gone.
      if (p.revents & POLLHUP) done_ = true;
      return !(p.revents & (POLLERR | POLLNVAL));
    }
    // The kernel wants the buffer zeroed (EINVAL otherwise).
    seccomp_notif req;
    std::memset(&req, 0, sizeof req);
    if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
      // ENOENT: the caller was interrupted (a signal) before we took it.
      if (errno == EINTR || errno == ENOENT) continue;
      return false;
    }
    SyscallDenial d;
    const bool record = records_.size() < SyscallReport::kRecords;
    if (record) {
      fill_task(d, static_cast<pid_t>(req.pid));
      // The task is blocked in the call until answered; if the id is still
      // valid, the pid read above was that task's (not a reused one).
      __u64 id = req.id;
      if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) continue;
    }
    seccomp_notif_resp resp;
    std::memset(&resp, 0, sizeof resp);
    resp.id = req.id;
    resp.error = -EPERM;
    if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0) {
      // ENOENT: the caller was killed or interrupted; it did not get the
      // answer (a restarted call notifies again, and is counted then).
      if (errno == EINTR || errno == ENOENT) continue;
      return false;
    }
    ++total_;
    ++counts_[(static_cast<uint64_t>(req.data.arch) << 32) | static_cast<uint32_t>(req.data.nr)];
    ++records_taken_;
    if (record) {
      d.name = syscall_display_name(req.data.arch, req.data.nr);
      records_.push_back(std::move(d));
    }
  }
  return true;
}

SyscallReport SyscallSupervisor::report() const {
  SyscallReport r;
  r.total = total_;
  r.records_taken = records_taken_;
  r.records = records_;
  for (const auto& [key, count] : counts_)
    r.by_name[syscall_display_name(static_cast<uint32_t>(key >> 32), static_cast<int>(key & 0xffffffffu))] +=
        count;
  return r;
}

int hand_over_listener(int sock, int listener, const void* message, size_t size) {
  // Raw calls only (util/raw_syscall.h): the child may share the parent's
  // memory, errno included.
  const long n = send_with_fd_raw(sock, message, size, listener);
  const int err = n == static_cast<long>(size) ? 0 : n < 0 ? static_cast<int>(-n) : EIO;
  // The run must never hold the listener: it could answer its own calls.
  (void)raw_syscall(SYS_close, listener);
  return err;
}

ssize_t receive_report(int sock, void* buf, size_t size, UniqueFd& fd) {
  int flags = 0;
  ssize_t n = recv_with_fd(sock, buf, size, fd, &flags);
  if (n < 0) return n;
  // A message cut short (MSG_CTRUNC/MSG_TRUNC) is not a valid report.
  if (flags & (MSG_CTRUNC | MSG_TRUNC)) {
    errno = EMSGSIZE;
    return -1;
  }
  return n;
}

}  // namespace agentcage::run
