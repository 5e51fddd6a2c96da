// SPDX-License-Identifier: Apache-2.0
#include "run/dns.h"

#include <time.h>

#include <cstring>

namespace agentcage::run {
namespace {

uint64_t boot_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string key_bytes(const ac_pin_key& k) {
  return std::string(reinterpret_cast<const char*>(&k), sizeof k);
}

}  // namespace

Result<std::unique_ptr<RunDns>> RunDns::open(const policy::Policy& policy, bpf::Enforcer& enforcer,
                                             uint64_t scope_id, const std::string& resolv_conf) {
  dns::Options options;
  options.resolv_conf = resolv_conf;
  std::vector<Reach> reach;
  for (const auto& r : policy.network_allow) {
    if (r.kind != policy::NetRule::Kind::domain) continue;
    options.names.push_back(dns::Name{r.domain, r.wildcard});
    Reach each;
    for (const auto& range : r.ports) each.ports.push_back(range.first);  // single ports (the parser's rule)
    each.tcp = r.protocol != policy::Protocol::udp;
    each.udp = r.protocol != policy::Protocol::tcp;
    reach.push_back(std::move(each));
  }
  std::unique_ptr<RunDns> self(new RunDns(enforcer, scope_id, std::move(reach)));
  RunDns* raw = self.get();
  options.pin = [raw](const dns::Resolved& r) { return raw->pin(r); };
  options.refused = [raw](const dns::Refused& r) { raw->refused(r); };
  auto resolver = dns::Resolver::open(std::move(options));
  if (!resolver) return resolver.error().wrap("dns: the run's resolver");
  self->resolver_ = std::move(*resolver);
  return self;
}

// Each address, for each rule that allowed the name, on each of its ports
// and protocols: pinned until the answer's TTL runs out. All or nothing:
// an answer is released only with every pin it needs in place.
Status RunDns::pin(const dns::Resolved& resolved) {
  const uint64_t expires = boot_ns() + static_cast<uint64_t>(resolved.ttl.count()) * 1000000000ull;
  std::vector<ac_pin_key> keys;
  for (size_t index : resolved.rules) {
    if (index >= reach_.size()) continue;
    const Reach& r = reach_[index];
    std::vector<uint16_t> ports = r.ports.empty() ? std::vector<uint16_t>{0} : r.ports;
    for (const auto& a : resolved.addresses)
      for (uint16_t port : ports)
        for (uint8_t bit : {uint8_t{AC_PROTO_TCP}, uint8_t{AC_PROTO_UDP}}) {
          if ((bit == AC_PROTO_TCP && !r.tcp) || (bit == AC_PROTO_UDP && !r.udp)) continue;
          ac_pin_key k{};
          k.scope_id = scope_id_;
          std::memcpy(k.addr, a.addr.data(), sizeof k.addr);
          k.port = port;
          k.proto_bit = bit;
          keys.push_back(k);
        }
  }
  for (const auto& k : keys) {
    // A pin held longer already stays as long.
    auto it = pins_.find(key_bytes(k));
    const uint64_t until = it != pins_.end() ? std::max(it->second.second, expires) : expires;
    if (Status st = enforcer_.put_pin(k, until); !st) {
      ++report_.pin_errors;
      return st;
    }
    pins_[key_bytes(k)] = {k, until};
    ++report_.pinned;
  }
  return {};
}

void RunDns::refused(const dns::Refused& r) {
  ++report_.refused_total;
  auto it = report_.refused_by_name.find(r.name);
  if (it != report_.refused_by_name.end()) {
    ++it->second;
  } else if (report_.refused_by_name.size() < DnsReport::kNames) {
    report_.refused_by_name.emplace(r.name, 1);
  }
}

void RunDns::expire() {
  const uint64_t now = boot_ns();
  for (auto it = pins_.begin(); it != pins_.end();) {
    if (it->second.second <= now) {
      enforcer_.delete_pin(it->second.first);
      it = pins_.erase(it);
    } else {
      ++it;
    }
  }
}

void RunDns::service() {
  resolver_->service();
  expire();
}

DnsReport RunDns::report() const {
  DnsReport r = report_;
  r.stats = resolver_->stats();
  return r;
}

nlohmann::json dns_json(const DnsReport& r) {
  return {{"queries", r.stats.queries},       {"forwarded", r.stats.forwarded},
          {"refused", r.stats.refused},       {"failed", r.stats.failed},
          {"malformed", r.stats.malformed},   {"other_types", r.stats.other_types},
          {"pinned", r.pinned},               {"pin_errors", r.pin_errors}};
}

}  // namespace agentcage::run
