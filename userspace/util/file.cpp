// SPDX-License-Identifier: Apache-2.0
#include "util/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "util/unique_fd.h"

namespace agentcage {

Result<std::string> read_up_to(int fd, size_t max) {
  // The buffer grows with what arrives (4 KiB, then doubling up to `max`):
  // one of `max` bytes, zeroed first, cost every run 64 page faults for a
  // policy of a few hundred bytes (bench/README.md, section 3).
  std::string text;
  size_t used = 0;
  while (used < max) {
    if (used == text.size()) text.resize(std::min(max, std::max<size_t>(4096, text.size() * 2)));
    const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno("read");
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  text.resize(used);
  return text;
}

Result<std::string> read_regular_file(const std::string& path, size_t max, int flags,
                                      const std::function<Status(const struct stat&)>& check) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | flags));
  if (!fd) return Error::from_errno("cannot read " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error::from_errno("cannot stat " + path);
  if (!S_ISREG(st.st_mode)) return Error{path + ": not a regular file", EINVAL};
  if (check)
    if (Status st_ok = check(st); !st_ok) return st_ok.error();
  if (static_cast<size_t>(st.st_size) > max)
    return Error{path + ": larger than " + std::to_string(max) + " bytes", EFBIG};
  auto text = read_up_to(fd.get(), max);
  if (!text) return text.error().wrap("cannot read " + path);
  return text;
}

Status write_all_to(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno("write");
    if (n == 0) return Error{"write: no progress", EIO};
    text.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Status replace_file(const std::string& path, std::string_view text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  // O_EXCL: a PATH.tmp left by someone else is not ours to write through
  // (it could be a link planted in the directory).
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return Error::from_errno("cannot create " + tmp);
  auto fail = [&](Error e) -> Status {
    ::unlink(tmp.c_str());
    return e;
  };
  if (::fchmod(fd.get(), mode) != 0) return fail(Error::from_errno("cannot set the mode of " + tmp));
  if (Status st = write_all_to(fd.get(), text); !st) return fail(st.error().wrap("cannot write " + tmp));
  if (::fsync(fd.get()) != 0) return fail(Error::from_errno("cannot sync " + tmp));
  if (::close(fd.release()) != 0) return fail(Error::from_errno("cannot write " + tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(Error::from_errno("cannot replace " + path));
  // The rename itself reaches the disk with the directory.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) ::fsync(dfd.get());
  return {};
}

}  // namespace agentcage
