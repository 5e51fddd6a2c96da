// SPDX-License-Identifier: Apache-2.0
// What the policy compiler (compile.h) produces and a policy slot holds in
// the kernel: path rules, network rules and flags, ready to become map keys
// (keys.h).
#pragma once

#include <agentcage/abi.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace agentcage::bpf {

// Where a path rule applies.
enum class RuleSpace : uint32_t {
  absolute = 0,                          // host paths
  workspace = AC_RULES_NS_WORKSPACE,     // relative to each run's workspace
  abstract_unix = AC_RULES_NS_ABSTRACT,  // abstract unix socket names (exact)
  ancestor = AC_RULES_NS_ANCESTOR,       // directories leading to absolute rules (exact)
};

// One compiled path rule: a normalised path ("/" or no trailing slash;
// workspace rules are "/" for the workspace itself or "/sub/dir"; abstract
// names are the raw name) and the AC_ACCESS_* bits it grants, after the
// compiler merged in what enclosing rules grant (see compile.h).
struct PathRule {
  std::string path;
  uint32_t access = 0;
  RuleSpace space = RuleSpace::absolute;
};

// Which rules a network entry belongs to.
enum class NetSpace : uint32_t {
  allow = 0,                    // network.allow: destinations
  listen = AC_RULES_NS_LISTEN,  // network.listen: local addresses to bind and listen on
};

// One entry of the network LPM map: an IPv6 network (IPv4 as
// ::ffff:a.b.c.d), its prefix length in IPv6 bits, and the merged port
// ranges of every network.allow CIDR that covers it. This is not a
// policy::NetRule (one network.allow entry as written): a unix socket entry
// compiles to a PathRule, and several CIDR entries for one network compile
// to one CompiledNetRule.
struct CompiledNetRule {
  std::array<uint8_t, 16> addr{};
  uint8_t prefix_len = 0;
  std::vector<ac_port_range> ranges;
  NetSpace space = NetSpace::allow;
};

// One name rule of files.deny: a path is denied when one of its components
// is `text` (exact, from a NAME pattern) or ends in `text` (suffix, ".EXT"
// from a *.EXT pattern). Entries of the path rule map in their own
// namespace (AC_RULES_NS_NAME, keys.h).
struct NameRule {
  enum class Kind : uint8_t { exact = AC_NAME_EXACT, suffix = AC_NAME_SUFFIX };
  Kind kind = Kind::exact;
  std::string text;
  bool operator==(const NameRule&) const = default;
};

// Everything a policy slot holds in the kernel.
struct CompiledPolicy {
  std::vector<PathRule> paths;
  std::vector<NameRule> names;  // sorted, no duplicates; AC_POLICY_F_NAMES when not empty
  std::vector<CompiledNetRule> net;
  uint32_t flags = 0;  // AC_POLICY_F_*
};

}  // namespace agentcage::bpf
