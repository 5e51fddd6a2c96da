// SPDX-License-Identifier: Apache-2.0
// Move-only owner of a file descriptor.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include <utility>

namespace agentcage {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Opens /dev/null on each of 0, 1 and 2 that is closed, so that no
// descriptor a process opens later (a pipe, a lock, a socket) lands there
// and is taken for stdin, stdout or stderr. false when one cannot be opened.
inline bool open_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) != fd) return false;
  return true;
}

// Closes every descriptor above 2 but the `count` in `keep` (a child that
// holds only what it works on: not the parent's result pipe or notice
// channel). Only system calls: for a child between fork and _exit. false
// (nothing closed) for more than 8 descriptors to keep; false when
// close_range fails.
inline bool close_fds_except(const int* keep, size_t count) {
  int sorted[8];
  if (count > 8) return false;
  size_t n = 0;
  for (size_t i = 0; i < count; ++i)
    if (keep[i] > 2) sorted[n++] = keep[i];
  for (size_t i = 1; i < n; ++i)
    for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; --j) std::swap(sorted[j - 1], sorted[j]);
  unsigned from = 3;
  for (size_t i = 0; i < n; ++i) {
    const unsigned fd = static_cast<unsigned>(sorted[i]);
    if (fd > from && ::syscall(SYS_close_range, from, fd - 1, 0U) != 0) return false;
    if (fd + 1 > from) from = fd + 1;
  }
  return ::syscall(SYS_close_range, from, ~0U, 0U) == 0;
}

}  // namespace agentcage
