// SPDX-License-Identifier: Apache-2.0
// The daemon's Closer (daemon/closer.h) on the host's own kernel: a TCP
// socket with SO_LINGER whose data its peer never takes waits in close() for
// the linger's time; the Closer's worker is interrupted, and the other
// descriptors it was given are closed meanwhile, never behind it. The kernel
// test DaemonRun.ADescriptorWhoseCloseWaitsDoesNotStallTheDaemon shows the
// same through the real daemon.
#include "daemon/closer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
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

  Closer closer;
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

  closer.close(lingering_socket(listener.get()));
  // Given after it: the write end of a pipe, closed at once.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd read_end(p[0]);
  std::vector<UniqueFd> more;
  more.emplace_back(p[1]);
  closer.close(more);
  EXPECT_TRUE(more.empty());
  pollfd pf{read_end.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&pf, 1, 200), 1) << "the pipe waited behind the lingering socket";
  EXPECT_TRUE(pf.revents & POLLHUP);
  // The lingering close is interrupted: nothing is left after about
  // Closer::kInterruptAfter.
  EXPECT_TRUE(wait_for([&] { return closer.queued() == 0; }, 3s)) << closer.queued() << " still closing";
}

}  // namespace
}  // namespace agentcage::daemon
