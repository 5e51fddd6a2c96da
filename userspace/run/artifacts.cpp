// SPDX-License-Identifier: Apache-2.0
#include "run/artifacts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/text.h"
#include "util/unique_fd.h"

namespace agentcage::run {
namespace {

constexpr mode_t kSetId = S_ISUID | S_ISGID;

// Clears the bits of the open `fd` (a regular file or directory).
Status clear(int fd, const struct stat& st, const std::string& shown) {
  if ((st.st_mode & kSetId) == 0) return {};
  if (::fchmod(fd, st.st_mode & 07777 & ~kSetId) != 0)
    return Error::from_errno("clearing set-id bits of " + shown);
  return {};
}

// `dirfd` is an open directory of the tree at `depth`; `shown` its path for
// messages.
Status walk(int dirfd, int depth, const std::string& shown) {
  if (depth > kMaxArtifactDepth)
    return Error{"more than " + std::to_string(kMaxArtifactDepth) +
                     " directory levels below the workspace at " + shown,
                 ELOOP};
  // fdopendir takes the descriptor: give it its own.
  const int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return Error::from_errno("listing " + shown);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return Error::from_errno("listing " + shown);
  }
  Status result;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (!e) {
      if (errno != 0) result = Error::from_errno("listing " + shown);
      break;
    }
    const char* name = e->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    const std::string child = shown + "/" + escape(name, 200);
    struct stat listed {};
    if (::fstatat(dirfd, name, &listed, AT_SYMLINK_NOFOLLOW) != 0) {
      result = Error::from_errno("checking " + child);
      break;
    }
    // Only regular files and directories: a link is left alone (never
    // followed), and set-id bits mean nothing on the other types.
    if (!S_ISREG(listed.st_mode) && !S_ISDIR(listed.st_mode)) continue;
    if (S_ISREG(listed.st_mode) && (listed.st_mode & kSetId) == 0) continue;
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
                      (S_ISDIR(listed.st_mode) ? O_DIRECTORY : 0);
    UniqueFd fd(::openat(dirfd, name, flags));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      result = Error::from_errno("opening " + child);
      break;
    }
    if (st.st_dev != listed.st_dev || st.st_ino != listed.st_ino) {
      result = Error{child + " changed while it was checked", EAGAIN};
      break;
    }
    if (result = clear(fd.get(), st, child); !result) break;
    if (S_ISDIR(st.st_mode))
      if (result = walk(fd.get(), depth + 1, child); !result) break;
  }
  ::closedir(d);
  return result;
}

}  // namespace

Status strip_setid_bits(const std::string& dir) {
  const std::string shown = escape(dir, 200);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return Error::from_errno("opening " + shown);
  if (Status s = clear(fd.get(), st, shown); !s) return s;
  return walk(fd.get(), 1, shown);
}

}  // namespace agentcage::run
