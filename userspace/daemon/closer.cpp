// SPDX-License-Identifier: Apache-2.0
#include "daemon/closer.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

namespace agentcage::daemon {

namespace {

// Aimed at one worker by its own timer; it only interrupts the wait.
int interrupt_signal() { return SIGRTMIN + 2; }

void interrupted(int) {}

}  // namespace

struct Closer::State {
  using Clock = std::chrono::steady_clock;
  struct Owner {
    std::deque<std::pair<int, Clock::time_point>> fds;  // and when each was taken
    std::multiset<Clock::time_point> busy;              // when each close in progress was taken
  };
  std::function<int(int)> close_fd;
  mutable std::mutex mu;
  std::condition_variable ready;
  std::map<uid_t, Owner> owners;
  uid_t last = 0;  // the owner served last: the next turn starts after it
  size_t queued = 0, workers = 0, busy = 0;
  bool stop = false;

  struct Taken {
    uid_t owner;
    int fd;
    Clock::time_point since;
  };
  // The next descriptor in turn whose owner may have another worker.
  std::optional<Taken> take() {
    if (queued == 0 || owners.empty()) return std::nullopt;
    auto start = owners.upper_bound(last);
    for (size_t i = 0; i < owners.size(); ++i, ++start) {
      if (start == owners.end()) start = owners.begin();
      Owner& o = start->second;
      if (o.fds.empty() || o.busy.size() >= kMaxBusyPerOwner) continue;
      const auto [fd, since] = o.fds.front();
      o.fds.pop_front();
      o.busy.insert(since);
      --queued;
      ++busy;
      last = start->first;
      return Taken{start->first, fd, since};
    }
    return std::nullopt;
  }
  void done(const Taken& t) {
    --busy;
    auto it = owners.find(t.owner);
    it->second.busy.erase(it->second.busy.find(t.since));
    if (it->second.busy.empty() && it->second.fds.empty()) owners.erase(it);
  }
};

Closer::Closer(std::function<int(int)> close_fd) : state_(std::make_shared<State>()) {
  state_->close_fd = std::move(close_fd);
  struct sigaction sa {};
  sa.sa_handler = interrupted;  // no SA_RESTART: the wait ends
  sigemptyset(&sa.sa_mask);
  ::sigaction(interrupt_signal(), &sa, nullptr);
}

Closer::~Closer() {
  std::lock_guard lock(state_->mu);
  state_->stop = true;
  state_->ready.notify_all();
}

void Closer::close(uid_t owner, UniqueFd fd) {
  if (!fd) return;
  std::vector<UniqueFd> one;
  one.push_back(std::move(fd));
  close(owner, one);
}

void Closer::close(uid_t owner, std::vector<UniqueFd>& fds) {
  if (fds.empty()) return;
  std::unique_lock lock(state_->mu);
  State::Owner& o = state_->owners[owner];
  const auto now = State::Clock::now();
  for (UniqueFd& fd : fds)
    if (fd) {
      o.fds.emplace_back(fd.release(), now);
      ++state_->queued;
    }
  fds.clear();
  if (o.fds.empty() && o.busy.empty()) state_->owners.erase(owner);
  state_->ready.notify_all();
  spawn(state_, lock);
}

// Another worker when more wait than there are workers free (one that is in
// a close may be held there). Called with `lock` held; returns with it held.
void Closer::spawn(const std::shared_ptr<State>& s, std::unique_lock<std::mutex>& lock) {
  if (s->queued <= s->workers - s->busy || s->workers >= kMaxWorkers) return;
  ++s->workers;
  lock.unlock();
  try {
    std::thread([s] { work(s); }).detach();
  } catch (const std::system_error&) {
    lock.lock();
    --s->workers;  // the ones there are take the queue
    return;
  }
  lock.lock();
}

size_t Closer::pending(uid_t owner, std::chrono::milliseconds older_than) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->owners.find(owner);
  if (it == state_->owners.end()) return 0;
  const auto before = State::Clock::now() - older_than;
  size_t n = 0;
  for (const auto& [fd, since] : it->second.fds) n += since <= before;
  for (const auto& since : it->second.busy) n += since <= before;
  return n;
}

size_t Closer::pending() const {
  std::lock_guard lock(state_->mu);
  return state_->queued + state_->busy;
}

void Closer::work(const std::shared_ptr<State>& s) {
  // Only the interruption reaches this thread; the loop's signals stay the
  // loop's (its signalfd).
  sigset_t all;
  sigfillset(&all);
  sigdelset(&all, interrupt_signal());
  ::pthread_sigmask(SIG_SETMASK, &all, nullptr);
  sigevent ev{};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = interrupt_signal();
  ev._sigev_un._tid = static_cast<pid_t>(::syscall(SYS_gettid));
  timer_t timer{};
  const bool timed = ::timer_create(CLOCK_MONOTONIC, &ev, &timer) == 0;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(kInterruptEvery).count();
  const timespec every{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  std::unique_lock lock(s->mu);
  for (;;) {
    std::optional<State::Taken> next;
    s->ready.wait(lock, [&] { return (next = s->take()) || (s->stop && s->queued == 0); });
    if (!next) break;  // stopping, nothing left
    spawn(s, lock);    // the rest is not left behind this close
    lock.unlock();
    if (timed) {
      const itimerspec arm{every, every};
      ::timer_settime(timer, 0, &arm, nullptr);
    }
    s->close_fd(next->fd);
    if (timed) {
      const itimerspec disarm{};
      ::timer_settime(timer, 0, &disarm, nullptr);
    }
    lock.lock();
    s->done(*next);
    s->ready.notify_all();  // the owner may have another turn now
  }
  --s->workers;
  lock.unlock();
  if (timed) ::timer_delete(timer);
}

}  // namespace agentcage::daemon
