// SPDX-License-Identifier: Apache-2.0
#include "probes.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "cgroup/cgroup.h"

namespace agentcage::kt {
namespace {

// sockaddr_un for an abstract name; *len gets the address length that
// covers exactly the name (no trailing NULs: they would be part of it).
sockaddr_un abstract_addr(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t n = name.size() < sizeof a.sun_path - 1 ? name.size() : sizeof a.sun_path - 1;
  std::memcpy(a.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

sockaddr_un path_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  return a;
}

}  // namespace

int classify(int err) { return err == EACCES ? kDenied : kOtherError; }
int result(int rc) { return rc == 0 ? kOk : classify(errno); }
int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st); }

int try_exec(const char* path) {
  char* const argv[] = {const_cast<char*>(path), nullptr};
  char* const envp[] = {nullptr};
  ::execve(path, argv, envp);
  return classify(errno);  // reached only when exec failed
}

int try_open(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return kOk;
  }
  return classify(errno);
}

int run_exec(const std::function<void()>& do_exec) {
  pid_t pid = ::fork();
  if (pid < 0) return kOtherError;
  if (pid == 0) {
    do_exec();
    ::_exit(errno == EACCES ? 40 : 41);  // reached only when exec failed
  }
  int st = 0;
  if (::waitpid(pid, &st, 0) < 0) return kOtherError;
  int code = exit_code(st);
  return code == 0 ? kOk : code == 40 ? kDenied : 10 + code;
}

int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return run_exec([&] {
    char* const envp[] = {nullptr};
    ::execve(argv[0], argv.data(), envp);
  });
}

int run_program(const std::string& path) { return run_program(std::vector<std::string>{path}); }

int tcp_connect(int family, const char* addr, uint16_t port) {
  int s = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  int rc;
  if (family == AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, addr, &a.sin_addr);
    rc = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    ::inet_pton(AF_INET6, addr, &a.sin6_addr);
    rc = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  int r = result(rc);
  ::close(s);
  return r;
}

sockaddr_storage inet_addr_of(int family, const char* text, uint16_t port, socklen_t* len) {
  sockaddr_storage ss{};
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    ::inet_pton(AF_INET, text, &a->sin_addr);
    *len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    ::inet_pton(AF_INET6, text, &a->sin6_addr);
    *len = sizeof(sockaddr_in6);
  }
  return ss;
}

int tcp_connect_loopback(uint16_t port) { return tcp_connect(AF_INET, "127.0.0.1", port); }

int udp_sendto(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int r = ::sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a) == 1 ? kOk : classify(errno);
  ::close(s);
  return r;
}

int unix_connect(const std::string& path) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  sockaddr_un a = path_addr(path);
  int r = result(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a));
  ::close(s);
  return r;
}

int unix_connect_abstract(const std::string& name) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  socklen_t len = 0;
  sockaddr_un a = abstract_addr(name, &len);
  int r = result(::connect(s, reinterpret_cast<sockaddr*>(&a), len));
  ::close(s);
  return r;
}

int unix_sendto_abstract(const std::string& name) {
  int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  socklen_t len = 0;
  sockaddr_un a = abstract_addr(name, &len);
  int r = ::sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), len) == 1 ? kOk : classify(errno);
  ::close(s);
  return r;
}

int in_child(bool new_session, const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid < 0) return kOtherError;
  if (pid == 0) {
    if (new_session && ::setsid() < 0) ::_exit(kOtherError);
    ::_exit(fn());
  }
  int st = 0;
  if (::waitpid(pid, &st, 0) < 0) return kOtherError;
  return exit_code(st);
}

int run_in_cgroup(int cgroup_fd, const std::function<int()>& fn) {
  auto pid = cgroup::spawn_in_cgroup(cgroup_fd, fn);
  if (!pid) return -1;
  auto st = cgroup::wait_for(*pid);
  return st ? exit_code(*st) : -1;
}

uint16_t port_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

int udp_bound(int family, const char* addr) {
  int s = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(family, addr, 0, &len);
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (s >= 0) ::close(s);
    return -1;
  }
  return s;
}

std::thread answer_then_spray(int echo, int other) {
  return std::thread([echo, other] {
    timeval tv{300, 0};  // a whole run first: a cold Python under an emulator takes a minute
    ::setsockopt(echo, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    char c;
    if (::recvfrom(echo, &c, 1, 0, reinterpret_cast<sockaddr*>(&from), &from_len) != 1) return;
    ::sendto(echo, "p", 1, 0, reinterpret_cast<sockaddr*>(&from), from_len);
    ::sendto(other, "i", 1, 0, reinterpret_cast<sockaddr*>(&from), from_len);
  });
}

std::vector<uint32_t> ingress_programs(int fd) {
  uint32_t ids[64] = {};  // BPF_CGROUP_MAX_PROGS
  uint32_t count = 64, flags = 0;
  if (bpf_prog_query(fd, BPF_CGROUP_INET_INGRESS, 0, &flags, ids, &count) != 0) return {0};
  return std::vector<uint32_t>(ids, ids + count);
}

int pass_all_program() {
  const bpf_insn insns[] = {{BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1},
                            {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}};
  return bpf_prog_load(BPF_PROG_TYPE_CGROUP_SKB, "kt_other_tool", "GPL", insns, 2, nullptr);
}

int refuse_connect4_program() {
  const bpf_insn insns[] = {{BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
                            {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}};
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_CGROUP_INET4_CONNECT);
  return bpf_prog_load(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, "kt_tool_connect", "GPL", insns, 2, &opts);
}

int listen_tcp(int family, uint16_t* port) {
  int s = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (family == AF_INET6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;  // dual-stack: accepts v4-mapped too
    rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (rc != 0 || ::listen(s, 64) != 0 || ::getsockname(s, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    ::close(s);
    return -1;
  }
  *port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return s;
}

std::optional<Listener> Listener::tcp() {
  Listener l;
  l.fd_ = listen_tcp(AF_INET, &l.port_);
  if (l.fd_ < 0) return std::nullopt;
  return l;
}

std::optional<Listener> Listener::unix_at(const std::string& path) {
  Listener l;
  l.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a = path_addr(path);
  if (l.fd_ < 0 || ::bind(l.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l.fd_, 64) != 0)
    return std::nullopt;
  return l;
}

std::optional<Listener> Listener::unix_abstract(const std::string& name, int type) {
  Listener l;
  l.fd_ = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_un a = abstract_addr(name, &len);
  if (l.fd_ < 0 || ::bind(l.fd_, reinterpret_cast<sockaddr*>(&a), len) != 0) return std::nullopt;
  if (type == SOCK_STREAM && ::listen(l.fd_, 64) != 0) return std::nullopt;
  return l;
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace agentcage::kt
