// SPDX-License-Identifier: Apache-2.0
// Egress by domain name, end to end: `agentcage run` with a policy that
// allows names, its own resolver, and Debian's dnsmasq on 127.0.0.1:53 as
// the upstream with a test zone whose names map to loopback addresses that
// have listeners. What must hold: allowed names resolve and connect; other
// names get NXDOMAIN and dnsmasq never sees them; an address of a name the
// policy does not allow stays denied; any query to port 53, however sent,
// is answered by agentcage; a pin is this run's alone and expires.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <link.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <bpf/bpf.h>
#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "daemon_env.h"
#include "kernel_env.h"
#include "probes.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The test zone (dnsmasq --host-record), TTL 1 s (--local-ttl): addresses of
// a dummy interface the suite adds (198.18.0.0/15 is for tests, RFC 2544),
// not loopback ones, which a resolver's answer never pins.
constexpr const char* kAllowedAddr = "198.18.0.2";  // api.allowed.test
constexpr const char* kEvilAddr = "198.18.0.3";     // evil.test
constexpr const char* kWildAddr = "198.18.0.4";     // a.pkg.wild.test
constexpr const char* kApexAddr = "198.18.0.5";     // pkg.wild.test
constexpr const char* kOtherAddr = "198.18.0.6";    // other.allowed.test

// A TCP listener on addr:port that answers every connection with a short
// HTTP response, until destroyed.
class Listener {
 public:
  Listener(const char* addr, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, addr, &a.sin_addr);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0;
    if (ok_) thread_ = std::thread([this] { serve(); });
  }
  ~Listener() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  void serve() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      char buf[512];
      timeval tv{1, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      (void)!::recv(c, buf, sizeof buf, 0);
      const char reply[] = "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello";
      (void)!::send(c, reply, sizeof reply - 1, MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int fd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

constexpr uint16_t kPort = 8443;

class Dns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("ip link add ac-dns-test type dummy && ip link set ac-dns-test up && "
                    "for i in 2 3 4 5 6; do ip addr add 198.18.0.$i/32 dev ac-dns-test || exit 1; done") != 0)
      std::fprintf(stderr, "dns_test: could not add the dummy interface with 198.18.0.2-6\n");
    dir_ = fs::temp_directory_path() / ("agentcage-dns-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "resolv.conf") << "nameserver 127.0.0.1\n";
    log_ = dir_ / "dnsmasq.log";
    dnsmasq_ = ::fork();
    if (dnsmasq_ == 0) {
      const std::string log_arg = "--log-facility=" + log_.string();
      ::execl("/usr/sbin/dnsmasq", "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
              "--no-hosts", "--no-poll", "--bind-interfaces", "--listen-address=127.0.0.1", "--port=53",
              "--user=root", "--log-queries", log_arg.c_str(), "--local-ttl=1",
              "--host-record=api.allowed.test,198.18.0.2", "--host-record=evil.test,198.18.0.3",
              "--host-record=a.pkg.wild.test,198.18.0.4", "--host-record=pkg.wild.test,198.18.0.5",
              "--host-record=other.allowed.test,198.18.0.6", "--host-record=loop.allowed.test,127.0.0.1",
              "--address=/zero.allowed.test/0.0.0.0", "--cname=alias.allowed.test,api.allowed.test",
              "--host-record=metadata.allowed.test,100.100.100.200",
              "--host-record=wireserver.allowed.test,168.63.129.16",
              "--host-record=ec2-198-18-0-3.compute-1.amazonaws.com,198.18.0.3",
              "--host-record=rented.s3.amazonaws.com,198.18.0.3",
              "--host-record=sts.amazonaws.com,198.18.0.2", "--host-record=imds6.allowed.test,fd00:ec2::254",
              "--host-record=podid.allowed.test,fd00:ec2::23",
              "--host-record=nat64-imds.allowed.test,64:ff9b::a9fe:a9fe",
              "--host-record=nat64-loop.allowed.test,64:ff9b::7f00:1",
              "--host-record=local48-imds.allowed.test,64:ff9b:1:a9fe:a9:fe00::",
              "--host-record=compat.allowed.test,::c612:2",
              "--host-record=nat64-api.allowed.test,64:ff9b::c612:2",
              "--host-record=local96-api.allowed.test,64:ff9b:1::c612:2",
              "--host-record=local48-api.allowed.test,64:ff9b:1:c612:0:2::", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Up when it answers on 127.0.0.1:53 (its log says so).
    for (int i = 0; i < 100 && slurp(log_).find("started") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  static void TearDownTestSuite() {
    if (dnsmasq_ > 0) {
      ::kill(dnsmasq_, SIGTERM);
      ::waitpid(dnsmasq_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
    (void)!std::system("ip link del ac-dns-test 2>/dev/null");
  }
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists("/usr/sbin/dnsmasq")) << "install dnsmasq-base (scripts/install-deps)";
    ASSERT_NE(slurp(log_).find("started"), std::string::npos) << "dnsmasq did not start:\n" << slurp(log_);
  }

  // A policy: python-sandbox.yaml plus `network` lines, written under dir_.
  // `spec` lines go before `network` (e.g. "  syscalls: {allow: [io_uring]}\n").
  static std::string policy(const std::string& name, const std::string& network, const std::string& spec = "") {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: " << name
                     << "\ninclude: [" << kPythonSandbox << "]\nspec:\n  exec:\n    allow: [/usr/bin/curl, "
                     << uring_probe() << "]\n"
                     << spec << "  network:\n    allow:\n"
                     << network;
    return p.string();
  }
  static SpawnOptions with(const std::string& policy_file) {
    SpawnOptions o;
    o.policy = policy_file;
    o.env = {"AGENTCAGE_RESOLV_CONF=" + (dir_ / "resolv.conf").string()};
    return o;
  }
  // What dnsmasq was asked for: its log's query lines.
  static bool upstream_saw(const std::string& name) {
    return slurp(log_).find("]" + std::string(" ") + name + " from") != std::string::npos;
  }

  // tests/kernel/uring_probe.cpp, built next to this binary.
  static std::string uring_probe() {
    return (fs::read_symlink("/proc/self/exe").parent_path() / "agentcage-uring-probe").string();
  }

  static inline fs::path dir_, log_;
  static inline pid_t dnsmasq_ = -1;
};

// Python that prints one word per step: how each attempt went.
std::string attempt_lib() {
  return "import socket, sys, time\n"
         "out = []\n"
         "def resolve(name):\n"
         "    try:\n"
         "        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]\n"
         "    except socket.gaierror as e:\n"
         "        out.append('nxdomain' if e.errno in (socket.EAI_NONAME, socket.EAI_NODATA) else 'gai%d' % "
         "e.errno)\n"
         "        return None\n"
         "def connect(addr, port):\n"
         "    try:\n"
         "        socket.create_connection((addr, port), timeout=5).close()\n"
         "        out.append('connected')\n"
         "    except PermissionError:\n"
         "        out.append('denied')\n"
         "    except OSError as e:\n"
         "        out.append('error%d' % e.errno)\n";
}

TEST_F(Dns, AnAllowedNameResolvesAndConnectsAndNothingElseDoes) {
  Listener allowed(kAllowedAddr, kPort), evil(kEvilAddr, kPort);
  ASSERT_TRUE(allowed.ok() && evil.ok());
  const std::string p =
      policy("dns-exact", "      - {domain: api.allowed.test, ports: [8443], protocol: tcp}\n");
  Ran r = run(py(attempt_lib() + "a = resolve('api.allowed.test'); out.append(a or '-')\n"
                                 "connect(a, 8443)\n"
                                 "connect(a, 8444)\n"  // a port the rule does not name
                                 "b = resolve('evil.test')\n"
                                 "connect('198.18.0.3', 8443)\n"  // evil.test's address, asked for by number
                                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "198.18.0.2 connected denied nxdomain denied\n") << r.describe();
  EXPECT_TRUE(upstream_saw("api.allowed.test")) << slurp(log_);
  EXPECT_FALSE(upstream_saw("evil.test")) << "a name the policy does not allow was forwarded:\n"
                                          << slurp(log_);
  EXPECT_GE(r.result["denials"]["dns"]["by_name"].value("evil.test", 0), 1) << r.result.dump(2);
  EXPECT_GE(r.result["dns"]["pinned"].get<int>(), 1) << r.result.dump(2);
  // The two denied connects (the report's first records are the
  // interpreter's denied file lookups).
  EXPECT_EQ(denied(r, "socket_connect"), 2u) << r.result.dump(2);
}

// What a pin lets through, beyond connect: a UDP sendto, a TCP fast open
// (data with the SYN, no connect) and urllib, each to the pinned address
// only; DNS over TLS (853) to any server stays denied.
TEST_F(Dns, APinAllowsSendtoFastOpenAndUrllibToItsAddressOnly) {
  Listener allowed(kAllowedAddr, kPort), evil(kEvilAddr, kPort);
  ASSERT_TRUE(allowed.ok() && evil.ok());
  const std::string p = policy("dns-send", "      - {domain: api.allowed.test, ports: [8443]}\n");
  Ran r = run(py(attempt_lib() +
                     "import urllib.request\n"
                     "def sendto(addr):\n"
                     "    try:\n"
                     "        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', (addr, 8443))\n"
                     "        out.append('sent')\n"
                     "    except PermissionError:\n"
                     "        out.append('denied')\n"
                     "def fastopen(addr):\n"
                     "    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"  // blocking: the SYN's answer
                     "    try:\n"
                     "        t.sendto(b'GET / HTTP/1.0\\r\\n\\r\\n', socket.MSG_FASTOPEN, (addr, 8443))\n"
                     "        t.settimeout(5)\n"
                     "        out.append('tfo-' + t.recv(64).decode().split()[1])\n"
                     "    except PermissionError:\n"
                     "        out.append('denied')\n"
                     "a = resolve('api.allowed.test')\n"
                     "sendto(a); sendto('198.18.0.3')\n"
                     "fastopen(a); fastopen('198.18.0.3')\n"
                     "out.append(urllib.request.urlopen('http://api.allowed.test:8443/', timeout=10).read().decode())\n"
                     "connect('10.255.255.1', 853)\n"
                     "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "sent denied tfo-200 denied hello denied\n") << r.describe();
  EXPECT_EQ(denied(r, "socket_connect") + denied(r, "socket_send"), 3u) << r.result.dump(2);
}

// curl (its own resolver calls through glibc) under a policy that allows the
// name: the page arrives; another name is not resolved.
TEST_F(Dns, CurlReachesAnAllowedNameOnly) {
  Listener allowed(kAllowedAddr, kPort);
  ASSERT_TRUE(allowed.ok());
  const std::string p = policy("dns-curl", "      - {domain: api.allowed.test, ports: [8443]}\n");
  Ran r = run({"--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://api.allowed.test:8443/"}, with(p));
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "hello") << r.describe();
  Ran denied_run = run({"--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://evil.test:8443/"}, with(p));
  EXPECT_EQ(denied_run.code, 6) << "curl: could not resolve host\n" << denied_run.describe();
  EXPECT_FALSE(upstream_saw("evil.test")) << slurp(log_);
}

// Another tool's connect4 program attached with BPF_F_ALLOW_OVERRIDE above
// the run parent: a run's DNS programs (BPF_F_ALLOW_MULTI, on the run's
// cgroup) would replace it for the run (the kernel's override rule), and the
// tool's own rule (here: no IPv4 connect at all) would be off. A run with
// domain rules is refused there, naming that cgroup; a run without them
// attaches no such program and runs, under the tool's rule; with the tool's
// program gone the domain run reaches its name.
TEST_F(Dns, ARunsDnsProgramsNeverSwitchOffAnotherToolsProgramAbove) {
  Listener allowed(kAllowedAddr, kPort);
  ASSERT_TRUE(allowed.ok());
  const std::string name = "dns-tool-above-" + std::to_string(::getpid());
  auto outer = test_cgroup(name);
  ASSERT_TRUE(outer.ok()) << outer.error().message;
  int tool = refuse_connect4_program();
  // Whatever fails below, the tool's program and the cgroups go.
  const std::shared_ptr<void> undo(nullptr, [&](void*) {
    if (tool >= 0) {
      (void)bpf_prog_detach2(tool, outer->fd(), BPF_CGROUP_INET4_CONNECT);
      ::close(tool);
    }
    (void)::rmdir((outer->path() / "runs").c_str());
    (void)outer->remove();
  });
  ASSERT_GE(tool, 0) << std::strerror(errno);
  ASSERT_EQ(bpf_prog_attach(tool, outer->fd(), BPF_CGROUP_INET4_CONNECT, BPF_F_ALLOW_OVERRIDE), 0)
      << std::strerror(errno);
  SpawnOptions o = with(policy("dns-tool", "      - {domain: api.allowed.test, ports: [8443]}\n"));
  o.env.push_back("AGENTCAGE_CGROUP_PARENT=agentcage-kt/" + name + "/runs");
  const std::vector<std::string> curl = {
      "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://api.allowed.test:8443/"};
  Ran refused = run(curl, o);
  EXPECT_EQ(refused.code, 125) << refused.describe();
  EXPECT_NE(refused.err.find(outer->path().string() +
                             " has BPF_CGROUP_INET4_CONNECT programs attached without BPF_F_ALLOW_MULTI"),
            std::string::npos)
      << refused.describe();
  EXPECT_EQ(refused.out, "") << refused.describe();
  // The tool's rule holds for a run without domain rules (the policy lets
  // Python connect to 198.18.0.2:8443 by its address).
  SpawnOptions plain = with(policy("dns-tool-plain", "      - {cidr: 198.18.0.2/32, ports: [8443]}\n"));
  plain.env.push_back("AGENTCAGE_CGROUP_PARENT=agentcage-kt/" + name + "/runs");
  Ran under_tool = run(py(attempt_lib() + "connect('198.18.0.2', 8443)\nprint(' '.join(out))\n"), plain);
  EXPECT_EQ(under_tool.code, 0) << under_tool.describe();
  EXPECT_EQ(under_tool.out, "denied\n") << under_tool.describe();
  EXPECT_EQ(denied(under_tool, "socket_connect"), 0u) << "the tool refused it, not agentcage\n"
                                                      << under_tool.result.dump(2);
  EXPECT_EQ(bpf_prog_detach2(tool, outer->fd(), BPF_CGROUP_INET4_CONNECT), 0) << std::strerror(errno);
  ::close(tool);
  tool = -1;
  Ran reached = run(curl, o);
  EXPECT_EQ(reached.code, 0) << reached.describe();
  EXPECT_EQ(reached.out, "hello") << reached.describe();
  // Nothing of the runs is left below the run parent.
  EXPECT_EQ(::rmdir((outer->path() / "runs").c_str()), 0) << std::strerror(errno);
}

// Python that builds an A query by hand (query(name, qid)) and reads an
// answer's RCODE (rcode(reply, qid)), with `out` for the words it prints.
std::string query_lib() {
  return "import socket, struct\n"
         "def query(name, qid):\n"
         "    q = struct.pack('>HHHHHH', qid, 0x0100, 1, 0, 0, 0)\n"
         "    for label in name.split('.'):\n"
         "        q += bytes([len(label)]) + label.encode()\n"
         "    return q + b'\\0' + struct.pack('>HH', 1, 1)\n"
         "def rcode(reply, qid):\n"
         "    rid, flags = struct.unpack('>HH', reply[:4])\n"
         "    return 'id?' if rid != qid else str(flags & 0xf)\n"
         "out = []\n";
}

// A query built by hand and sent straight to port 53 of dnsmasq's address,
// or of any other: over UDP with sendto, over a connected UDP socket, over
// TCP. Each is answered by the run's resolver (NXDOMAIN for a name the
// policy does not allow, from the address the query went to), never by
// dnsmasq.
TEST_F(Dns, DirectQueriesToAnyServerAreAnsweredByTheRunsResolver) {
  const std::string p = policy("dns-direct", "      - {domain: api.allowed.test, ports: [8443]}\n");
  Ran r = run(py(query_lib() +
                 "for server in ('127.0.0.1', '10.255.255.1'):\n"
                 "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n"
                 "    s.sendto(query('evil.test', 7), (server, 53))\n"
                 "    reply, src = s.recvfrom(512)\n"
                 "    out.append(rcode(reply, 7) + '@' + src[0] + ':' + str(src[1]))\n"
                 "    s.close()\n"
                 "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n"
                 "s.connect(('127.0.0.1', 53)); s.send(query('evil.test', 8))\n"
                 "out.append(rcode(s.recv(512), 8) + '@' + s.getpeername()[0])\n"
                 "s.send(query('api.allowed.test', 9)); out.append(rcode(s.recv(512), 9))\n"
                 "t = socket.create_connection(('127.0.0.1', 53), timeout=5)\n"
                 "m = query('evil.test', 10); t.sendall(struct.pack('>H', len(m)) + m)\n"
                 "n = struct.unpack('>H', t.recv(2))[0]; out.append('tcp' + rcode(t.recv(n), 10))\n"
                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  // rcode 3: NXDOMAIN; 0: an answer (the allowed name, forwarded).
  EXPECT_EQ(r.out, "3@127.0.0.1:53 3@10.255.255.1:53 3@127.0.0.1 0 tcp3\n") << r.describe();
  EXPECT_FALSE(upstream_saw("evil.test")) << slurp(log_);
  EXPECT_EQ(r.result["denials"]["dns"]["by_name"].value("evil.test", 0), 4) << r.result.dump(2);
}

// TCP fast open sends its data with the SYN (sendto with MSG_FASTOPEN, no
// connect): the kernel's connect hook still redirects it, so the run's
// resolver answers and the upstream never sees the name.
TEST_F(Dns, AFastOpenQueryIsAnsweredByTheRunsResolver) {
  const std::string p = policy("dns-tfo", "      - {domain: api.allowed.test, ports: [8443]}\n");
  Ran r = run(
      py("import socket, struct\n"
         "q = struct.pack('>HHHHHH', 11, 0x0100, 1, 0, 0, 0)\n"
         "for label in 'evil.test'.split('.'):\n"
         "    q += bytes([len(label)]) + label.encode()\n"
         "q += b'\\0' + struct.pack('>HH', 1, 1)\n"
         "t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"  // blocking: it waits for the SYN's answer
         "t.sendto(struct.pack('>H', len(q)) + q, socket.MSG_FASTOPEN, ('127.0.0.1', 53))\n"
         "t.settimeout(5)\n"
         "n = struct.unpack('>H', t.recv(2))[0]; reply = t.recv(n)\n"
         "rid, flags = struct.unpack('>HH', reply[:4])\n"
         "print('tfo', rid, flags & 0xf)\n"),
      with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "tfo 11 3\n") << r.describe();  // NXDOMAIN, from the run's resolver
  EXPECT_FALSE(upstream_saw("evil.test")) << slurp(log_);
  EXPECT_EQ(r.result["denials"]["dns"]["by_name"].value("evil.test", 0), 1) << r.result.dump(2);
}

// io_uring's connect and sendmsg (a policy that lets the run use io_uring):
// a pinned address connects, an unpinned one is denied, and a query sent to
// another server's port 53 is answered by the run's resolver.
TEST_F(Dns, IoUringConnectsToPinsOnlyAndItsQueriesAreRedirected) {
  Listener allowed(kAllowedAddr, kPort), evil(kEvilAddr, kPort);
  ASSERT_TRUE(allowed.ok() && evil.ok());
  const std::string p = policy("dns-uring", "      - {domain: api.allowed.test, ports: [8443], protocol: tcp}\n",
                               "  syscalls: {allow: [io_uring]}\n");
  Ran r = run({"--", uring_probe(), "connect", "api.allowed.test", "8443", "connect", "198.18.0.3", "8443",
               "query", "10.255.255.1", "evil.test", "query", "127.0.0.1", "api.allowed.test"},
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  // rcode 3: NXDOMAIN, from the address the query went to; 0: forwarded.
  EXPECT_EQ(r.out, "connected denied 3@10.255.255.1 0@127.0.0.1\n") << r.describe();
  EXPECT_FALSE(upstream_saw("evil.test")) << slurp(log_);
  EXPECT_EQ(r.result["denials"]["dns"]["by_name"].value("evil.test", 0), 1) << r.result.dump(2);
  EXPECT_EQ(denied(r, "socket_connect"), 1u) << r.result.dump(2);
}

// IPv6: a query to [::1]:53 or to any IPv6 server, over UDP and TCP, and one
// to an IPv4-mapped address on an IPv6 socket, is answered by the run's
// resolver from the address asked, never by dnsmasq (which listens on
// 127.0.0.1 only) and never sent out.
TEST_F(Dns, Ipv6QueriesAreAnsweredByTheRunsResolver) {
  const std::string p = policy("dns-v6", "      - {domain: api.allowed.test, ports: [8443]}\n");
  Ran r = run(py(query_lib() +
                 "for qid, server in enumerate(('::1', '2001:db8::53', '::ffff:10.255.255.1'), 20):\n"
                 "    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(5)\n"
                 "    try:\n"
                 "        s.sendto(query('evil.test', qid), (server, 53))\n"
                 "        reply, src = s.recvfrom(512)\n"
                 "        out.append(rcode(reply, qid) + '@' + src[0])\n"
                 "    except OSError as e:\n"
                 "        out.append('error%s' % e.errno)\n"
                 "    s.close()\n"
                 "t = socket.create_connection(('::1', 53), timeout=5)\n"
                 "m = query('evil.test', 30); t.sendall(struct.pack('>H', len(m)) + m)\n"
                 "n = struct.unpack('>H', t.recv(2))[0]; out.append('tcp' + rcode(t.recv(n), 30) + '@' + "
                 "t.getpeername()[0])\n"
                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "3@::1 3@2001:db8::53 3@::ffff:10.255.255.1 tcp3@::1\n") << r.describe();
  EXPECT_FALSE(upstream_saw("evil.test")) << slurp(log_);
  EXPECT_EQ(r.result["denials"]["dns"]["by_name"].value("evil.test", 0), 4) << r.result.dump(2);
}

// "*.pkg.wild.test" is every name under pkg.wild.test, not pkg.wild.test.
TEST_F(Dns, AWildcardMatchesNamesUnderItNotItself) {
  Listener wild(kWildAddr, kPort), apex(kApexAddr, kPort);
  ASSERT_TRUE(wild.ok() && apex.ok());
  const std::string p = policy("dns-wild", "      - {domain: \"*.pkg.wild.test\", ports: [8443]}\n");
  Ran r = run(py(attempt_lib() + "a = resolve('a.pkg.wild.test'); out.append(a or '-'); connect(a, 8443)\n"
                                 "resolve('pkg.wild.test')\n"
                                 "connect('198.18.0.5', 8443)\n"
                                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "198.18.0.4 connected nxdomain denied\n") << r.describe();
  EXPECT_FALSE(upstream_saw("pkg.wild.test")) << slurp(log_);
}

// Two runs at once with different names: each reaches only what its own
// resolver pinned, although both resolved through the same upstream.
TEST_F(Dns, APinIsItsRunsAlone) {
  auto allowed = std::make_unique<Listener>(kAllowedAddr, kPort);
  Listener other(kOtherAddr, kPort);
  ASSERT_TRUE(allowed->ok() && other.ok());
  const std::string pa = policy("dns-a", "      - {domain: api.allowed.test, ports: [8443]}\n");
  const std::string pb = policy("dns-b", "      - {domain: other.allowed.test, ports: [8443]}\n");
  // Run A keeps its pin fresh and its connection working until the test
  // closes A's listener (connection refused), then tries B's address.
  auto asked = [] {  // how often dnsmasq was asked for A's name
    const std::string log = slurp(log_);
    size_t n = 0;
    for (size_t at = log.find("api.allowed.test from"); at != std::string::npos;
         at = log.find("api.allowed.test from", at + 1))
      ++n;
    return n;
  };
  const size_t asked_before = asked();
  Started a = start(py(attempt_lib() + "a = resolve('api.allowed.test')\n"
                                       "t0 = time.monotonic()\n"
                                       "while time.monotonic() - t0 < 120:\n"
                                       "    resolve('api.allowed.test')\n"
                                       "    try:\n"
                                       "        socket.create_connection((a, 8443), timeout=5).close()\n"
                                       "    except ConnectionRefusedError:\n"
                                       "        out.append('refused'); break\n"
                                       "    except PermissionError:\n"
                                       "        out.append('lost'); break\n"
                                       "    time.sleep(0.3)\n"
                                       "connect('198.18.0.6', 8443)\n"
                                       "print(' '.join(out))\n"),
                    with(pa));
  // A has resolved once dnsmasq logged its question.
  for (int i = 0; i < 600 && asked() == asked_before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GT(asked(), asked_before) << "run A never resolved its name:\n" << slurp(log_);
  // While A runs, its scope holds its pin in ac_pins.
  auto enforcer = bpf::Enforcer::open_shared();
  ASSERT_TRUE(enforcer) << enforcer.error().message;
  size_t live_pins = 0;
  if (auto scopes = (*enforcer)->scopes())
    for (const auto& sc : *scopes)
      if (auto n = (*enforcer)->pins_of(sc.scope_id)) live_pins += *n;
  EXPECT_GE(live_pins, 1u) << "no scope holds a pin while run A is resolving";
  Ran b = run(py(attempt_lib() + "connect('198.18.0.2', 8443)\n"  // A's pin, not B's
                                 "b = resolve('other.allowed.test'); connect(b, 8443)\n"
                                 "print(' '.join(out))\n"),
              with(pb));
  allowed.reset();  // A's next connection is refused: it moves on
  Ran ra = finish(a);
  // A run's pins go with it.
  for (const Ran* done : {&b, &ra}) {
    auto left = (*enforcer)->pins_of(done->result.value("scope_id", uint64_t{0}));
    ASSERT_TRUE(left) << left.error().message;
    EXPECT_EQ(*left, 0u) << done->describe();
  }
  EXPECT_EQ(b.code, 0) << b.describe();
  EXPECT_EQ(b.out, "denied connected\n") << b.describe();
  ASSERT_EQ(ra.code, 0) << ra.describe();
  EXPECT_EQ(ra.out, "refused denied\n") << ra.describe();
}

// A pin lasts the answer's TTL, held at least the resolver's minimum (5 s;
// the zone's TTL is 1 s), then the address is denied again.
TEST_F(Dns, APinExpiresWithItsTtl) {
  Listener allowed(kAllowedAddr, kPort);
  ASSERT_TRUE(allowed.ok());
  const std::string p = policy("dns-ttl", "      - {domain: api.allowed.test, ports: [8443]}\n");
  Ran r = run(py(attempt_lib() + "a = resolve('api.allowed.test'); t0 = time.monotonic(); connect(a, 8443)\n"
                                 "time.sleep(max(0, 7 - (time.monotonic() - t0)))\n"
                                 "connect(a, 8443)\n"
                                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "connected denied\n") << r.describe();
}

// A CNAME's target's addresses are pinned for the name that was asked.
TEST_F(Dns, AnAliasResolvesToItsTargetsPinnedAddress) {
  Listener allowed(kAllowedAddr, kPort);
  ASSERT_TRUE(allowed.ok());
  const std::string p = policy("dns-alias", "      - {domain: alias.allowed.test, ports: [8443]}\n");
  Ran r = run(py(attempt_lib() + "a = resolve('alias.allowed.test'); out.append(a or '-'); connect(a, 8443)\n"
                                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "198.18.0.2 connected\n") << r.describe();
}

// An allowed name whose answer is this host (127.0.0.1, or 0.0.0.0, which
// filtering resolvers answer for blocked names and which reaches the host):
// the answer is released, nothing is pinned, and the host's listener stays
// out of reach.
TEST_F(Dns, AnAnswerPointingAtThisHostIsNeverPinned) {
  uint16_t port = 0;
  const int host = listen_tcp(AF_INET, &port);  // on 127.0.0.1 and so on 0.0.0.0's reach
  ASSERT_GE(host, 0);
  const std::string p = policy("dns-loop", "      - {domain: \"*.allowed.test\"}\n");
  Ran r = run(py(attempt_lib() +
                 "for name in ('loop.allowed.test', 'zero.allowed.test'):\n"
                 "    a = resolve(name); out.append(a or '-'); connect(a, " +
                 std::to_string(port) +
                 ")\n"
                 "print(' '.join(out))\n"),
              with(p));
  ::close(host);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "127.0.0.1 denied 0.0.0.0 denied\n") << r.describe();
  EXPECT_EQ(r.result["dns"]["not_pinned"].get<int>(), 2) << r.result.dump(2);
  EXPECT_EQ(r.result["dns"]["pinned"].get<int>(), 0) << r.result.dump(2);
}

// A wildcard over a registrant's domain (`*.amazonaws.com`, a common
// allowlist entry) does not reach the names under its operator's own public
// suffixes below it: an EC2 instance's public name and a bucket are anyone's
// to rent. The registrant's own names still resolve. Before, both rented
// names resolved and connected.
TEST_F(Dns, AWildcardDoesNotReachTheRegistrantsOfPublicSuffixesBelowIt) {
  Listener allowed(kAllowedAddr, kPort), evil(kEvilAddr, kPort);
  ASSERT_TRUE(allowed.ok() && evil.ok());
  const std::string p = policy("dns-psl", "      - {domain: \"*.amazonaws.com\", ports: [8443]}\n");
  Ran r = run(py(attempt_lib() +
                 "for name in ('ec2-198-18-0-3.compute-1.amazonaws.com', 'rented.s3.amazonaws.com'):\n"
                 "    a = resolve(name); out.append(a or '-')\n"
                 "connect('198.18.0.3', 8443)\n"
                 "a = resolve('sts.amazonaws.com'); out.append(a or '-'); connect(a, 8443)\n"
                 "print(' '.join(out))\n"),
              with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "nxdomain - nxdomain - denied 198.18.0.2 connected\n") << r.describe();
  EXPECT_FALSE(upstream_saw("ec2-198-18-0-3.compute-1.amazonaws.com"))
      << "a refused name reached the upstream";
  EXPECT_TRUE(upstream_saw("sts.amazonaws.com"));
  // Why, in the result and on stderr: the policy's author expected them allowed.
  const json why = r.result["denials"]["dns"].value("why", json::object());
  EXPECT_NE(why.value("rented.s3.amazonaws.com", std::string()).find("public suffix s3.amazonaws.com"),
            std::string::npos)
      << r.result["denials"].dump(2);
  EXPECT_TRUE(why.contains("ec2-198-18-0-3.compute-1.amazonaws.com")) << r.result["denials"].dump(2);
  EXPECT_FALSE(why.contains("sts.amazonaws.com"));
  EXPECT_NE(r.err.find("agentcage: dns: rented.s3.amazonaws.com was refused, under the public suffix"),
            std::string::npos)
      << r.err;
  // The result with its reasons is the documented one (docs/schema/result.schema.json).
  const fs::path doc = dir_ / "psl-result.json";
  std::ofstream(doc) << r.result.dump();
  EXPECT_EQ(schema_errors("result", doc), "");
}

// Cloud metadata services outside link-local addresses (Alibaba's
// 100.100.100.200, Azure's WireServer 168.63.129.16, AWS's IPv6
// fd00:ec2::254 and EKS Pod Identity's fd00:ec2::23) hand out credentials: an allowed name whose
// answer points there (a dangling alias, a wildcard) pins nothing.
TEST_F(Dns, AnAnswerPointingAtACloudMetadataServiceIsNeverPinned) {
  const std::string p = policy("dns-meta", "      - {domain: \"*.allowed.test\", ports: [80]}\n");
  Ran r =
      run(py(attempt_lib() + "for name in ('metadata.allowed.test', 'wireserver.allowed.test'):\n"
                             "    a = resolve(name); out.append(a or '-'); connect(a, 80)\n"
                             "for name in ('imds6.allowed.test', 'podid.allowed.test'):\n"
                             "    try:\n"
                             "        out.append(socket.getaddrinfo(name, None, socket.AF_INET6)[0][4][0])\n"
                             "    except socket.gaierror as e:\n"
                             "        out.append('gai%d' % e.errno)\n"
                             "print(' '.join(out))\n"),
          with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "100.100.100.200 denied 168.63.129.16 denied fd00:ec2::254 fd00:ec2::23\n")
      << r.describe();
  EXPECT_EQ(r.result["dns"]["not_pinned"].get<int>(), 4) << r.result.dump(2);
  EXPECT_EQ(r.result["dns"]["pinned"].get<int>(), 0) << r.result.dump(2);
}

// On a DNS64/NAT64 network an AAAA answer can carry an IPv4 address to the
// NAT64 gateway: 64:ff9b::a9fe:a9fe is the metadata service's
// 169.254.169.254. Such an address is judged as the IPv4 address it carries
// (well-known prefix, local-use /48, the deprecated IPv4-compatible ::/96):
// not pinned, so its connect is denied. The same prefixes carrying an
// ordinary address (198.18.0.2; under the local-use prefix at the places
// of a /96 and a /48, where its bytes read elsewhere look like 0.x.x.x) are
// pinned: their connects pass agentcage and fail in the network (there is
// no NAT64 gateway here), not with EPERM.
TEST_F(Dns, AnIpv6AnswerCarryingAMetadataAddressToANat64GatewayIsNeverPinned) {
  const std::string p = policy("dns-nat64", "      - {domain: \"*.allowed.test\", ports: [80]}\n");
  Ran r = run(
      py(attempt_lib() +
         "def connect6(name):\n"
         "    try:\n"
         "        a = socket.getaddrinfo(name, 80, socket.AF_INET6, socket.SOCK_STREAM)[0][4]\n"
         "    except socket.gaierror as e:\n"
         "        out.append('gai%d' % e.errno); return\n"
         "    out.append(a[0])\n"
         "    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n"
         "    s.settimeout(3)\n"
         "    try:\n"
         "        s.connect(a); out.append('connected')\n"
         "    except PermissionError:\n"
         "        out.append('denied')\n"
         "    except OSError:\n"
         "        out.append('passed')\n"
         "    s.close()\n"
         "for name in ('nat64-imds', 'nat64-loop', 'local48-imds', 'compat', 'nat64-api', 'local96-api',\n"
         "             'local48-api'):\n"
         "    connect6(name + '.allowed.test')\n"
         "print(' '.join(out))\n"),
      with(p));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(
      r.out,
      "64:ff9b::a9fe:a9fe denied 64:ff9b::7f00:1 denied 64:ff9b:1:a9fe:a9:fe00:: denied ::198.18.0.2 denied "
      "64:ff9b::c612:2 passed 64:ff9b:1::c612:2 passed 64:ff9b:1:c612:0:2:: passed\n")
      << r.describe();
  EXPECT_EQ(r.result["dns"]["not_pinned"].get<int>(), 4) << r.result.dump(2);
  // The three ordinary addresses on port 80 over TCP and UDP.
  EXPECT_EQ(r.result["dns"]["pinned"].get<int>(), 6) << r.result.dump(2);
}

// A socket made outside the run is not redirected to its resolver (the
// cgroup's programs run for the sockets made in it): a run with domain rules
// refuses one as a standard stream, before anything is created; the same
// run with a pipe there starts.
TEST_F(Dns, ARunRefusesANetworkSocketAsAStandardStream) {
  const std::string p = policy("dns-stdio", "      - {domain: api.allowed.test}\n");
  SpawnOptions o = with(p);
  o.in_child = [] {
    int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    ::dup2(s, 0);
  };
  const std::vector<std::string> before = run_cgroups();
  Ran r = run({"--", "/bin/true"}, o);
  EXPECT_EQ(r.code, 125) << r.describe();
  EXPECT_NE(r.err.find("descriptor 0 is an IPv4/IPv6 socket"), std::string::npos) << r.describe();
  EXPECT_EQ(run_cgroups(), before) << "nothing was created";
  Ran fine = run(py("print('ok')"), with(p));
  EXPECT_EQ(fine.code, 0) << fine.describe();
  EXPECT_EQ(fine.out, "ok\n") << fine.describe();
}

// agentcage opens ldns (and OpenSSL under it) only when a run has a
// resolver (dns/ldns_api.h). Without it a run under domain rules refuses
// to start, says which library and what to install, and leaves nothing;
// here libldns.so.3 is hidden under /dev/null in agentcage's own mount
// namespace. The same run with the library there works.
TEST_F(Dns, ARunWhoseResolverCannotLoadLdnsRefusesToStart) {
  const std::string p = policy("dns-noldns", "      - {domain: api.allowed.test}\n");
  // Where the loader finds it here (the file, not its symlink).
  void* handle = ::dlopen("libldns.so.3", RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << ::dlerror() << " (scripts/install-deps installs libldns3)";
  link_map* map = nullptr;
  ASSERT_EQ(::dlinfo(handle, RTLD_DI_LINKMAP, &map), 0) << ::dlerror();
  std::error_code ec;
  const fs::path lib = fs::canonical(map->l_name, ec);
  ASSERT_FALSE(ec) << map->l_name << ": " << ec.message();
  SpawnOptions o = with(p);
  o.in_child = [lib] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("/dev/null", lib.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      std::perror("hiding libldns");
      ::_exit(99);
    }
  };
  const std::vector<std::string> before = run_cgroups();
  Ran r = run(py("print('ran')"), o);
  EXPECT_EQ(r.code, 125) << r.describe();
  EXPECT_EQ(r.out, "") << "the command ran without its resolver: " << r.describe();
  EXPECT_NE(r.err.find("needs ldns (Debian package libldns3): cannot load libldns.so.3"), std::string::npos)
      << r.describe();
  EXPECT_NE(r.err.find("fix: install ldns (Debian: apt install libldns3)"), std::string::npos) << r.describe();
  EXPECT_EQ(r.result["fail_closed"], "scope") << r.result.dump(2);
  EXPECT_EQ(run_cgroups(), before) << "nothing is left";
  Ran fine = run(py("print('ok')"), with(p));
  EXPECT_EQ(fine.code, 0) << fine.describe();
  EXPECT_EQ(fine.out, "ok\n") << fine.describe();
}

}  // namespace
}  // namespace agentcage::kt
