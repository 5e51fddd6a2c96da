// SPDX-License-Identifier: Apache-2.0
// Counting the run's denied system calls. The filter (run/seccomp.h) does
// not answer a denied call itself: it hands it to a user-notification
// listener (SECCOMP_RET_USER_NOTIF), which the child creates with the filter
// (SECCOMP_FILTER_FLAG_NEW_LISTENER) and passes to agentcage over its report
// socket before exec (and agentcage ends a run whose listener it does not
// receive). agentcage answers every notification with EPERM and
// counts it; the call never runs.
//
// Why this cannot let a denied call through: only the listener can make a
// notified call proceed (SECCOMP_USER_NOTIF_FLAG_CONTINUE), and agentcage
// never sends that. If agentcage dies or closes the listener, the kernel
// fails every pending and later notified call with ENOSYS; while agentcage
// is slow, the caller waits (killably: cgroup.kill and the timeout still end
// it). The listener is inherited with the filter by every thread and child
// of the run, so their calls all arrive here. The run never holds the
// listener's descriptor: the child closes its copy before exec.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/unique_fd.h"

namespace agentcage::run {

// One denied call, for the result's denial records.
struct SyscallDenial {
  std::string name;  // "keyctl"; "i386:keyctl" for another ABI; "syscall_N" if unknown
  pid_t pid = 0;     // thread-group id
  pid_t tid = 0;
  uint32_t uid = 0;
  std::string comm;  // the kernel's bytes (need not be UTF-8)
};

// What a run's denied calls add up to.
struct SyscallReport {
  uint64_t total = 0;
  std::map<std::string, uint64_t> by_name;
  uint64_t records_taken = 0;          // denials that produced a record
  std::vector<SyscallDenial> records;  // the first kRecords
  static constexpr size_t kRecords = 8;
};

// The parent's side of the listener.
class SyscallSupervisor {
 public:
  explicit SyscallSupervisor(UniqueFd listener);
  // For poll(2): the listener, or -1 once no task of the run can notify
  // any more (poll ignores negative descriptors).
  int poll_fd() const { return done_ ? -1 : listener_.get(); }
  // Answers the pending notifications with EPERM and counts them (at most
  // a batch, so that the caller's loop stays responsive); never blocks.
  // Returns false when the listener itself failed: the caller ends the run
  // (its denied calls would still fail, but uncounted).
  bool answer_pending();
  // The counts so far, with names.
  SyscallReport report() const;

 private:
  UniqueFd listener_;
  bool done_ = false;
  std::map<uint64_t, uint64_t> counts_;  // (arch << 32 | nr) -> count
  uint64_t total_ = 0, records_taken_ = 0;
  std::vector<SyscallDenial> records_;
};

// Child side, after the filter is installed with its listener: sends the
// listener on `sock` (SCM_RIGHTS, with `message` as the payload) and closes
// its own copy. From then on the listener is agentcage's, on its way or
// taken: a denied call waits for agentcage's answer (or fails with ENOSYS
// should agentcage never take it). Raw system calls only, no allocation
// (runs between clone3 and exec, in the parent's memory:
// util/raw_syscall.h). Returns 0 or an errno.
int hand_over_listener(int sock, int listener, const void* message, size_t size);

// Parent side: one message from the child's report socket into `buf`
// (returns its length, 0 at EOF, -1 with errno), and the descriptor it
// carried, if any, into `fd` (close-on-exec).
ssize_t receive_report(int sock, void* buf, size_t size, UniqueFd& fd);

// The name of a notified call: the native name, "i386:"/"x32:" + name for
// another ABI, "syscall_N" when libseccomp does not know it.
std::string syscall_display_name(uint32_t arch, int nr);

}  // namespace agentcage::run
