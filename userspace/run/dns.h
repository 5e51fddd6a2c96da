// SPDX-License-Identifier: Apache-2.0
// A run's DNS, for a policy with domain rules: the run's own resolver
// (dns/resolver.h), serviced by the runner's wait loop, whose answers for
// allowed names pin their addresses for this run's scope only (ac_pins,
// through the Enforcer) with the ports and protocols of the rules that
// allowed the name. Names the policy does not allow are counted for the
// result's denials. The resolver lives in the runner: `agentcage run`, and
// the runner the daemon starts for a run through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "dns/resolver.h"
#include "policy/model.h"
#include "util/result.h"

namespace agentcage::run {

// What the result says of the run's DNS ("dns", and "denials.dns").
struct DnsReport {
  dns::Stats stats;
  uint64_t pinned = 0;  // pins made (address x port x protocol)
  uint64_t pin_errors = 0;
  uint64_t not_pinned = 0;  // addresses of answers that are never pinned (this host, link-local, multicast)
  uint64_t refused_total = 0;
  std::map<std::string, uint64_t> refused_by_name;  // the first kNames distinct names
  // Why a name a wildcard matched was refused after all (its veto), for the
  // first kNames such names.
  std::map<std::string, std::string> refused_why;
  static constexpr size_t kNames = 256;
};

// Pins one run may hold at once (address x port x protocol), of the host's
// AC_MAX_PINS: more is refused (SERVFAIL) rather than crowding out others.
// The daemon's default max_runs (32) at this limit fill the map exactly, so
// its clients' runs cannot starve each other; a daemon allowed more runs
// warns at its start (a run that resolves hundreds of names needs a few
// hundred pins).
inline constexpr size_t kMaxPinsPerRun = 2048;

// A socket made outside the run's cgroup is not redirected to its resolver
// (the cgroup's programs run for the sockets made in it), so a run with
// domain rules refuses an IPv4 or IPv6 socket among its standard streams
// (fds 0..2): its DNS queries would reach the network as they are.
Status refuse_inet_stdio();

class RunDns {
 public:
  // Opens the resolver (binding its sockets, reading `resolv_conf`) for the
  // scope `scope_id` about to be confined; the Enforcer must outlive this.
  static Result<std::unique_ptr<RunDns>> open(const policy::Policy& policy, bpf::Enforcer& enforcer,
                                              uint64_t scope_id, const std::string& resolv_conf);

  uint16_t port() const { return resolver_->port(); }
  bool has_ipv6() const { return resolver_->has_ipv6(); }
  // For poll(2) in the wait loop.
  int poll_fd() const { return resolver_->fd(); }
  // Answers what is ready and removes the pins that expired.
  void service();
  DnsReport report() const;

 private:
  // What one domain rule lets a pinned address be reached on.
  struct Reach {
    std::vector<uint16_t> ports;  // empty: every port (pinned as port 0)
    bool tcp = false, udp = false;
  };
  RunDns(bpf::Enforcer& enforcer, uint64_t scope_id, std::vector<Reach> reach)
      : enforcer_(enforcer), scope_id_(scope_id), reach_(std::move(reach)) {}
  Status pin(const dns::Resolved& resolved);
  void refused(const dns::Refused& refused);
  void expire();

  bpf::Enforcer& enforcer_;
  uint64_t scope_id_;
  std::vector<Reach> reach_;  // by the resolver's name index
  std::unique_ptr<dns::Resolver> resolver_;
  // Every pin this run holds, by key bytes, with its expiry (boot time ns).
  std::map<std::string, std::pair<ac_pin_key, uint64_t>> pins_;
  DnsReport report_;
};

}  // namespace agentcage::run
