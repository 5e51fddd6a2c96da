// SPDX-License-Identifier: Apache-2.0
// The run's stdin, stdout and stderr: what the caller pointed them at must
// not be damaged by the run.
//
// An open file description is shared: a run handed the caller's regular
// file as stdout could seek back and rewrite it, truncate it, punch holes in
// it, clear O_APPEND, map it, or lock it; a read-write stdin could be
// written. So a regular file or block device never reaches the run:
//   stdout, stderr  are relayed: the run writes into a pipe, agentcage
//                   appends what it reads to the caller's descriptor (the
//                   caller's offset and O_APPEND apply as for its own
//                   writes). stdout and stderr on one description (2>&1)
//                   share one pipe, so their order is kept. What reaches
//                   the caller's files this way is bounded by limits.disk
//                   (both together): past it the pipe is closed, so the
//                   run's next write fails with EPIPE as it would on a full
//                   disk, and the result says the output was cut. They
//                   are written as the run's uid would for space: with
//                   its uid and gid as the file system's and without
//                   CAP_SYS_RESOURCE, so that the run's output never takes
//                   the blocks a file system reserves for root nor goes
//                   past a quota (agentcage itself is root).
//   stdin           is reopened read-only, a description of the run's own at
//                   the caller's offset (the caller's offset does not move);
//                   a stdin the caller could not read becomes /dev/null.
// Pipes, FIFOs, sockets and character devices (terminals, /dev/null) are
// passed as they are: nothing in them can be rewritten, and isatty() keeps
// its answer. A terminal's input cannot be pushed into (TIOCSTI is denied in
// every scope, bpf: AC_HOOK_TTY), and the run has no controlling terminal.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::run {

enum class StdioWay { pass, relay, read_only };

// How descriptor `fd` (0, 1 or 2) of file type `mode` (st_mode) reaches the
// run. Pure, for the unit tests.
StdioWay stdio_way(int fd, mode_t mode);

class StdioRelay {
 public:
  // Looks at this process's 0, 1 and 2 and prepares what the run gets.
  // max_bytes: at most this much relayed output in all (limits.disk).
  // uid, gid: who the writes are made as for space (the run's).
  static Result<StdioRelay> prepare(std::optional<uint64_t> max_bytes, uid_t uid, gid_t gid);

  // The descriptor the child makes its `i` (dup2), or -1 to keep its own.
  std::array<int, 3> child_fds() const;
  // Closes the child's ends once the child exists (EOF needs it).
  void close_child_ends();

  // The read ends to poll (POLLIN), appended to `fds`.
  void add_poll_fds(std::vector<pollfd>& fds) const;
  // Moves what is readable now; call after poll() with the same `fds`.
  void pump(const std::vector<pollfd>& fds);
  // Moves everything left, without blocking: call when no process of the run
  // is left (then every pipe ends in EOF).
  void drain();
  // Relay errors (the caller's descriptor refused a write, the limit was
  // reached), for a warning.
  const std::vector<std::string>& problems() const { return problems_; }
  // Whether output was cut at the limit.
  bool truncated() const { return truncated_; }

 private:
  struct Out {
    UniqueFd read_end, write_end;
    int target = -1;             // the caller's descriptor the data goes to
    std::vector<int> child_fds;  // where the child gets write_end (1, 2 or both)
  };
  void move(Out& out, bool until_eof);

  std::vector<Out> outs_;
  UniqueFd stdin_;  // the read-only reopened stdin, or /dev/null
  std::vector<std::string> problems_;
  std::optional<uint64_t> limit_;  // max_bytes
  uid_t writer_uid_ = 0;
  gid_t writer_gid_ = 0;
  uint64_t relayed_ = 0;           // bytes written to the caller's files so far
  bool truncated_ = false;
};

}  // namespace agentcage::run
