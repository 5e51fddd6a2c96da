// SPDX-License-Identifier: Apache-2.0
// Ingress and socket kinds on a real kernel: what a scope may create (unix,
// TCP, UDP, route netlink), that route netlink stays read-only while name
// resolution keeps working, and that nothing outside can reach the run
// through a socket it binds or listens on unless network.listen allows it.
// Each denial sits next to the legitimate case that must keep working, and
// is checked in the slot's counters (so a kernel refusal of its own cannot
// pass for ours).
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

namespace agentcage {
namespace {

using namespace kt;

std::string policy_yaml(const std::string& spec) {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-ingress\nspec:\n" + spec;
}

// socket() + close.
int try_socket(int family, int type, int protocol) {
  int s = ::socket(family, type | SOCK_CLOEXEC, protocol);
  if (s < 0) return classify(errno);
  ::close(s);
  return kOk;
}

// bind (and optionally listen) a fresh socket; kOk, kDenied or kOtherError,
// and 10 + the code of listen when bind went through but listen did not.
int try_bind(int family, int type, const char* addr, uint16_t port, bool listen, bool reuse = true) {
  int s = ::socket(family, type | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  int one = 1;
  if (reuse) ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(family, addr, port, &len);
  int code = result(::bind(s, reinterpret_cast<sockaddr*>(&ss), len));
  if (code == kOk && listen) {
    int l = result(::listen(s, 4));
    if (l != kOk) code = 10 + l;
  }
  ::close(s);
  return code;
}

// listen() on a socket never bound: the kernel binds it to the wildcard.
int try_listen_unbound() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  int code = result(::listen(s, 4));
  ::close(s);
  return code;
}

// bind a unix socket to `name` (abstract when it starts with '\0').
int try_bind_unix(const std::string& name, bool autobind = false) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, name.data(), name.size());
  socklen_t len = autobind ? sizeof(sa_family_t) : static_cast<socklen_t>(sizeof(sa_family_t) + name.size());
  int code = result(::bind(s, reinterpret_cast<sockaddr*>(&a), len));
  if (code == kOk) code = result(::listen(s, 4));
  ::close(s);
  return code;
}

// A free TCP port on 127.0.0.1 (bound and released).
uint16_t free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
  ::bind(s, reinterpret_cast<sockaddr*>(&ss), len);
  sockaddr_in got{};
  socklen_t glen = sizeof got;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&got), &glen);
  ::close(s);
  return ntohs(got.sin_port);
}

// One netlink route request of `type` (a dump when `dump`) sent in one
// buffer with `extra` (another message, or none); the code of sendmsg, and
// when `read_reply` the code of reading at least one reply.
struct NlMsg {
  nlmsghdr h;
  ifinfomsg body;
};

NlMsg nl_msg(uint16_t type, uint16_t flags, uint32_t seq) {
  NlMsg m{};
  m.h.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg));
  m.h.nlmsg_type = type;
  m.h.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  m.h.nlmsg_seq = seq;
  m.body.ifi_family = AF_UNSPEC;
  // An interface that does not exist: a change the kernel would try is
  // refused by it anyway (ENODEV in the reply), so no test can alter the
  // host's network even when the hook is missing.
  if (type != RTM_GETLINK) m.body.ifi_index = 0x7ffffff0;
  return m;
}

int nl_route_send(const std::vector<NlMsg>& msgs, bool read_reply) {
  int s = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (s < 0) return classify(errno);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  ssize_t n = ::sendto(s, msgs.data(), msgs.size() * sizeof(NlMsg), 0, reinterpret_cast<sockaddr*>(&kernel),
                       sizeof kernel);
  int code = n < 0 ? classify(errno) : kOk;
  if (code == kOk && read_reply) {
    char buf[8192];
    ssize_t r = ::recv(s, buf, sizeof buf, 0);
    code = r > 0 ? kOk : kOtherError;
  }
  ::close(s);
  return code;
}

class IngressTest : public PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 10;
  IngressTest() : PolicyScopeTest(kSlot, "ig") {}

  void apply(const std::string& spec) { apply_yaml(policy_yaml(spec), ws_.string()); }
};

// ---- socket families and protocols ----------------------------------------------

TEST_F(IngressTest, OnlyUnixTcpUdpAndRouteNetlinkSocketsAreCreated) {
  // Outside the scope the refused kinds exist on this kernel (socket
  // diagnostics, uevents): the denials below are the policy's.
  ASSERT_EQ(in_child(false, [] { return try_socket(AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG); }), kOk);
  ASSERT_EQ(in_child(false, [] { return try_socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT); }), kOk);
  apply("  network: {}\n");

  struct Case {
    const char* what;
    int family, type, protocol;
    int want;
  };
  const Case cases[] = {
      {"tcp", AF_INET, SOCK_STREAM, 0, kOk},
      {"tcp explicit", AF_INET, SOCK_STREAM, IPPROTO_TCP, kOk},
      {"tcp6", AF_INET6, SOCK_STREAM, 0, kOk},
      {"udp", AF_INET, SOCK_DGRAM, 0, kOk},
      {"udp explicit", AF_INET, SOCK_DGRAM, IPPROTO_UDP, kOk},
      {"udp6", AF_INET6, SOCK_DGRAM, IPPROTO_UDP, kOk},
      {"unix stream", AF_UNIX, SOCK_STREAM, 0, kOk},
      {"unix dgram", AF_UNIX, SOCK_DGRAM, 0, kOk},
      {"unix seqpacket", AF_UNIX, SOCK_SEQPACKET, 0, kOk},
      {"route netlink", AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, kOk},
      {"route netlink dgram", AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE, kOk},
      // SCTP reaches peers through its connectx socket options, never
      // socket_connect; asking for it here also loads its module.
      {"sctp one-to-one", AF_INET, SOCK_STREAM, IPPROTO_SCTP, kDenied},
      {"sctp one-to-many", AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP, kDenied},
      {"sctp6", AF_INET6, SOCK_STREAM, IPPROTO_SCTP, kDenied},
      {"mptcp", AF_INET, SOCK_STREAM, IPPROTO_MPTCP, kDenied},
      {"udplite", AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE, kDenied},
      {"icmp ping", AF_INET, SOCK_DGRAM, IPPROTO_ICMP, kDenied},
      {"icmp6 ping", AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6, kDenied},
      {"raw", AF_INET, SOCK_RAW, IPPROTO_RAW, kDenied},
      {"sock_diag", AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG, kDenied},
      {"uevent", AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT, kDenied},
      {"audit", AF_NETLINK, SOCK_RAW, NETLINK_AUDIT, kDenied},
      {"usersock", AF_NETLINK, SOCK_RAW, NETLINK_USERSOCK, kDenied},
      {"generic", AF_NETLINK, SOCK_RAW, NETLINK_GENERIC, kDenied},
      {"packet", AF_PACKET, SOCK_DGRAM, 0, kDenied},
      {"vsock", AF_VSOCK, SOCK_STREAM, 0, kDenied},
  };
  int refused = 0;
  for (const Case& c : cases) {
    const uint64_t before = denied(AC_HOOK_SOCKET_CREATE);
    EXPECT_EQ(scoped([&] { return try_socket(c.family, c.type, c.protocol); }), c.want) << c.what;
    EXPECT_EQ(denied(AC_HOOK_SOCKET_CREATE) - before, c.want == kDenied ? 1u : 0u) << c.what;
    refused += c.want == kDenied;
  }
  EXPECT_GE(reason(AC_HOOK_SOCKET_CREATE, AC_REASON_PROTECTED), static_cast<uint64_t>(refused));
}

// ---- netlink: route sockets read only -------------------------------------------

TEST_F(IngressTest, RouteNetlinkReadsButDoesNotChangeAndResolutionWorks) {
  apply(
      "  files:\n    read: [/etc, /usr, /lib, /lib64]\n"
      "  network: {}\n");
  const NlMsg dump = nl_msg(RTM_GETLINK, NLM_F_DUMP, 1);
  const NlMsg change = nl_msg(RTM_DELLINK, NLM_F_ACK, 2);
  const NlMsg add_addr = nl_msg(RTM_NEWADDR, NLM_F_ACK, 3);

  uint64_t allowed_before = hook(AC_HOOK_NETLINK_SEND).decisions[AC_DECISION_ALLOW];
  EXPECT_EQ(scoped([&] { return nl_route_send({dump}, true); }), kOk) << "a route dump must work";
  EXPECT_GT(hook(AC_HOOK_NETLINK_SEND).decisions[AC_DECISION_ALLOW], allowed_before);

  const uint64_t before = denied(AC_HOOK_NETLINK_SEND);
  EXPECT_EQ(scoped([&] { return nl_route_send({change}, false); }), kDenied) << "RTM_DELLINK";
  EXPECT_EQ(scoped([&] { return nl_route_send({add_addr}, false); }), kDenied) << "RTM_NEWADDR";
  // A change behind a harmless first message of the same buffer.
  EXPECT_EQ(scoped([&] { return nl_route_send({dump, change}, false); }), kDenied) << "batched";
  EXPECT_EQ(denied(AC_HOOK_NETLINK_SEND) - before, 3u);

  // glibc's getaddrinfo with AI_ADDRCONFIG asks the kernel for the host's
  // addresses over NETLINK_ROUTE (RTM_GETADDR dump): it keeps working.
  allowed_before = hook(AC_HOOK_NETLINK_SEND).decisions[AC_DECISION_ALLOW];
  EXPECT_EQ(scoped([] {
              addrinfo hints{};
              hints.ai_family = AF_UNSPEC;
              hints.ai_socktype = SOCK_STREAM;
              hints.ai_flags = AI_ADDRCONFIG;
              addrinfo* res = nullptr;
              int rc = ::getaddrinfo("localhost", "80", &hints, &res);
              if (res) ::freeaddrinfo(res);
              return rc == 0 ? kOk : kOtherError;
            }),
            kOk);
  EXPECT_GT(hook(AC_HOOK_NETLINK_SEND).decisions[AC_DECISION_ALLOW], allowed_before)
      << "getaddrinfo did not use netlink, so this test proves nothing about it";
}

// A route socket is also a way to another process: a unicast to a netlink
// socket of the host (root may send one) is refused; to the kernel is fine.
TEST_F(IngressTest, NetlinkToAHostProcessIsDenied) {
  int host = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  ASSERT_GE(host, 0);
  sockaddr_nl me{};
  me.nl_family = AF_NETLINK;
  ASSERT_EQ(::bind(host, reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  socklen_t len = sizeof me;
  ASSERT_EQ(::getsockname(host, reinterpret_cast<sockaddr*>(&me), &len), 0);
  const uint32_t portid = me.nl_pid;
  apply("  network: {}\n");

  auto send_to_host = [portid](bool use_connect) {
    int s = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (s < 0) return classify(errno);
    sockaddr_nl peer{};
    peer.nl_family = AF_NETLINK;
    peer.nl_pid = portid;
    NlMsg m = nl_msg(RTM_GETLINK, 0, 7);
    int code;
    if (use_connect) {
      code = result(::connect(s, reinterpret_cast<sockaddr*>(&peer), sizeof peer));
    } else {
      code = ::sendto(s, &m, sizeof m, 0, reinterpret_cast<sockaddr*>(&peer), sizeof peer) < 0
                 ? classify(errno)
                 : kOk;
    }
    ::close(s);
    return code;
  };
  const uint64_t before = denied(AC_HOOK_SOCKET_SEND) + denied(AC_HOOK_SOCKET_CONNECT);
  EXPECT_EQ(scoped([&] { return send_to_host(false); }), kDenied) << "sendto a host netlink socket";
  EXPECT_EQ(scoped([&] { return send_to_host(true); }), kDenied) << "connect to a host netlink socket";
  EXPECT_EQ(denied(AC_HOOK_SOCKET_SEND) + denied(AC_HOOK_SOCKET_CONNECT) - before, 2u);
  char buf[256];
  EXPECT_LT(::recv(host, buf, sizeof buf, 0), 0) << "a message from the scope reached the host socket";
  // Unscoped, the same send arrives: the test can tell.
  EXPECT_EQ(in_child(false, [&] { return send_to_host(false); }), kOk);
  EXPECT_GT(::recv(host, buf, sizeof buf, 0), 0);
  ::close(host);
}

// ---- bind and listen --------------------------------------------------------------

TEST_F(IngressTest, NoListenAndNoBindOffLoopbackWithoutARule) {
  apply("  files:\n    write: [\"${workspace}\"]\n  network: {}\n");
  const std::string sock = ws("server.sock");
  const uint64_t bind_before = denied(AC_HOOK_SOCKET_BIND), listen_before = denied(AC_HOOK_SOCKET_LISTEN);

  // Loopback binds (a test's own UDP traffic, a client's source address).
  EXPECT_EQ(scoped([] { return try_bind(AF_INET, SOCK_STREAM, "127.0.0.1", 0, false); }), kOk);
  EXPECT_EQ(scoped([] { return try_bind(AF_INET, SOCK_DGRAM, "127.0.0.1", 0, false, false); }), kOk);
  EXPECT_EQ(scoped([] { return try_bind(AF_INET6, SOCK_DGRAM, "::1", 0, false, false); }), kOk);
  // A loopback UDP socket is the run's private one: with SO_REUSEADDR a
  // host socket could share its port (selftalk_test.cpp has the rest).
  EXPECT_EQ(scoped([] { return try_bind(AF_INET, SOCK_DGRAM, "127.0.0.1", 0, false); }), kDenied);
  EXPECT_EQ(scoped([] { return try_bind(AF_INET6, SOCK_STREAM, "::ffff:127.0.0.1", 0, false); }), kOk);
  // A unix socket in the workspace, and an autobound (kernel-named) one.
  EXPECT_EQ(scoped([&] { return try_bind_unix(sock); }), kOk);
  EXPECT_EQ(scoped([] { return try_bind_unix(std::string(1, '\0'), true); }), kOk);

  // Reachable from the network: the wildcard, any address of the host.
  EXPECT_EQ(scoped([] { return try_bind(AF_INET, SOCK_STREAM, "0.0.0.0", 0, false); }), kDenied);
  EXPECT_EQ(scoped([] { return try_bind(AF_INET, SOCK_DGRAM, "0.0.0.0", 0, false); }), kDenied);
  EXPECT_EQ(scoped([] { return try_bind(AF_INET6, SOCK_STREAM, "::", 0, false); }), kDenied);
  EXPECT_EQ(scoped([] { return try_bind(AF_INET6, SOCK_DGRAM, "::ffff:0.0.0.0", 0, false); }), kDenied);
  // AF_UNSPEC is INADDR_ANY to an AF_INET socket.
  EXPECT_EQ(scoped([] {
              int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              sockaddr_in a{};
              a.sin_family = AF_UNSPEC;
              int code = result(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a));
              ::close(s);
              return code;
            }),
            kDenied);
  // A name in the abstract namespace the host shares.
  EXPECT_EQ(scoped([] { return try_bind_unix(std::string("\0agentcage-kt-squat", 19)); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_BIND) - bind_before, 7u);

  // No listening without a rule, and not through listen()'s own bind of an
  // unbound socket; on loopback a listener is the run's private one (only
  // its own processes reach it: selftalk_test.cpp), but not one that shares
  // its port with others through SO_REUSEPORT.
  EXPECT_EQ(scoped([] { return try_bind(AF_INET, SOCK_STREAM, "127.0.0.1", 0, true); }), kOk);
  EXPECT_EQ(scoped([] { return try_listen_unbound(); }), kDenied);
  EXPECT_EQ(scoped([] {
              int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              int one = 1;
              ::setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
              socklen_t len = 0;
              sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", 0, &len);
              int code = result(::bind(s, reinterpret_cast<sockaddr*>(&ss), len));
              if (code == kOk) code = result(::listen(s, 4));
              ::close(s);
              return code;
            }),
            kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_LISTEN) - listen_before, 2u);
}

TEST_F(IngressTest, NetworkListenAllowsADevServerOnItsPort) {
  const uint16_t dev = free_port(), wild = free_port();
  ASSERT_NE(dev, wild);
  apply(
      "  network:\n    listen:\n"
      "      - {cidr: 127.0.0.1/32, ports: [" +
      std::to_string(dev) +
      "], protocol: tcp}\n"
      "      - {cidr: 0.0.0.0/32, ports: [" +
      std::to_string(wild) +
      "], protocol: tcp}\n"
      "      - {unix: \"@agentcage-kt-dev\"}\n");
  const uint64_t bind_before = denied(AC_HOOK_SOCKET_BIND), listen_before = denied(AC_HOOK_SOCKET_LISTEN);

  EXPECT_EQ(scoped([&] { return try_bind(AF_INET, SOCK_STREAM, "127.0.0.1", dev, true); }), kOk);
  EXPECT_EQ(scoped([&] { return try_bind(AF_INET, SOCK_STREAM, "0.0.0.0", wild, true); }), kOk);
  EXPECT_EQ(scoped([] { return try_bind_unix(std::string("\0agentcage-kt-dev", 17)); }), kOk);
  // The servers are reachable: a client outside the scope connects to each.
  // `listen_on` runs in the scope and returns a listening socket (or -1).
  auto host_reaches = [&](const std::function<int()>& listen_on, const std::function<int()>& connect) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) return std::pair{kOtherError, kOtherError};
    int client = kOtherError;
    std::thread host_client([&] {
      char c;
      if (::read(ready[0], &c, 1) == 1) client = connect();
    });
    const int server = scoped([&] {
      ::alarm(20);
      int s = listen_on();
      (void)!::write(ready[1], "x", 1);  // the client must not wait forever either way
      if (s < 0) return kOtherError;
      int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
      return c >= 0 ? kOk : kOtherError;
    });
    host_client.join();
    ::close(ready[0]);
    ::close(ready[1]);
    return std::pair{server, client};
  };
  auto [server, client] = host_reaches(
      [&] {
        int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        socklen_t len = 0;
        sockaddr_storage ss = inet_addr_of(AF_INET, "127.0.0.1", dev, &len);
        return ::bind(s, reinterpret_cast<sockaddr*>(&ss), len) == 0 && ::listen(s, 4) == 0 ? s : -1;
      },
      [&] { return tcp_connect_loopback(dev); });
  EXPECT_EQ(server, kOk);
  EXPECT_EQ(client, kOk);
  // The abstract name network.listen opens is public too (a name the run
  // binds without a rule, or autobinds, is private: selftalk_test.cpp).
  const std::string dev_name("\0agentcage-kt-dev", 17);
  sockaddr_un dev_addr{};
  dev_addr.sun_family = AF_UNIX;
  std::memcpy(dev_addr.sun_path, dev_name.data(), dev_name.size());
  const auto dev_len = static_cast<socklen_t>(sizeof(sa_family_t) + dev_name.size());
  auto [unix_server, unix_client] = host_reaches(
      [&] {
        int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        return ::bind(s, reinterpret_cast<const sockaddr*>(&dev_addr), dev_len) == 0 && ::listen(s, 4) == 0
                   ? s
                   : -1;
      },
      [&] {
        int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int code = result(::connect(c, reinterpret_cast<const sockaddr*>(&dev_addr), dev_len));
        ::close(c);
        return code;
      });
  EXPECT_EQ(unix_server, kOk);
  EXPECT_EQ(unix_client, kOk) << "the host reaches the abstract name network.listen opens";

  // Another port, another address, another protocol, another name.
  // On loopback another port listens as the run's private listener, which
  // only the run reaches (selftalk_test.cpp), not the host.
  EXPECT_EQ(scoped([&] { return try_bind(AF_INET, SOCK_STREAM, "127.0.0.1", wild, true); }), kOk);
  EXPECT_EQ(scoped([&] { return try_bind(AF_INET, SOCK_STREAM, "0.0.0.0", dev, false); }), kDenied);
  EXPECT_EQ(scoped([&] { return try_bind(AF_INET, SOCK_DGRAM, "0.0.0.0", wild, false); }), kDenied);
  EXPECT_EQ(scoped([&] { return try_bind(AF_INET6, SOCK_STREAM, "::", wild, false); }), kDenied);
  EXPECT_EQ(scoped([] { return try_bind_unix(std::string("\0agentcage-kt-devx", 18)); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_BIND) - bind_before, 4u);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_LISTEN) - listen_before, 0u);
}

}  // namespace
}  // namespace agentcage
