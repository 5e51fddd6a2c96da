// SPDX-License-Identifier: Apache-2.0
#include "daemon/closer.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace agentcage::daemon {

namespace {

// Aimed at one worker by its own timer; it only interrupts the wait.
int interrupt_signal() { return SIGRTMIN + 2; }

void interrupted(int) {}

}  // namespace

struct Closer::State {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<int> fds;
  size_t workers = 0;
  size_t busy = 0;
  bool stop = false;
};

Closer::Closer() : state_(std::make_shared<State>()) {
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

void Closer::close(UniqueFd fd) {
  if (!fd) return;
  std::vector<UniqueFd> one;
  one.push_back(std::move(fd));
  close(one);
}

void Closer::close(std::vector<UniqueFd>& fds) {
  if (fds.empty()) return;
  std::unique_lock lock(state_->mu);
  for (UniqueFd& fd : fds)
    if (fd) state_->fds.push_back(fd.release());
  fds.clear();
  state_->ready.notify_all();
  // Another worker when more wait than there are workers free (one that is
  // in a close may be held there).
  if (state_->fds.size() > state_->workers - state_->busy && state_->workers < kMaxWorkers) {
    ++state_->workers;
    lock.unlock();
    try {
      std::thread([s = state_] { work(s); }).detach();
    } catch (const std::system_error&) {
      lock.lock();
      --state_->workers;  // the ones there are take the queue
    }
  }
}

size_t Closer::queued() const {
  std::lock_guard lock(state_->mu);
  return state_->fds.size() + state_->busy;
}

size_t Closer::busy() const {
  std::lock_guard lock(state_->mu);
  return state_->busy;
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
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Closer::kInterruptAfter).count();
  const timespec every{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  std::unique_lock lock(s->mu);
  for (;;) {
    s->ready.wait(lock, [&] { return s->stop || !s->fds.empty(); });
    if (s->fds.empty()) break;  // stopping, nothing left
    const int fd = s->fds.front();
    s->fds.pop_front();
    ++s->busy;
    lock.unlock();
    if (timed) {
      const itimerspec arm{every, every};
      ::timer_settime(timer, 0, &arm, nullptr);
    }
    ::close(fd);
    if (timed) {
      const itimerspec disarm{};
      ::timer_settime(timer, 0, &disarm, nullptr);
    }
    lock.lock();
    --s->busy;
  }
  --s->workers;
  lock.unlock();
  if (timed) ::timer_delete(timer);
}

}  // namespace agentcage::daemon
