// SPDX-License-Identifier: Apache-2.0
// No descriptor passed in from outside the scope: a socket the host or
// another run created (a connection that would carry the run's traffic past
// network.allow) and a file the policy would not let the run open are
// refused at file_receive, and so is any io_uring instance; the run's own
// sockets, the files it may open, pipes and eventfds still pass. The sender queues the descriptor on a
// socketpair before the scoped receiver starts, so each case differs only in what is passed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"
#include "util/fd_passing.h"

namespace agentcage {
namespace {

using namespace kt;

bool send_fd(int via, int fd) { return send_with_fd(via, "x", 1, fd) == 1; }

// Receive one byte and the descriptor sent with it on `via`. kOk (and
// *out) when it arrived, kDenied when the kernel dropped it from the
// message (MSG_CTRUNC without a descriptor: file_receive refused it),
// kOtherError otherwise.
int recv_fd(int via, int* out) {
  char byte = 0;
  UniqueFd fd;
  int flags = 0;
  if (recv_with_fd(via, &byte, 1, fd, &flags) != 1) return kOtherError;
  if (fd) {
    *out = fd.release();
    return kOk;
  }
  return (flags & MSG_CTRUNC) ? kDenied : kOtherError;
}

// A receiver's probe: the descriptor arrives and `use` works on it.
int receive_and(int via, int (*use)(int)) {
  ::alarm(20);
  int fd = -1;
  int code = recv_fd(via, &fd);
  if (code != kOk) return code;
  return use(fd);
}

int read_byte(int fd) {
  char c;
  return ::read(fd, &c, 1) == 1 ? kOk : 10 + classify(errno);
}
int is_socket(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 ? kOk : 10 + classify(errno);
}

class FdPassTest : public PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 24;
  FdPassTest() : PolicyScopeTest(kSlot, "fp") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair_), 0);
    // No network rules; the workspace readable and writable, nothing else
    // of the test's directory.
    apply_yaml(
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-fdpass\nspec:\n"
        "  files:\n    write: [\"${workspace}\"]\n  network: {}\n",
        ws_.string());
  }
  void TearDown() override {
    for (int fd : pair_)
      if (fd >= 0) ::close(fd);
    PolicyScopeTest::TearDown();
  }

  // Queue `fd` from this (unscoped) process, then receive it in the scope.
  int pass_in(int fd, int (*use)(int)) {
    if (!send_fd(pair_[0], fd)) return -1;
    const int via = pair_[1];
    return scoped([via, use] { return receive_and(via, use); });
  }

  int pair_[2] = {-1, -1};
};

TEST_F(FdPassTest, AHostSocketIsNotPassedIn) {
  auto host = Listener::tcp();
  ASSERT_TRUE(host.has_value());
  // A connection the host opened: in the run it would be a way out that
  // network.allow (empty here) never saw.
  int conn = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(host->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(conn, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const uint64_t before = denied(AC_HOOK_FILE_RECEIVE);
  EXPECT_EQ(pass_in(conn, is_socket), kDenied);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
  ::close(conn);

  // The run's own sockets pass between its processes: a TCP socket one of
  // them created, sent to another over a socketpair of the run's.
  EXPECT_EQ(scoped([] {
              int sp[2];
              if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) return 20;
              int sender = in_child(false, [&] {
                int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                return s >= 0 && send_fd(sp[0], s) ? kOk : kOtherError;
              });
              if (sender != kOk) return 30 + sender;
              return receive_and(sp[1], is_socket);
            }),
            kOk);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
}

TEST_F(FdPassTest, AnotherScopesSocketIsNotPassedIn) {
  // The sender is another run: its socket is as foreign as the host's.
  auto cg2 = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "fp-other-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg2.ok()) << cg2.error().message;
  ASSERT_TRUE(enforcer()->add_scope(kt::scope_cgroup(*cg2), cg2->id(), slot_, ws_.string()).ok());
  const int via = pair_[0];
  EXPECT_EQ(run_in_cgroup(cg2->fd(),
                          [via] {
                            int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                            return s >= 0 && send_fd(via, s) ? kOk : kOtherError;
                          }),
            kOk);
  const uint64_t before = denied(AC_HOOK_FILE_RECEIVE);
  const int in = pair_[1];
  EXPECT_EQ(scoped([in] { return receive_and(in, is_socket); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
  EXPECT_TRUE(enforcer()->remove_scope(kt::scope_cgroup(*cg2)).ok());
  EXPECT_TRUE(cg2->remove().ok());
}

TEST_F(FdPassTest, AFileIsPassedInOnlyIfTheRunCouldOpenIt) {
  const std::string secret = base("secret.txt"), mine = ws("mine.txt");
  for (const auto& p : {secret, mine}) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "s", 1), 1);
    ::close(fd);
  }
  // The run cannot open the host's file itself...
  ASSERT_EQ(scoped([&] { return try_open(secret, O_RDONLY); }), kDenied);
  const uint64_t before = denied(AC_HOOK_FILE_RECEIVE);
  // ...nor have it handed in.
  int fd = ::open(secret.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(pass_in(fd, read_byte), kDenied);
  ::close(fd);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);

  // A file of its workspace, read and read-write, and a pipe: received.
  fd = ::open(mine.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(pass_in(fd, read_byte), kOk);
  ::close(fd);
  fd = ::open(mine.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(pass_in(fd, read_byte), kOk);
  ::close(fd);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(::write(p[1], "p", 1), 1);
  EXPECT_EQ(pass_in(p[0], read_byte), kOk);
  ::close(p[0]);
  ::close(p[1]);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
}

// pidfd_getfd of descriptor `fd` of process `pid` as a probe code: kOk,
// kDenied (EACCES: file_receive refused it), 13 (EPERM: no ptrace access to
// the process), 20 (pidfd_open failed), kOtherError.
int grab(pid_t pid, int fd) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return 20;
  int got = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  int err = errno;
  ::close(pidfd);
  if (got >= 0) {
    ::close(got);
    return kOk;
  }
  return err == EACCES ? kDenied : err == EPERM ? 13 : kOtherError;
}

int new_ring(unsigned flags) {
  io_uring_params p{};
  p.flags = flags;
  p.sq_thread_idle = 1000;
  return static_cast<int>(::syscall(__NR_io_uring_setup, 4, &p));
}

TEST_F(FdPassTest, NoIoUringInstanceGetsIn) {
  // A ring carries requests past the run's rules: with a submission thread
  // they run in the cgroup of whoever set the ring up, and its registered
  // files are its creator's. A scope without a seccomp filter (as an
  // attached workload) could submit on a host's ring. From the host, the
  // kernel refuses to pass a ring over a unix socket, and pidfd_getfd of a
  // host process is ptrace across the scope's border.
  int ring = new_ring(IORING_SETUP_SQPOLL);
  ASSERT_GE(ring, 0) << std::strerror(errno);
  EXPECT_FALSE(send_fd(pair_[0], ring)) << "the kernel passed an io_uring instance over SCM_RIGHTS";
  const pid_t self = ::getpid();
  const uint64_t escape_before = denied(AC_HOOK_SCOPE_ESCAPE);
  EXPECT_EQ(scoped([self, ring] { return grab(self, ring); }), 13) << "pidfd_getfd of a host process's ring";
  EXPECT_EQ(denied(AC_HOOK_SCOPE_ESCAPE) - escape_before, 1u);
  ::close(ring);

  // Inside the run, with debugging allowed (its processes may take each
  // other's descriptors): no ring either (file_receive), an eventfd passes.
  apply_yaml(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-fdpass\nspec:\n"
      "  exec:\n    debugging: allow\n  files:\n    write: [\"${workspace}\"]\n  network: {}\n",
      ws_.string());
  const uint64_t before = denied(AC_HOOK_FILE_RECEIVE);
  EXPECT_EQ(scoped([] {
              int r = new_ring(0);
              int efd = ::eventfd(0, EFD_CLOEXEC);
              if (r < 0 || efd < 0) return 20;
              const pid_t parent = ::getpid();
              return in_child(false, [&] {
                int a = grab(parent, r), b = grab(parent, efd);
                return a != kDenied ? 30 + a : b != kOk ? 60 + b : kOk;
              });
            }),
            kOk);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
}

TEST_F(FdPassTest, NoNamespaceFileIsPassedIn) {
  // A namespace descriptor of the host (what setns needs) is refused like
  // the run's own open of one; an eventfd from the host still passes.
  int ns = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ns, 0);
  const uint64_t before = denied(AC_HOOK_FILE_RECEIVE);
  EXPECT_EQ(pass_in(ns, [](int) { return kOk; }), kDenied);
  ::close(ns);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
  int efd = ::eventfd(1, EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  EXPECT_EQ(pass_in(efd,
                    [](int fd) {
                      uint64_t v = 0;
                      return ::read(fd, &v, sizeof v) == sizeof v ? kOk : kOtherError;
                    }),
            kOk);
  ::close(efd);
  EXPECT_EQ(denied(AC_HOOK_FILE_RECEIVE) - before, 1u);
}

}  // namespace
}  // namespace agentcage
