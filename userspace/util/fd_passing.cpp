// SPDX-License-Identifier: Apache-2.0
#include "util/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "util/raw_syscall.h"

namespace agentcage {
namespace {

// A message of one buffer with room for one descriptor.
struct OneFdMessage {
  iovec iov;
  msghdr msg;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];

  OneFdMessage(void* data, size_t size) : iov{data, size}, msg{} {
    std::memset(control, 0, sizeof control);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  OneFdMessage(const OneFdMessage&) = delete;
  OneFdMessage& operator=(const OneFdMessage&) = delete;
};

}  // namespace

long send_with_fd_raw(int sock, const void* data, size_t size, int fd) {
  OneFdMessage m(const_cast<void*>(data), size);
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  long n;
  do n = raw_syscall(SYS_sendmsg, sock, sysarg(&m.msg), MSG_NOSIGNAL);
  while (n == -EINTR);
  return n;
}

ssize_t send_with_fd(int sock, const void* data, size_t size, int fd) {
  const long n = send_with_fd_raw(sock, data, size, fd);
  if (n < 0) {
    errno = static_cast<int>(-n);
    return -1;
  }
  return n;
}

ssize_t recv_with_fd(int sock, void* buf, size_t size, UniqueFd& fd, int* msg_flags) {
  OneFdMessage m(buf, size);
  ssize_t n;
  do n = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c), sizeof got);
      fd.reset(got);
    }
  if (msg_flags) *msg_flags = m.msg.msg_flags;
  return n;
}

ssize_t send_with_fds(int sock, const void* data, size_t size, const int* fds, size_t count) {
  if (count > kMaxPassedFds) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  ssize_t n;
  do n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

ssize_t recv_with_fds(int sock, void* buf, size_t size, std::vector<UniqueFd>& fds, int* msg_flags,
                      bool nonblock) {
  iovec iov{buf, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxReceivedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (nonblock ? MSG_DONTWAIT : 0));
  while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      fds.emplace_back(got);
    }
  }
  if (msg_flags) *msg_flags = msg.msg_flags;
  return n;
}

}  // namespace agentcage
