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
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
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

void EventLoop::add(int fd, uint32_t events, Handler handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  handlers_[fd] = std::move(handler);
}

void EventLoop::modify(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
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
      auto it = handlers_.find(events[i].data.fd);
      if (it == handlers_.end()) continue;  // removed by an earlier handler of this batch
      // A copy: the handler may remove itself.
      Handler handler = it->second;
      handler(events[i].events);
    }
  }
  return 0;
}

}  // namespace agentcage::daemon
