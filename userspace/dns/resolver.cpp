// SPDX-License-Identifier: Apache-2.0
// The resolver's event loop: the listening sockets, client connections,
// queries waiting for an upstream and their deadlines (resolver.h).
//
// Choices the header leaves open:
// - An answer over UDP is at most 512 bytes whatever EDNS size the client
//   offered (the answer carries no OPT); a longer one goes without its
//   answer section and with TC set, so the client asks again over TCP.
// - An upstream answer with TC set is asked again once over TCP, to the same
//   server, within the query's time.
// - `pin` is called for every NOERROR and NXDOMAIN upstream answer, also
//   when it holds no address (then with an empty list and ttl 0).
// - The TTLs of the records sent to the client are lowered to the pinned ttl
//   so that no client caches an address longer than its pin.
// - The upstream time (upstream_timeout) is shared among the servers: each
//   gets an equal slice, asked in turn; a server that refuses (ICMP) is left
//   at once for the next.
// - An upstream rcode other than NOERROR or NXDOMAIN answers SERVFAIL.
// - A class other than IN answers REFUSED (counted in `queries` only; not
//   `refused`, which is for names).
// - A name with a '.' or a byte outside '!'..'~' inside a label, or the root,
//   is never allowed (its text would not say which name it is).
// - service() does at most 16 rounds of ready events per call (16 reads
//   each): under a flood the descriptor stays readable and the caller's
//   other descriptors are not starved.
// - Caps: 32 TCP clients (more are accepted and closed at once), 4 KiB per
//   TCP query (more closes the connection), 64 KiB of unread answers per
//   connection (more closes it), 10 s idle per connection.
#include "dns/resolver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "dns/resolver_impl.h"
#include "util/log.h"
#include "util/unique_fd.h"

namespace agentcage::dns {

std::vector<size_t> match(const std::vector<Name>& names, std::string_view qname) {
  std::vector<size_t> out;
  if (!qname.empty() && qname.back() == '.') qname.remove_suffix(1);
  if (qname.empty() || qname.front() == '.' || qname.find("..") != std::string_view::npos) return out;
  const auto equal = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      const auto lo = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; };
      if (lo(a[i]) != lo(b[i])) return false;
    }
    return true;
  };
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i].name;
    if (name.empty()) continue;
    if (!names[i].wildcard) {
      if (equal(qname, name)) out.push_back(i);
    } else if (qname.size() > name.size() + 1 && qname[qname.size() - name.size() - 1] == '.' &&
               equal(qname.substr(qname.size() - name.size()), name)) {
      out.push_back(i);
    }
  }
  return out;
}

namespace detail {

// --- sockets ---------------------------------------------------------------

namespace {

int bind_loopback(int fd, int family, uint16_t port) {
  if (family == AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  a.sin6_addr = in6addr_loopback;
  return ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
}

}  // namespace

Status ResolverImpl::bind_listeners() {
  int last_error = 0;
  for (int attempt = 0; attempt < kBindAttempts; ++attempt) {
    UniqueFd udp4 = make_socket(AF_INET, SOCK_DGRAM);
    if (!udp4) return Error::from_errno("dns: socket");
    if (int err = bind_loopback(udp4.get(), AF_INET, 0)) return Error::from_errno("dns: bind 127.0.0.1", err);
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(udp4.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0)
      return Error::from_errno("dns: getsockname");
    const uint16_t port = ntohs(bound.sin_port);
    UniqueFd tcp4 = make_socket(AF_INET, SOCK_STREAM);
    if (!tcp4) return Error::from_errno("dns: socket");
    if (int err = bind_loopback(tcp4.get(), AF_INET, port)) {
      last_error = err;
      if (err == EADDRINUSE) continue;
      return Error::from_errno("dns: bind 127.0.0.1 (TCP)", err);
    }
    if (::listen(tcp4.get(), kBacklog) != 0) return Error::from_errno("dns: listen");

    // ::1 at the same port, when the host has IPv6 loopback.
    UniqueFd udp6 = make_socket(AF_INET6, SOCK_DGRAM);
    UniqueFd tcp6 = make_socket(AF_INET6, SOCK_STREAM);
    bool v6 = udp6 && tcp6;
    if (v6) {
      int err = bind_loopback(udp6.get(), AF_INET6, port);
      if (!err) err = bind_loopback(tcp6.get(), AF_INET6, port);
      if (!err && ::listen(tcp6.get(), kBacklog) != 0) err = errno;
      if (err == EADDRINUSE && attempt + 1 < kBindAttempts) {
        last_error = err;
        continue;  // another port may have ::1 free too
      }
      v6 = err == 0;
    }
    port_ = port;
    listeners_.push_back(std::move(udp4));
    listeners_.push_back(std::move(tcp4));
    if (v6) {
      listeners_.push_back(std::move(udp6));
      listeners_.push_back(std::move(tcp6));
    }
    ipv6_ = v6;
    return {};
  }
  return Error::from_errno("dns: no port free on 127.0.0.1 for both UDP and TCP", last_error);
}

Status ResolverImpl::setup() {
  epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return Error::from_errno("dns: epoll_create1");
  spare_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  timer_ = UniqueFd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_) return Error::from_errno("dns: timerfd_create");
  if (!watch(timer_.get(), EPOLLIN, tag(Kind::timer, 0))) return Error::from_errno("dns: epoll_ctl");
  if (Status st = bind_listeners(); !st) return st;
  for (size_t i = 0; i < listeners_.size(); ++i) {
    const Kind kind = i % 2 == 0 ? Kind::udp_listener : Kind::tcp_listener;
    if (!watch(listeners_[i].get(), EPOLLIN, tag(kind, static_cast<uint32_t>(i))))
      return Error::from_errno("dns: epoll_ctl");
  }
  return {};
}

// --- the loop ----------------------------------------------------------------

void ResolverImpl::service() {
  try {
    work();
  } catch (const std::exception& e) {
    log::error(std::string("dns: ") + e.what());
  } catch (...) {
    log::error("dns: unexpected failure");
  }
  try {
    arm_timer();
  } catch (...) {
  }
}

void ResolverImpl::work() {
  epoll_event events[64];
  for (int round = 0; round < kRounds; ++round) {
    const int n = ::epoll_wait(epoll_.get(), events, 64, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const auto kind = static_cast<Kind>(events[i].data.u64 >> 32);
      const auto n32 = static_cast<uint32_t>(events[i].data.u64);
      switch (kind) {
        case Kind::udp_listener:
          on_udp(listeners_.at(n32).get());
          break;
        case Kind::tcp_listener:
          on_accept(listeners_.at(n32).get());
          break;
        case Kind::timer: {
          uint64_t expirations = 0;
          [[maybe_unused]] ssize_t r = ::read(timer_.get(), &expirations, sizeof expirations);
          break;
        }
        case Kind::client:
          on_client(n32, events[i].events);
          break;
        case Kind::upstream:
          on_upstream(n32, events[i].events);
          break;
      }
    }
    expire(Clock::now());
    if (n < 64) break;
  }
  expire(Clock::now());
}

void ResolverImpl::expire(Clock::time_point now) {
  std::vector<uint32_t> due;
  for (const auto& [id, p] : pending_)
    if (p.attempt_deadline <= now) due.push_back(id);
  for (uint32_t id : due) next_attempt(id);
  due.clear();
  for (const auto& [id, c] : clients_)
    if (c.last + kClientIdle <= now) due.push_back(id);
  for (uint32_t id : due) close_client(id);
}

void ResolverImpl::arm_timer() {
  std::optional<Clock::time_point> next;
  const auto earlier = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
  for (const auto& [id, p] : pending_) earlier(p.attempt_deadline);
  for (const auto& [id, c] : clients_) earlier(c.last + kClientIdle);
  itimerspec spec{};
  if (next) {
    // steady_clock is CLOCK_MONOTONIC; a deadline already past fires at once.
    const auto ns = std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::nanoseconds>(next->time_since_epoch()).count());
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
  }
  ::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
}

// --- clients -----------------------------------------------------------------

void ResolverImpl::on_udp(int listener) {
  for (int i = 0; i < kReadsPerEvent; ++i) {
    Origin origin;
    origin.listener = listener;
    origin.peer_len = sizeof origin.peer;
    const ssize_t n = ::recvfrom(listener, buffer_.data(), buffer_.size(), MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&origin.peer), &origin.peer_len);
    if (n < 0) return;  // EAGAIN, or an error of a past datagram: nothing to do
    if (static_cast<size_t>(n) > buffer_.size()) {
      ++stats_.malformed;
      continue;
    }
    on_query(std::span<const uint8_t>(buffer_.data(), static_cast<size_t>(n)), origin);
  }
}

void ResolverImpl::on_accept(int listener) {
  for (int i = 0; i < kReadsPerEvent; ++i) {
    UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd && (errno == EMFILE || errno == ENFILE) && spare_) {
      // Out of descriptors: the connection would stay queued and the
      // listener readable for ever. Take it with the spare one and drop it.
      spare_.reset();
      UniqueFd dropped(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
      dropped.reset();
      spare_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      continue;
    }
    if (!fd) return;
    if (clients_.size() >= kMaxClients) continue;  // closed at once: too many connections
    const uint32_t id = next_id_++;
    if (!watch(fd.get(), EPOLLIN, tag(Kind::client, id))) continue;
    Client& c = clients_[id];
    c.fd = std::move(fd);
    c.last = Clock::now();
  }
}

void ResolverImpl::close_client(uint32_t id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  unwatch(it->second.fd.get());
  clients_.erase(it);
}

void ResolverImpl::flush(uint32_t id, Client& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      close_client(id);
      return;
    }
    c.out_sent += static_cast<size_t>(n);
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  }
  const bool want = !c.out.empty();
  if (want != c.writing) {
    c.writing = want;
    rewatch(c.fd.get(), (c.eof ? 0u : uint32_t{EPOLLIN}) | (want ? uint32_t{EPOLLOUT} : 0u),
            tag(Kind::client, id));
  }
  if (c.eof && c.out.empty() && c.pending == 0) close_client(id);
}

void ResolverImpl::on_client(uint32_t id, uint32_t events) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (events & (EPOLLHUP | EPOLLERR)) {
    close_client(id);  // gone both ways: no answer can reach it
    return;
  }
  if (events & EPOLLOUT) {
    c.last = Clock::now();
    flush(id, c);
    if (!clients_.count(id)) return;
  }
  if (!(events & EPOLLIN) || c.eof) return;
  for (int i = 0; i < kReadsPerEvent && !c.eof; ++i) {
    uint8_t chunk[4096];
    const ssize_t n = ::recv(c.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      close_client(id);
      return;
    }
    if (n == 0) {
      // The client is done asking: answer what it asked, then close.
      c.eof = true;
      rewatch(c.fd.get(), c.writing ? uint32_t{EPOLLOUT} : 0u, tag(Kind::client, id));
      break;
    }
    c.last = Clock::now();
    c.in.insert(c.in.end(), chunk, chunk + n);
    size_t used = 0;
    while (c.in.size() - used >= 2) {
      const size_t len = read16(c.in.data() + used);
      if (len > kMaxTcpQuery) {
        ++stats_.malformed;
        close_client(id);
        return;
      }
      if (c.in.size() - used < 2 + len) break;
      Origin origin;
      origin.tcp = true;
      origin.client = id;
      // on_query may answer at once, appending to c.out: it does not touch c.in.
      const std::vector<uint8_t> frame(c.in.begin() + static_cast<ptrdiff_t>(used + 2),
                                       c.in.begin() + static_cast<ptrdiff_t>(used + 2 + len));
      used += 2 + len;
      on_query(frame, origin);
      if (!clients_.count(id)) return;  // closed while answering (its buffer full)
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(used));
  }
  if (c.eof && c.out.empty() && c.pending == 0) close_client(id);
}

void ResolverImpl::send_answer(const Origin& origin, const std::vector<uint8_t>& wire) {
  if (wire.empty()) return;
  if (!origin.tcp) {
    ::sendto(origin.listener, wire.data(), wire.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
             reinterpret_cast<const sockaddr*>(&origin.peer), origin.peer_len);
    return;
  }
  auto it = clients_.find(origin.client);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (c.out.size() + 2 + wire.size() > kMaxClientOut) {
    close_client(origin.client);  // it does not read its answers
    return;
  }
  c.out.push_back(static_cast<uint8_t>(wire.size() >> 8));
  c.out.push_back(static_cast<uint8_t>(wire.size() & 0xff));
  c.out.insert(c.out.end(), wire.begin(), wire.end());
  flush(origin.client, c);
}

void ResolverImpl::reply(const Origin& origin, const ClientQuery& query, uint8_t rcode,
                         const ldns_rr_list* answers, std::optional<uint32_t> ttl_cap) {
  const std::vector<uint8_t> wire =
      detail::answer(query, rcode, answers, origin.tcp ? kTcpLimit : kUdpLimit, ttl_cap);
  send_answer(origin, wire);
}

// --- queries -----------------------------------------------------------------

void ResolverImpl::on_query(std::span<const uint8_t> wire, const Origin& origin) {
  if (wire.size() < 12 || (wire[2] & 0x80)) {
    ++stats_.malformed;  // not a DNS message, or an answer: no reply
    return;
  }
  if (wire.size() > kMaxQueryBytes || read16(&wire[4]) != 1 || read16(&wire[6]) != 0 ||
      read16(&wire[8]) != 0 || read16(&wire[10]) > 1) {
    ++stats_.malformed;
    ClientQuery query;
    query.id = read16(&wire[0]);
    query.rd = (wire[2] & 0x01) != 0;
    query.opcode = detail::opcode(wire);
    reply(origin, query, LDNS_RCODE_FORMERR);
    return;
  }
  Pkt pkt = detail::parse(wire);
  if (!pkt || ldns().pkt_qr(pkt.get())) {
    ++stats_.malformed;  // not a DNS message, or an answer: no reply
    return;
  }
  ClientQuery query;
  query.id = ldns().pkt_id(pkt.get());
  query.rd = ldns().pkt_rd(pkt.get());
  query.opcode = detail::opcode(wire);
  if (query.opcode != 0) {
    ++stats_.malformed;
    reply(origin, query, LDNS_RCODE_NOTIMPL);
    return;
  }
  const ldns_rr_list* questions = ldns().pkt_question(pkt.get());
  if (ldns().pkt_qdcount(pkt.get()) != 1 || !questions || ldns().rr_list_rr_count(questions) != 1) {
    ++stats_.malformed;
    reply(origin, query, LDNS_RCODE_FORMERR);
    return;
  }
  const ldns_rr* question = ldns().rr_list_rr(questions, 0);
  query.question = Rr(ldns().rr_clone(question));
  if (!query.question) return;
  ++stats_.queries;
  const uint16_t qtype = static_cast<uint16_t>(ldns().rr_get_type(question));
  if (ldns().rr_get_class(question) != LDNS_RR_CLASS_IN) {
    reply(origin, query, LDNS_RCODE_REFUSED);
    return;
  }
  const detail::NameText name = detail::name_text(ldns().rr_owner(question));
  std::vector<size_t> rules = name.clean ? match(options_.names, name.text) : std::vector<size_t>{};
  std::string vetoed;
  if (options_.veto)
    std::erase_if(rules, [&](size_t i) {
      if (!options_.names[i].wildcard) return false;
      std::string why;
      try {
        why = options_.veto(name.text, options_.names[i]);
      } catch (...) {
        why = "its check failed";
      }
      if (!why.empty() && vetoed.empty()) vetoed = why;
      return !why.empty();
    });
  if (rules.empty()) {
    ++stats_.refused;
    if (options_.refused) {
      try {
        options_.refused(Refused{name.shown, qtype, vetoed.empty() ? "not allowed by the policy" : vetoed,
                                 !vetoed.empty()});
      } catch (...) {
      }
    }
    reply(origin, query, LDNS_RCODE_NXDOMAIN);
    return;
  }
  if (qtype != LDNS_RR_TYPE_A && qtype != LDNS_RR_TYPE_AAAA) {
    ++stats_.other_types;
    reply(origin, query, LDNS_RCODE_NOERROR);
    return;
  }
  if (pending_.size() >= options_.max_pending) {
    ++stats_.failed;
    reply(origin, query, LDNS_RCODE_SERVFAIL);
    return;
  }
  Rdf qname(ldns().rdf_clone(ldns().rr_owner(question)));
  if (!qname) {
    ++stats_.failed;
    reply(origin, query, LDNS_RCODE_SERVFAIL);
    return;
  }
  ldns().dname2canonical(qname.get());

  const uint32_t id = next_id_++;
  Pending& p = pending_[id];
  p.origin = origin;
  p.query = std::move(query);
  p.qname = std::move(qname);
  p.name = name.text;
  p.qtype = qtype;
  p.rules = std::move(rules);
  p.deadline = Clock::now() + options_.upstream_timeout;
  if (auto c = clients_.find(origin.client); origin.tcp && c != clients_.end()) ++c->second.pending;
  ++stats_.forwarded;
  if (!start_attempt(id, p, false)) next_attempt(id);
}

}  // namespace detail

Result<std::unique_ptr<Resolver>> Resolver::open(Options options) {
  if (Status st = load_ldns(); !st) return st.error();
  auto upstreams = detail::read_upstreams(options.resolv_conf);
  if (!upstreams) return upstreams.error();
  auto resolver = std::make_unique<detail::ResolverImpl>(std::move(options), std::move(*upstreams));
  if (Status st = resolver->setup(); !st) return st.error();
  return std::unique_ptr<Resolver>(std::move(resolver));
}

}  // namespace agentcage::dns
