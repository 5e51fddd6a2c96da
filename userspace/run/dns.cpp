// SPDX-License-Identifier: Apache-2.0
#include "run/dns.h"

#include <time.h>

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string_view>

#include "policy/public_suffix.h"

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

// IPv4 addresses an answer never pins: they are not a remote host's. This
// host itself (0.0.0.0/8: 0.0.0.0 is what filtering resolvers answer for a
// blocked name, and a connect to it reaches the host; 127.0.0.0/8),
// link-local (cloud metadata services at 169.254.169.254), the cloud metadata
// services elsewhere (Alibaba's 100.100.100.200, Azure's WireServer
// 168.63.129.16), multicast and broadcast.
bool never_pinned_v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  const auto is = [&](uint8_t w, uint8_t x, uint8_t y, uint8_t z) {
    return a == w && b == x && c == y && d == z;
  };
  return a == 0 || a == 127 || (a == 169 && b == 254) || a >= 224 || is(100, 100, 100, 200) ||
         is(168, 63, 129, 16);
}

// The IPv4 services of a host itself that an address translated for it
// would reach: loopback, link-local (the metadata service at
// 169.254.169.254), Alibaba's and Azure's metadata services.
bool hosts_own_v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return a == 127 || (a == 169 && b == 254) || (a == 100 && b == 100 && c == 100 && d == 200) ||
         (a == 168 && b == 63 && c == 129 && d == 16);
}

// An IPv6 address that carries an IPv4 one to a NAT64 gateway (DNS64
// networks, AWS's IPv6-only subnets), which turns 64:ff9b::a9fe:a9fe into
// 169.254.169.254. The well-known prefix 64:ff9b::/96 (RFC 6052) carries
// only global addresses, so the whole IPv4 rule applies. Under the
// local-use 64:ff9b:1::/48 (RFC 8215) the network picks the prefix length,
// so each place RFC 6052 may put the address is read (prefixes of 48, 56 and
// 64 bits with their zero u-octet and zero suffix, and 96 bits) and judged
// by the narrower hosts_own_v4: a byte of an ordinary address read at the
// wrong place must not make it unreachable. A NAT64 prefix of the network's
// own choosing cannot be told from any other address (docs/policy.md).
bool carries_never_pinned_v4(const std::array<uint8_t, 16>& b) {
  static constexpr std::array<uint8_t, 12> kWellKnown{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(kWellKnown.begin(), kWellKnown.end(), b.begin()))
    return never_pinned_v4(b[12], b[13], b[14], b[15]);
  static constexpr std::array<uint8_t, 6> kLocalUse{0, 0x64, 0xff, 0x9b, 0, 1};
  if (!std::equal(kLocalUse.begin(), kLocalUse.end(), b.begin())) return false;
  const auto zero_from = [&](size_t i) {
    return std::all_of(b.begin() + static_cast<long>(i), b.end(), [](uint8_t x) { return x == 0; });
  };
  const bool u_zero = b[8] == 0;
  return (u_zero && zero_from(11) && hosts_own_v4(b[6], b[7], b[9], b[10])) ||    // /48
         (u_zero && zero_from(12) && hosts_own_v4(b[7], b[9], b[10], b[11])) ||   // /56
         (u_zero && zero_from(13) && hosts_own_v4(b[9], b[10], b[11], b[12])) ||  // /64
         hosts_own_v4(b[12], b[13], b[14], b[15]);                                // /96
}

// Addresses an answer never pins: the IPv4 ones above, as themselves or
// carried in IPv6 (above); IPv6's own unspecified, loopback, link-local and
// multicast addresses; all of ::/96 (::, ::1 and the deprecated
// IPv4-compatible addresses, which a host may tunnel to the IPv4 address
// they carry); AWS's fd00:ec2::/64 (the instance metadata at ::254,
// EKS Pod Identity's credentials at ::23, its DNS and NTP); and an IPv4
// address dressed as IPv6 in an AAAA record (::ffff:0:0/96, and SIIT's
// ::ffff:0:0:0/96).
bool never_pinned(const dns::Address& a) {
  const auto& b = a.addr;
  const bool mapped = std::all_of(b.begin(), b.begin() + 10, [](uint8_t x) { return x == 0; }) &&
                      b[10] == 0xff && b[11] == 0xff;
  if (a.family == AF_INET) return !mapped || never_pinned_v4(b[12], b[13], b[14], b[15]);
  const bool translated = std::all_of(b.begin(), b.begin() + 8, [](uint8_t x) { return x == 0; }) &&
                          b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0;
  if (mapped || translated) return true;
  static constexpr std::array<uint8_t, 8> kAwsLocal6{0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0};  // fd00:ec2::/64
  if (std::equal(kAwsLocal6.begin(), kAwsLocal6.end(), b.begin())) return true;
  const bool compatible = std::all_of(b.begin(), b.begin() + 12, [](uint8_t x) { return x == 0; });
  return compatible || carries_never_pinned_v4(b) ||  // ::/96; NAT64
         (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) ||   // fe80::/10
         b[0] == 0xff;                                // ff00::/8
}

}  // namespace

Status refuse_inet_stdio() {
  for (int fd = 0; fd <= 2; ++fd) {
    int domain = 0;
    socklen_t len = sizeof domain;
    if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
        (domain == AF_INET || domain == AF_INET6))
      return Error{"descriptor " + std::to_string(fd) +
                       " is an IPv4/IPv6 socket; a run whose policy allows destinations by name takes no "
                       "network socket as a standard stream (its DNS would not go to the run's resolver): "
                       "pass a pipe, a file or a unix socket",
                   EINVAL};
  }
  return {};
}

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
  // A wildcard over a registrant's domain does not reach the registrants of
  // its operator's public suffixes below it (policy/public_suffix.h).
  options.veto = [](std::string_view qname, const dns::Name& rule) -> std::string {
    auto below = policy::public_suffix_below(qname, rule.name);
    if (!below) return "its public suffix could not be checked: " + below.error().message;
    if (below->empty()) return "";
    return "under the public suffix " + *below + " (its registrants are not *." + rule.name + "'s owner)";
  };
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
  std::vector<dns::Address> addresses;
  for (const auto& a : resolved.addresses) {
    if (never_pinned(a))
      ++report_.not_pinned;
    else
      addresses.push_back(a);
  }
  std::vector<ac_pin_key> keys;
  for (size_t index : resolved.rules) {
    if (index >= reach_.size()) continue;
    const Reach& r = reach_[index];
    std::vector<uint16_t> ports = r.ports.empty() ? std::vector<uint16_t>{0} : r.ports;
    for (const auto& a : addresses)
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
  // One run may not fill the host's pin map for every other run.
  size_t fresh = 0;
  for (const auto& k : keys) fresh += !pins_.count(key_bytes(k));
  if (pins_.size() + fresh > kMaxPinsPerRun) {
    ++report_.pin_errors;
    return Error{"dns: the run holds " + std::to_string(pins_.size()) + " pins; " + std::to_string(fresh) +
                     " more would pass its limit of " + std::to_string(kMaxPinsPerRun),
                 E2BIG};
  }
  // All or nothing: what this answer wrote is undone when a pin fails.
  std::vector<std::pair<ac_pin_key, std::optional<uint64_t>>> written;
  for (const auto& k : keys) {
    // A pin held longer already stays as long.
    auto it = pins_.find(key_bytes(k));
    const std::optional<uint64_t> before =
        it != pins_.end() ? std::optional<uint64_t>(it->second.second) : std::nullopt;
    const uint64_t until = before ? std::max(*before, expires) : expires;
    if (Status st = enforcer_.put_pin(k, until); !st) {
      ++report_.pin_errors;
      for (const auto& [key, old] : written) {
        if (old) {
          static_cast<void>(enforcer_.put_pin(key, *old));
          pins_[key_bytes(key)] = {key, *old};
        } else {
          enforcer_.delete_pin(key);
          pins_.erase(key_bytes(key));
        }
      }
      return st;
    }
    written.emplace_back(k, before);
    pins_[key_bytes(k)] = {k, until};
  }
  report_.pinned += keys.size();  // counted once the whole answer is pinned
  return {};
}

void RunDns::refused(const dns::Refused& r) {
  ++report_.refused_total;
  if (r.vetoed && report_.refused_why.size() < DnsReport::kNames)
    report_.refused_why.emplace(r.name, r.reason);
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

}  // namespace agentcage::run
