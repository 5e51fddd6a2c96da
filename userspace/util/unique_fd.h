// SPDX-License-Identifier: Apache-2.0
// Move-only owner of a file descriptor.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

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

}  // namespace agentcage
