// SPDX-License-Identifier: Apache-2.0
// The daemon's main loop: one epoll, the signals (SIGINT/SIGTERM stop,
// SIGHUP reloads, SIGUSR1 reopens the log) through a signalfd, and a once-a-second tick through a
// timerfd. The daemon's parts register their fds with a handler and are
// called when they are ready; nothing else blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;

  // Blocks SIGINT, SIGTERM, SIGHUP and SIGUSR1 (they arrive through the loop),
  // ignores SIGPIPE, and arms the tick.
  Status open(int tick_ms, std::function<void(int signo)> on_signal, std::function<void()> on_tick);
  // `events`: EPOLLIN etc. A handler may add or remove fds, its own too.
  void add(int fd, uint32_t events, Handler handler);
  void modify(int fd, uint32_t events);
  void remove(int fd);

  // Until stop(). 0 after a stop, 1 when epoll fails.
  int run();
  void stop() { stop_ = true; }

 private:
  void read_signals();

  struct Registration {
    uint32_t generation = 0;
    Handler handler;
  };
  UniqueFd epoll_, signal_fd_, timer_fd_;
  std::map<int, Registration> handlers_;
  uint32_t generation_ = 0;
  std::function<void(int)> on_signal_;
  std::function<void()> on_tick_;
  bool stop_ = false;
};

}  // namespace agentcage::daemon
