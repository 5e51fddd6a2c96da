// SPDX-License-Identifier: Apache-2.0
// Probes for kernel tests: small operations a process inside (or outside) a
// scope performs, each reduced to an exit code the test can compare, plus
// the sockets and processes the tests set up around them. Shared by every
// kernel test file.
//
// The probe functions run in forked children (cgroup::spawn_in_cgroup,
// in_child), so they only return codes and never use gtest assertions.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace agentcage::kt {

// Exit codes of the probe processes.
constexpr int kOk = 0;
constexpr int kDenied = 1;      // EACCES: what agentcage returns
constexpr int kOtherError = 2;  // anything else is a test failure

// EACCES -> kDenied, any other errno -> kOtherError.
int classify(int err);
// A syscall's return value (0 or -1 with errno) as a probe code.
int result(int rc);
// A wait status as one number: the exit status, or 100 + the signal.
int exit_code(int wait_status);

// execve(path) in the calling process; returns only when exec failed.
int try_exec(const char* path);
// open + close.
int try_open(const std::string& path, int flags);

// fork + execve(argv) with an empty environment and report how it went:
// kOk if it ran and exited 0, kDenied if execve failed with EACCES,
// 10 + the program's exit code otherwise (a failed execve with another
// errno gives 10 + 41).
int run_program(const std::vector<std::string>& argv);
int run_program(const std::string& path);
// The same for any way of starting a program: fork, call do_exec (an
// execve/execveat/fexecve) in the child and map the outcome as above.
int run_exec(const std::function<void()>& do_exec);

// An AF_INET or AF_INET6 address from its text and port; *len gets its size.
sockaddr_storage inet_addr_of(int family, const char* text, uint16_t port, socklen_t* len);
// TCP connect to addr:port (AF_INET or AF_INET6 address text).
int tcp_connect(int family, const char* addr, uint16_t port);
// TCP connect to 127.0.0.1:port.
int tcp_connect_loopback(uint16_t port);
// One UDP datagram to 127.0.0.1:port with sendto (no connect).
int udp_sendto(uint16_t port);
// Stream connect to a unix socket bound at a path.
int unix_connect(const std::string& path);
// Stream connect to an abstract unix socket: `name` without the leading NUL.
int unix_connect_abstract(const std::string& name);
// One datagram with sendto to an abstract unix datagram socket.
int unix_sendto_abstract(const std::string& name);

// Run fn in a child of the calling process (optionally in a new session)
// and return its exit code; kOtherError if fork fails.
int in_child(bool new_session, const std::function<int()>& fn);
// Run fn in a new process started inside the cgroup open at cgroup_fd
// (clone3 + CLONE_INTO_CGROUP); its exit code, -1 if it could not start.
int run_in_cgroup(int cgroup_fd, const std::function<int()>& fn);

// The port a socket is bound to.
uint16_t port_of(int fd);
// A UDP socket bound to `addr` (AF_INET or AF_INET6 text) and a free port,
// or -1.
int udp_bound(int family, const char* addr);
// An echo server on `echo` that answers the first datagram, then has
// `other` send to the same client: what a client of a scope hears.
std::thread answer_then_spray(int echo, int other);

// The ids of the programs attached to cgroup `fd` at BPF_CGROUP_INET_INGRESS
// ({0}, no program's id, when the kernel cannot say).
std::vector<uint32_t> ingress_programs(int fd);

// Another tool's cgroup_skb program, loaded: lets every packet through.
// Its fd, or -1.
int pass_all_program();
// Another tool's cgroup/connect4 program, loaded: refuses every IPv4
// connect (EPERM). Its fd, or -1.
int refuse_connect4_program();

// A listening TCP socket on loopback (AF_INET: 127.0.0.1, AF_INET6: the
// dual-stack wildcard, which accepts v4-mapped too); *port gets its port.
// Returns the fd or -1.
int listen_tcp(int family, uint16_t* port);

// A listening socket owned by the (unscoped) test process; closed on
// destruction.
class Listener {
 public:
  static std::optional<Listener> tcp();
  static std::optional<Listener> unix_at(const std::string& path);
  // Abstract unix socket `name` (no leading NUL), stream or datagram.
  static std::optional<Listener> unix_abstract(const std::string& name, int type);
  Listener(Listener&& o) noexcept : fd_(std::exchange(o.fd_, -1)), port_(o.port_) {}
  Listener& operator=(Listener&&) = delete;
  ~Listener();
  int fd() const { return fd_; }
  uint16_t port() const { return port_; }

 private:
  Listener() = default;
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace agentcage::kt
