// SPDX-License-Identifier: Apache-2.0
// Asking the upstream (a fresh query over UDP, again over TCP when the answer
// is truncated, the next server on a timeout) and answering the client with
// what it said, after the pin (resolver.h).
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <string>
#include <utility>

#include "dns/resolver_impl.h"

namespace agentcage::dns::detail {

bool ResolverImpl::start_attempt(uint32_t id, Pending& p, bool tcp) {
  if (p.fd) unwatch(p.fd.get());
  p.fd.reset();
  p.tcp = tcp;
  p.connected = false;
  p.sent = 0;
  p.in.clear();
  const auto now = Clock::now();
  const size_t left = upstreams_.size() - p.upstream;
  const auto remaining = std::max(p.deadline - now, Clock::duration::zero());
  p.attempt_deadline = tcp ? p.deadline : now + remaining / static_cast<Clock::rep>(left);
  const std::optional<uint16_t> qid = random_id();
  if (!qid) return false;
  p.id = *qid;
  std::vector<uint8_t> query = detail::upstream_query(p.qname.get(), p.qtype, p.id);
  if (query.empty()) return false;
  if (tcp) {
    query.insert(query.begin(),
                 {static_cast<uint8_t>(query.size() >> 8), static_cast<uint8_t>(query.size())});
  }
  p.wire = std::move(query);
  const Upstream& up = upstreams_[p.upstream];
  p.fd = make_socket(up.addr.ss_family, tcp ? SOCK_STREAM : SOCK_DGRAM);
  if (!p.fd) return false;
  // Connected: the kernel drops datagrams from any other source.
  if (::connect(p.fd.get(), reinterpret_cast<const sockaddr*>(&up.addr), up.len) != 0 && errno != EINPROGRESS)
    return false;
  if (!tcp) {
    if (::send(p.fd.get(), p.wire.data(), p.wire.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
        static_cast<ssize_t>(p.wire.size()))
      return false;
    p.connected = true;
    p.sent = p.wire.size();
    return watch(p.fd.get(), EPOLLIN, tag(Kind::upstream, id));
  }
  return watch(p.fd.get(), EPOLLOUT, tag(Kind::upstream, id));
}

void ResolverImpl::next_attempt(uint32_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  while (!p.tcp && p.upstream + 1 < upstreams_.size() && Clock::now() < p.deadline) {
    ++p.upstream;
    if (start_attempt(id, p, false)) return;
  }
  ++stats_.failed;
  finish(id, LDNS_RCODE_SERVFAIL);
}

void ResolverImpl::on_upstream(uint32_t id, uint32_t events) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (!p.tcp) {
    for (int i = 0; i < kReadsPerEvent; ++i) {
      const ssize_t n = ::recv(p.fd.get(), buffer_.data(), buffer_.size(), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0) {
        next_attempt(id);  // refused (ICMP) or unreachable: the next server
        return;
      }
      const std::span<const uint8_t> wire(buffer_.data(), static_cast<size_t>(n));
      Pkt answer = detail::opcode(wire) == 0 ? detail::parse(wire) : nullptr;
      if (!answer || !detail::answers_query(answer.get(), p.qname.get(), p.qtype, p.id)) continue;
      on_upstream_answer(id, std::move(answer));
      return;
    }
    return;
  }
  if (!p.connected) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      next_attempt(id);
      return;
    }
    if (!(events & EPOLLOUT)) return;
    p.connected = true;
  }
  if (p.sent < p.wire.size()) {
    const ssize_t n =
        ::send(p.fd.get(), p.wire.data() + p.sent, p.wire.size() - p.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
      next_attempt(id);
      return;
    }
    p.sent += static_cast<size_t>(n);
    if (p.sent == p.wire.size()) rewatch(p.fd.get(), EPOLLIN, tag(Kind::upstream, id));
    return;
  }
  for (int i = 0; i < kReadsPerEvent; ++i) {
    const size_t want = p.in.size() < 2 ? 2 : 2 + static_cast<size_t>(read16(p.in.data()));
    const size_t have = p.in.size();
    p.in.resize(want);
    const ssize_t n = ::recv(p.fd.get(), p.in.data() + have, want - have, MSG_DONTWAIT);
    if (n < 0) p.in.resize(have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      next_attempt(id);  // closed before the whole answer
      return;
    }
    p.in.resize(have + static_cast<size_t>(n));
    if (p.in.size() < 2 || p.in.size() < 2 + static_cast<size_t>(read16(p.in.data()))) continue;
    const std::span<const uint8_t> wire(p.in.data() + 2, p.in.size() - 2);
    Pkt answer = detail::opcode(wire) == 0 ? detail::parse(wire) : nullptr;
    if (!answer || !detail::answers_query(answer.get(), p.qname.get(), p.qtype, p.id)) {
      next_attempt(id);  // a stream has no other answer to wait for
      return;
    }
    on_upstream_answer(id, std::move(answer));
    return;
  }
}

void ResolverImpl::on_upstream_answer(uint32_t id, Pkt answer) {
  Pending& p = pending_.at(id);
  if (ldns().pkt_tc(answer.get()) && !p.tcp) {
    if (!start_attempt(id, p, true)) next_attempt(id);
    return;
  }
  const uint8_t rcode = static_cast<uint8_t>(ldns().pkt_get_rcode(answer.get()));
  if (rcode != LDNS_RCODE_NOERROR && rcode != LDNS_RCODE_NXDOMAIN) {
    ++stats_.failed;
    finish(id, LDNS_RCODE_SERVFAIL);
    return;
  }
  const ldns_rr_list* answers = ldns().pkt_answer(answer.get());
  detail::Addresses found = detail::addresses(answers);
  Resolved resolved;
  resolved.name = p.name;
  resolved.qtype = p.qtype;
  resolved.rules = p.rules;
  resolved.addresses = std::move(found.list);
  if (found.min_ttl) {
    auto ttl = std::chrono::seconds(*found.min_ttl);
    ttl = std::max(ttl, options_.min_ttl);
    ttl = std::min(ttl, options_.max_ttl);
    resolved.ttl = ttl;
  }
  Status pinned;
  if (options_.pin) {
    try {
      pinned = options_.pin(resolved);
    } catch (const std::exception& e) {
      pinned = Error{std::string("dns: pin: ") + e.what(), 0};
    } catch (...) {
      pinned = Error{"dns: pin failed", 0};
    }
  }
  if (!pinned) {
    // Not logged here: a run could flood the log; the caller's pin knows its error.
    ++stats_.failed;
    finish(id, LDNS_RCODE_SERVFAIL);
    return;
  }
  std::optional<uint32_t> cap;
  if (found.min_ttl) cap = static_cast<uint32_t>(resolved.ttl.count());
  finish(id, rcode, answers, cap);
}

void ResolverImpl::finish(uint32_t id, uint8_t rcode, const ldns_rr_list* answers,
                          std::optional<uint32_t> ttl_cap) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.fd) unwatch(p.fd.get());
  if (p.origin.tcp) {
    auto c = clients_.find(p.origin.client);
    if (c == clients_.end()) return;
    --c->second.pending;
    reply(p.origin, p.query, rcode, answers, ttl_cap);
    c = clients_.find(p.origin.client);
    if (c != clients_.end() && c->second.eof && c->second.out.empty() && c->second.pending == 0)
      close_client(p.origin.client);
    return;
  }
  reply(p.origin, p.query, rcode, answers, ttl_cap);
}

}  // namespace agentcage::dns::detail
