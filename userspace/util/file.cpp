// SPDX-License-Identifier: Apache-2.0
#include "util/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "util/unique_fd.h"

namespace agentcage {

Result<std::string> read_up_to(int fd, size_t max) {
  std::string text(max, '\0');
  size_t used = 0;
  while (used < text.size()) {
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

}  // namespace agentcage
