// SPDX-License-Identifier: Apache-2.0
// A run talks to itself, nobody else talks in: under a policy with no
// network rules a server the run starts on loopback (or on a unix socket in
// its workspace) serves the run's own clients, while a host process or
// another scope cannot reach it, and the run cannot reach a host server on
// the same kind of address. Decided by the owner of the socket reached, so
// each denial sits next to the same operation between the run's own
// sockets, and is checked in the slot's counters.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <bpf/bpf.h>

#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"
#include "scope/scope.h"

namespace agentcage {
namespace {

using namespace kt;

std::string policy_yaml(const std::string& spec) {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-selftalk\nspec:\n" + spec;
}

// A free UDP port on 127.0.0.1 (bound and released).
uint16_t free_udp_port() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
  ::bind(s, reinterpret_cast<sockaddr*>(&ss), len);
  uint16_t port = port_of(s);
  ::close(s);
  return port;
}

// A TCP server on `server` (a port the kernel picks) and a client from a
// child process connecting to `client` on that port; one message each way.
// kOk, or 10 + the step that failed (0 bind, 1 listen, 4 serving), or
// 12 + 10 * the client's code.
int tcp_self_talk(int family, const char* server, int client_family, const char* client, bool reuse = false) {
  ::alarm(20);
  int s = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (reuse) ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as Python's servers do
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(family, server, 0, &len);
  if (::bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 10;
  if (::listen(s, 4) != 0) return 11;
  ss = inet_addr_of(client_family, client, port_of(s), &len);
  pid_t pid = ::fork();
  if (pid == 0) {
    int c = ::socket(client_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&ss), len) != 0) ::_exit(classify(errno));
    char buf[4];
    bool ok = ::write(c, "ping", 4) == 4 && ::read(c, buf, 4) == 4 && std::memcmp(buf, "pong", 4) == 0;
    ::_exit(ok ? kOk : kOtherError);
  }
  int a = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
  char buf[4];
  bool served =
      a >= 0 && ::read(a, buf, 4) == 4 && std::memcmp(buf, "ping", 4) == 0 && ::write(a, "pong", 4) == 4;
  int status = 0;
  ::waitpid(pid, &status, 0);
  int code = exit_code(status);
  if (code != kOk) return 12 + 10 * code;
  return served ? kOk : 14;
}

// A UDP server on `server` (a port the kernel picks) and a client from a
// child process, bound to `server` with port 0 first when client_binds
// (else the kernel picks its port as it first sends, after every hook): one
// datagram each way. kOk, 10 (bind), 11 (nothing arrived), 20 + the code of
// the server's answer, or 30 + the client's code.
int udp_round_trip(int family, const char* server, bool client_binds) {
  ::alarm(20);
  int s = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(family, server, 0, &len);
  if (::bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 10;
  ss = inet_addr_of(family, server, port_of(s), &len);
  pid_t pid = ::fork();
  if (pid == 0) {
    int c = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    socklen_t own_len = 0;
    sockaddr_storage own = inet_addr_of(family, server, 0, &own_len);
    if (client_binds && ::bind(c, reinterpret_cast<sockaddr*>(&own), own_len) != 0) ::_exit(kOtherError);
    if (::sendto(c, "ping", 4, 0, reinterpret_cast<sockaddr*>(&ss), len) != 4) ::_exit(classify(errno));
    char buf[4];
    ::_exit(::recv(c, buf, 4, 0) == 4 && std::memcmp(buf, "pong", 4) == 0 ? kOk : kOtherError);
  }
  sockaddr_storage from{};
  socklen_t from_len = sizeof from;
  char buf[4];
  int code = 11;
  if (::recvfrom(s, buf, 4, 0, reinterpret_cast<sockaddr*>(&from), &from_len) == 4)
    code = ::sendto(s, "pong", 4, 0, reinterpret_cast<sockaddr*>(&from), from_len) == 4
               ? kOk
               : 20 + classify(errno);
  if (code != kOk) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (code != kOk) return code;
  return exit_code(status) == kOk ? kOk : 30 + exit_code(status);
}

// The local port of the UDP socket with inode `ino`, from /proc/net/udp
// (a host process's view; 0 if not found).
uint16_t udp_port_of_inode(ino_t ino) {
  std::ifstream in("/proc/net/udp");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
    f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
    if (inode == std::to_string(ino))
      return static_cast<uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return 0;
}

// A unix stream server at `path`, a client from a child. kOk or 10 + step.
int unix_self_talk(const std::string& path) {
  ::alarm(20);
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 10;
  if (::listen(s, 4) != 0) return 11;
  int client = in_child(false, [&] { return unix_connect(path); });
  return client == kOk ? kOk : 12 + 10 * client;
}

class SelfTalkTest : public PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 20;
  SelfTalkTest() : PolicyScopeTest(kSlot, "st") {}

  void apply(const std::string& spec) { apply_yaml(policy_yaml(spec), ws_.string()); }
};

// What the shipped no-network policies leave: no network rules at all.
constexpr const char* kNoNetwork = "  files:\n    write: [\"${workspace}\"]\n  network: {}\n";

TEST_F(SelfTalkTest, ARunsLoopbackServerServesItsOwnClients) {
  apply(kNoNetwork);
  const uint64_t denied_before = denied(AC_HOOK_SOCKET_LISTEN) + denied(AC_HOOK_SOCKET_CONNECT);
  EXPECT_EQ(scoped([] { return tcp_self_talk(AF_INET, "127.0.0.1", AF_INET, "127.0.0.1"); }), kOk)
      << "127.0.0.1";
  EXPECT_EQ(scoped([] { return tcp_self_talk(AF_INET6, "::1", AF_INET6, "::1"); }), kOk) << "::1";
  EXPECT_EQ(scoped([] { return tcp_self_talk(AF_INET, "127.0.0.1", AF_INET, "127.0.0.1", true); }), kOk)
      << "server with SO_REUSEADDR";
  // A v6 client reaching the v4 listener through its mapped address.
  EXPECT_EQ(scoped([] { return tcp_self_talk(AF_INET, "127.0.0.1", AF_INET6, "::ffff:127.0.0.1"); }), kOk)
      << "v4-mapped";
  EXPECT_EQ(denied(AC_HOOK_SOCKET_LISTEN) + denied(AC_HOOK_SOCKET_CONNECT), denied_before);

  // The run's own server and a host server on the same kind of address:
  // the host's stays out of reach (network.allow decides, and allows none).
  auto host = Listener::tcp();
  ASSERT_TRUE(host.has_value());
  const uint16_t port = host->port();
  const uint64_t connect_before = denied(AC_HOOK_SOCKET_CONNECT);
  EXPECT_EQ(scoped([port] { return tcp_connect_loopback(port); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_CONNECT) - connect_before, 1u);
}

TEST_F(SelfTalkTest, AUnixServerInTheWorkspaceServesItsOwnClients) {
  apply(kNoNetwork);
  const std::string own = ws("own.sock"), host_path = ws("host.sock");
  EXPECT_EQ(scoped([&] { return unix_self_talk(own); }), kOk);
  // A socket the host bound in the same workspace is not the run's.
  auto host = Listener::unix_at(host_path);
  ASSERT_TRUE(host.has_value());
  const uint64_t before = denied(AC_HOOK_UNIX_CONNECT);
  EXPECT_EQ(scoped([&] { return unix_connect(host_path); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_UNIX_CONNECT) - before, 1u);
}

// The scoped server listens and waits; `outside` tries to reach it; the
// server reports whether anything arrived. kOk: nothing did.
int serve_and_watch(int fd_ready, int fd_done, int type, uint16_t port, int family) {
  ::alarm(20);
  int s = ::socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(family, family == AF_INET ? "127.0.0.1" : "::1", port, &len);
  bool up =
      ::bind(s, reinterpret_cast<sockaddr*>(&ss), len) == 0 && (type != SOCK_STREAM || ::listen(s, 4) == 0);
  uint16_t bound = up ? port_of(s) : 0;
  (void)!::write(fd_ready, &bound, sizeof bound);
  if (!up) return kOtherError;
  char c;
  (void)!::read(fd_done, &c, 1);
  char buf[16];
  if (type == SOCK_STREAM) return ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC) < 0 ? kOk : kOtherError;
  return ::recv(s, buf, sizeof buf, 0) < 0 ? kOk : kOtherError;
}

// Runs serve_and_watch (on 127.0.0.1, or ::1 for AF_INET6) in the scope and
// `outside(port)` meanwhile; returns {server code, outside code}.
std::pair<int, int> reach_in(const std::function<int(std::function<int()>)>& run_server, int type,
                             uint16_t port, const std::function<int(uint16_t)>& outside,
                             int family = AF_INET) {
  int ready[2], done[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0) return {kOtherError, kOtherError};
  int outside_code = kOtherError;
  std::thread t([&] {
    uint16_t bound = 0;
    if (::read(ready[0], &bound, sizeof bound) == sizeof bound && bound) outside_code = outside(bound);
    (void)!::write(done[1], "x", 1);
  });
  int server = run_server([&] { return serve_and_watch(ready[1], done[0], type, port, family); });
  t.join();
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
  return {server, outside_code};
}

// A connect (stream) or one datagram (dgram) to the unix address a/len.
int unix_reach(int type, const sockaddr_un& a, socklen_t len) {
  int c = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  const auto* to = reinterpret_cast<const sockaddr*>(&a);
  int r = type == SOCK_STREAM ? ::connect(c, to, len) : (::sendto(c, "x", 1, 0, to, len) == 1 ? 0 : -1);
  int code = r == 0 ? kOk : classify(errno);
  ::close(c);
  return code;
}

// How serve_unix_and_watch names its socket.
constexpr const char* kAutobind = "";              // bind() with no name: the kernel picks one
constexpr const char* kPasscred = "\x01passcred";  // no bind(): SO_PASSCRED, then a failed connect

// serve_and_watch for a unix socket bound at `path`, or given an abstract
// name the kernel picks (kAutobind, kPasscred): the address goes to
// fd_ready as its length and its bytes.
int serve_unix_and_watch(int fd_ready, int fd_done, int type, const std::string& path) {
  ::alarm(20);
  int s = ::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  socklen_t len = sizeof(sa_family_t);
  bool up = true;
  if (path == kPasscred) {
    // The kernel autobinds a SO_PASSCRED socket before it looks for the
    // peer, and the name stays when the peer is not there.
    int one = 1;
    const std::string nowhere = std::string(1, '\0') + "agentcage-kt-nowhere-" + std::to_string(::getpid());
    std::memcpy(a.sun_path, nowhere.data(), nowhere.size());
    auto nl = static_cast<socklen_t>(sizeof(sa_family_t) + nowhere.size());
    up = ::setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) == 0 &&
         ::connect(s, reinterpret_cast<sockaddr*>(&a), nl) != 0;
  } else {
    if (!path.empty()) {
      std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
      len = sizeof a;
    }
    up = ::bind(s, reinterpret_cast<sockaddr*>(&a), len) == 0;
  }
  up = up && (type != SOCK_STREAM || ::listen(s, 4) == 0);
  sockaddr_un got{};
  socklen_t got_len = sizeof got;
  up = up && ::getsockname(s, reinterpret_cast<sockaddr*>(&got), &got_len) == 0;
  uint32_t n = up ? got_len : 0;
  (void)!::write(fd_ready, &n, sizeof n);
  if (!up) return kOtherError;
  (void)!::write(fd_ready, &got, n);
  char c;
  (void)!::read(fd_done, &c, 1);
  char buf[16];
  if (type == SOCK_STREAM) return ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC) < 0 ? kOk : kOtherError;
  return ::recv(s, buf, sizeof buf, 0) < 0 ? kOk : kOtherError;
}

// reach_in for unix sockets: {server code, outside code}.
std::pair<int, int> reach_in_unix(const std::function<int(std::function<int()>)>& run_server, int type,
                                  const std::string& path,
                                  const std::function<int(const sockaddr_un&, socklen_t)>& outside) {
  int ready[2], done[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0) return {kOtherError, kOtherError};
  int outside_code = kOtherError;
  std::thread t([&] {
    uint32_t n = 0;
    sockaddr_un a{};
    if (::read(ready[0], &n, sizeof n) == sizeof n && n && n <= sizeof a &&
        ::read(ready[0], &a, n) == static_cast<ssize_t>(n))
      outside_code = outside(a, n);
    (void)!::write(done[1], "x", 1);
  });
  int server = run_server([&] { return serve_unix_and_watch(ready[1], done[0], type, path); });
  t.join();
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
  return {server, outside_code};
}

TEST_F(SelfTalkTest, NoHostProcessOrOtherScopeReachesARunsUnixSockets) {
  // A run's listener on its workspace path or an autobound abstract name
  // (no rule needed) is a bind shell for any local process, unless only the
  // run may reach it.
  apply(kNoNetwork);
  auto in_scope = [this](std::function<int()> fn) { return scoped(fn); };
  const uint64_t before = denied(AC_HOOK_INGRESS);
  struct Case {
    int type;
    std::string path;
    const char* what;
  };
  const Case cases[] = {{SOCK_STREAM, ws("srv.sock"), "a stream listener in the workspace"},
                        {SOCK_STREAM, kAutobind, "a stream listener on an autobound abstract name"},
                        {SOCK_STREAM, kPasscred, "a stream listener named by SO_PASSCRED's autobind"},
                        {SOCK_DGRAM, ws("dgram.sock"), "a datagram socket in the workspace"},
                        {SOCK_DGRAM, kAutobind, "a datagram socket on an autobound abstract name"},
                        {SOCK_DGRAM, kPasscred, "a datagram socket named by SO_PASSCRED's autobind"}};
  for (const Case& k : cases) {
    auto [server, host] = reach_in_unix(in_scope, k.type, k.path, [&](const sockaddr_un& a, socklen_t l) {
      return unix_reach(k.type, a, l);
    });
    EXPECT_EQ(server, kOk) << k.what << ": the host reached it";
    EXPECT_EQ(host, kDenied) << k.what;
    if (!k.path.empty() && k.path[0] == '/') ::unlink(k.path.c_str());
  }
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 6u) << "counted in the owner's policy";

  // Another scope, even one whose rules would let it connect anywhere.
  auto cg2 = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-unix-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg2.ok()) << cg2.error().message;
  ASSERT_TRUE(enforcer()->add_scope(kt::scope_cgroup(*cg2), cg2->id(), slot_, ws_.string()).ok());
  auto [server2, other] =
      reach_in_unix(in_scope, SOCK_STREAM, kAutobind, [&](const sockaddr_un& a, socklen_t l) {
        return run_in_cgroup(cg2->fd(), [&] { return unix_reach(SOCK_STREAM, a, l); });
      });
  EXPECT_EQ(server2, kOk) << "the other scope's connection reached the run's listener";
  EXPECT_EQ(other, kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 7u);
  EXPECT_TRUE(enforcer()->remove_scope(kt::scope_cgroup(*cg2)).ok());
  EXPECT_TRUE(cg2->remove().ok());

  // The run's own processes reach each kind, and the host its own sockets.
  EXPECT_EQ(scoped([] {
              for (int type : {SOCK_STREAM, SOCK_DGRAM}) {
                int s = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
                sockaddr_un a{};
                a.sun_family = AF_UNIX;
                if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(sa_family_t)) != 0)
                  return 10 + classify(errno);
                if (type == SOCK_STREAM && ::listen(s, 1) != 0) return 20 + classify(errno);
                sockaddr_un got{};
                socklen_t l = sizeof got;
                ::getsockname(s, reinterpret_cast<sockaddr*>(&got), &l);
                int code = unix_reach(type, got, l);
                ::close(s);
                if (code != kOk) return 30 + code;
              }
              return kOk;
            }),
            kOk);
  EXPECT_EQ(scoped([&] { return unix_self_talk(ws("own.sock")); }), kOk);
  auto host = Listener::unix_at(ws("host.sock"));
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(unix_connect(ws("host.sock")), kOk);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 7u);
}

// A unix datagram socket of the run hears back from the host socket it sent
// to (a reply to a client, as for UDP), from nobody else.
TEST_F(SelfTalkTest, AUnixDatagramClientHearsOnlyFromWhereItSent) {
  const std::string server_path = "/tmp/agentcage-kt-dgram-" + std::to_string(::getpid());
  ::unlink(server_path.c_str());
  apply("  files:\n    write: [\"${workspace}\"]\n  network:\n    allow:\n      - {unix: " + server_path +
        "}\n");
  int server = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, server_path.c_str(), sizeof sa.sun_path - 1);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  const uint64_t before = denied(AC_HOOK_INGRESS);
  int replies = kOtherError, stranger = kOtherError;
  std::thread host([&] {
    // The client's datagram; a datagram from another host socket to the
    // client's address; the server's reply to it.
    char buf[16];
    sockaddr_un from{};
    socklen_t fl = sizeof from;
    if (::recvfrom(server, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fl) <= 0) return;
    stranger = unix_reach(SOCK_DGRAM, from, fl);
    replies =
        ::sendto(server, "pong", 4, 0, reinterpret_cast<sockaddr*>(&from), fl) == 4 ? kOk : classify(errno);
  });
  int client = scoped([&] {
    ::alarm(20);
    int c = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un me{};
    me.sun_family = AF_UNIX;
    const std::string mine = ws("client.sock");
    std::strncpy(me.sun_path, mine.c_str(), sizeof me.sun_path - 1);
    if (::bind(c, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0) return 10 + classify(errno);
    if (::sendto(c, "ping", 4, 0, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 4)
      return 20 + classify(errno);
    char buf[16];
    ssize_t n = ::recv(c, buf, sizeof buf, 0);  // the reply, and only it
    if (n != 4 || std::memcmp(buf, "pong", 4) != 0) return 30;
    return ::recv(c, buf, sizeof buf, MSG_DONTWAIT) < 0 ? kOk : 40;
  });
  host.join();
  ::close(server);
  ::unlink(server_path.c_str());
  EXPECT_EQ(client, kOk);
  EXPECT_EQ(replies, kOk) << "the server's reply to the run's client was refused";
  EXPECT_EQ(stranger, kDenied) << "another host socket reached the run's client";
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u);
}

TEST_F(SelfTalkTest, NoHostProcessReachesARunsPrivateSockets) {
  apply(kNoNetwork);
  auto in_scope = [this](std::function<int()> fn) { return scoped(fn); };
  const uint64_t before = denied(AC_HOOK_INGRESS);

  // TCP: the run's loopback listener refuses the host's connection.
  auto [server, client] =
      reach_in(in_scope, SOCK_STREAM, 0, [](uint16_t p) { return tcp_connect_loopback(p); });
  EXPECT_EQ(server, kOk) << "the host's connection reached the run's server";
  EXPECT_EQ(client, kDenied);
  // UDP: a datagram from the host to the run's loopback socket.
  auto [udp_server, sender] =
      reach_in(in_scope, SOCK_DGRAM, free_udp_port(), [](uint16_t p) { return udp_sendto(p); });
  EXPECT_EQ(udp_server, kOk) << "the host's datagram reached the run's socket";
  EXPECT_EQ(sender, kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 2u) << "counted in the owner's policy";
  // 0.0.0.0 as the destination reaches loopback too (the kernel's route for
  // it from an unbound socket).
  auto [server0, client0] =
      reach_in(in_scope, SOCK_STREAM, 0, [](uint16_t p) { return tcp_connect(AF_INET, "0.0.0.0", p); });
  EXPECT_EQ(server0, kOk) << "the host's connection to 0.0.0.0 reached the run's server";
  EXPECT_EQ(client0, kDenied);
  auto send_one = [](int family, const char* to_addr, uint16_t p) {
    int s = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t l = 0;
    sockaddr_storage to = inet_addr_of(family, to_addr, p, &l);
    int r = ::sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), l) == 1 ? kOk : classify(errno);
    ::close(s);
    return r;
  };
  auto [udp_server0, sender0] = reach_in(in_scope, SOCK_DGRAM, free_udp_port(),
                                         [&](uint16_t p) { return send_one(AF_INET, "0.0.0.0", p); });
  EXPECT_EQ(udp_server0, kOk) << "the host's datagram to 0.0.0.0 reached the run's socket";
  EXPECT_EQ(sender0, kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 4u);
  // And :: reaches ::1, the run's IPv6 loopback sockets.
  auto [server6, client6] = reach_in(
      in_scope, SOCK_STREAM, 0, [](uint16_t p) { return tcp_connect(AF_INET6, "::", p); }, AF_INET6);
  EXPECT_EQ(server6, kOk) << "the host's connection to :: reached the run's server on ::1";
  EXPECT_EQ(client6, kDenied);
  auto [udp_server6, sender6] = reach_in(
      in_scope, SOCK_DGRAM, free_udp_port(), [&](uint16_t p) { return send_one(AF_INET6, "::", p); },
      AF_INET6);
  EXPECT_EQ(udp_server6, kOk) << "the host's datagram to :: reached the run's socket on ::1";
  EXPECT_EQ(sender6, kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 6u);

  // Addresses the kernel takes in other spellings: what it reaches is
  // decided, not what the sender wrote. `connect_with(socket, to, len,
  // bind_to)` connects (stream) or sends one datagram (dgram).
  auto connect_with = [](int s, const sockaddr_storage& to, socklen_t len, const char* bind_to = nullptr) {
    int type = 0;
    socklen_t tl = sizeof type;
    ::getsockopt(s, SOL_SOCKET, SO_TYPE, &type, &tl);
    if (bind_to) {
      socklen_t bl = 0;
      sockaddr_storage b = inet_addr_of(AF_INET6, bind_to, 0, &bl);
      if (::bind(s, reinterpret_cast<sockaddr*>(&b), bl) != 0) return kOtherError;
    }
    const auto* a = reinterpret_cast<const sockaddr*>(&to);
    int rc = type == SOCK_STREAM ? ::connect(s, a, len) : (::sendto(s, "x", 1, 0, a, len) == 1 ? 0 : -1);
    int code = rc == 0 ? kOk : classify(errno);
    ::close(s);
    return code;
  };
  struct Odd {
    int type, server_family;
    std::function<int(uint16_t)> outside;
    const char* what;
  };
  // ::1 in the 24 bytes of a sockaddr_in6 without sin6_scope_id.
  auto short6 = [&](int type) {
    return [&connect_with, type](uint16_t p) {
      socklen_t l = 0;
      sockaddr_storage to = inet_addr_of(AF_INET6, "::1", p, &l);
      return connect_with(::socket(AF_INET6, type | SOCK_CLOEXEC, 0), to, 24);
    };
  };
  const Odd odd[] = {
      {SOCK_STREAM, AF_INET6, short6(SOCK_STREAM), "a 24-byte sockaddr_in6 (no sin6_scope_id), TCP"},
      {SOCK_DGRAM, AF_INET6, short6(SOCK_DGRAM), "a 24-byte sockaddr_in6, UDP"},
      {SOCK_DGRAM, AF_INET,
       [&](uint16_t p) {
         socklen_t l = 0;
         sockaddr_storage to = inet_addr_of(AF_INET, "127.0.0.1", p, &l);
         to.ss_family = AF_UNSPEC;  // udp_sendmsg takes it for AF_INET
         return connect_with(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), to, l);
       },
       "AF_UNSPEC to a UDP socket"},
      {SOCK_STREAM, AF_INET,
       [&](uint16_t p) {
         int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_MPTCP);
         if (s < 0) return kOtherError;
         socklen_t l = 0;
         sockaddr_storage to = inet_addr_of(AF_INET, "127.0.0.1", p, &l);
         return connect_with(s, to, l);
       },
       "MPTCP (falls back to TCP at the listener)"},
      {SOCK_STREAM, AF_INET,
       [&](uint16_t p) {
         socklen_t l = 0;
         sockaddr_storage to = inet_addr_of(AF_INET6, "::", p, &l);
         return connect_with(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), to, l, "::ffff:127.0.0.2");
       },
       ":: from a socket bound to ::ffff:127.0.0.2 (the kernel goes to 127.0.0.1)"},
  };
  uint64_t expected = 6;
  for (const Odd& o : odd) {
    auto [odd_server, odd_outside] =
        reach_in(in_scope, o.type, o.type == SOCK_DGRAM ? free_udp_port() : 0, o.outside, o.server_family);
    EXPECT_EQ(odd_server, kOk) << o.what << ": the host reached the run's socket";
    EXPECT_EQ(odd_outside, kDenied) << o.what;
    EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, ++expected) << o.what;
  }

  // The same datagram between two sockets of the run arrives.
  EXPECT_EQ(scoped([] {
              uint16_t port = free_udp_port();
              int r = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
              socklen_t len = 0;
              sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", port, &len);
              if (::bind(r, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 10 + classify(errno);
              int code = udp_sendto(port);
              if (code != kOk) return 20 + code;
              char buf[16];
              return ::recv(r, buf, sizeof buf, MSG_DONTWAIT) > 0 ? kOk : kOtherError;
            }),
            kOk);
}

TEST_F(SelfTalkTest, AUdpPortTheKernelPicksIsPrivateToo) {
  // bind(127.0.0.1:0): the port is chosen after the bind hook; the socket
  // becomes the run's private one when the run learns the port.
  apply(kNoNetwork);
  auto in_scope = [this](std::function<int()> fn) { return scoped(fn); };
  const uint64_t before = denied(AC_HOOK_INGRESS);
  auto [server, sender] = reach_in(in_scope, SOCK_DGRAM, 0, [](uint16_t p) { return udp_sendto(p); });
  EXPECT_EQ(server, kOk) << "the host's datagram reached the run's socket";
  EXPECT_EQ(sender, kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u);
  // The run's own datagram to it arrives.
  EXPECT_EQ(scoped([] {
              int r = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
              socklen_t len = 0;
              sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
              if (::bind(r, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 10 + classify(errno);
              int code = udp_sendto(port_of(r));
              if (code != kOk) return 20 + code;
              char buf[16];
              return ::recv(r, buf, sizeof buf, MSG_DONTWAIT) > 0 ? kOk : kOtherError;
            }),
            kOk);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u);
}

TEST_F(SelfTalkTest, AUdpServerAnswersItsOwnBoundClients) {
  // A client bound to loopback (port 0) is the run's private socket, so
  // its server's answer reaches it. A client that just sends gets its port
  // from the kernel after every hook: nothing can tell the answer's
  // destination is the run's own, and network.allow decides (the README's
  // limits; a datagram's source cannot vouch for it, a sender chooses it).
  apply(kNoNetwork);
  auto denials = [this] {
    return denied(AC_HOOK_SOCKET_CONNECT) + denied(AC_HOOK_SOCKET_SEND) + denied(AC_HOOK_INGRESS);
  };
  const uint64_t before = denials();
  EXPECT_EQ(scoped([] { return udp_round_trip(AF_INET, "127.0.0.1", true); }), kOk) << "127.0.0.1";
  EXPECT_EQ(scoped([] { return udp_round_trip(AF_INET6, "::1", true); }), kOk) << "::1";
  EXPECT_EQ(denials(), before);
  EXPECT_EQ(scoped([] { return udp_round_trip(AF_INET, "127.0.0.1", false); }), 20 + kDenied);
  EXPECT_EQ(denials(), before + 1);
}

TEST_F(SelfTalkTest, AHostDatagramReachesNoSocketThatHasNoPeer) {
  // A UDP socket of the run is a client with no peer from its creation:
  // bound to port 0 and not yet used, it takes no host datagram (nor could
  // it answer one: network.allow, none here, decides that).
  apply(kNoNetwork);
  auto host = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
  ASSERT_EQ(::bind(host, reinterpret_cast<sockaddr*>(&ss), len), 0);
  int ready[2], sent[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(sent, O_CLOEXEC), 0);
  std::thread t([&] {
    ino_t ino = 0;
    if (::read(ready[0], &ino, sizeof ino) == sizeof ino && ino) {
      uint16_t port = udp_port_of_inode(ino);
      sockaddr_storage to = inet_addr_of(AF_INET, "127.0.0.1", port, &len);
      if (port) ::sendto(host, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), len);
    }
    (void)!::write(sent[1], "x", 1);
  });
  const uint64_t before = denied(AC_HOOK_INGRESS);
  int code = scoped([&] {
    ::alarm(20);
    int r = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t rlen = 0;
    sockaddr_storage a = inet_addr_of(AF_INET, "127.0.0.1", 0, &rlen);
    struct stat st {};
    ino_t ino = ::bind(r, reinterpret_cast<sockaddr*>(&a), rlen) == 0 && ::fstat(r, &st) == 0 ? st.st_ino : 0;
    (void)!::write(ready[1], &ino, sizeof ino);
    if (!ino) return 10;
    char c;
    (void)!::read(sent[0], &c, 1);
    ::usleep(200 * 1000);  // the datagram, if let in, is queued by now
    return ::recv(r, &c, 1, MSG_DONTWAIT) == 1 ? 11 : kOk;
  });
  t.join();
  for (int fd : {ready[0], ready[1], sent[0], sent[1]}) ::close(fd);
  EXPECT_EQ(code, kOk) << "11: the host's datagram reached the run's socket";
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u);
  ::close(host);
}

TEST_F(SelfTalkTest, ASocketTheKernelBindsOnAFailedSendHearsFromNoOne) {
  // send() without an address on an unconnected UDP socket, or sendto()
  // with an address of another family, binds the socket to the wildcard
  // address and a port before failing, without the send hooks seeing an
  // inet destination: the socket has no peer and takes nothing.
  apply(kNoNetwork);
  auto host = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int ports[2], sent[2];
  ASSERT_EQ(::pipe2(ports, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(sent, O_CLOEXEC), 0);
  std::thread t([&] {
    uint16_t port = 0;
    while (::read(ports[0], &port, sizeof port) == sizeof port && port) {
      socklen_t len = 0;
      sockaddr_storage to = inet_addr_of(AF_INET, "127.0.0.1", port, &len);
      ::sendto(host, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), len);
      (void)!::write(sent[1], "x", 1);
    }
  });
  const uint64_t before = denied(AC_HOOK_INGRESS);
  int code = scoped([&] {
    ::alarm(20);
    int got = 0;
    for (int way = 0; way < 2; ++way) {
      int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_un un{};
      un.sun_family = AF_UNIX;
      int r = way == 0
                  ? static_cast<int>(::send(s, "q", 1, 0))
                  : static_cast<int>(::sendto(s, "q", 1, 0, reinterpret_cast<sockaddr*>(&un), sizeof un));
      if (r != -1) return 20 + way;
      uint16_t port = port_of(s);
      if (!port) return 30 + way;  // not bound: nothing to test
      (void)!::write(ports[1], &port, sizeof port);
      char c;
      (void)!::read(sent[0], &c, 1);
      ::usleep(200 * 1000);
      if (::recv(s, &c, 1, MSG_DONTWAIT) == 1) got |= 1 << way;
    }
    return got ? 10 + got : kOk;
  });
  uint16_t stop = 0;
  (void)!::write(ports[1], &stop, sizeof stop);
  t.join();
  for (int fd : {ports[0], ports[1], sent[0], sent[1], host}) ::close(fd);
  EXPECT_EQ(code, kOk)
      << "11: after send() without an address, 12: after sendto() to a unix address, 13: both";
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 2u);
}

// In a scoped process: send one datagram from a fresh client socket to
// addr:port, then collect what arrives within 2 s. kOk when only the
// answer did; 20: the other socket's datagram too; 21: nothing.
int udp_client_hears(int family, const char* addr, uint16_t port) {
  ::alarm(20);
  int c = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  timeval tv{2, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  socklen_t l = 0;
  sockaddr_storage to = inet_addr_of(family, addr, port, &l);
  if (::sendto(c, "q", 1, 0, reinterpret_cast<sockaddr*>(&to), l) != 1) return 10 + classify(errno);
  // A bind the kernel refuses (the socket is bound already) changes
  // nothing: it is still a client.
  sockaddr_storage lo = inet_addr_of(family, addr, 0, &l);
  if (::bind(c, reinterpret_cast<sockaddr*>(&lo), l) == 0) return 23;
  std::string got;
  char b;
  while (::recv(c, &b, 1, 0) == 1) got += b;
  return got == "p" ? kOk : got == "pi" || got == "ip" ? 20 : got.empty() ? 21 : 22;
}

TEST_F(SelfTalkTest, AUdpClientHearsOnlyFromWhereItSent) {
  // A client the kernel binds to the wildcard address is reachable from
  // anywhere: it takes datagrams only from the peers it sent to (the
  // filter on the scope's cgroup). Here the policy allows one host echo
  // server per family; its answer arrives, a datagram from another host
  // socket to the same client does not, over IPv4 and IPv6.
  struct Family {
    int family;
    const char* addr;
    int echo, other;
  } families[] = {{AF_INET, "127.0.0.1", udp_bound(AF_INET, "127.0.0.1"), udp_bound(AF_INET, "127.0.0.1")},
                  {AF_INET6, "::1", udp_bound(AF_INET6, "::1"), udp_bound(AF_INET6, "::1")}};
  for (const auto& f : families) ASSERT_TRUE(f.echo >= 0 && f.other >= 0) << f.addr;
  apply("  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" +
        std::to_string(port_of(families[0].echo)) + "], protocol: udp}\n      - {cidr: ::1/128, ports: [" +
        std::to_string(port_of(families[1].echo)) + "], protocol: udp}\n");
  for (const auto& f : families) {
    std::thread t = answer_then_spray(f.echo, f.other);
    const uint64_t before = denied(AC_HOOK_INGRESS);
    const uint16_t port = port_of(f.echo);
    int code = scoped([&f, port] { return udp_client_hears(f.family, f.addr, port); });
    t.join();
    EXPECT_EQ(code, kOk) << f.addr << " (20: the other socket's datagram arrived; 21: not even the answer)";
    EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u) << f.addr;
    ::close(f.echo);
    ::close(f.other);
  }
}

// Sends one UDP datagram over IPv6 to [::1]:dport with a source of our
// choosing (a raw socket writes the whole IPv6 header). 0 on success.
int send_udp6_from(const char* src, uint16_t sport, uint16_t dport) {
  struct {
    uint32_t flow;
    uint16_t plen;
    uint8_t next, hops;
    in6_addr saddr, daddr;
    uint16_t sport, dport, len, sum;
    char data;
  } __attribute__((packed)) pkt{};
  pkt.flow = htonl(6u << 28);
  pkt.plen = htons(9);
  pkt.next = IPPROTO_UDP;
  pkt.hops = 64;
  ::inet_pton(AF_INET6, src, &pkt.saddr);
  ::inet_pton(AF_INET6, "::1", &pkt.daddr);
  pkt.sport = htons(sport);
  pkt.dport = htons(dport);
  pkt.len = htons(9);
  pkt.data = 'i';
  // The UDP checksum over the pseudo-header (addresses, length, protocol).
  uint32_t sum = 0;
  auto add = [&sum](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; i += 2) sum += (b[i] << 8) | (i + 1 < n ? b[i + 1] : 0);
  };
  add(&pkt.saddr, 16);
  add(&pkt.daddr, 16);
  sum += 9 + IPPROTO_UDP;
  add(&pkt.sport, 9);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  pkt.sum = htons(static_cast<uint16_t>(~sum) ? static_cast<uint16_t>(~sum) : 0xffff);
  int raw = ::socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (raw < 0) return -1;
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  to.sin6_addr = in6addr_loopback;
  int r =
      ::sendto(raw, &pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) == sizeof pkt ? 0 : -1;
  ::close(raw);
  return r;
}

TEST_F(SelfTalkTest, AForgedIPv6SourceIsNoPeer) {
  // A dual-stack client that sent to an IPv4 peer (::ffff:127.0.0.1) hears
  // that peer's IPv4 answers; an IPv6 packet claiming that v4-mapped
  // source (or ::) is forged and matches no peer.
  int echo = udp_bound(AF_INET, "127.0.0.1");
  ASSERT_GE(echo, 0);
  const uint16_t echo_port = port_of(echo);
  apply("  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" + std::to_string(echo_port) +
        "], protocol: udp}\n");
  int ports[2], sent[2];
  ASSERT_EQ(::pipe2(ports, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(sent, O_CLOEXEC), 0);
  std::thread t([&] {
    uint16_t port = 0;
    if (::read(ports[0], &port, sizeof port) == sizeof port && port) {
      char c = send_udp6_from("::ffff:127.0.0.1", echo_port, port) == 0 ? 'y' : 'n';
      if (c == 'y') c = send_udp6_from("::", 0, port) == 0 ? 'y' : 'n';
      (void)!::write(sent[1], &c, 1);
    }
  });
  const uint64_t before = denied(AC_HOOK_INGRESS);
  int code = scoped([&] {
    ::alarm(20);
    int s = ::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t l = 0;
    sockaddr_storage to = inet_addr_of(AF_INET6, "::ffff:127.0.0.1", echo_port, &l);
    if (::sendto(s, "q", 1, 0, reinterpret_cast<sockaddr*>(&to), l) != 1) return 10 + classify(errno);
    uint16_t port = port_of(s);
    (void)!::write(ports[1], &port, sizeof port);
    char c = 0;
    if (::read(sent[0], &c, 1) != 1 || c != 'y') return 30;  // could not forge
    ::usleep(200 * 1000);
    return ::recv(s, &c, 1, MSG_DONTWAIT) == 1 ? 20 : kOk;
  });
  uint16_t stop = 0;
  (void)!::write(ports[1], &stop, sizeof stop);
  t.join();
  for (int fd : {ports[0], ports[1], sent[0], sent[1], echo}) ::close(fd);
  EXPECT_EQ(code, kOk) << "20: a forged IPv6 datagram reached the client; 30: the raw socket failed";
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 2u);
}

TEST_F(SelfTalkTest, AUdpSocketMadeOutsideTheScopeDoesNotSendAsAClient) {
  // The filter of what a client hears sits on the scope's cgroup and sees
  // the sockets made in it. A process that made its socket elsewhere and
  // was then moved into the scope (as `attach` finds a running one) would
  // hear from anyone through it: that socket may not send. A socket it
  // makes once inside works as any client's.
  int echo = udp_bound(AF_INET, "127.0.0.1");
  ASSERT_GE(echo, 0);
  const uint16_t echo_port = port_of(echo);
  apply("  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" + std::to_string(echo_port) +
        "], protocol: udp}\n");
  std::thread t([echo] {
    timeval tv{10, 0};
    ::setsockopt(echo, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    char c;
    // Answer every datagram until "x" (or none comes for 10 s).
    while (::recvfrom(echo, &c, 1, 0, reinterpret_cast<sockaddr*>(&from), &from_len) == 1 && c != 'x')
      ::sendto(echo, "p", 1, 0, reinterpret_cast<sockaddr*>(&from), from_len);
  });
  int moved[2], made[2];
  ASSERT_EQ(::pipe2(moved, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(made, O_CLOEXEC), 0);
  const uint64_t before = denied(AC_HOOK_INGRESS);
  const uint64_t protected_before = reason(AC_HOOK_INGRESS, AC_REASON_PROTECTED);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);
    int outside = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    (void)!::write(made[1], "m", 1);
    char m;
    if (::read(moved[0], &m, 1) != 1) ::_exit(9);
    socklen_t l = 0;
    sockaddr_storage to = inet_addr_of(AF_INET, "127.0.0.1", echo_port, &l);
    int first =
        ::sendto(outside, "q", 1, 0, reinterpret_cast<sockaddr*>(&to), l) == 1 ? kOk : classify(errno);
    int inside = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};
    ::setsockopt(inside, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b;
    if (::sendto(inside, "q", 1, 0, reinterpret_cast<sockaddr*>(&to), l) != 1 ||
        ::recv(inside, &b, 1, 0) != 1)
      ::_exit(30 + first);
    ::_exit(first == kDenied ? 0 : 20 + first);
  }
  char m;
  ASSERT_EQ(::read(made[0], &m, 1), 1);
  auto st = cgroup::write_file(cg_.path() / "cgroup.procs", std::to_string(pid));
  EXPECT_TRUE(st.ok()) << st.error().message;
  (void)!::write(moved[1], "g", 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  int stop = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t l = 0;
  sockaddr_storage to = inet_addr_of(AF_INET, "127.0.0.1", echo_port, &l);
  ::sendto(stop, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), l);
  t.join();
  for (int fd : {moved[0], moved[1], made[0], made[1], echo, stop}) ::close(fd);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "20: the socket made outside sent; 30+: the socket made inside got no answer";
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u);
  EXPECT_EQ(reason(AC_HOOK_INGRESS, AC_REASON_PROTECTED) - protected_before, 1u);
}

TEST_F(SelfTalkTest, TheReceiveFilterComesAndGoesWithTheScope) {
  // Attached to the scope's cgroup when it becomes a scope, to no other
  // cgroup, and gone when the scope is removed (an attached cgroup goes
  // on living after detach). Through the scope lifecycle, as runs and
  // attach do it.
  auto cg2 = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-filter-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg2.ok()) << cg2.error().message;
  ASSERT_TRUE(ingress_programs(cg2->fd()).empty());
  scope::CgroupRef ref{cg2->id(), cg2->level(), cg2->path()};
  bpf::CompiledPolicy none;
  auto c = scope::confine(*enforcer(), ref, scope::TransientPolicy{"kt-filter", none, false}, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto attached = ingress_programs(cg2->fd());
  ASSERT_EQ(attached.size(), 1u);
  int prog = bpf_prog_get_fd_by_id(attached[0]);
  ASSERT_GE(prog, 0);
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  ASSERT_EQ(bpf_obj_get_info_by_fd(prog, &info, &len), 0);
  ::close(prog);
  EXPECT_STREQ(info.name, "ac_udp_client_f") << "the kernel keeps 15 characters of a name";
  EXPECT_EQ(info.type, BPF_PROG_TYPE_CGROUP_SKB);
  EXPECT_TRUE(ingress_programs(cg_.fd()).empty()) << "a filter on a cgroup that is no scope";
  auto r = scope::release(*enforcer(), *c, scope::Ending::detach);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(ingress_programs(cg2->fd()).empty()) << "the filter outlived the scope";
  EXPECT_TRUE(cg2->remove().ok());
}

TEST_F(SelfTalkTest, TheFilterGoesOnTheScopesCgroupAndComesOffOnlyItself) {
  // A descriptor of another cgroup is refused (the filter would go where
  // the scope is not), and nothing is registered. Removing a scope that is
  // gone never takes another tool's program off its cgroup (the kernel's
  // detach on a cgroup not in multi mode takes whatever is there).
  const std::string tag = std::to_string(::getpid());
  auto cg2 = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-fd-" + tag);
  auto cg3 = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-fd3-" + tag);
  ASSERT_TRUE(cg2.ok() && cg3.ok());
  ASSERT_TRUE(enforcer()->put_policy(slot_, std::vector<bpf::PathRule>{}).ok());
  auto st = enforcer()->add_scope({cg3->fd(), cg2->id(), cg2->level()}, cg2->id(), slot_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EBADF);
  EXPECT_TRUE(ingress_programs(cg3->fd()).empty());
  auto scopes = enforcer()->scopes();
  ASSERT_TRUE(scopes.ok());
  for (const auto& sc : *scopes) EXPECT_NE(sc.cgroup_id, cg2->id());

  int tool = pass_all_program();
  ASSERT_GE(tool, 0);
  ASSERT_EQ(bpf_prog_attach(tool, cg2->fd(), BPF_CGROUP_INET_INGRESS, 0), 0);  // exclusive
  EXPECT_TRUE(enforcer()->remove_scope(kt::scope_cgroup(*cg2)).ok());
  EXPECT_EQ(ingress_programs(cg2->fd()).size(), 1u) << "removing a scope took another tool's program off";
  EXPECT_EQ(bpf_prog_detach2(tool, cg2->fd(), BPF_CGROUP_INET_INGRESS), 0);
  ::close(tool);
  EXPECT_TRUE(cg2->remove().ok());
  EXPECT_TRUE(cg3->remove().ok());
}

TEST_F(SelfTalkTest, APrivateSetTakesItsFilterAlongWhenItGoes) {
  // A private set (tests, the doctor's probe, the bench) is detached when
  // it is destroyed: its filter leaves the cgroups of the scopes it still
  // had, as its LSM programs leave their hooks.
  auto cg2 =
      cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-private-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg2.ok()) << cg2.error().message;
  {
    auto e = bpf::Enforcer::load();
    ASSERT_TRUE(e.ok()) << e.error().message;
    ASSERT_TRUE((*e)->put_policy(1, std::vector<bpf::PathRule>{}).ok());
    ASSERT_TRUE((*e)->add_scope(kt::scope_cgroup(*cg2), cg2->id(), 1).ok());
    EXPECT_EQ(ingress_programs(cg2->fd()).size(), 1u);
  }
  EXPECT_TRUE(ingress_programs(cg2->fd()).empty()) << "the filter outlived its private set";
  EXPECT_TRUE(cg2->remove().ok());
}

TEST_F(SelfTalkTest, TheReceiveFilterNeverSwitchesOffAnotherToolsFilter) {
  // A program attached with BPF_F_ALLOW_OVERRIDE applies below its cgroup
  // until something is attached there: the filter would switch it off for
  // the scope, so confining is refused, naming the cgroup, and nothing
  // changes. Attached with BPF_F_ALLOW_MULTI, both run.
  const std::string tag = std::to_string(::getpid());
  auto outer = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-tool-" + tag);
  ASSERT_TRUE(outer.ok()) << outer.error().message;
  auto inner = cgroup::Cgroup::create(root_, outer->path(), "scope");
  ASSERT_TRUE(inner.ok()) << inner.error().message;
  int tool = pass_all_program();
  ASSERT_GE(tool, 0) << std::strerror(errno);
  scope::CgroupRef ref{inner->id(), inner->level(), inner->path()};
  const scope::TransientPolicy policy{"kt-tool", bpf::CompiledPolicy{}, false};

  ASSERT_EQ(bpf_prog_attach(tool, outer->fd(), BPF_CGROUP_INET_INGRESS, BPF_F_ALLOW_OVERRIDE), 0);
  auto refused = scope::confine(*enforcer(), ref, policy, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, EPERM);
  EXPECT_NE(refused.error().message.find(outer->path().string() + " has BPF_CGROUP_INET_INGRESS programs"),
            std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(ingress_programs(inner->fd()).empty());
  auto scopes = enforcer()->scopes();
  ASSERT_TRUE(scopes.ok());
  for (const auto& sc : *scopes) EXPECT_NE(sc.cgroup_id, inner->id()) << "a refused confine left a scope";

  ASSERT_EQ(bpf_prog_detach2(tool, outer->fd(), BPF_CGROUP_INET_INGRESS), 0);
  ASSERT_EQ(bpf_prog_attach(tool, outer->fd(), BPF_CGROUP_INET_INGRESS, BPF_F_ALLOW_MULTI), 0);
  auto c = scope::confine(*enforcer(), ref, policy, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  uint32_t ids[8] = {};
  uint32_t count = 8, flags = 0;
  ASSERT_EQ(bpf_prog_query(inner->fd(), BPF_CGROUP_INET_INGRESS, BPF_F_QUERY_EFFECTIVE, &flags, ids, &count),
            0);
  EXPECT_EQ(count, 2u) << "the other tool's program and the filter both apply to the scope";
  EXPECT_TRUE(scope::release(*enforcer(), *c, scope::Ending::detach).ok());
  EXPECT_EQ(bpf_prog_detach2(tool, outer->fd(), BPF_CGROUP_INET_INGRESS), 0);
  ::close(tool);
  EXPECT_TRUE(inner->remove().ok());
  EXPECT_TRUE(outer->remove().ok());
}

TEST_F(SelfTalkTest, AToolsFilterThatANearerOneAlreadyOverridesIsNoReasonToRefuse) {
  // The kernel counts a cgroup's programs further up only while none were
  // found below, or where they are in multi mode: with a tool's program
  // attached with BPF_F_ALLOW_MULTI in between, a program attached with
  // BPF_F_ALLOW_OVERRIDE further up is out for the scope already, and
  // agentcage's filter changes nothing for it. Confining is not refused;
  // with the program in between gone, it is.
  const std::string tag = std::to_string(::getpid());
  auto outer = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-near-" + tag);
  ASSERT_TRUE(outer.ok()) << outer.error().message;
  auto mid = cgroup::Cgroup::create(root_, outer->path(), "mid");
  ASSERT_TRUE(mid.ok()) << mid.error().message;
  auto inner = cgroup::Cgroup::create(root_, mid->path(), "scope");
  ASSERT_TRUE(inner.ok()) << inner.error().message;
  int far = pass_all_program(), near = pass_all_program();
  ASSERT_GE(far, 0) << std::strerror(errno);
  ASSERT_GE(near, 0) << std::strerror(errno);
  ASSERT_EQ(bpf_prog_attach(far, outer->fd(), BPF_CGROUP_INET_INGRESS, BPF_F_ALLOW_OVERRIDE), 0);
  ASSERT_EQ(bpf_prog_attach(near, mid->fd(), BPF_CGROUP_INET_INGRESS, BPF_F_ALLOW_MULTI), 0);
  scope::CgroupRef ref{inner->id(), inner->level(), inner->path()};
  const scope::TransientPolicy policy{"kt-near", bpf::CompiledPolicy{}, false};
  auto c = scope::confine(*enforcer(), ref, policy, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(scope::release(*enforcer(), *c, scope::Ending::detach).ok());
  EXPECT_EQ(bpf_prog_detach2(near, mid->fd(), BPF_CGROUP_INET_INGRESS), 0);
  auto refused = scope::confine(*enforcer(), ref, policy, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find(outer->path().string() + " has BPF_CGROUP_INET_INGRESS programs"),
            std::string::npos)
      << refused.error().message;
  EXPECT_EQ(bpf_prog_detach2(far, outer->fd(), BPF_CGROUP_INET_INGRESS), 0);
  ::close(far);
  ::close(near);
  EXPECT_TRUE(inner->remove().ok());
  EXPECT_TRUE(mid->remove().ok());
  EXPECT_TRUE(outer->remove().ok());
}

// setsockopt(SOL_SOCKET, opt, 1) as a probe code.
int set_opt(int fd, int opt) {
  int one = 1;
  return result(::setsockopt(fd, SOL_SOCKET, opt, &one, sizeof one));
}

TEST_F(SelfTalkTest, APrivateSocketKeepsItsAddressToItself) {
  // Listening first and asking for SO_REUSEPORT afterwards would let a host
  // socket with the same uid join the address and answer the run's own
  // clients. SO_REUSEADDR on a TCP listener shares nothing and stays.
  apply(kNoNetwork);
  const uint64_t before = denied(AC_HOOK_INGRESS);
  EXPECT_EQ(scoped([] {
              int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              socklen_t len = 0;
              sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
              if (::bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(s, 4) != 0) return 10;
              if (int c = set_opt(s, SO_REUSEADDR); c != kOk) return 20 + c;
              return set_opt(s, SO_REUSEPORT);
            }),
            kDenied);
  EXPECT_EQ(scoped([] {
              int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
              socklen_t len = 0;
              sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
              if (::bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 10;
              port_of(s);
              return set_opt(s, SO_REUSEADDR);
            }),
            kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 2u);
  // A socket that is nobody's private one yet may set both (the server of
  // tcp_self_talk sets SO_REUSEADDR before it binds, as Python's do).
  EXPECT_EQ(scoped([] {
              int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
              if (int c = set_opt(s, SO_REUSEADDR); c != kOk) return 20 + c;
              return set_opt(s, SO_REUSEPORT);
            }),
            kOk);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 2u);
}

TEST_F(SelfTalkTest, AnotherScopeCannotReachARunsPrivateListener) {
  // Both scopes under a policy that allows every loopback destination:
  // the other scope's own rules would let it in, the owner's listener
  // (no network.listen rule) does not. Its own clients still get in.
  apply("  network:\n    allow:\n      - {cidr: 127.0.0.0/8, protocol: any}\n");
  auto cg2 = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "st-other-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg2.ok()) << cg2.error().message;
  ASSERT_TRUE(enforcer()->add_scope(kt::scope_cgroup(*cg2), cg2->id(), slot_, ws_.string()).ok());
  EXPECT_EQ(scoped([] { return tcp_self_talk(AF_INET, "127.0.0.1", AF_INET, "127.0.0.1"); }), kOk);
  const uint64_t before = denied(AC_HOOK_INGRESS);
  auto in_scope = [this](std::function<int()> fn) { return scoped(fn); };
  auto [server, client] = reach_in(in_scope, SOCK_STREAM, 0, [&](uint16_t p) {
    return run_in_cgroup(cg2->fd(), [p] { return tcp_connect_loopback(p); });
  });
  EXPECT_EQ(server, kOk) << "the other scope's connection reached the run's server";
  EXPECT_EQ(client, kDenied);
  EXPECT_EQ(denied(AC_HOOK_INGRESS) - before, 1u);
  EXPECT_TRUE(enforcer()->remove_scope(kt::scope_cgroup(*cg2)).ok());
  EXPECT_TRUE(cg2->remove().ok());
}

}  // namespace
}  // namespace agentcage
