// SPDX-License-Identifier: Apache-2.0
// The resolver's state (resolver.h): its sockets, client connections and the
// queries waiting for an upstream. resolver.cpp has the loop, the clients and
// the queries; forward.cpp asks the upstream and answers with what it said.
#pragma once

#include <sys/random.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dns/message.h"
#include "dns/resolv_conf.h"
#include "dns/resolver.h"
#include "util/unique_fd.h"

namespace agentcage::dns::detail {

inline UniqueFd make_socket(int family, int type) {
  return UniqueFd(::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

using Clock = std::chrono::steady_clock;

inline constexpr size_t kMaxClients = 32;           // open TCP client connections
inline constexpr size_t kMaxTcpQuery = 4096;        // bytes of one query over TCP
// What a stub resolver sends: one question, no answer or authority record,
// at most one additional one (EDNS's OPT), in a few hundred bytes. Anything
// else is refused from its header, unparsed: the parser follows every
// compression pointer of a message (thousands in one large datagram), in
// agentcage's own process, outside the run's CPU limit.
inline constexpr size_t kMaxQueryBytes = 512;
inline constexpr size_t kMaxClientOut = 64 * 1024;  // unread answers of one connection
inline constexpr auto kClientIdle = std::chrono::seconds(10);
inline constexpr size_t kUdpLimit = 512;
inline constexpr size_t kTcpLimit = 65535;
inline constexpr int kBacklog = 16;
inline constexpr int kBindAttempts = 8;
inline constexpr int kReadsPerEvent = 16;
inline constexpr int kRounds = 16;  // epoll_wait rounds per service()

enum class Kind : uint32_t { udp_listener, tcp_listener, timer, client, upstream };
inline uint64_t tag(Kind kind, uint32_t n) { return (static_cast<uint64_t>(kind) << 32) | n; }

inline uint16_t read16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

inline std::optional<uint16_t> random_id() {
  uint16_t id = 0;
  if (::getrandom(&id, sizeof id, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof id)) return std::nullopt;
  return id;
}

// Where an answer goes: a UDP peer (through the listener it asked on) or a
// TCP connection.
struct Origin {
  bool tcp = false;
  uint32_t client = 0;
  int listener = -1;
  sockaddr_storage peer{};
  socklen_t peer_len = 0;
};

struct Client {
  UniqueFd fd;
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  size_t out_sent = 0;
  Clock::time_point last{};
  size_t pending = 0;
  bool eof = false;
  bool writing = false;  // EPOLLOUT registered
};

// A query waiting for the upstream.
struct Pending {
  Origin origin;
  ClientQuery query;
  Rdf qname;  // lower-case, as asked upstream
  std::string name;
  uint16_t qtype = 0;
  std::vector<size_t> rules;
  size_t upstream = 0;
  uint16_t id = 0;  // of the query sent upstream
  bool tcp = false;
  bool connected = false;
  UniqueFd fd;
  std::vector<uint8_t> wire;  // the query as sent (with the length prefix over TCP)
  size_t sent = 0;
  std::vector<uint8_t> in;  // a TCP answer being read
  Clock::time_point attempt_deadline{};
  Clock::time_point deadline{};
};

class ResolverImpl final : public Resolver {
 public:
  ResolverImpl(Options options, std::vector<Upstream> upstreams)
      : options_(std::move(options)), upstreams_(std::move(upstreams)), buffer_(kTcpLimit + 2) {}

  Status setup();

  uint16_t port() const override { return port_; }
  bool has_ipv6() const override { return ipv6_; }
  int fd() const override { return epoll_.get(); }
  const Stats& stats() const override { return stats_; }

  void service() override;

 private:
  Status bind_listeners();
  bool watch(int fd, uint32_t events, uint64_t data) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    return ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  void rewatch(int fd, uint32_t events, uint64_t data) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
  void unwatch(int fd) { ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

  void work();
  void expire(Clock::time_point now);
  void arm_timer();

  void on_udp(int listener);
  void on_accept(int listener);
  void on_client(uint32_t id, uint32_t events);
  void close_client(uint32_t id);
  void flush(uint32_t id, Client& c);

  void on_query(std::span<const uint8_t> wire, const Origin& origin);
  void send_answer(const Origin& origin, const std::vector<uint8_t>& wire);
  void reply(const Origin& origin, const ClientQuery& query, uint8_t rcode,
             const ldns_rr_list* answers = nullptr, std::optional<uint32_t> ttl_cap = std::nullopt);

  bool start_attempt(uint32_t id, Pending& p, bool tcp);
  void next_attempt(uint32_t id);
  void on_upstream(uint32_t id, uint32_t events);
  void on_upstream_answer(uint32_t id, Pkt answer);
  void finish(uint32_t id, uint8_t rcode, const ldns_rr_list* answers = nullptr,
              std::optional<uint32_t> ttl_cap = std::nullopt);

  Options options_;
  std::vector<Upstream> upstreams_;
  UniqueFd epoll_, timer_;
  UniqueFd spare_;                   // given up to accept a connection when out of descriptors
  std::vector<UniqueFd> listeners_;  // UDP 4, TCP 4[, UDP 6, TCP 6]
  uint16_t port_ = 0;
  bool ipv6_ = false;
  std::unordered_map<uint32_t, Client> clients_;
  std::unordered_map<uint32_t, Pending> pending_;
  uint32_t next_id_ = 1;
  std::vector<uint8_t> buffer_;
  Stats stats_;
};

}  // namespace agentcage::dns::detail
