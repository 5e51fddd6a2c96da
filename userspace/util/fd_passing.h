// SPDX-License-Identifier: Apache-2.0
// A file descriptor sent with a message over a unix socket (SCM_RIGHTS).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <vector>

#include "util/unique_fd.h"

namespace agentcage {

// Sends `size` bytes of `data` with `fd` attached on `sock` (MSG_NOSIGNAL,
// EINTR retried). The bytes sent, or -1 with errno.
ssize_t send_with_fd(int sock, const void* data, size_t size, int fd);
// The same with a raw system call (util/raw_syscall.h), for a child that
// may share its parent's memory: the bytes sent or -errno, errno untouched.
long send_with_fd_raw(int sock, const void* data, size_t size, int fd);

// Receives up to `size` bytes into `buf` and the descriptor sent with them,
// if any, into `fd` (close-on-exec; room for one: a message with more is
// cut short). *msg_flags gets the message's flags (MSG_CTRUNC: a descriptor
// was not delivered, MSG_TRUNC: bytes were cut). The bytes received, or -1
// with errno (EINTR retried).
ssize_t recv_with_fd(int sock, void* buf, size_t size, UniqueFd& fd, int* msg_flags);

// Up to kMaxPassedFds descriptors with one message.
inline constexpr size_t kMaxPassedFds = 8;
ssize_t send_with_fds(int sock, const void* data, size_t size, const int* fds, size_t count);
// The most descriptors the kernel passes with one message (SCM_MAX_FD).
inline constexpr size_t kMaxReceivedFds = 253;
// Receives up to `size` bytes and appends the descriptors sent with them to
// `fds` (close-on-exec). There is room for kMaxReceivedFds, so the kernel
// never has to drop (and close, in the receiver) descriptors a message
// carried: the caller decides where each is closed. *msg_flags gets the
// message's flags. MSG_DONTWAIT when `nonblock`.
ssize_t recv_with_fds(int sock, void* buf, size_t size, std::vector<UniqueFd>& fds, int* msg_flags,
                      bool nonblock);

}  // namespace agentcage
