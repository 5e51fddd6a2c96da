// SPDX-License-Identifier: Apache-2.0
// The daemon's Closer (daemon/closer.h). On the host's own kernel: a TCP
// socket with SO_LINGER whose data its peer never takes waits in close() for
// the linger's time; the Closer's worker is interrupted at once, and other
// descriptors are never closed behind it. With a close held for as long as
// the test likes (as a FUSE server that never answers FLUSH holds one): an
// owner's held closes take at most kMaxBusyPerOwner workers, and another
// owner's descriptors are closed meanwhile. The kernel test
// DaemonRun.ADescriptorWhoseCloseWaitsDoesNotStallTheDaemon shows the loop's
// side through the real daemon.
#include "daemon/closer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace agentcage::daemon {
namespace {

using namespace std::chrono_literals;

// A connected TCP socket to `listener` (which never accepts) with an hour's
// linger and a full send queue.
UniqueFd lingering_socket(int listener) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const linger l{1, 3600};
  EXPECT_EQ(::setsockopt(s.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
  ::fcntl(s.get(), F_SETFL, O_NONBLOCK);
  static char junk[65536];
  size_t sent = 0;
  for (ssize_t n; (n = ::send(s.get(), junk, sizeof junk, MSG_NOSIGNAL)) > 0;) sent += static_cast<size_t>(n);
  EXPECT_GT(sent, 0u);
  return s;
}

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return cond();
}

TEST(Closer, ALingeringCloseIsInterruptedAndHoldsNoOtherDescriptor) {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener.get(), 8), 0);

  // The linger is real: a plain close() of such a socket on another thread
  // is still waiting half a second later.
  {
    UniqueFd s = lingering_socket(listener.get());
    std::atomic<bool> closed{false};
    std::thread t([&closed, fd = s.release()] {
      ::close(fd);
      closed = true;
    });
    std::this_thread::sleep_for(500ms);
    EXPECT_FALSE(closed) << "this kernel did not wait in close(): the case below proves nothing";
    t.detach();  // ends within the linger's hour, or with the process
  }

  Closer closer;
  closer.close(1000, lingering_socket(listener.get()));
  // Given after it: the write end of a pipe, closed at once.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd read_end(p[0]);
  std::vector<UniqueFd> more;
  more.emplace_back(p[1]);
  closer.close(1000, more);
  EXPECT_TRUE(more.empty());
  pollfd pf{read_end.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&pf, 1, 200), 1) << "the pipe waited behind the lingering socket";
  EXPECT_TRUE(pf.revents & POLLHUP);
  EXPECT_TRUE(wait_for([&] { return closer.pending() == 0; }, 1s)) << closer.pending() << " still closing";
}

TEST(Closer, AnOwnersHeldClosesNeverHoldAnotherOwners) {
  // Closes of the descriptors in `held` wait until `release`.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::set<int> held;
  std::atomic<int> waiting{0};
  Closer closer([&](int fd) {
    bool hold;
    {
      std::lock_guard lock(mu);
      hold = held.count(fd) != 0;
    }
    if (hold) {
      ++waiting;
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return release; });
      --waiting;
    }
    return ::close(fd);
  });
  std::vector<UniqueFd> a;
  for (int i = 0; i < 10; ++i) {
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    ::close(p[0]);
    std::lock_guard lock(mu);
    held.insert(p[1]);
    a.emplace_back(p[1]);
  }
  closer.close(1000, a);
  EXPECT_TRUE(wait_for([&] { return waiting == static_cast<int>(Closer::kMaxBusyPerOwner); }, 2s));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(waiting, static_cast<int>(Closer::kMaxBusyPerOwner)) << "more workers than one owner may hold";
  EXPECT_EQ(closer.pending(1000), 10u);
  // All ten have waited 100 ms (what the daemon mutes a member for).
  EXPECT_EQ(closer.pending(1000, 50ms), 10u);
  // Another owner's descriptor is closed meanwhile.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd read_end(p[0]);
  closer.close(2000, UniqueFd(p[1]));
  pollfd pf{read_end.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&pf, 1, 2000), 1) << "another owner's close waited behind the held ones";
  EXPECT_TRUE(wait_for([&] { return closer.pending(2000) == 0; }, 1s));
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(wait_for([&] { return closer.pending() == 0; }, 2s)) << closer.pending() << " still closing";
}

}  // namespace
}  // namespace agentcage::daemon
