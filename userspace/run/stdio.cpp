// SPDX-License-Identifier: Apache-2.0
#include "run/stdio.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/kcmp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace agentcage::run {
namespace {

// Whether this process's descriptors a and b are one open file description
// (2>&1). Without kcmp, the same file counts as the same description: one
// relay then carries both, which keeps their order either way.
bool same_description(int a, int b) {
  const pid_t self = ::getpid();
  long rc = ::syscall(SYS_kcmp, self, self, KCMP_FILE, a, b);
  if (rc >= 0) return rc == 0;
  struct stat sa {
  }, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// While it lives, this thread writes as `uid` and `gid` would for space:
// they are its file system uid and gid (ext4 keeps its reserved blocks for
// s_resuid, root by default, and the group s_resgid) and CAP_SYS_RESOURCE
// (reserved blocks, quota limits) is out of its effective set. All come
// back after, and so do its supplementary groups, which it has none of
// meanwhile (a reserve given to one of root's groups, `tune2fs -g`, is not
// the run's). ok() is false when any could not be dropped: nothing is
// written then. Raw system calls: they change this thread's credentials
// only (glibc's wrappers change every thread's).
class WritesAs {
 public:
  WritesAs(uid_t uid, gid_t gid) {
    if (::syscall(SYS_capget, &hdr_, saved_) != 0) return;
    __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
    lowered[CAP_TO_INDEX(CAP_SYS_RESOURCE)].effective &= ~CAP_TO_MASK(CAP_SYS_RESOURCE);
    if (::syscall(SYS_capset, &hdr_, lowered) != 0) return;
    lowered_ = true;
    // setfsuid answers with the previous value, never an error: asking
    // again with an invalid uid tells whether it took.
    old_fsgid_ = static_cast<gid_t>(::syscall(SYS_setfsgid, gid));
    fsgid_set_ = true;
    old_fsuid_ = static_cast<uid_t>(::syscall(SYS_setfsuid, uid));
    fsuid_set_ = true;
    if (static_cast<gid_t>(::syscall(SYS_setfsgid, static_cast<gid_t>(-1))) != gid ||
        static_cast<uid_t>(::syscall(SYS_setfsuid, static_cast<uid_t>(-1))) != uid)
      return;
    const long n = ::syscall(SYS_getgroups, 0, nullptr);
    if (n < 0) return;
    groups_.resize(static_cast<size_t>(n));
    if (n > 0 && ::syscall(SYS_getgroups, n, groups_.data()) != n) return;
    if (::syscall(SYS_setgroups, 0, nullptr) != 0) return;
    groups_dropped_ = true;
    ok_ = true;
  }
  ~WritesAs() {
    if (groups_dropped_) ::syscall(SYS_setgroups, groups_.size(), groups_.data());
    if (fsuid_set_) ::syscall(SYS_setfsuid, old_fsuid_);
    if (fsgid_set_) ::syscall(SYS_setfsgid, old_fsgid_);
    if (lowered_) ::syscall(SYS_capset, &hdr_, saved_);
  }
  WritesAs(const WritesAs&) = delete;
  WritesAs& operator=(const WritesAs&) = delete;
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct hdr_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2] = {};
  uid_t old_fsuid_ = 0;
  gid_t old_fsgid_ = 0;
  std::vector<gid_t> groups_;
  bool lowered_ = false, fsuid_set_ = false, fsgid_set_ = false, groups_dropped_ = false, ok_ = false;
};

}  // namespace

StdioWay stdio_way(int fd, mode_t mode) {
  if (!S_ISREG(mode) && !S_ISBLK(mode)) return StdioWay::pass;
  return fd == 0 ? StdioWay::read_only : StdioWay::relay;
}

Result<StdioRelay> StdioRelay::prepare(std::optional<uint64_t> max_bytes, uid_t uid, gid_t gid) {
  StdioRelay r;
  r.limit_ = max_bytes;
  r.writer_uid_ = uid;
  r.writer_gid_ = gid;
  struct stat st[3] = {};
  for (int fd = 0; fd <= 2; ++fd)
    if (::fstat(fd, &st[fd]) != 0) return Error::from_errno("stdio: fstat " + std::to_string(fd));

  if (stdio_way(0, st[0].st_mode) == StdioWay::read_only) {
    const int flags = ::fcntl(0, F_GETFL);
    if (flags < 0) return Error::from_errno("stdio: reading the flags of stdin");
    if ((flags & O_ACCMODE) == O_WRONLY || (flags & O_PATH)) {
      // The caller could not read it (write-only, or an O_PATH descriptor,
      // which F_GETFL reports as O_RDONLY): neither may the run.
      r.stdin_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    } else {
      // A description of the run's own: its reads, seeks and locks stay its
      // own, and it can never write through it.
      r.stdin_.reset(::open("/proc/self/fd/0", O_RDONLY | O_CLOEXEC | O_NOCTTY));
      if (r.stdin_) {
        const off_t at = ::lseek(0, 0, SEEK_CUR);
        if (at > 0 && ::lseek(r.stdin_.get(), at, SEEK_SET) != at)
          return Error::from_errno("stdio: positioning the run's stdin");
      }
    }
    if (!r.stdin_) return Error::from_errno("stdio: reopening stdin read-only");
  }

  const bool relay1 = stdio_way(1, st[1].st_mode) == StdioWay::relay;
  const bool relay2 = stdio_way(2, st[2].st_mode) == StdioWay::relay;
  auto add = [&r](int target, std::vector<int> child_fds) -> Status {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return Error::from_errno("stdio: pipe2");
    Out out;
    out.read_end.reset(p[0]);
    out.write_end.reset(p[1]);
    if (::fcntl(p[0], F_SETFL, O_NONBLOCK) != 0) return Error::from_errno("stdio: O_NONBLOCK");
    out.target = target;
    out.child_fds = std::move(child_fds);
    r.outs_.push_back(std::move(out));
    return {};
  };
  if (relay1 && relay2 && same_description(1, 2)) {
    if (Status s = add(1, {1, 2}); !s) return s.error();
  } else {
    if (relay1)
      if (Status s = add(1, {1}); !s) return s.error();
    if (relay2)
      if (Status s = add(2, {2}); !s) return s.error();
  }
  return r;
}

std::array<int, 3> StdioRelay::child_fds() const {
  std::array<int, 3> fds = {stdin_ ? stdin_.get() : -1, -1, -1};
  for (const auto& out : outs_)
    for (int i : out.child_fds) fds[static_cast<size_t>(i)] = out.write_end.get();
  return fds;
}

void StdioRelay::close_child_ends() {
  stdin_.reset();
  for (auto& out : outs_) out.write_end.reset();
}

void StdioRelay::add_poll_fds(std::vector<pollfd>& fds) const {
  for (const auto& out : outs_)
    if (out.read_end) fds.push_back({out.read_end.get(), POLLIN, 0});
}

void StdioRelay::pump(const std::vector<pollfd>& fds) {
  for (auto& out : outs_)
    for (const auto& p : fds)
      if (out.read_end && p.fd == out.read_end.get() && (p.revents & (POLLIN | POLLHUP | POLLERR)))
        move(out, false);
}

void StdioRelay::drain() {
  for (auto& out : outs_)
    if (out.read_end) move(out, true);
}

void StdioRelay::move(Out& out, bool until_eof) {
  char buf[65536];
  const WritesAs as_the_run(writer_uid_, writer_gid_);
  if (!as_the_run.ok()) {
    problems_.push_back(
        "relaying the run's output: could not drop root's claim on disk space (the file system uid and gid, "
        "CAP_SYS_RESOURCE); the rest was not written");
    out.read_end.reset();
    return;
  }
  // At most 16 buffers per wake-up, so a chatty run cannot starve the
  // signal and timeout checks of the wait loop.
  for (int round = 0; until_eof || round < 16; ++round) {
    ssize_t n = ::read(out.read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      out.read_end.reset();  // EOF: every writer is gone
      return;
    }
    const char* what = out.target == 1 ? "stdout" : "stderr";
    const bool over = limit_ && relayed_ + static_cast<uint64_t>(n) > *limit_;
    if (over) n = static_cast<ssize_t>(*limit_ - relayed_);
    relayed_ += static_cast<uint64_t>(n);
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(out.target, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        // The run's next write gets EPIPE (SIGPIPE), as a full disk or a
        // closed reader would have told it.
        problems_.push_back("relaying the run's " + std::string(what) + ": " + std::strerror(errno));
        out.read_end.reset();
        return;
      }
      off += w;
    }
    if (over) {
      // As a full disk would: the run learns at its next write (EPIPE).
      truncated_ = true;
      problems_.push_back("the run's " + std::string(what) + " reached the disk limit of " +
                          std::to_string(*limit_) +
                          " bytes (limits.disk, --disk) for output written to files; the rest was not "
                          "written and the run's next write failed with EPIPE");
      out.read_end.reset();
      return;
    }
  }
}

}  // namespace agentcage::run
