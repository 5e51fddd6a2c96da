// SPDX-License-Identifier: Apache-2.0
// The timed loops and the hook-cost workload. Each runs in a child process
// started directly in a cgroup (clone3 CLONE_INTO_CGROUP), so "unscoped" and
// "scoped" are properties of where the child lives, not of the bench process.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench.h"

namespace agentcage::bench {

namespace {

bool write_all(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// A loopback TCP port nothing listens on: connect() gets ECONNREFUSED at once.
uint16_t refused_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0) ::close(s);
  return port;
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// One op each; false when it did not behave as expected.
bool do_open_close(const char* path, int flags) {
  int fd = ::open(path, flags | O_CLOEXEC, 0600);  // (the mode only matters with O_CREAT)
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

bool do_connect(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  sockaddr_in a = loopback(port);
  int rc = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  bool ok = rc == 0 || errno == ECONNREFUSED;
  ::close(s);
  return ok;
}

bool do_stat(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

// One datagram to a loopback port of the loop's own socket (drained so the
// queue never fills).
bool do_sendto(int s, uint16_t port) {
  sockaddr_in a = loopback(port);
  char c = 0;
  if (::sendto(s, &c, 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a) != 1) return false;
  return ::recv(s, &c, 1, MSG_DONTWAIT) == 1;
}

// A UDP socket bound to a loopback port; *port gets it.
int udp_self(uint16_t* port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (s >= 0) ::close(s);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return s;
}

bool do_fork_exec(const char* path) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    char* const argv[] = {const_cast<char*>(path), nullptr};
    char* const envp[] = {nullptr};
    ::execve(path, argv, envp);
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// The write end of the result pipe, for a child body that execs.
int g_result_fd = -1;

// Run `body` in a child spawned into `cgroup_fd`; it writes its result
// (a flat array of doubles) into a pipe the parent reads.
Result<std::vector<double>> in_child(int cgroup_fd, const std::function<std::vector<double>()>& body) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Error::from_errno("bench: pipe2");
  g_result_fd = p[1];
  auto pid = cgroup::spawn_in_cgroup(cgroup_fd, [&]() -> int {
    ::close(p[0]);
    std::vector<double> out = body();
    uint64_t n = out.size();
    bool ok = write_all(p[1], &n, sizeof n) && write_all(p[1], out.data(), n * sizeof(double));
    return ok ? 0 : 3;
  });
  ::close(p[1]);
  if (!pid) {
    ::close(p[0]);
    return pid.error();
  }
  std::vector<double> out;
  uint64_t n = 0;
  bool ok = read_all(p[0], &n, sizeof n) && n < (1u << 24);
  if (ok) {
    out.resize(n);
    ok = read_all(p[0], out.data(), n * sizeof(double));
  }
  ::close(p[0]);
  auto st = cgroup::wait_for(*pid);
  if (!st) return st.error();
  if (!ok || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0)
    return Error{"bench: workload child failed (wait status " + std::to_string(*st) + ")", ECHILD};
  return out;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::open_close:
      return "open+close";
    case Op::connect:
      return "socket+connect+close";
    case Op::fork_exec:
      return "fork+exec true+wait";
    case Op::stat:
      return "stat";
    case Op::sendto:
      return "udp sendto+recv";
  }
  return "?";
}

namespace {

// The loop body, in the worker process: per batch the ns/op of each op, then
// the number of failed operations.
std::vector<double> loops_body(const std::string& file, unsigned n, unsigned n_exec, unsigned batches) {
  std::vector<double> r;
  unsigned failures = 0;
  uint16_t port = refused_port(), udp_port = 0;
  if (port == 0) failures++;
  int udp = udp_self(&udp_port);
  if (udp < 0) failures++;
  // Warm-up: caches, page tables, the dentry of the file.
  for (unsigned i = 0; i < 50; i++) {
    failures += !do_open_close(file.c_str(), O_RDONLY);
    failures += !do_connect(port);
    failures += !do_stat(file.c_str());
    failures += !do_sendto(udp, udp_port);
  }
  failures += !do_fork_exec("/usr/bin/true");
  for (unsigned b = 0; b < batches; b++) {
    uint64_t t0 = now_ns();
    for (unsigned i = 0; i < n; i++) failures += !do_open_close(file.c_str(), O_RDONLY);
    uint64_t t1 = now_ns();
    for (unsigned i = 0; i < n; i++) failures += !do_connect(port);
    uint64_t t2 = now_ns();
    for (unsigned i = 0; i < n_exec; i++) failures += !do_fork_exec("/usr/bin/true");
    uint64_t t3 = now_ns();
    for (unsigned i = 0; i < n; i++) failures += !do_stat(file.c_str());
    uint64_t t4 = now_ns();
    for (unsigned i = 0; i < n; i++) failures += !do_sendto(udp, udp_port);
    uint64_t t5 = now_ns();
    r.push_back(static_cast<double>(t1 - t0) / n);
    r.push_back(static_cast<double>(t2 - t1) / n);
    r.push_back(static_cast<double>(t3 - t2) / n_exec);
    r.push_back(static_cast<double>(t4 - t3) / n);
    r.push_back(static_cast<double>(t5 - t4) / n);
  }
  if (udp >= 0) ::close(udp);
  r.push_back(failures);
  return r;
}

constexpr int kResultFd = 3;

}  // namespace

// The loops run in a freshly exec'd copy of this binary, not in a fork of
// the bench process: a fork would inherit whatever the bench has mapped at
// the time (libbpf, BTF, the skeleton in phase B), and fork+exec costs grow
// with the parent's memory. This way A and B time the same process image.
Result<LoopSamples> run_loops(int cgroup_fd, const fs::path& open_path, const Options& opts) {
  const unsigned n_exec = std::max(1u, opts.iterations / opts.exec_divisor);
  const std::vector<std::string> args = {"agentcage-bench",      std::string(kWorkerFlag),
                                         open_path.string(),     std::to_string(opts.iterations),
                                         std::to_string(n_exec), std::to_string(opts.batches)};
  auto out = in_child(cgroup_fd, [&]() -> std::vector<double> {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // The pipe becomes the worker's fd 3; this process never returns.
    if (g_result_fd == kResultFd ? ::fcntl(kResultFd, F_SETFD, 0) < 0 : ::dup2(g_result_fd, kResultFd) < 0)
      ::_exit(4);
    char* const envp[] = {nullptr};
    ::execve("/proc/self/exe", argv.data(), envp);
    ::_exit(5);
  });
  if (!out) return out.error();
  if (out->size() != opts.batches * kOpCount + 1) return Error{"bench: malformed loop results", EPROTO};
  LoopSamples s;
  for (unsigned b = 0; b < opts.batches; b++)
    for (int op = 0; op < kOpCount; op++) s.ns_per_op[op].push_back((*out)[b * kOpCount + op]);
  s.failures = static_cast<unsigned>(out->back());
  return s;
}

int worker_main(int argc, char** argv) {
  if (argc != 6) return 2;
  auto num = [](const char* s) { return static_cast<unsigned>(std::strtoul(s, nullptr, 10)); };
  unsigned n = num(argv[3]), n_exec = num(argv[4]), batches = num(argv[5]);
  if (n == 0 || n_exec == 0 || batches == 0) return 2;
  std::vector<double> out = loops_body(argv[2], n, n_exec, batches);
  uint64_t count = out.size();
  bool ok =
      write_all(kResultFd, &count, sizeof count) && write_all(kResultFd, out.data(), count * sizeof(double));
  return ok ? 0 : 3;
}

Result<unsigned> run_mixed_workload(int cgroup_fd, const fs::path& workspace, unsigned iterations) {
  const std::string data = (workspace / "data.txt").string();
  const std::string fresh = (workspace / "fresh.txt").string();
  const std::string moved = (workspace / "moved.txt").string();
  const std::string dir = (workspace / "dir").string();
  const std::string sock = (workspace / "bench.sock").string();
  auto out = in_child(cgroup_fd, [&] {
    unsigned failures = 0;
    auto check = [&](bool ok) { failures += !ok; };
    uint16_t tcp_port = refused_port();
    check(tcp_port != 0);

    int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int sink = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sink_addr = loopback(0);
    socklen_t len = sizeof sink_addr;
    check(udp >= 0 && sink >= 0 &&
          ::bind(sink, reinterpret_cast<sockaddr*>(&sink_addr), sizeof sink_addr) == 0 &&
          ::getsockname(sink, reinterpret_cast<sockaddr*>(&sink_addr), &len) == 0);

    ::unlink(sock.c_str());
    sockaddr_un ua{};
    ua.sun_family = AF_UNIX;
    std::strncpy(ua.sun_path, sock.c_str(), sizeof ua.sun_path - 1);
    int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check(listener >= 0 && sock.size() < sizeof ua.sun_path &&
          ::bind(listener, reinterpret_cast<sockaddr*>(&ua), sizeof ua) == 0 && ::listen(listener, 8) == 0);

    char buf[64];
    for (unsigned i = 0; i < iterations; i++) {
      check(do_open_close("/usr/lib/os-release", O_RDONLY));             // file_open, read rule
      check(do_open_close(data.c_str(), O_WRONLY));                      // file_open, workspace write rule
      check(do_open_close(fresh.c_str(), O_CREAT | O_EXCL | O_WRONLY));  // path_mknod + file_open
      check(::truncate(fresh.c_str(), 0) == 0);                          // path_truncate
      check(::chmod(fresh.c_str(), 0600) == 0);                          // path_chmod
      check(::rename(fresh.c_str(), moved.c_str()) == 0);                // path_rename
      check(::unlink(moved.c_str()) == 0);                               // path_unlink
      check(::mkdir(dir.c_str(), 0700) == 0);                            // path_mkdir
      check(::rmdir(dir.c_str()) == 0);                                  // path_rmdir
      check(do_connect(tcp_port));                                       // socket_create + socket_connect
      check(::sendto(udp, "x", 1, 0, reinterpret_cast<sockaddr*>(&sink_addr), sizeof sink_addr) ==
            1);  // socket_sendmsg
      (void)::recv(sink, buf, sizeof buf, MSG_DONTWAIT);
      int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);  // socket_create (unix)
      check(c >= 0 && ::connect(c, reinterpret_cast<sockaddr*>(&ua), sizeof ua) == 0);  // unix_stream_connect
      int a = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      check(a >= 0);
      if (a >= 0) ::close(a);
      if (c >= 0) ::close(c);
      if (i % 10 == 0) check(do_fork_exec("/usr/bin/true"));  // bprm_check, mmap_file, file_mprotect
    }
    ::close(listener);
    ::unlink(sock.c_str());
    ::close(udp);
    ::close(sink);
    return std::vector<double>{static_cast<double>(failures)};
  });
  if (!out) return out.error();
  if (out->size() != 1) return Error{"bench: malformed workload result", EPROTO};
  return static_cast<unsigned>(out->front());
}

bool fix_addresses() {
  const int current = ::personality(0xffffffff);
  return current >= 0 && ::personality(static_cast<unsigned long>(current) | ADDR_NO_RANDOMIZE) >= 0;
}

Result<double> time_command(const std::vector<std::string>& argv, unsigned runs, bool fixed_addresses) {
  if (argv.empty()) return Error{"bench: time_command: empty argv", EINVAL};
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<double> samples;
  for (unsigned i = 0; i < runs; i++) {
    uint64_t t0 = now_ns();
    pid_t pid = ::fork();
    if (pid < 0) return Error::from_errno("bench: fork");
    if (pid == 0) {
      int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        ::dup2(devnull, 0);
        ::dup2(devnull, 1);
      }
      if (fixed_addresses && !fix_addresses()) ::_exit(126);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    uint64_t t1 = now_ns();
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      return Error{"bench: `" + argv[0] + "` failed (wait status " + std::to_string(st) + ")", ECHILD};
    samples.push_back(static_cast<double>(t1 - t0));
  }
  return median(samples);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return v[lo] * (1 - frac) + v[hi] * frac;
}

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

}  // namespace agentcage::bench
