// SPDX-License-Identifier: Apache-2.0
// Closing what clients handed the daemon, off its event loop.
//
// A close can wait, for as long as a client likes: a TCP socket with
// SO_LINGER and unsent data waits for its peer to take the data, a FUSE file
// for its server's answer to FLUSH, and a unix socket releases the
// descriptors still queued on it (a lingering socket among them). The
// daemon's loop never closes such a descriptor itself: every descriptor a
// client sent and every client connection goes to a Closer, whose worker
// threads close them.
//
// A close still waiting after kInterruptAfter is interrupted with a signal
// aimed at its worker, again each kInterruptAfter: that ends a linger wait.
// One that no signal ends (a FUSE FLUSH the server never answers) holds its
// worker; the queue goes to another, up to kMaxWorkers. With every worker
// held the queue waits, and the loop goes on (docs/daemon.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "util/unique_fd.h"

namespace agentcage::daemon {

class Closer {
 public:
  static constexpr size_t kMaxWorkers = 16;
  static constexpr std::chrono::milliseconds kInterruptAfter{250};

  Closer();
  // Workers still closing go on alone; nothing waits for them.
  ~Closer();
  Closer(const Closer&) = delete;
  Closer& operator=(const Closer&) = delete;

  // Takes `fd` (nothing when it is not valid).
  void close(UniqueFd fd);
  // Takes every descriptor of `fds`, leaving it empty.
  void close(std::vector<UniqueFd>& fds);
  // Descriptors taken and not yet closed; workers in a close.
  size_t queued() const;
  size_t busy() const;

 private:
  struct State;
  static void work(const std::shared_ptr<State>& s);
  std::shared_ptr<State> state_;
};

}  // namespace agentcage::daemon
