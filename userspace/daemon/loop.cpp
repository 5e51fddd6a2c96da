// SPDX-License-Identifier: Apache-2.0
#include "daemon/loop.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "util/log.h"

namespace agentcage::daemon {

Status EventLoop::open(int tick_ms, std::function<void(int)> on_signal, std::function<void()> on_tick) {
  on_signal_ = std::move(on_signal);
  on_tick_ = std::move(on_tick);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set, s);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, nullptr);
  signal_fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!signal_fd_ || !epoll_ || !timer_fd_) return Error::from_errno("daemon: setting up the event loop");
  itimerspec its{};
  its.it_value = {tick_ms / 1000, (tick_ms % 1000) * 1000000L};
  its.it_interval = its.it_value;
  ::timerfd_settime(timer_fd_.get(), 0, &its, nullptr);
  add(signal_fd_.get(), EPOLLIN, [this](uint32_t) { read_signals(); });
  add(timer_fd_.get(), EPOLLIN, [this](uint32_t) {
    uint64_t expirations;
    (void)!::read(timer_fd_.get(), &expirations, sizeof expirations);
    on_tick_();
  });
  return {};
}

// An event names its registration, not only its fd: a handler that closes
// fd N and a new registration that gets number N again in the same batch
// must not see the old registration's events.
namespace {
uint64_t token(int fd, uint32_t generation) {
  return (uint64_t{generation} << 32) | static_cast<uint32_t>(fd);
}
}  // namespace

void EventLoop::add(int fd, uint32_t events, Handler handler) {
  const uint32_t generation = ++generation_;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token(fd, generation);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  handlers_[fd] = Registration{generation, std::move(handler)};
}

void EventLoop::modify(int fd, uint32_t events) {
  auto it = handlers_.find(fd);
  if (it == handlers_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token(fd, it->second.generation);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::remove(int fd) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(fd);
}

void EventLoop::read_signals() {
  signalfd_siginfo si{};
  while (::read(signal_fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
    on_signal_(static_cast<int>(si.ssi_signo));
}

int EventLoop::run() {
  epoll_event events[64];
  while (!stop_) {
    int n = ::epoll_wait(epoll_.get(), events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::error(std::string("epoll_wait: ") + std::strerror(errno));
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
      const auto generation = static_cast<uint32_t>(events[i].data.u64 >> 32);
      auto it = handlers_.find(fd);
      // Removed (or removed and replaced) by an earlier handler of this batch.
      if (it == handlers_.end() || it->second.generation != generation) continue;
      // A copy: the handler may remove itself.
      Handler handler = it->second.handler;
      handler(events[i].events);
    }
  }
  return 0;
}

}  // namespace agentcage::daemon
