// SPDX-License-Identifier: Apache-2.0
#include "run/artifacts.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "cgroup/cgroup.h"
#include "util/fd_passing.h"
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

// One entry of a directory being walked: its name, its path for messages,
// and what fstatat(AT_SYMLINK_NOFOLLOW) said of it.
struct Entry {
  const char* name;
  std::string shown;
  struct stat listed;
};

// Calls `fn` for each entry of the open directory `dirfd` (`.` and `..`
// left out), which is `depth` levels below the workspace; `shown` is its
// path for messages. Stops at the first error, from the listing or `fn`.
Status for_each_entry(int dirfd, int depth, const std::string& shown,
                      const std::function<Status(const Entry&)>& fn) {
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
    Entry entry{name, shown + "/" + escape(name, 200), {}};
    if (::fstatat(dirfd, name, &entry.listed, AT_SYMLINK_NOFOLLOW) != 0) {
      result = Error::from_errno("checking " + entry.shown);
      break;
    }
    if (result = fn(entry); !result) break;
  }
  ::closedir(d);
  return result;
}

// Opens the listed regular file or directory `e` of `dirfd` without
// following a link, and checks that it is still what was listed; *st gets
// its fstat.
Result<UniqueFd> open_listed(int dirfd, const Entry& e, struct stat* st) {
  const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
                    (S_ISDIR(e.listed.st_mode) ? O_DIRECTORY : 0);
  UniqueFd fd(::openat(dirfd, e.name, flags));
  if (!fd || ::fstat(fd.get(), st) != 0) return Error::from_errno("opening " + e.shown);
  if (st->st_dev != e.listed.st_dev || st->st_ino != e.listed.st_ino)
    return Error{e.shown + " changed while it was read", EAGAIN};
  return fd;
}

// The target of the listed symbolic link `e` of `dirfd`.
Result<std::string> read_link(int dirfd, const Entry& e) {
  std::string target(static_cast<size_t>(e.listed.st_size) + 1, '\0');
  ssize_t n = ::readlinkat(dirfd, e.name, target.data(), target.size());
  if (n < 0) return Error::from_errno("reading the link " + e.shown);
  if (static_cast<size_t>(n) >= target.size()) return Error{e.shown + " changed while it was read", EAGAIN};
  target.resize(static_cast<size_t>(n));
  return target;
}

// Whether `give` takes an entry of this owner and kind (a directory has
// more than one link by nature).
bool given(const std::optional<GiveAway>& give, const struct stat& st) {
  return give && st.st_uid == give->from && (S_ISDIR(st.st_mode) || st.st_nlink == 1);
}

// Gives the open regular file or directory `fd` (fstat: `st`) away when
// `give` takes it: as the caller's plain file, without the ACL entries the
// run may have set (one naming its uid would outlive the ownership) and
// without write permission for group and others (its group becomes the new
// owner's).
Status give_away(int fd, const struct stat& st, const std::string& shown,
                 const std::optional<GiveAway>& give) {
  if (!given(give, st)) return {};
  for (const char* acl : {"system.posix_acl_access", "system.posix_acl_default"})
    if (::fremovexattr(fd, acl) != 0 && errno != ENODATA && errno != EOPNOTSUPP &&
        !(errno == EACCES && !S_ISDIR(st.st_mode)))  // a default ACL on a file
      return Error::from_errno("removing the ACL of " + shown);
  if (::fchmod(fd, st.st_mode & 0755) != 0 || ::fchown(fd, give->uid, give->gid) != 0)
    return Error::from_errno("giving " + shown + " to uid " + std::to_string(give->uid));
  return {};
}

// Gives away a listed entry that is neither a regular file nor a directory
// (a link, FIFO or socket: never opened for reading), through an O_PATH
// descriptor checked to be the entry listed: by name, whoever may rename in
// the directory could put another file there between the listing and the
// change.
Status give_away_other(int dirfd, const Entry& e, const std::optional<GiveAway>& give) {
  if (!given(give, e.listed)) return {};
  UniqueFd fd(::openat(dirfd, e.name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return Error::from_errno("opening " + e.shown);
  if (st.st_dev != e.listed.st_dev || st.st_ino != e.listed.st_ino || !given(give, st))
    return Error{e.shown + " changed while it was handed back", EAGAIN};
  if (::fchownat(fd.get(), "", give->uid, give->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
    return Error::from_errno("giving " + e.shown + " to uid " + std::to_string(give->uid));
  return {};
}

// Clears set-id bits below the open directory `dirfd` and gives away what
// `give` takes (hand_back_tree_at).
Status walk(int dirfd, int depth, const std::string& shown, const std::optional<GiveAway>& give) {
  return for_each_entry(dirfd, depth, shown, [&](const Entry& e) -> Status {
    if (!S_ISDIR(e.listed.st_mode)) return hand_back_entry(dirfd, e.name, e.listed, e.shown, give);
    struct stat st {};
    auto fd = open_listed(dirfd, e, &st);
    if (!fd) return fd.error();
    if (Status s = clear(fd->get(), st, e.shown); !s) return s;
    if (Status s = walk(fd->get(), depth + 1, e.shown, give); !s) return s;
    return give_away(fd->get(), st, e.shown, give);
  });
}

// Copies the open regular file `src` into a new file `name` of `dstdir`.
// `budget`: the bytes the copy may still write (hard links and sparse files
// would otherwise let a full tmpfs become many times its size on disk).
Status copy_file(int src, const struct stat& st, int dstdir, const char* name, const std::string& shown,
                 uint64_t& budget, uid_t uid, gid_t gid) {
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
  if (::fchown(dst.get(), uid, gid) != 0 || ::fchmod(dst.get(), st.st_mode & 0777) != 0)
    return Error::from_errno("setting owner and mode of the copy of " + shown);
  return {};
}

// Copies the entries of the open directory `src` into the open directory `dst`.
Status copy_dir(int src, int dst, int depth, const std::string& shown, uint64_t& budget) {
  return for_each_entry(src, depth, shown, [&](const Entry& e) -> Status {
    const char* name = e.name;
    if (S_ISLNK(e.listed.st_mode)) {
      auto target = read_link(src, e);
      if (!target) return target.error();
      if (::symlinkat(target->c_str(), dst, name) != 0 ||
          ::fchownat(dst, name, e.listed.st_uid, e.listed.st_gid, AT_SYMLINK_NOFOLLOW) != 0)
        return Error::from_errno("copying the link " + e.shown);
      return {};
    }
    if (!S_ISREG(e.listed.st_mode) && !S_ISDIR(e.listed.st_mode)) return {};
    struct stat st {};
    auto fd = open_listed(src, e, &st);
    if (!fd) return fd.error();
    if (S_ISREG(st.st_mode))
      return copy_file(fd->get(), st, dst, name, e.shown, budget, st.st_uid, st.st_gid);
    if (::mkdirat(dst, name, 0700) != 0) return Error::from_errno("creating the copy of " + e.shown);
    UniqueFd sub(::openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return Error::from_errno("opening the copy of " + e.shown);
    if (Status s = copy_dir(fd->get(), sub.get(), depth + 1, e.shown, budget); !s) return s;
    // Owner and mode last: a directory without write permission for its
    // owner is still filled in.
    if (::fchown(sub.get(), st.st_uid, st.st_gid) != 0 || ::fchmod(sub.get(), st.st_mode & 0777) != 0)
      return Error::from_errno("setting owner and mode of the copy of " + e.shown);
    return {};
  });
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

Status remove_tree(const std::string& path) {
  const std::string shown = escape(path, 200);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return {};
    if (errno != ENOTDIR && errno != ELOOP) return Error::from_errno("opening " + shown);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Error::from_errno("removing " + shown);
    return {};
  }
  struct stat top {};
  if (::fstat(fd.get(), &top) != 0) return Error::from_errno("opening " + shown);
  uint64_t depth = 0;
  for (;;) {
    // Everything here goes but a directory that is not yet empty: the
    // first of those is the next way down.
    std::string down;
    const std::string here = shown + " (" + std::to_string(depth) + " levels down)";
    Status listed = for_each_entry(fd.get(), 1, here, [&](const Entry& e) -> Status {
      if (!S_ISDIR(e.listed.st_mode)) {
        if (::unlinkat(fd.get(), e.name, 0) != 0 && errno != ENOENT)
          return Error::from_errno("removing " + e.shown);
        return {};
      }
      if (::unlinkat(fd.get(), e.name, AT_REMOVEDIR) == 0 || errno == ENOENT) return {};
      if (errno != ENOTEMPTY && errno != EEXIST) return Error::from_errno("removing " + e.shown);
      if (down.empty()) down = e.name;
      return {};
    });
    if (!listed) return listed;
    if (!down.empty()) {
      UniqueFd sub(::openat(fd.get(), down.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return Error::from_errno("opening " + here + "/" + escape(down, 200));
      fd = std::move(sub);
      ++depth;
      continue;
    }
    if (depth == 0) break;
    // Empty: back up, where the next listing removes it.
    UniqueFd up(::openat(fd.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat st {};
    if (!up || ::fstat(up.get(), &st) != 0) return Error::from_errno("going back up from " + here);
    if (st.st_dev != top.st_dev) return Error{"going back up from " + here + " left its file system", EXDEV};
    fd = std::move(up);
    --depth;
  }
  fd.reset();
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Error::from_errno("removing " + shown);
  return {};
}

Status hand_back_entry(int dirfd, const char* name, const struct stat& listed, const std::string& shown,
                       const std::optional<GiveAway>& give) {
  const Entry e{name, shown, listed};
  if (!S_ISREG(listed.st_mode)) return give_away_other(dirfd, e, give);
  // A file with neither set-id bits nor anything to give: left unopened.
  if ((listed.st_mode & kSetId) == 0 && !given(give, listed)) return {};
  struct stat st {};
  auto fd = open_listed(dirfd, e, &st);
  if (!fd) return fd.error();
  if (!given(give, st) && given(give, listed))
    return Error{shown + " changed while it was handed back", EAGAIN};
  if (Status s = clear(fd->get(), st, shown); !s) return s;
  return give_away(fd->get(), st, shown, give);
}

Status hand_back_tree_at(int dir_fd, const std::string& dir, const std::optional<GiveAway>& give) {
  const std::string shown = escape(dir, 200);
  struct stat st {};
  if (::fstat(dir_fd, &st) != 0) return Error::from_errno("opening " + shown);
  if (Status s = clear(dir_fd, st, shown); !s) return s;
  if (Status s = walk(dir_fd, 1, shown, give); !s) return s;
  return give_away(dir_fd, st, shown, give);
}

// ---- the io directory --------------------------------------------------------

namespace {

constexpr int kIoOpenTimeoutMs = 10000;

void skip(IoCopy& done, const std::string& shown, const char* why) {
  ++done.skipped_total;
  if (done.skipped.size() < 20) done.skipped.push_back(shown + ": " + why);
}

// A readable descriptor of the directory `fd` refers to (an O_PATH one cannot be listed).
Result<UniqueFd> readable_dir(int fd, const std::string& shown) {
  UniqueFd d(::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return Error::from_errno("opening " + shown);
  return d;
}

Status copy_in_dir(int src, const IoOwner& who, int dst, uid_t uid, gid_t gid, int depth,
                   const std::string& shown, uint64_t& budget, IoCopy& done) {
  return for_each_entry(src, depth, shown, [&](const Entry& e) -> Status {
    if (e.listed.st_uid != who.uid) {
      skip(done, e.shown, "not the caller's");
      return {};
    }
    if (S_ISLNK(e.listed.st_mode)) {
      auto target = read_link(src, e);
      if (!target) return target.error();
      if (::symlinkat(target->c_str(), dst, e.name) != 0 ||
          ::fchownat(dst, e.name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
        return Error::from_errno("copying the link " + e.shown);
      ++done.entries;
      return {};
    }
    if (!S_ISREG(e.listed.st_mode) && !S_ISDIR(e.listed.st_mode)) {
      skip(done, e.shown, "not a file, directory or link");
      return {};
    }
    struct stat st {};
    auto fd = open_listed(src, e, &st);
    if (!fd) return fd.error();
    if (st.st_uid != who.uid) return Error{e.shown + " changed while it was read", EAGAIN};
    ++done.entries;
    if (S_ISREG(st.st_mode)) {
      const uint64_t before = budget;
      if (Status s = copy_file(fd->get(), st, dst, e.name, e.shown, budget, uid, gid); !s) return s;
      done.bytes += before - budget;
      return {};
    }
    if (::mkdirat(dst, e.name, 0700) != 0) return Error::from_errno("creating the copy of " + e.shown);
    UniqueFd sub(::openat(dst, e.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return Error::from_errno("opening the copy of " + e.shown);
    if (Status s = copy_in_dir(fd->get(), who, sub.get(), uid, gid, depth + 1, e.shown, budget, done); !s)
      return s;
    if (::fchown(sub.get(), uid, gid) != 0 || ::fchmod(sub.get(), st.st_mode & 0777) != 0)
      return Error::from_errno("setting owner and mode of the copy of " + e.shown);
    return {};
  });
}

// A fresh name in `dir` for a copy that is renamed over `name` once complete.
std::string temp_name(const char* name) {
  static unsigned counter = 0;
  return ".agentcage-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" +
         std::string(name).substr(0, 64);
}

Status copy_out_dir(int src, int dst, const IoOwner& who, int depth, const std::string& shown,
                    uint64_t& budget, IoCopy& done) {
  return for_each_entry(src, depth, shown, [&](const Entry& e) -> Status {
    // Every entry costs something, so a tree of empty files and links is bounded too.
    if (budget < kIoEntryBytes)
      return Error{"the workspace holds more than its disk limit (entries) at " + e.shown, EFBIG};
    budget -= kIoEntryBytes;
    struct stat there {};
    const bool exists = ::fstatat(dst, e.name, &there, AT_SYMLINK_NOFOLLOW) == 0;
    if (S_ISDIR(e.listed.st_mode)) {
      struct stat st {};
      auto fd = open_listed(src, e, &st);
      if (!fd) return fd.error();
      if (exists && (!S_ISDIR(there.st_mode) || there.st_uid != who.uid)) {
        skip(done, e.shown, "the caller's directory has something else of that name");
        return {};
      }
      if (!exists && ::mkdirat(dst, e.name, 0700) != 0) return Error::from_errno("creating " + e.shown);
      UniqueFd sub(::openat(dst, e.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat sub_st {};
      if (!sub || ::fstat(sub.get(), &sub_st) != 0) return Error::from_errno("opening " + e.shown);
      if (sub_st.st_uid != who.uid && !(sub_st.st_uid == 0 && !exists))
        return Error{e.shown + " changed while it was written", EAGAIN};
      if (!exists && ::fchown(sub.get(), who.uid, who.gid) != 0)
        return Error::from_errno("setting the owner of " + e.shown);
      ++done.entries;
      if (Status s = copy_out_dir(fd->get(), sub.get(), who, depth + 1, e.shown, budget, done); !s) return s;
      if (!exists && ::fchmod(sub.get(), (st.st_mode & 0755) | S_IRWXU) != 0)
        return Error::from_errno("setting the mode of " + e.shown);
      return {};
    }
    if (!S_ISREG(e.listed.st_mode) && !S_ISLNK(e.listed.st_mode)) {
      skip(done, e.shown, "not a file, directory or link");
      return {};
    }
    if (exists && S_ISDIR(there.st_mode)) {
      skip(done, e.shown, "the caller's directory has a directory of that name");
      return {};
    }
    const std::string tmp = temp_name(e.name);
    if (S_ISLNK(e.listed.st_mode)) {
      auto target = read_link(src, e);
      if (!target) return target.error();
      if (::symlinkat(target->c_str(), dst, tmp.c_str()) != 0)
        return Error::from_errno("copying the link " + e.shown);
      if (::fchownat(dst, tmp.c_str(), who.uid, who.gid, AT_SYMLINK_NOFOLLOW) != 0) {
        int err = errno;
        ::unlinkat(dst, tmp.c_str(), 0);
        return Error::from_errno("copying the link " + e.shown, err);
      }
    } else {
      struct stat st {};
      auto fd = open_listed(src, e, &st);
      if (!fd) return fd.error();
      const uint64_t before = budget;
      struct stat masked = st;
      masked.st_mode &= 0755;  // the run chooses no group- or world-writable files
      if (Status s = copy_file(fd->get(), masked, dst, tmp.c_str(), e.shown, budget, who.uid, who.gid); !s) {
        if (s.error().code != EEXIST) ::unlinkat(dst, tmp.c_str(), 0);  // only a file this copy created
        return s;
      }
      done.bytes += before - budget;
    }
    if (::renameat(dst, tmp.c_str(), dst, e.name) != 0) {
      int err = errno;
      ::unlinkat(dst, tmp.c_str(), 0);
      return Error::from_errno("replacing " + e.shown, err);
    }
    ++done.entries;
    return {};
  });
}

}  // namespace

Result<UniqueFd> open_io_dir(const std::string& path, const IoOwner& who) {
  const std::string shown = escape(path, 200);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return Error::from_errno("--io-dir: socketpair");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return Error::from_errno("--io-dir: fork");
  if (pid == 0) {
    // Only system calls from here on. The answer: errno (0: ok) with the fd.
    int err = 0;
    int fd = -1;
    const int keep = theirs.get();
    if (!close_fds_except(&keep, 1)) {
      err = errno;
    } else if (::setgroups(0, nullptr) != 0 || ::setresgid(who.gid, who.gid, who.gid) != 0 ||
               ::setresuid(who.uid, who.uid, who.uid) != 0) {
      err = errno;
    } else {
      open_how how{};
      how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
      how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
      fd = static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how));
      struct stat st {};
      if (fd < 0)
        err = errno;
      else if (::fstat(fd, &st) != 0)
        err = errno;
      else if (st.st_uid != who.uid)
        err = EPERM;
      else if (::faccessat(fd, "", W_OK | X_OK, AT_EACCESS | AT_EMPTY_PATH) != 0)
        err = errno;
    }
    ssize_t n = err == 0 ? send_with_fd(theirs.get(), &err, sizeof err, fd)
                         : ::send(theirs.get(), &err, sizeof err, MSG_NOSIGNAL);
    ::_exit(n == sizeof err ? 0 : 1);
  }
  theirs.reset();
  int err = 0;
  UniqueFd fd;
  int flags = 0;
  // The child runs as the caller, who may stop it or send it into a FUSE
  // mount that never answers: it gets a deadline, then SIGKILL.
  pollfd p{mine.get(), POLLIN, 0};
  int ready;
  do ready = ::poll(&p, 1, kIoOpenTimeoutMs);
  while (ready < 0 && errno == EINTR);
  ssize_t n = -1;
  if (ready > 0)
    n = recv_with_fd(mine.get(), &err, sizeof err, fd, &flags);
  else
    ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (ready == 0)
    return Error{"--io-dir " + shown + ": opening it as uid " + std::to_string(who.uid) +
                     " took longer than " + std::to_string(kIoOpenTimeoutMs / 1000) + " s",
                 ETIMEDOUT};
  if (n != sizeof err) return Error{"--io-dir " + shown + ": the check as the caller did not answer", EIO};
  if (err == EPERM)
    return Error{"--io-dir " + shown + ": not a directory uid " + std::to_string(who.uid) + " owns", EPERM};
  if (err == ELOOP)
    return Error{"--io-dir " + shown + ": a symbolic link in the path (give the real path)", ELOOP};
  if (err != 0)
    return Error::from_errno("--io-dir " + shown + " (as uid " + std::to_string(who.uid) + ")", err);
  if (!fd) return Error{"--io-dir " + shown + ": no descriptor came back", EIO};
  return fd;
}

Status become_io_owner(const IoOwner& who) {
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || ::setgroups(0, nullptr) != 0 ||
      ::setresgid(who.gid, who.gid, who.gid) != 0 || ::setresuid(who.uid, who.uid, who.uid) != 0)
    return Error::from_errno("becoming uid " + std::to_string(who.uid));
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[CAP_TO_INDEX(CAP_DAC_READ_SEARCH)].effective = CAP_TO_MASK(CAP_DAC_READ_SEARCH);
  data[CAP_TO_INDEX(CAP_DAC_READ_SEARCH)].permitted = CAP_TO_MASK(CAP_DAC_READ_SEARCH);
  if (::syscall(SYS_capset, &hdr, data) != 0) return Error::from_errno("keeping CAP_DAC_READ_SEARCH");
  return {};
}

Status run_copy_child(const CopyChild& how, const std::function<Status(IoCopy&)>& work, IoCopy& done) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Error::from_errno("copy: pipe2");
  UniqueFd rd(p[0]), wr(p[1]);
  auto child = [&]() -> int {
    rd.reset();
    std::vector<int> keep = how.keep;
    keep.push_back(wr.get());
    if (!close_fds_except(keep.data(), keep.size())) return 1;
    IoCopy mine;
    Status st = how.become ? how.become() : Status{};
    if (st) st = work(mine);
    nlohmann::json j = {{"ok", st.ok()},
                        {"message", st.ok() ? "" : st.error().message},
                        {"code", st.ok() ? 0 : st.error().code},
                        {"entries", mine.entries},
                        {"bytes", mine.bytes},
                        {"skipped", mine.skipped},
                        {"skipped_total", mine.skipped_total}};
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    for (size_t off = 0; off < text.size();) {
      ssize_t n = ::write(wr.get(), text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 1;
      off += static_cast<size_t>(n);
    }
    return 0;
  };
  pid_t pid;
  if (how.cgroup_fd >= 0) {
    auto spawned = cgroup::spawn_in_cgroup(how.cgroup_fd, child);
    if (!spawned) return spawned.error();
    pid = *spawned;
  } else {
    pid = ::fork();
    if (pid < 0) return Error::from_errno("copy: fork");
    if (pid == 0) ::_exit(child());
  }
  wr.reset();
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + how.timeout;
  Status outcome;
  for (;;) {
    pollfd fds[2] = {{rd.get(), POLLIN, 0}, {how.signal_fd, POLLIN, 0}};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      outcome = Error{"the copy took longer than " + std::to_string(how.timeout.count()) + " s", ETIMEDOUT};
      break;
    }
    int ready = ::poll(fds, how.signal_fd >= 0 ? 2 : 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0 && (fds[1].revents & POLLIN)) {
      outcome = Error{"interrupted by a signal", EINTR};
      break;
    }
    if (ready > 0) {
      char buf[4096];
      ssize_t n = ::read(rd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the child is done
      if (text.size() < (1u << 20)) text.append(buf, static_cast<size_t>(n));
    }
  }
  if (!outcome.ok()) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!outcome.ok()) return outcome;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object())
    return Error{"the copy ended without a report (status " + std::to_string(status) + ")", EIO};
  done.entries += j.value("entries", uint64_t{0});
  done.bytes += j.value("bytes", uint64_t{0});
  for (const auto& s : j.value("skipped", std::vector<std::string>{}))
    if (done.skipped.size() < 20) done.skipped.push_back(s);
  done.skipped_total += j.value("skipped_total", uint64_t{0});
  if (!j.value("ok", false))
    return Error{j.value("message", std::string("the copy failed")), j.value("code", EIO)};
  return {};
}

Status copy_in(int src, const IoOwner& who, int dst, uid_t uid, gid_t gid, uint64_t max_bytes, IoCopy& done) {
  auto dir = readable_dir(src, "the io directory");
  if (!dir) return dir.error();
  uint64_t budget = max_bytes;
  return copy_in_dir(dir->get(), who, dst, uid, gid, 1, "io-dir", budget, done);
}

Status copy_out(int src, int dst, const IoOwner& who, uint64_t max_bytes, IoCopy& done) {
  struct stat st {};
  if (::fstat(dst, &st) != 0 || st.st_uid != who.uid)
    return Error{"the io directory is not uid " + std::to_string(who.uid) + "'s any more", EPERM};
  uint64_t budget = max_bytes;
  return copy_out_dir(src, dst, who, 1, "workspace", budget, done);
}

}  // namespace agentcage::run
