// SPDX-License-Identifier: Apache-2.0
// A FUSE file system served by a child process of the test, speaking the
// kernel's protocol on /dev/fuse directly: its root holds one empty regular
// file, "f" (mode 0666), and it never answers STATFS, nor FLUSH unless told
// to (each one it is asked is counted). A FLUSH waits for its answer without
// end (no signal ends it, SIGKILL neither): every close of "f", in any
// process, until the server is gone. Mounted by root with allow_other, so every uid may open "f",
// and a root process that asks the file system anything the cache does not
// answer waits for the server. Needs root and the fuse module.
#pragma once

#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace agentcage::kt {

class FuseServer {
 public:
  // Mounts at `dir` (created) and starts serving; ok() says whether it did.
  explicit FuseServer(std::filesystem::path dir, bool answer_flush = true)
      : dir_(std::move(dir)), answer_flush_(answer_flush) {
    (void)!std::system("modprobe fuse 2>/dev/null");
    std::filesystem::create_directories(dir_);
    const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      why_ = "open /dev/fuse: " + std::string(std::strerror(errno));
      return;
    }
    const std::string opts = "fd=" + std::to_string(fd) + ",rootmode=40755,user_id=0,group_id=0,allow_other";
    if (::mount("agentcage-test", dir_.c_str(), "fuse.agentcage-test", MS_NOSUID | MS_NODEV, opts.c_str()) !=
        0) {
      why_ = "mount fuse: " + std::string(std::strerror(errno));
      ::close(fd);
      return;
    }
    int counted[2];
    if (::pipe2(counted, O_CLOEXEC) != 0) return;
    asked_ = counted[0];
    ::fcntl(asked_, F_SETFL, O_NONBLOCK);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(counted[0]);
      serve(fd, counted[1], answer_flush_);
      ::_exit(0);
    }
    ::close(counted[1]);
    ::close(fd);
    mounted_ = true;
  }
  ~FuseServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);  // aborts the connection: every wait on it ends
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    if (asked_ >= 0) ::close(asked_);
  }
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  bool ok() const { return mounted_ && pid_ > 0; }
  // Stops the server (SIGSTOP): from now on nothing is read, so whoever asks
  // the file system anything the cache does not answer waits, and a fatal
  // signal ends that wait (one the server had read would hold even SIGKILL,
  // as an unanswered FLUSH does).
  void stop_reading() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  const std::string& why() const { return why_; }
  std::filesystem::path file() const { return dir_ / "f"; }
  // How many STATFS and unanswered FLUSH requests came so far.
  int statfs_asked() {
    collect();
    return statfs_;
  }
  int flushes_held() {
    collect();
    return flushes_;
  }

 private:
  static fuse_attr attr_of(uint64_t node) {
    fuse_attr a{};
    a.ino = node;
    a.mode = node == FUSE_ROOT_ID ? (S_IFDIR | 0755) : (S_IFREG | 0666);
    a.nlink = node == FUSE_ROOT_ID ? 2 : 1;
    a.blksize = 4096;
    return a;
  }
  static void reply(int fd, const fuse_in_header& in, int error, const void* body, size_t size) {
    std::vector<char> out(sizeof(fuse_out_header) + (error ? 0 : size));
    fuse_out_header h{};
    h.len = static_cast<uint32_t>(out.size());
    h.error = -error;
    h.unique = in.unique;
    std::memcpy(out.data(), &h, sizeof h);
    if (!error && size) std::memcpy(out.data() + sizeof h, body, size);
    (void)!::write(fd, out.data(), out.size());
  }
  void collect() {
    char buf[64];
    for (ssize_t r; (r = ::read(asked_, buf, sizeof buf)) > 0;)
      for (ssize_t i = 0; i < r; ++i) (buf[i] == 's' ? statfs_ : flushes_)++;
  }
  static void serve(int fd, int counted, bool answer_flush) {
    std::vector<char> buf(FUSE_MIN_READ_BUFFER + (1 << 20));
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == ENOENT)) continue;
      if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return;
      fuse_in_header in;
      std::memcpy(&in, buf.data(), sizeof in);
      const char* arg = buf.data() + sizeof in;
      switch (in.opcode) {
        case FUSE_INIT: {
          fuse_init_in init;
          std::memcpy(&init, arg, sizeof init);
          fuse_init_out out{};
          out.major = FUSE_KERNEL_VERSION;
          out.minor = init.minor < FUSE_KERNEL_MINOR_VERSION ? init.minor : FUSE_KERNEL_MINOR_VERSION;
          out.max_readahead = init.max_readahead;
          out.max_write = 4096;
          out.max_background = 16;
          out.congestion_threshold = 12;
          out.time_gran = 1;
          reply(fd, in, 0, &out, sizeof out);
          break;
        }
        case FUSE_LOOKUP: {
          if (in.nodeid != FUSE_ROOT_ID || std::strcmp(arg, "f") != 0) {
            reply(fd, in, ENOENT, nullptr, 0);
            break;
          }
          fuse_entry_out e{};
          e.nodeid = 2;
          e.entry_valid = e.attr_valid = 3600;
          e.attr = attr_of(2);
          reply(fd, in, 0, &e, sizeof e);
          break;
        }
        case FUSE_GETATTR: {
          fuse_attr_out a{};
          a.attr_valid = 3600;
          a.attr = attr_of(in.nodeid);
          reply(fd, in, 0, &a, sizeof a);
          break;
        }
        case FUSE_OPEN:
        case FUSE_OPENDIR: {
          fuse_open_out o{};
          o.fh = 1;
          reply(fd, in, 0, &o, sizeof o);
          break;
        }
        case FUSE_STATFS:
          (void)!::write(counted, "s", 1);  // and no answer
          break;
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
        case FUSE_INTERRUPT:
          break;
        case FUSE_FLUSH:
          if (!answer_flush) {
            (void)!::write(counted, "f", 1);  // and no answer
            break;
          }
          reply(fd, in, 0, nullptr, 0);
          break;
        case FUSE_RELEASE:
        case FUSE_RELEASEDIR:
          reply(fd, in, 0, nullptr, 0);
          break;
        default:
          reply(fd, in, ENOSYS, nullptr, 0);
      }
    }
  }

  std::filesystem::path dir_;
  std::string why_;
  bool answer_flush_ = true;
  pid_t pid_ = -1;
  int asked_ = -1;
  int statfs_ = 0, flushes_ = 0;
  bool mounted_ = false;
};

}  // namespace agentcage::kt
