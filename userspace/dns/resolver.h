// SPDX-License-Identifier: Apache-2.0
// A run's own DNS resolver: every DNS query a scoped process makes is sent
// here by the kernel (the scope's cgroup redirects port 53), answered only
// for the names the run's policy allows, and forwarded upstream only for
// those. The addresses of an allowed answer are handed to `pin` before the
// answer is released, so the first connect never races the pin.
//
// Messages are parsed and built with ldns; no hand-written DNS parser. The
// upstream never sees a query for a name the policy does not allow, nor any
// byte of the client's query but its name and type: each forwarded query is
// built afresh (new id, class IN, RD, no EDNS options of the client's).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage::dns {

// One domain name of a policy: `api.example.com` (that name only) or, with
// `wildcard`, `*.pkg.example.org` (every name strictly under pkg.example.org,
// not pkg.example.org itself). `name` is lower-case ASCII without the
// leading "*." or a trailing dot, as the policy parser validated it.
struct Name {
  std::string name;
  bool wildcard = false;
};

// The indexes of the entries of `names` that allow `qname` (compared without
// regard to ASCII case; one trailing dot ignored), in order. Empty: the name
// is not allowed.
std::vector<size_t> match(const std::vector<Name>& names, std::string_view qname);

// An address of an answer: AF_INET or AF_INET6; IPv4 as ::ffff:a.b.c.d, as
// the kernel's rules see it.
struct Address {
  int family = 0;
  std::array<uint8_t, 16> addr{};
};

// An allowed name's answer, about to be released to the client.
struct Resolved {
  std::string name;               // the question's name, lower-case, no trailing dot
  uint16_t qtype = 0;             // A (1) or AAAA (28)
  std::vector<size_t> rules;      // match(names, name)
  std::vector<Address> addresses; // every A and AAAA record of the answer section, each once
  std::chrono::seconds ttl{0};    // their smallest TTL, clamped to [min_ttl, max_ttl]
};

// A query that was not forwarded.
struct Refused {
  std::string name;    // as asked, lower-case, no trailing dot; printable ASCII only ('?' for the rest)
  uint16_t qtype = 0;
  std::string reason;   // "not allowed by the policy", or the veto's (Options::veto)
  bool vetoed = false;  // a wildcard matched it, and its veto said no
};

struct Options {
  std::vector<Name> names;
  // Upstream servers: the `nameserver` lines of this file (read once, at open).
  std::string resolv_conf = "/etc/resolv.conf";
  std::chrono::milliseconds upstream_timeout{3000};
  std::chrono::seconds min_ttl{5};
  std::chrono::seconds max_ttl{3600};
  // Queries waiting for the upstream at once; more are answered SERVFAIL.
  size_t max_pending = 64;
  // Called before an allowed answer is sent. An error answers SERVFAIL.
  std::function<Status(const Resolved&)> pin;
  // Called for each query that is answered without asking the upstream for a
  // name the policy does not allow (NXDOMAIN). Not for malformed messages.
  std::function<void(const Refused&)> refused;
  // Called for a name that a wildcard entry `rule` matches: a reason not to
  // allow it by that entry after all ("" : allowed). An exception is a
  // reason too.
  std::function<std::string(std::string_view qname, const Name& rule)> veto;
};

struct Stats {
  uint64_t queries = 0;    // well-formed queries received (UDP and TCP)
  uint64_t forwarded = 0;  // sent upstream
  uint64_t refused = 0;    // answered NXDOMAIN, never forwarded
  uint64_t failed = 0;     // answered SERVFAIL (upstream timeout or error, pin error, too many pending)
  uint64_t malformed = 0;  // dropped or answered FORMERR
  uint64_t other_types = 0;  // allowed name, a type other than A/AAAA: empty NOERROR, not forwarded
};

class Resolver {
 public:
  // Binds a UDP and a TCP socket on 127.0.0.1 and, when the host has it, on
  // ::1, all four at one port the kernel picks, and reads the upstreams.
  // Fails when no upstream is configured or a socket cannot be had.
  static Result<std::unique_ptr<Resolver>> open(Options options);
  virtual ~Resolver() = default;

  // The port on 127.0.0.1 (and on ::1 when has_ipv6()).
  virtual uint16_t port() const = 0;
  virtual bool has_ipv6() const = 0;
  // Readable when service() has work to do (an epoll descriptor holding the
  // sockets and the timeout timer): poll it with the caller's other fds.
  virtual int fd() const = 0;
  // Does all the work that is ready (queries, upstream answers, timeouts);
  // never blocks.
  virtual void service() = 0;
  virtual const Stats& stats() const = 0;
};

}  // namespace agentcage::dns
