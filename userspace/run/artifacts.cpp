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

// Copies the open regular file `src` into a new file `name` of `dstdir`.
// `budget`: the bytes the copy may still write (hard links and sparse files
// would otherwise let a full tmpfs become many times its size on disk).
Status copy_file(int src, const struct stat& st, int dstdir, const char* name, const std::string& shown,
                 uint64_t& budget) {
  UniqueFd dst(::openat(dstdir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!dst) return Error::from_errno("creating the copy of " + shown);
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(src, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno("reading " + shown);
    if (n == 0) break;
    if (static_cast<uint64_t>(n) > budget)
      return Error{"the workspace holds more than its disk limit in file contents at " + shown +
                       " (hard links or sparse files)",
                   EFBIG};
    budget -= static_cast<uint64_t>(n);
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(dst.get(), buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Error::from_errno("writing the copy of " + shown);
      off += w;
    }
  }
  if (::fchown(dst.get(), st.st_uid, st.st_gid) != 0 || ::fchmod(dst.get(), st.st_mode & 0777) != 0)
    return Error::from_errno("setting owner and mode of the copy of " + shown);
  return {};
}

// Copies the entries of the open directory `src` into the open directory `dst`.
Status copy_dir(int src, int dst, int depth, const std::string& shown, uint64_t& budget) {
  if (depth > kMaxArtifactDepth)
    return Error{"more than " + std::to_string(kMaxArtifactDepth) +
                     " directory levels below the workspace at " + shown,
                 ELOOP};
  const int dup = ::fcntl(src, F_DUPFD_CLOEXEC, 0);
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
    if (::fstatat(src, name, &listed, AT_SYMLINK_NOFOLLOW) != 0) {
      result = Error::from_errno("checking " + child);
      break;
    }
    if (S_ISLNK(listed.st_mode)) {
      std::string target(static_cast<size_t>(listed.st_size) + 1, '\0');
      ssize_t n = ::readlinkat(src, name, target.data(), target.size());
      if (n < 0 || static_cast<size_t>(n) >= target.size()) {
        result = n < 0 ? Error::from_errno("reading the link " + child)
                       : Error{child + " changed while it was copied", EAGAIN};
        break;
      }
      target.resize(static_cast<size_t>(n));
      if (::symlinkat(target.c_str(), dst, name) != 0 ||
          ::fchownat(dst, name, listed.st_uid, listed.st_gid, AT_SYMLINK_NOFOLLOW) != 0) {
        result = Error::from_errno("copying the link " + child);
        break;
      }
      continue;
    }
    if (!S_ISREG(listed.st_mode) && !S_ISDIR(listed.st_mode)) continue;
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
                      (S_ISDIR(listed.st_mode) ? O_DIRECTORY : 0);
    UniqueFd fd(::openat(src, name, flags));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      result = Error::from_errno("opening " + child);
      break;
    }
    if (st.st_dev != listed.st_dev || st.st_ino != listed.st_ino) {
      result = Error{child + " changed while it was copied", EAGAIN};
      break;
    }
    if (S_ISREG(st.st_mode)) {
      if (result = copy_file(fd.get(), st, dst, name, child, budget); !result) break;
      continue;
    }
    if (::mkdirat(dst, name, 0700) != 0) {
      result = Error::from_errno("creating the copy of " + child);
      break;
    }
    UniqueFd sub(::openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) {
      result = Error::from_errno("opening the copy of " + child);
      break;
    }
    if (result = copy_dir(fd.get(), sub.get(), depth + 1, child, budget); !result) break;
    // Owner and mode last: a directory without write permission for its
    // owner is still filled in.
    if (::fchown(sub.get(), st.st_uid, st.st_gid) != 0 || ::fchmod(sub.get(), st.st_mode & 0777) != 0) {
      result = Error::from_errno("setting owner and mode of the copy of " + child);
      break;
    }
  }
  ::closedir(d);
  return result;
}

}  // namespace

Status copy_kept_tree(const std::string& from, const std::string& to, uint64_t max_bytes) {
  const std::string shown = escape(from, 200);
  UniqueFd src(::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!src || ::fstat(src.get(), &st) != 0) return Error::from_errno("opening " + shown);
  if (::mkdir(to.c_str(), 0700) != 0) return Error::from_errno("creating " + escape(to, 200));
  UniqueFd dst(::open(to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst) return Error::from_errno("opening " + escape(to, 200));
  uint64_t budget = max_bytes;
  if (Status s = copy_dir(src.get(), dst.get(), 1, shown, budget); !s) return s;
  if (::fchown(dst.get(), st.st_uid, st.st_gid) != 0 || ::fchmod(dst.get(), st.st_mode & 0777) != 0)
    return Error::from_errno("setting owner and mode of " + escape(to, 200));
  return {};
}

Status strip_setid_bits(const std::string& dir) {
  const std::string shown = escape(dir, 200);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return Error::from_errno("opening " + shown);
  if (Status s = clear(fd.get(), st, shown); !s) return s;
  return walk(fd.get(), 1, shown);
}

}  // namespace agentcage::run
