// SPDX-License-Identifier: Apache-2.0
// Closing what clients handed the daemon, off its event loop.
//
// A close can wait, for as long as a client likes: a TCP socket with
// SO_LINGER and unsent data waits for its peer to take the data, a FUSE file
// for its server's answer to FLUSH (on every close, by any process), and a
// unix socket releases the descriptors still queued on it (a lingering
// socket among them). The daemon's loop never closes such a descriptor
// itself: every client connection and every descriptor a client sent goes to
// the Closer, whose worker threads close them.
//
// A close is interrupted by a signal aimed at its worker every
// kInterruptEvery while it lasts: a linger wait ends at once. What no signal
// ends (a FUSE FLUSH its server never answers) holds its worker. Each owner
// (a client's uid; kConnections for the connections themselves, whose close
// never waits on a FLUSH) has its own queue, taken in turn, and at most
// kMaxBusyPerOwner workers at once: one owner's held closes never hold
// another's. pending(owner, older_than) says how many of an owner's have
// waited that long, so that the daemon stops reading from an owner whose
// descriptors pile up (daemon/control_server.h).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "util/unique_fd.h"

namespace agentcage::daemon {

class Closer {
 public:
  static constexpr size_t kMaxWorkers = 16;
  static constexpr size_t kMaxBusyPerOwner = 4;
  static constexpr std::chrono::milliseconds kInterruptEvery{1};
  // The owner of client connections (no uid has it: uid_t(-1) is invalid).
  static constexpr uid_t kConnections = static_cast<uid_t>(-1);

  // `close_fd` is what closes (::close; the unit tests hold it).
  explicit Closer(std::function<int(int)> close_fd = ::close);
  // Workers still closing go on alone; nothing waits for them.
  ~Closer();
  Closer(const Closer&) = delete;
  Closer& operator=(const Closer&) = delete;

  // Takes `fd` (nothing when it is not valid).
  void close(uid_t owner, UniqueFd fd);
  // Takes every descriptor of `fds`, leaving it empty.
  void close(uid_t owner, std::vector<UniqueFd>& fds);
  // An owner's descriptors taken at least `older_than` ago and not yet
  // closed (queued or in a close).
  size_t pending(uid_t owner, std::chrono::milliseconds older_than = std::chrono::milliseconds{0}) const;
  // All of them.
  size_t pending() const;

 private:
  struct State;
  static void work(const std::shared_ptr<State>& s);
  static void spawn(const std::shared_ptr<State>& s, std::unique_lock<std::mutex>& lock);
  std::shared_ptr<State> state_;
};

}  // namespace agentcage::daemon
