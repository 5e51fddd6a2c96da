// SPDX-License-Identifier: Apache-2.0
// The run's DNS resolver (userspace/dns/resolver.h) against a fake upstream
// server in a thread of the test, which answers from a small zone and keeps
// every question it was asked.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>

// Without <stdbool.h> first, ldns defines `bool`, `true` and `false` as macros.
#include <stdbool.h>  // NOLINT(modernize-deprecated-headers)

#include <ldns/ldns.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dns/ldns_api.h"
#include "dns/resolv_conf.h"
#include "dns/resolver.h"
#include "util/shared_library.h"
#include "util/unique_fd.h"

namespace agentcage::dns {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;
constexpr uint16_t kA = LDNS_RR_TYPE_A, kAAAA = LDNS_RR_TYPE_AAAA;

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using PktPtr = std::unique_ptr<ldns_pkt, PktFree>;

Bytes to_wire(const ldns_pkt* pkt) {
  uint8_t* raw = nullptr;
  size_t size = 0;
  if (ldns_pkt2wire(&raw, pkt, &size) != LDNS_STATUS_OK) {
    std::free(raw);
    return {};
  }
  Bytes out(raw, raw + size);
  std::free(raw);
  return out;
}

PktPtr parse(const Bytes& wire) {
  ldns_pkt* pkt = nullptr;
  if (ldns_wire2pkt(&pkt, wire.data(), wire.size()) != LDNS_STATUS_OK) return nullptr;
  return PktPtr(pkt);
}

Bytes query(const std::string& name, ldns_rr_type type, uint16_t id, bool edns = false) {
  PktPtr pkt(ldns_pkt_query_new(ldns_dname_new_frm_str(name.c_str()), type, LDNS_RR_CLASS_IN, LDNS_RD));
  ldns_pkt_set_id(pkt.get(), id);
  if (edns) {
    ldns_pkt_set_edns_udp_size(pkt.get(), 4096);
    ldns_pkt_set_edns_do(pkt.get(), true);
  }
  return to_wire(pkt.get());
}

std::string owner_text(const ldns_rr* rr) {
  char* s = ldns_rdf2str(ldns_rr_owner(rr));
  std::string out = s ? s : "";
  std::free(s);
  return out;
}

// The A and AAAA addresses of an answer, as text.
std::vector<std::string> answer_addresses(const ldns_pkt* pkt) {
  std::vector<std::string> out;
  const ldns_rr_list* answers = ldns_pkt_answer(pkt);
  for (size_t i = 0; i < ldns_rr_list_rr_count(answers); ++i) {
    const ldns_rr* rr = ldns_rr_list_rr(answers, i);
    if (ldns_rr_get_type(rr) != LDNS_RR_TYPE_A && ldns_rr_get_type(rr) != LDNS_RR_TYPE_AAAA) continue;
    char* s = ldns_rdf2str(ldns_rr_rdf(rr, 0));
    out.emplace_back(s);
    std::free(s);
  }
  return out;
}

std::string address_text(const Address& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.family == AF_INET) {
    EXPECT_EQ(a.addr[10], 0xff);
    EXPECT_EQ(a.addr[11], 0xff);
    inet_ntop(AF_INET, a.addr.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, a.addr.data(), buf, sizeof buf);
  }
  return buf;
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// --- the fake upstream ---------------------------------------------------------

struct Seen {
  std::string name;  // as received (case kept), with the trailing dot
  uint16_t type = 0;
  uint16_t id = 0;
  bool edns = false;
  uint16_t arcount = 0;
  bool rd = false;
  bool tcp = false;
};

class FakeUpstream {
 public:
  FakeUpstream() {
    for (int attempt = 0; attempt < 8 && !tcp_; ++attempt) {
      udp_ = UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_in a = loopback(0);
      ::bind(udp_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
      socklen_t len = sizeof a;
      ::getsockname(udp_.get(), reinterpret_cast<sockaddr*>(&a), &len);
      port_ = ntohs(a.sin_port);
      UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::bind(tcp.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(tcp.get(), 8) == 0)
        tcp_ = std::move(tcp);
    }
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    stop_r_ = UniqueFd(fds[0]);
    stop_w_ = UniqueFd(fds[1]);
    thread_ = std::thread([this] { run(); });
  }
  ~FakeUpstream() {
    [[maybe_unused]] ssize_t n = ::write(stop_w_.get(), "x", 1);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  size_t asked(const std::string& name_lower_with_dot) const {
    size_t n = 0;
    for (const Seen& s : seen()) {
      std::string lower = s.name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      n += lower == name_lower_with_dot;
    }
    return n;
  }

 private:
  void run() {
    for (;;) {
      pollfd p[3] = {{udp_.get(), POLLIN, 0}, {tcp_.get(), POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
      if (::poll(p, 3, 1000) < 0) continue;
      if (p[2].revents) return;
      if (p[0].revents & POLLIN) serve_udp();
      if (p[1].revents & POLLIN) serve_tcp();
    }
  }

  void serve_udp() {
    Bytes buf(65536);
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const ssize_t n =
        ::recvfrom(udp_.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&peer), &len);
    if (n <= 0) return;
    buf.resize(static_cast<size_t>(n));
    for (const Bytes& out : answer(buf, false))
      ::sendto(udp_.get(), out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&peer), len);
  }

  void serve_tcp() {
    UniqueFd conn(::accept4(tcp_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) return;
    timeval tv{2, 0};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
      uint8_t head[2];
      if (::recv(conn.get(), head, 2, MSG_WAITALL) != 2) return;
      Bytes msg(static_cast<size_t>(head[0] << 8 | head[1]));
      if (!msg.empty() &&
          ::recv(conn.get(), msg.data(), msg.size(), MSG_WAITALL) != static_cast<ssize_t>(msg.size()))
        return;
      for (const Bytes& out : answer(msg, true)) {
        Bytes framed{static_cast<uint8_t>(out.size() >> 8), static_cast<uint8_t>(out.size())};
        framed.insert(framed.end(), out.begin(), out.end());
        if (::send(conn.get(), framed.data(), framed.size(), MSG_NOSIGNAL) < 0) return;
      }
    }
  }

  // The zone. Returns the messages to send back (none: a server that does
  // not answer).
  std::vector<Bytes> answer(const Bytes& wire, bool tcp) {
    PktPtr q = parse(wire);
    if (!q || ldns_rr_list_rr_count(ldns_pkt_question(q.get())) != 1) return {};
    const ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(q.get()), 0);
    Seen seen;
    seen.name = owner_text(question);
    seen.type = static_cast<uint16_t>(ldns_rr_get_type(question));
    seen.id = ldns_pkt_id(q.get());
    seen.edns = ldns_pkt_edns(q.get());
    seen.arcount = ldns_pkt_arcount(q.get());
    seen.rd = ldns_pkt_rd(q.get());
    seen.tcp = tcp;
    {
      std::lock_guard lock(mutex_);
      seen_.push_back(seen);
    }
    std::string name = seen.name;
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool a = seen.type == LDNS_RR_TYPE_A, aaaa = seen.type == LDNS_RR_TYPE_AAAA;

    std::vector<std::string> records;
    ldns_pkt_rcode rcode = LDNS_RCODE_NOERROR;
    bool truncated = false;
    std::vector<Bytes> before;  // sent ahead of the real answer
    if (name == "api.example.com.") {
      if (a) records = {"api.example.com. 1 IN A 127.0.0.2"};
      if (aaaa) records = {"api.example.com. 1 IN AAAA ::2"};
    } else if (name == "cdn.example.com.") {
      records = {"cdn.example.com. 300 IN CNAME edge.example.net."};
      if (a) records.push_back("edge.example.net. 120 IN A 127.0.0.3");
    } else if (name == "a.pkg.example.org." || name == "a.b.pkg.example.org." || name == "pkg.example.org." ||
               name == "xpkg.example.org.") {
      if (a) records = {seen.name + " 7200 IN A 127.0.0.4"};
    } else if (name == "big.example.com.") {
      if (a && !tcp) truncated = true;  // no records: the whole answer needs TCP
      for (int i = 1; a && tcp && i <= 60; ++i)
        records.push_back("big.example.com. 600 IN A 10.0.0." + std::to_string(i));
    } else if (name == "spoof.example.com.") {
      // A reply with another id and one for another name come first.
      before.push_back(reply(q.get(), static_cast<uint16_t>(seen.id ^ 0x5a5a), "spoof.example.com.",
                             {"spoof.example.com. 60 IN A 6.6.6.6"}, LDNS_RCODE_NOERROR, false));
      before.push_back(reply(q.get(), seen.id, "other.example.com.", {"other.example.com. 60 IN A 6.6.6.7"},
                             LDNS_RCODE_NOERROR, false));
      records = {"spoof.example.com. 60 IN A 127.0.0.5"};
    } else if (name == "tcpspoof.example.com.") {
      // Truncated over UDP; over TCP an answer with another id.
      if (!tcp) {
        truncated = true;
      } else {
        return {reply(q.get(), static_cast<uint16_t>(seen.id ^ 1), seen.name,
                      {"tcpspoof.example.com. 60 IN A 6.6.6.6"}, LDNS_RCODE_NOERROR, false)};
      }
    } else if (name == "slow.example.com.") {
      return {};
    } else {
      rcode = LDNS_RCODE_NXDOMAIN;
    }
    before.push_back(reply(q.get(), seen.id, seen.name, records, rcode, truncated));
    return before;
  }

  static Bytes reply(const ldns_pkt* q, uint16_t id, const std::string& qname,
                     const std::vector<std::string>& records, ldns_pkt_rcode rcode, bool truncated) {
    PktPtr r(ldns_pkt_new());
    ldns_pkt_set_id(r.get(), id);
    ldns_pkt_set_qr(r.get(), true);
    ldns_pkt_set_rd(r.get(), ldns_pkt_rd(q));
    ldns_pkt_set_ra(r.get(), true);
    ldns_pkt_set_tc(r.get(), truncated);
    ldns_pkt_set_rcode(r.get(), static_cast<uint8_t>(rcode));
    ldns_rr* question = ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(q), 0));
    ldns_rdf* owner = ldns_dname_new_frm_str(qname.c_str());
    ldns_rdf_deep_free(ldns_rr_owner(question));
    ldns_rr_set_owner(question, owner);
    ldns_pkt_push_rr(r.get(), LDNS_SECTION_QUESTION, question);
    for (const std::string& text : records) {
      ldns_rr* rr = nullptr;
      EXPECT_EQ(ldns_rr_new_frm_str(&rr, text.c_str(), 0, nullptr, nullptr), LDNS_STATUS_OK) << text;
      ldns_pkt_push_rr(r.get(), LDNS_SECTION_ANSWER, rr);
    }
    // Sections the resolver must not pass on.
    ldns_rr* ns = nullptr;
    ldns_rr_new_frm_str(&ns, "example.com. 60 IN NS ns.example.com.", 0, nullptr, nullptr);
    ldns_pkt_push_rr(r.get(), LDNS_SECTION_AUTHORITY, ns);
    return to_wire(r.get());
  }

  UniqueFd udp_, tcp_, stop_r_, stop_w_;
  uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::vector<Seen> seen_;
  std::thread thread_;
};

// --- the fixture -------------------------------------------------------------

struct Pin {
  Resolved resolved;
  bool answer_was_out = false;  // the client could already read an answer
};

class DnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/agentcage-dns-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    conf_ = dir_ + "/resolv.conf";
    std::ofstream(conf_) << "# the test's upstream\nsearch example.com\nnameserver 127.0.0.1@"
                         << upstream_.port() << "\noptions ndots:1\n";
  }
  void TearDown() override {
    std::remove(conf_.c_str());
    ::rmdir(dir_.c_str());
  }

  Options options(std::vector<Name> names = {{"api.example.com", false},
                                             {"cdn.example.com", false},
                                             {"big.example.com", false},
                                             {"slow.example.com", false},
                                             {"spoof.example.com", false},
                                             {"api.example.com", false},
                                             {"tcpspoof.example.com", false}}) {
    Options o;
    o.names = std::move(names);
    o.resolv_conf = conf_;
    o.upstream_timeout = 2000ms;
    o.pin = [this](const Resolved& r) -> Status {
      Pin p{r, false};
      for (int fd : clients_) {
        char b;
        if (::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) p.answer_was_out = true;
      }
      pins_.push_back(p);
      if (pin_error_) return Error{"pin: map full", 0};
      return {};
    };
    o.refused = [this](const Refused& r) { refused_.push_back(r); };
    return o;
  }

  std::unique_ptr<Resolver> open(Options o) {
    auto r = Resolver::open(std::move(o));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    if (!r.ok()) return nullptr;
    return std::move(*r);
  }

  UniqueFd udp_client(Resolver& r) {
    UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_in a = loopback(r.port());
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    clients_.push_back(fd.get());
    return fd;
  }
  UniqueFd tcp_client(Resolver& r) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a = loopback(r.port());
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);  // the backlog takes it
    ::fcntl(fd.get(), F_SETFL, O_NONBLOCK);
    clients_.push_back(fd.get());
    return fd;
  }

  // Runs the resolver until `done` or the deadline.
  template <class Done>
  bool pump_until(Resolver& r, Done done, std::chrono::milliseconds limit = 3000ms) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (done()) return true;
      pollfd p{r.fd(), POLLIN, 0};
      ::poll(&p, 1, 10);
      r.service();
    }
    return done();
  }

  // The next datagram on `fd`, the resolver running meanwhile.
  std::optional<Bytes> recv_udp(Resolver& r, int fd, std::chrono::milliseconds limit = 3000ms) {
    Bytes buf(65536);
    std::optional<Bytes> got;
    pump_until(
        r,
        [&] {
          const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
          if (n < 0) return false;
          got = Bytes(buf.begin(), buf.begin() + n);
          return true;
        },
        limit);
    return got;
  }

  PktPtr ask_udp(Resolver& r, const Bytes& q) {
    UniqueFd fd = udp_client(r);
    EXPECT_EQ(::send(fd.get(), q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
    std::optional<Bytes> a = recv_udp(r, fd.get());
    clients_.pop_back();  // closed here: its number may be reused
    if (!a) return nullptr;
    return parse(*a);
  }

  // The next length-prefixed message on a TCP client; nullopt at the
  // deadline or when the resolver closed the connection (closed set).
  std::optional<Bytes> recv_tcp(Resolver& r, int fd, bool* closed = nullptr) {
    Bytes& in = tcp_in_[fd];
    std::optional<Bytes> got;
    pump_until(r, [&] {
      uint8_t chunk[4096];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n == 0 && closed) *closed = true;
      if (n == 0) return true;
      if (n > 0) in.insert(in.end(), chunk, chunk + n);
      if (in.size() >= 2 && in.size() >= 2u + (in[0] << 8 | in[1])) {
        const size_t len = static_cast<size_t>(in[0] << 8 | in[1]);
        got = Bytes(in.begin() + 2, in.begin() + 2 + static_cast<ptrdiff_t>(len));
        in.erase(in.begin(), in.begin() + 2 + static_cast<ptrdiff_t>(len));
        return true;
      }
      return false;
    });
    return got;
  }

  static void send_tcp(int fd, const Bytes& msg) {
    Bytes framed{static_cast<uint8_t>(msg.size() >> 8), static_cast<uint8_t>(msg.size())};
    framed.insert(framed.end(), msg.begin(), msg.end());
    ASSERT_EQ(::send(fd, framed.data(), framed.size(), MSG_NOSIGNAL), static_cast<ssize_t>(framed.size()));
  }

  FakeUpstream upstream_;
  std::string dir_, conf_;
  std::vector<Pin> pins_;
  std::vector<Refused> refused_;
  std::vector<int> clients_;
  std::map<int, Bytes> tcp_in_;
  bool pin_error_ = false;
};

// --- match() -----------------------------------------------------------------

// agentcage does not link ldns (OpenSSL under it would load on every run's
// start): the resolver opens it, and every function it uses is there.
TEST(DnsLdns, EveryFunctionIsTakenFromLibldns) {
  ASSERT_TRUE(load_ldns()) << load_ldns().error().message;
#define AGENTCAGE_LDNS_CHECK(name) \
  EXPECT_EQ(reinterpret_cast<void*>(ldns().name), reinterpret_cast<void*>(&::ldns_##name)) << #name;
  AGENTCAGE_LDNS_FUNCTIONS(AGENTCAGE_LDNS_CHECK)
#undef AGENTCAGE_LDNS_CHECK
}

TEST(DnsLdns, AMissingLibraryIsAnErrorThatNamesIt) {
  auto lib = SharedLibrary::open("libagentcage-no-such-library.so.1");
  ASSERT_FALSE(lib);
  EXPECT_NE(lib.error().message.find("cannot load libagentcage-no-such-library.so.1: "), std::string::npos)
      << lib.error().message;
  auto libc = SharedLibrary::open("libc.so.6");
  ASSERT_TRUE(libc) << libc.error().message;
  EXPECT_EQ(libc->function<decltype(&::getpid)>("agentcage_no_such_function"), nullptr);
  const auto pid = libc->function<decltype(&::getpid)>("getpid");
  ASSERT_NE(pid, nullptr);
  EXPECT_EQ(pid(), ::getpid());
}

TEST(DnsMatch, ExactNamesMatchOnlyThemselvesWithoutRegardToCase) {
  const std::vector<Name> names = {
      {"api.example.com", false}, {"other.example.com", false}, {"api.example.com", false}};
  EXPECT_EQ(match(names, "api.example.com"), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(match(names, "API.Example.COM."), (std::vector<size_t>{0, 2}));
  EXPECT_TRUE(match(names, "api.example.com..").empty());
  EXPECT_TRUE(match(names, "x.api.example.com").empty());
  EXPECT_TRUE(match(names, "example.com").empty());
  EXPECT_TRUE(match(names, "api.example.co").empty());
  EXPECT_TRUE(match(names, "").empty());
  EXPECT_TRUE(match(names, ".").empty());
}

TEST(DnsMatch, WildcardsMatchStrictlyUnderTheirNameAtALabelBoundary) {
  const std::vector<Name> names = {{"pkg.example.org", true}};
  EXPECT_EQ(match(names, "a.pkg.example.org"), (std::vector<size_t>{0}));
  EXPECT_EQ(match(names, "a.b.pkg.example.org."), (std::vector<size_t>{0}));
  EXPECT_EQ(match(names, "A.PKG.example.ORG"), (std::vector<size_t>{0}));
  EXPECT_TRUE(match(names, "pkg.example.org").empty());
  EXPECT_TRUE(match(names, "pkg.example.org.").empty());
  EXPECT_TRUE(match(names, "xpkg.example.org").empty());
  EXPECT_TRUE(match(names, ".pkg.example.org").empty());
  EXPECT_TRUE(match(names, "a..pkg.example.org").empty());
  EXPECT_TRUE(match(names, "a.pkg.example.org.evil").empty());
  EXPECT_TRUE(match({{"example.org", true}}, "evilexample.org").empty());
}

// --- open() ------------------------------------------------------------------

TEST_F(DnsTest, OpenFailsForAFileWithoutNameserverNamingIt) {
  std::ofstream(conf_, std::ios::trunc) << "search example.com\n# nameserver 127.0.0.1\noptions ndots:1\n";
  auto r = Resolver::open(options());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(conf_), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("no upstream server"), std::string::npos) << r.error().message;

  auto missing = options();
  missing.resolv_conf = dir_ + "/missing.conf";
  auto m = Resolver::open(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find(missing.resolv_conf), std::string::npos) << m.error().message;
  EXPECT_EQ(m.error().code, ENOENT);
}

TEST_F(DnsTest, UpstreamsAreTheFirstThreeNumericNameservers) {
  std::ofstream(conf_, std::ios::trunc) << "domain example.com\n"
                                           "nameserver ::1@5353 # a comment\n"
                                           "nameserver\tbogus.example.com\n"
                                           "nameserver 10.0.0.1\n"
                                           "nameserver 10.0.0.2@0\n"
                                           "nameserver 10.0.0.3@65536\n"
                                           "nameserver fe80::1%lo\n"
                                           "nameserver 192.0.2.1\n";
  auto ups = detail::read_upstreams(conf_);
  ASSERT_TRUE(ups.ok()) << ups.error().message;
  ASSERT_EQ(ups->size(), 3u);
  const auto port = [](const detail::Upstream& u) {
    return ntohs(u.addr.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&u.addr)->sin_port
                                             : reinterpret_cast<const sockaddr_in6*>(&u.addr)->sin6_port);
  };
  EXPECT_EQ((*ups)[0].addr.ss_family, AF_INET6);
  EXPECT_EQ(port((*ups)[0]), 5353);
  EXPECT_EQ((*ups)[1].addr.ss_family, AF_INET);
  EXPECT_EQ((*ups)[1].text, "10.0.0.1");
  EXPECT_EQ(port((*ups)[1]), 53);
  EXPECT_EQ((*ups)[2].text, "fe80::1%lo");
  EXPECT_NE(reinterpret_cast<const sockaddr_in6*>(&(*ups)[2].addr)->sin6_scope_id, 0u);

  std::ofstream(conf_, std::ios::trunc) << "nameserver bogus.example.com\n";
  auto bad = detail::read_upstreams(conf_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(conf_), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("numeric"), std::string::npos) << bad.error().message;
}

TEST_F(DnsTest, OpenBindsUdpAndTcpOnOneLoopbackPort) {
  auto r = open(options());
  ASSERT_TRUE(r);
  EXPECT_NE(r->port(), 0);
  EXPECT_GE(r->fd(), 0);
  UniqueFd tcp = tcp_client(*r);  // connects: TCP listens at the same port
  EXPECT_TRUE(tcp.valid());
  if (r->has_ipv6()) {
    UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(r->port());
    a.sin6_addr = in6addr_loopback;
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
}

// --- allowed names -----------------------------------------------------------

TEST_F(DnsTest, AllowedNameIsPinnedBeforeItsAnswerIsSent) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_A, 0x1234));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 0x1234);
  EXPECT_TRUE(ldns_pkt_qr(a.get()));
  EXPECT_TRUE(ldns_pkt_ra(a.get()));
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NOERROR);
  EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.2"}));
  EXPECT_EQ(ldns_pkt_nscount(a.get()), 0);  // the upstream's authority section is not passed on
  ASSERT_EQ(pins_.size(), 1u);
  EXPECT_FALSE(pins_[0].answer_was_out);
  EXPECT_EQ(pins_[0].resolved.name, "api.example.com");
  EXPECT_EQ(pins_[0].resolved.qtype, kA);
  EXPECT_EQ(pins_[0].resolved.rules, (std::vector<size_t>{0, 5}));
  ASSERT_EQ(pins_[0].resolved.addresses.size(), 1u);
  EXPECT_EQ(pins_[0].resolved.addresses[0].family, AF_INET);
  EXPECT_EQ(address_text(pins_[0].resolved.addresses[0]), "127.0.0.2");
  EXPECT_EQ(pins_[0].resolved.ttl, 5s);  // TTL 1 raised to min_ttl

  PktPtr aaaa = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_AAAA, 0x4321));
  ASSERT_TRUE(aaaa);
  EXPECT_EQ(ldns_pkt_id(aaaa.get()), 0x4321);
  EXPECT_EQ(answer_addresses(aaaa.get()), (std::vector<std::string>{"::2"}));
  ASSERT_EQ(pins_.size(), 2u);
  EXPECT_FALSE(pins_[1].answer_was_out);
  EXPECT_EQ(pins_[1].resolved.qtype, kAAAA);
  ASSERT_EQ(pins_[1].resolved.addresses.size(), 1u);
  EXPECT_EQ(pins_[1].resolved.addresses[0].family, AF_INET6);
  EXPECT_EQ(address_text(pins_[1].resolved.addresses[0]), "::2");
  EXPECT_EQ(r->stats().queries, 2u);
  EXPECT_EQ(r->stats().forwarded, 2u);
  EXPECT_TRUE(refused_.empty());
}

TEST_F(DnsTest, ForwardedQueryIsFreshLowerCaseWithoutClientEdns) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("API.Example.COM", LDNS_RR_TYPE_A, 0x0f0f, /*edns=*/true));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 0x0f0f);
  EXPECT_EQ(owner_text(ldns_rr_list_rr(ldns_pkt_question(a.get()), 0)), "API.Example.COM.");
  EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.2"}));
  const std::vector<Seen> seen = upstream_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].name, "api.example.com.");
  EXPECT_EQ(seen[0].type, kA);
  EXPECT_NE(seen[0].id, 0x0f0f);
  EXPECT_FALSE(seen[0].edns);
  EXPECT_EQ(seen[0].arcount, 0);
  EXPECT_TRUE(seen[0].rd);
  ASSERT_EQ(pins_.size(), 1u);
  EXPECT_EQ(pins_[0].resolved.name, "api.example.com");
}

TEST_F(DnsTest, CnameChainAddressesArePinned) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("cdn.example.com", LDNS_RR_TYPE_A, 7));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 2);
  EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.3"}));
  ASSERT_EQ(pins_.size(), 1u);
  EXPECT_EQ(pins_[0].resolved.name, "cdn.example.com");
  ASSERT_EQ(pins_[0].resolved.addresses.size(), 1u);
  EXPECT_EQ(address_text(pins_[0].resolved.addresses[0]), "127.0.0.3");
  EXPECT_EQ(pins_[0].resolved.ttl, 120s);

  // No address at all (a CNAME only): pinned empty, ttl 0, answered.
  PktPtr six = ask_udp(*r, query("cdn.example.com", LDNS_RR_TYPE_AAAA, 8));
  ASSERT_TRUE(six);
  EXPECT_EQ(ldns_pkt_get_rcode(six.get()), LDNS_RCODE_NOERROR);
  ASSERT_EQ(pins_.size(), 2u);
  EXPECT_TRUE(pins_[1].resolved.addresses.empty());
  EXPECT_EQ(pins_[1].resolved.ttl, 0s);
}

TEST_F(DnsTest, TtlsAreClampedToMaxTtlInThePinAndTheAnswer) {
  auto o = options({{"pkg.example.org", true}});
  o.max_ttl = 300s;
  auto r = open(std::move(o));
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("a.pkg.example.org", LDNS_RR_TYPE_A, 9));
  ASSERT_TRUE(a);
  ASSERT_EQ(ldns_pkt_ancount(a.get()), 1);
  EXPECT_EQ(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(a.get()), 0)), 300u);  // 7200 upstream
  ASSERT_EQ(pins_.size(), 1u);
  EXPECT_EQ(pins_[0].resolved.ttl, 300s);
}

TEST_F(DnsTest, RepliesWithAnotherIdOrQuestionAreIgnored) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("spoof.example.com", LDNS_RR_TYPE_A, 10));
  ASSERT_TRUE(a);
  EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.5"}));
  ASSERT_EQ(pins_.size(), 1u);
  ASSERT_EQ(pins_[0].resolved.addresses.size(), 1u);
  EXPECT_EQ(address_text(pins_[0].resolved.addresses[0]), "127.0.0.5");
}

// --- names the policy does not allow -----------------------------------------

TEST_F(DnsTest, NotAllowedNameIsNxdomainAndNeverAskedUpstream) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("Secret.Exfil.example.net", LDNS_RR_TYPE_A, 0xbeef));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 0xbeef);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NXDOMAIN);
  EXPECT_TRUE(ldns_pkt_ra(a.get()));
  ASSERT_EQ(ldns_pkt_qdcount(a.get()), 1);
  EXPECT_EQ(owner_text(ldns_rr_list_rr(ldns_pkt_question(a.get()), 0)), "Secret.Exfil.example.net.");
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 0);
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_EQ(refused_[0].name, "secret.exfil.example.net");
  EXPECT_EQ(refused_[0].qtype, kA);
  EXPECT_EQ(refused_[0].reason, "not allowed by the policy");
  EXPECT_EQ(r->stats().refused, 1u);
  EXPECT_EQ(r->stats().forwarded, 0u);
  EXPECT_TRUE(pins_.empty());
  // An allowed query after it reaches the upstream: the log holds only that one.
  ASSERT_TRUE(ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_A, 1)));
  const std::vector<Seen> seen = upstream_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].name, "api.example.com.");
}

// An A query (RD set) for a name given in wire form, built field by field:
// for names ldns's text parser would not make.
PktPtr a_query_for(const uint8_t* wire_name, size_t size, uint16_t id) {
  PktPtr pkt(ldns_pkt_new());
  ldns_pkt_set_id(pkt.get(), id);
  ldns_pkt_set_rd(pkt.get(), true);
  ldns_rr* q = ldns_rr_new();
  ldns_rr_set_question(q, true);
  ldns_rr_set_owner(q, ldns_rdf_new_frm_data(LDNS_RDF_TYPE_DNAME, size, wire_name));
  ldns_rr_set_type(q, LDNS_RR_TYPE_A);
  ldns_rr_set_class(q, LDNS_RR_CLASS_IN);
  ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_QUESTION, q);
  return pkt;
}

TEST_F(DnsTest, RefusedNameIsShownAsPrintableAscii) {
  auto r = open(options());
  ASSERT_TRUE(r);
  // a label "a.b\x01" (a dot and a control byte inside it) under example.com
  const uint8_t wire_name[] = {4,   'a', '.', 'B', 1,   3,   'a', 'p', 'i', 7,   'e',
                               'x', 'a', 'm', 'p', 'l', 'e', 3,   'c', 'o', 'm', 0};
  PktPtr a = ask_udp(*r, to_wire(a_query_for(wire_name, sizeof wire_name, 3).get()));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NXDOMAIN);
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_EQ(refused_[0].name, "a?b?.api.example.com");
  EXPECT_TRUE(upstream_.seen().empty());
}

// A query for the root name (`dig . NS`): refused, and shown as ".", never as
// an empty name (which the daemon's run_end would refuse).
TEST_F(DnsTest, TheRootNameIsRefusedAndShownAsADot) {
  auto r = open(options());
  ASSERT_TRUE(r);
  const uint8_t root[] = {0};
  PktPtr a = ask_udp(*r, to_wire(a_query_for(root, sizeof root, 4).get()));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NXDOMAIN);
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_EQ(refused_[0].name, ".");
  EXPECT_TRUE(upstream_.seen().empty());
}

TEST_F(DnsTest, WildcardEndToEnd) {
  auto r = open(options({{"pkg.example.org", true}}));
  ASSERT_TRUE(r);
  for (const char* name : {"a.pkg.example.org", "a.b.pkg.example.org"}) {
    PktPtr a = ask_udp(*r, query(name, LDNS_RR_TYPE_A, 11));
    ASSERT_TRUE(a) << name;
    EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NOERROR) << name;
    EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.4"})) << name;
  }
  for (const char* name : {"pkg.example.org", "xpkg.example.org"}) {
    PktPtr a = ask_udp(*r, query(name, LDNS_RR_TYPE_A, 12));
    ASSERT_TRUE(a) << name;
    EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NXDOMAIN) << name;
  }
  EXPECT_EQ(upstream_.asked("a.pkg.example.org."), 1u);
  EXPECT_EQ(upstream_.asked("a.b.pkg.example.org."), 1u);
  EXPECT_EQ(upstream_.asked("pkg.example.org."), 0u);
  EXPECT_EQ(upstream_.asked("xpkg.example.org."), 0u);
  EXPECT_EQ(refused_.size(), 2u);
  EXPECT_EQ(pins_.size(), 2u);
}

// A wildcard's match can be vetoed (the run vetoes names under a public
// suffix below the wildcard's base): NXDOMAIN with the veto's reason, never
// forwarded; an exact entry for the same name is not vetoed.
TEST_F(DnsTest, AVetoedWildcardMatchIsRefusedButAnExactEntryStands) {
  Options o = options({{"pkg.example.org", true}, {"ok.bad.pkg.example.org", false}});
  o.veto = [](std::string_view qname, const Name& rule) -> std::string {
    EXPECT_TRUE(rule.wildcard);
    return qname.find("bad.") != std::string_view::npos ? "under a suffix of its own" : "";
  };
  auto r = open(std::move(o));
  ASSERT_TRUE(r);
  PktPtr bad = ask_udp(*r, query("x.bad.pkg.example.org", LDNS_RR_TYPE_A, 21));
  ASSERT_TRUE(bad);
  EXPECT_EQ(ldns_pkt_get_rcode(bad.get()), LDNS_RCODE_NXDOMAIN);
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_EQ(refused_[0].reason, "under a suffix of its own");
  EXPECT_EQ(upstream_.asked("x.bad.pkg.example.org."), 0u);
  PktPtr exact = ask_udp(*r, query("ok.bad.pkg.example.org", LDNS_RR_TYPE_A, 22));
  ASSERT_TRUE(exact);
  EXPECT_EQ(upstream_.asked("ok.bad.pkg.example.org."), 1u);  // allowed, so forwarded
  PktPtr good = ask_udp(*r, query("a.pkg.example.org", LDNS_RR_TYPE_A, 23));
  ASSERT_TRUE(good);
  EXPECT_EQ(ldns_pkt_get_rcode(good.get()), LDNS_RCODE_NOERROR);
  EXPECT_EQ(refused_.size(), 1u);
}

TEST_F(DnsTest, OtherTypeOfAnAllowedNameIsEmptyNoerrorNotForwarded) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_TXT, 13));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 13);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NOERROR);
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 0);
  EXPECT_EQ(ldns_pkt_qdcount(a.get()), 1);
  EXPECT_EQ(r->stats().other_types, 1u);
  EXPECT_TRUE(upstream_.seen().empty());
  EXPECT_TRUE(pins_.empty());

  // Class CH: REFUSED, not forwarded.
  PktPtr ch(ldns_pkt_query_new(ldns_dname_new_frm_str("api.example.com"), LDNS_RR_TYPE_A, LDNS_RR_CLASS_CH,
                               LDNS_RD));
  ldns_pkt_set_id(ch.get(), 14);
  PktPtr b = ask_udp(*r, to_wire(ch.get()));
  ASSERT_TRUE(b);
  EXPECT_EQ(ldns_pkt_get_rcode(b.get()), LDNS_RCODE_REFUSED);
  EXPECT_TRUE(upstream_.seen().empty());
}

// --- failures ----------------------------------------------------------------

TEST_F(DnsTest, PinErrorAnswersServfailAndNothingElse) {
  pin_error_ = true;
  auto r = open(options());
  ASSERT_TRUE(r);
  UniqueFd fd = udp_client(*r);
  const Bytes q = query("api.example.com", LDNS_RR_TYPE_A, 15);
  ASSERT_EQ(::send(fd.get(), q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
  std::optional<Bytes> got = recv_udp(*r, fd.get());
  ASSERT_TRUE(got);
  PktPtr a = parse(*got);
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 15);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 0);
  EXPECT_EQ(pins_.size(), 1u);
  EXPECT_EQ(r->stats().failed, 1u);
  EXPECT_FALSE(recv_udp(*r, fd.get(), 300ms));  // no second message
}

TEST_F(DnsTest, UpstreamTimeoutAnswersServfail) {
  auto o = options();
  o.upstream_timeout = 200ms;
  auto r = open(std::move(o));
  ASSERT_TRUE(r);
  const auto start = Clock::now();
  PktPtr a = ask_udp(*r, query("slow.example.com", LDNS_RR_TYPE_A, 16));
  ASSERT_TRUE(a);
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_EQ(ldns_pkt_id(a.get()), 16);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(r->stats().failed, 1u);
  EXPECT_TRUE(pins_.empty());
  EXPECT_EQ(upstream_.asked("slow.example.com."), 1u);
}

TEST_F(DnsTest, TooManyPendingAnswersServfailAtOnce) {
  auto o = options();
  o.max_pending = 1;
  o.upstream_timeout = 1500ms;
  auto r = open(std::move(o));
  ASSERT_TRUE(r);
  UniqueFd slow = udp_client(*r);
  const Bytes q1 = query("slow.example.com", LDNS_RR_TYPE_A, 17);
  ASSERT_EQ(::send(slow.get(), q1.data(), q1.size(), 0), static_cast<ssize_t>(q1.size()));
  ASSERT_TRUE(pump_until(*r, [&] { return r->stats().forwarded == 1; }));
  const auto start = Clock::now();
  PktPtr a = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_A, 18));
  ASSERT_TRUE(a);
  EXPECT_LT(Clock::now() - start, 1000ms);  // not after the slow one's timeout
  EXPECT_EQ(ldns_pkt_id(a.get()), 18);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(r->stats().failed, 1u);
  EXPECT_EQ(upstream_.asked("api.example.com."), 0u);
}

TEST_F(DnsTest, NextUpstreamIsAskedWhenTheFirstRefusesOrIsSilent) {
  // A port nobody listens on (the kernel answers ICMP port unreachable) and
  // one that never answers.
  UniqueFd closed(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  UniqueFd silent(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  uint16_t ports[2] = {};
  for (int i = 0; i < 2; ++i) {
    const int fd = i == 0 ? closed.get() : silent.get();
    sockaddr_in a = loopback(0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ports[i] = ntohs(a.sin_port);
  }
  closed.reset();
  for (const uint16_t first : ports) {
    std::ofstream(conf_, std::ios::trunc)
        << "nameserver 127.0.0.1@" << first << "\nnameserver 127.0.0.1@" << upstream_.port() << "\n";
    auto o = options();
    o.upstream_timeout = 1000ms;  // 500 ms each
    auto r = open(std::move(o));
    ASSERT_TRUE(r);
    const auto start = Clock::now();
    PktPtr a = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_A, 19));
    ASSERT_TRUE(a) << first;
    EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NOERROR) << first;
    EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.2"})) << first;
    if (first == ports[1]) {
      EXPECT_GE(Clock::now() - start, 500ms);  // the silent one's slice
    } else {
      EXPECT_LT(Clock::now() - start, 500ms);  // refused: no need to wait
    }
  }
  EXPECT_EQ(upstream_.asked("api.example.com."), 2u);
}

TEST_F(DnsTest, IPv6LoopbackIsServedWhenTheHostHasIt) {
  auto r = open(options());
  ASSERT_TRUE(r);
  UniqueFd probe(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool host_has_it = probe && ::bind(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ASSERT_EQ(r->has_ipv6(), host_has_it);
  if (!host_has_it) GTEST_SKIP() << "no ::1 on this host";
  UniqueFd fd(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  a.sin6_port = htons(r->port());
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const Bytes q = query("api.example.com", LDNS_RR_TYPE_AAAA, 20);
  ASSERT_EQ(::send(fd.get(), q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
  std::optional<Bytes> got = recv_udp(*r, fd.get());
  ASSERT_TRUE(got);
  PktPtr p = parse(*got);
  ASSERT_TRUE(p);
  EXPECT_EQ(ldns_pkt_id(p.get()), 20);
  EXPECT_EQ(answer_addresses(p.get()), (std::vector<std::string>{"::2"}));
}

// --- TCP ---------------------------------------------------------------------

TEST_F(DnsTest, TcpClientGetsTwoAnswersOnOneConnection) {
  auto r = open(options());
  ASSERT_TRUE(r);
  UniqueFd fd = tcp_client(*r);
  // Both queries in one write, the second split over two.
  Bytes both;
  for (auto [name, id] : {std::pair{"api.example.com", 21}, std::pair{"cdn.example.com", 22}}) {
    const Bytes q = query(name, LDNS_RR_TYPE_A, static_cast<uint16_t>(id));
    both.push_back(static_cast<uint8_t>(q.size() >> 8));
    both.push_back(static_cast<uint8_t>(q.size()));
    both.insert(both.end(), q.begin(), q.end());
  }
  const size_t half = both.size() - 5;
  ASSERT_EQ(::send(fd.get(), both.data(), half, 0), static_cast<ssize_t>(half));
  std::optional<Bytes> first = recv_tcp(*r, fd.get());
  ASSERT_EQ(::send(fd.get(), both.data() + half, both.size() - half, 0), 5);
  std::optional<Bytes> second = recv_tcp(*r, fd.get());
  ASSERT_TRUE(first && second);
  PktPtr a = parse(*first), b = parse(*second);
  ASSERT_TRUE(a && b);
  if (ldns_pkt_id(a.get()) != 21) std::swap(a, b);
  EXPECT_EQ(ldns_pkt_id(a.get()), 21);
  EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.2"}));
  EXPECT_EQ(ldns_pkt_id(b.get()), 22);
  EXPECT_EQ(answer_addresses(b.get()), (std::vector<std::string>{"127.0.0.3"}));
  EXPECT_EQ(pins_.size(), 2u);
  for (const Pin& p : pins_) EXPECT_FALSE(p.answer_was_out);
}

TEST_F(DnsTest, TcpClientsThatLeaveEarlyDisturbNobody) {
  auto r = open(options());
  ASSERT_TRUE(r);
  {
    // Asks, half-closes and goes before the answer.
    UniqueFd early = tcp_client(*r);
    send_tcp(early.get(), query("api.example.com", LDNS_RR_TYPE_A, 23));
    ASSERT_EQ(::shutdown(early.get(), SHUT_WR), 0);
    clients_.pop_back();
  }
  {
    // Asks for a name the upstream does not answer and goes.
    UniqueFd slow = tcp_client(*r);
    send_tcp(slow.get(), query("slow.example.com", LDNS_RR_TYPE_A, 24));
    ASSERT_TRUE(pump_until(*r, [&] { return r->stats().forwarded == 2; }));
    clients_.pop_back();
  }
  ASSERT_TRUE(pump_until(*r, [&] { return pins_.size() == 1; }));
  UniqueFd fd = tcp_client(*r);
  send_tcp(fd.get(), query("cdn.example.com", LDNS_RR_TYPE_A, 25));
  std::optional<Bytes> got = recv_tcp(*r, fd.get());
  ASSERT_TRUE(got);
  PktPtr a = parse(*got);
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 25);
  EXPECT_EQ(answer_addresses(a.get()), (std::vector<std::string>{"127.0.0.3"}));
}

TEST_F(DnsTest, TruncatedUpstreamAnswerIsAskedAgainOverTcp) {
  auto r = open(options());
  ASSERT_TRUE(r);
  // Over UDP the client gets TC (the answer is longer than 512 bytes)...
  PktPtr a = ask_udp(*r, query("big.example.com", LDNS_RR_TYPE_A, 31));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 31);
  EXPECT_TRUE(ldns_pkt_tc(a.get()));
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 0);
  // ...and the pin has all 60 addresses, which the upstream gave over TCP.
  ASSERT_EQ(pins_.size(), 1u);
  EXPECT_EQ(pins_[0].resolved.addresses.size(), 60u);
  EXPECT_EQ(pins_[0].resolved.ttl, 600s);
  const std::vector<Seen> seen = upstream_.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].tcp);
  EXPECT_TRUE(seen[1].tcp);
  EXPECT_EQ(seen[1].name, "big.example.com.");

  // Over TCP the client gets every record.
  UniqueFd fd = tcp_client(*r);
  send_tcp(fd.get(), query("big.example.com", LDNS_RR_TYPE_A, 32));
  std::optional<Bytes> got = recv_tcp(*r, fd.get());
  ASSERT_TRUE(got);
  PktPtr b = parse(*got);
  ASSERT_TRUE(b);
  EXPECT_FALSE(ldns_pkt_tc(b.get()));
  EXPECT_EQ(answer_addresses(b.get()).size(), 60u);
}

TEST_F(DnsTest, TcpUpstreamAnswerWithAnotherIdIsServfail) {
  auto r = open(options());
  ASSERT_TRUE(r);
  PktPtr a = ask_udp(*r, query("tcpspoof.example.com", LDNS_RR_TYPE_A, 33));
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 33);
  EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 0);
  EXPECT_TRUE(pins_.empty());
  EXPECT_EQ(r->stats().failed, 1u);
  const std::vector<Seen> seen = upstream_.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[1].tcp);
}

// --- hostile input -----------------------------------------------------------

TEST_F(DnsTest, MalformedInputsLeaveTheResolverHealthy) {
  auto r = open(options());
  ASSERT_TRUE(r);
  UniqueFd fd = udp_client(*r);
  uint64_t malformed = 0;
  const auto send_bad = [&](const Bytes& b) {
    ASSERT_EQ(::send(fd.get(), b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
    ++malformed;
    ASSERT_TRUE(pump_until(*r, [&] { return r->stats().malformed == malformed; }));
  };
  // Garbage and a response: dropped, no answer.
  send_bad({0x01, 0x02, 0x03});
  send_bad(Bytes(300, 0xff));
  PktPtr resp = parse(query("api.example.com", LDNS_RR_TYPE_A, 40));
  ldns_pkt_set_qr(resp.get(), true);
  send_bad(to_wire(resp.get()));
  char b;
  EXPECT_LT(::recv(fd.get(), &b, 1, MSG_DONTWAIT), 0);
  // Two questions: FORMERR.
  PktPtr two = parse(query("api.example.com", LDNS_RR_TYPE_A, 41));
  ldns_pkt_push_rr(two.get(), LDNS_SECTION_QUESTION,
                   ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(two.get()), 0)));
  send_bad(to_wire(two.get()));
  std::optional<Bytes> formerr = recv_udp(*r, fd.get());
  ASSERT_TRUE(formerr);
  PktPtr f = parse(*formerr);
  ASSERT_TRUE(f);
  EXPECT_EQ(ldns_pkt_id(f.get()), 41);
  EXPECT_EQ(ldns_pkt_get_rcode(f.get()), LDNS_RCODE_FORMERR);
  // What no stub resolver sends is refused from its header, unparsed (a
  // large message makes the parser follow thousands of compression
  // pointers, in agentcage's process): an answer or authority record, two
  // additional ones, or more than 512 bytes, even around one question.
  const auto formerr_for = [&](Bytes msg, uint16_t id) {
    msg[0] = static_cast<uint8_t>(id >> 8);
    msg[1] = static_cast<uint8_t>(id & 0xff);
    send_bad(msg);
    std::optional<Bytes> got = recv_udp(*r, fd.get());
    ASSERT_TRUE(got) << id;
    PktPtr g = parse(*got);
    ASSERT_TRUE(g) << id;
    EXPECT_EQ(ldns_pkt_id(g.get()), id);
    EXPECT_EQ(ldns_pkt_get_rcode(g.get()), LDNS_RCODE_FORMERR) << id;
  };
  Bytes with_answer = query("api.example.com", LDNS_RR_TYPE_A, 0);
  with_answer[7] = 1;  // ancount
  formerr_for(with_answer, 46);
  Bytes two_additional = query("api.example.com", LDNS_RR_TYPE_A, 0);
  two_additional[11] = 2;  // arcount
  formerr_for(two_additional, 47);
  // One question and an EDNS OPT record padded to 600 bytes (option 12).
  Bytes padded = query("api.example.com", LDNS_RR_TYPE_A, 0);
  padded[10] = 0;
  padded[11] = 1;
  const size_t pad = 600 - padded.size() - 11 - 4;
  const Bytes opt{0x00,
                  0x00,
                  0x29,
                  0x10,
                  0x00,
                  0x00,
                  0x00,
                  0x00,
                  0x00,
                  static_cast<uint8_t>((pad + 4) >> 8),
                  static_cast<uint8_t>((pad + 4) & 0xff),
                  0x00,
                  0x0c,
                  static_cast<uint8_t>(pad >> 8),
                  static_cast<uint8_t>(pad & 0xff)};
  padded.insert(padded.end(), opt.begin(), opt.end());
  padded.insert(padded.end(), pad, 0x00);
  ASSERT_EQ(padded.size(), 600u);
  ASSERT_TRUE(parse(padded)) << "the padded query is a well-formed message: the test proves nothing";
  formerr_for(padded, 48);
  // Thousands of questions pointing down a chain of compression pointers.
  Bytes chain(12, 0);
  chain[4] = 0x0f;
  chain[5] = 0xa0;  // 4000 questions
  chain.insert(chain.end(), {0x01, 'a', 0x00});
  for (int i = 0; i < 8000; ++i) {
    const size_t to = chain.size() - (i ? 2 : 3);
    chain.push_back(static_cast<uint8_t>(0xc0 | (to >> 8)));
    chain.push_back(static_cast<uint8_t>(to & 0xff));
  }
  const size_t head = chain.size() - 2;
  for (int i = 0; i < 4000; ++i)
    chain.insert(chain.end(), {static_cast<uint8_t>(0xc0 | (head >> 8)), static_cast<uint8_t>(head & 0xff),
                               0x00, 0x01, 0x00, 0x01});
  formerr_for(chain, 49);
  // Another opcode: NOTIMP.
  PktPtr notify = parse(query("api.example.com", LDNS_RR_TYPE_A, 42));
  ldns_pkt_set_opcode(notify.get(), LDNS_PACKET_NOTIFY);
  send_bad(to_wire(notify.get()));
  std::optional<Bytes> notimp = recv_udp(*r, fd.get());
  ASSERT_TRUE(notimp);
  PktPtr n = parse(*notimp);
  ASSERT_TRUE(n);
  EXPECT_EQ(ldns_pkt_get_rcode(n.get()), LDNS_RCODE_NOTIMPL);
  EXPECT_EQ(((*notimp)[2] >> 3) & 0x0f, LDNS_PACKET_NOTIFY);  // its opcode echoed
  // An opcode ldns has no name for (13): NOTIMP too.
  Bytes thirteen = query("api.example.com", LDNS_RR_TYPE_A, 45);
  thirteen[2] = static_cast<uint8_t>((thirteen[2] & 0x87) | (13 << 3));
  send_bad(thirteen);
  std::optional<Bytes> notimp13 = recv_udp(*r, fd.get());
  ASSERT_TRUE(notimp13 && notimp13->size() >= 12);
  EXPECT_EQ(((*notimp13)[2] >> 3) & 0x0f, 13);
  EXPECT_EQ((*notimp13)[3] & 0x0f, LDNS_RCODE_NOTIMPL);

  // TCP: a 1-byte frame is dropped, the connection goes on.
  UniqueFd tcp = tcp_client(*r);
  const Bytes one{0x00, 0x01, 0x00};
  ASSERT_EQ(::send(tcp.get(), one.data(), one.size(), 0), 3);
  ++malformed;
  ASSERT_TRUE(pump_until(*r, [&] { return r->stats().malformed == malformed; }));
  send_tcp(tcp.get(), query("api.example.com", LDNS_RR_TYPE_A, 43));
  std::optional<Bytes> after = recv_tcp(*r, tcp.get());
  ASSERT_TRUE(after);
  PktPtr t = parse(*after);
  ASSERT_TRUE(t);
  EXPECT_EQ(ldns_pkt_id(t.get()), 43);
  EXPECT_EQ(answer_addresses(t.get()), (std::vector<std::string>{"127.0.0.2"}));

  // A huge length: the connection is closed.
  UniqueFd huge = tcp_client(*r);
  const Bytes big{0xff, 0xff, 0x00, 0x00};
  ASSERT_EQ(::send(huge.get(), big.data(), big.size(), 0), 4);
  bool closed = false;
  EXPECT_FALSE(recv_tcp(*r, huge.get(), &closed));
  EXPECT_TRUE(closed);
  EXPECT_EQ(r->stats().malformed, malformed + 1);

  // Still healthy.
  PktPtr ok = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_A, 44));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ldns_pkt_id(ok.get()), 44);
  EXPECT_EQ(answer_addresses(ok.get()), (std::vector<std::string>{"127.0.0.2"}));
  EXPECT_TRUE(refused_.empty());
}

TEST_F(DnsTest, RandomAndMutatedMessagesReachTheUpstreamOnlyAsAllowedQueries) {
  auto o = options();
  o.upstream_timeout = 300ms;
  auto r = open(std::move(o));
  ASSERT_TRUE(r);
  std::mt19937 rng(1234);
  const auto byte = [&] { return static_cast<uint8_t>(rng() & 0xff); };
  const std::vector<Bytes> seeds = {query("api.example.com", LDNS_RR_TYPE_A, 60),
                                    query("cdn.example.com", LDNS_RR_TYPE_AAAA, 61, true),
                                    query("secret.example.net", LDNS_RR_TYPE_A, 62)};
  UniqueFd fd = udp_client(*r);
  for (int i = 0; i < 3000; ++i) {
    Bytes msg;
    if (i % 3 == 0) {
      msg.resize(rng() % 600);
      for (uint8_t& b : msg) b = byte();
    } else {
      msg = seeds[rng() % seeds.size()];
      for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips) msg[rng() % msg.size()] = byte();
    }
    ::send(fd.get(), msg.data(), msg.size(), 0);
    if (i % 20 == 0) r->service();
    char sink[4096];
    while (::recv(fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
  }
  for (int i = 0; i < 20; ++i) {
    UniqueFd tcp = tcp_client(*r);
    Bytes junk(2000);
    for (uint8_t& b : junk) b = byte();
    ::send(tcp.get(), junk.data(), junk.size(), MSG_NOSIGNAL);
    r->service();
    clients_.pop_back();
  }
  clients_.pop_back();
  // Every query that reached the upstream is a fresh A or AAAA query for an
  // allowed name.
  ASSERT_TRUE(pump_until(*r, [&] {
    PktPtr ok = ask_udp(*r, query("api.example.com", LDNS_RR_TYPE_A, 63));
    return ok && ldns_pkt_id(ok.get()) == 63 && ldns_pkt_get_rcode(ok.get()) == LDNS_RCODE_NOERROR;
  }));
  const std::set<std::string> allowed = {"api.example.com.",  "cdn.example.com.",   "big.example.com.",
                                         "slow.example.com.", "spoof.example.com.", "tcpspoof.example.com."};
  for (const Seen& seen : upstream_.seen()) {
    EXPECT_TRUE(allowed.count(seen.name)) << seen.name;
    EXPECT_TRUE(seen.type == kA || seen.type == kAAAA) << seen.type;
    EXPECT_FALSE(seen.edns);
  }
  EXPECT_GT(upstream_.seen().size(), 10u);  // the test asked the upstream something
  EXPECT_GT(r->stats().malformed, 0u);
  EXPECT_GT(r->stats().refused, 0u);
}

TEST_F(DnsTest, TcpConnectionsAreCapped) {
  auto r = open(options());
  ASSERT_TRUE(r);
  std::vector<UniqueFd> conns;
  for (int i = 0; i < 40; ++i) {
    conns.push_back(tcp_client(*r));
    r->service();  // accepts it: the listen backlog never fills
  }
  // The resolver accepts them all; past its cap it closes them at once.
  size_t closed = 0;
  ASSERT_TRUE(pump_until(*r, [&] {
    closed = 0;
    for (const UniqueFd& c : conns) {
      char b;
      closed += ::recv(c.get(), &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
    }
    return closed == 8;
  }));
  // The first ones still get answers.
  send_tcp(conns[0].get(), query("api.example.com", LDNS_RR_TYPE_A, 50));
  std::optional<Bytes> got = recv_tcp(*r, conns[0].get());
  ASSERT_TRUE(got);
  PktPtr a = parse(*got);
  ASSERT_TRUE(a);
  EXPECT_EQ(ldns_pkt_id(a.get()), 50);
}

}  // namespace
}  // namespace agentcage::dns
