// SPDX-License-Identifier: Apache-2.0
#include "bpf/decide.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

#include "bpf/compile.h"
#include "bpf/keys.h"

namespace agentcage::bpf {
namespace {

// path.bpf.h's AC_ACCESS_UNRESOLVED: a path in the workspace too long to
// match exactly (never a rule's bit).
constexpr uint32_t kUnresolved = 1u << 31;

// ac_resolve's key for a resolved path and its text length: the path with a
// trailing '/', cut at AC_PATH_KEY_MAX bytes (then without the '/').
struct Key {
  std::string text;
  size_t text_len = 0;
};
Key request_key(const std::string& path) {
  if (path == "/") return {"/", 1};
  if (path.size() >= AC_PATH_KEY_MAX) return {path.substr(0, AC_PATH_KEY_MAX), AC_PATH_KEY_MAX};
  return {path + "/", path.size()};
}

// The longest rule of `space` whose key is a prefix of `key` (the trie's
// longest-prefix match), or nullptr.
const PathRule* longest(const CompiledPolicy& p, RuleSpace space, std::string_view key) {
  const PathRule* best = nullptr;
  size_t best_len = 0;
  for (const auto& r : p.paths) {
    if (r.space != space) continue;
    const std::string k = path_key_text(r.path);
    if (key.starts_with(k) && (!best || k.size() > best_len)) {
      best = &r;
      best_len = k.size();
    }
  }
  return best;
}

// ac_path_access, without the name rules.
uint32_t path_access(const CompiledPolicy& p, const std::string& workspace, const Key& key) {
  uint32_t access = 0;
  if (const PathRule* r = longest(p, RuleSpace::absolute, key.text)) access = r->access;
  if (workspace.empty()) return access;
  const std::string w = path_key_text(workspace);
  if (!key.text.starts_with(w)) return access;
  const size_t off = workspace.size();
  if (off >= key.text.size() || off >= AC_PATH_KEY_MAX) return access | AC_ACCESS_DENY;
  if (key.text_len >= AC_PATH_KEY_MAX) return access | kUnresolved;
  if (const PathRule* r = longest(p, RuleSpace::workspace, std::string_view(key.text).substr(off)))
    access |= r->access;
  return access;
}

// ac_path_ancestor: exactly a directory on the way to an allowed path, or
// to the workspace (or the workspace itself).
bool ancestor(const CompiledPolicy& p, const std::string& workspace, const Key& key) {
  if (key.text_len >= AC_PATH_KEY_MAX) return false;
  for (const auto& a : ancestor_rules(p.paths))
    if (path_key_text(a.path) == key.text) return true;
  if (workspace.empty()) return false;
  auto dirs = ancestors_of(workspace);
  dirs.push_back(workspace);
  return std::any_of(dirs.begin(), dirs.end(),
                     [&](const std::string& d) { return path_key_text(d) == key.text; });
}

// ac_port_allowed on the longest network.allow entry that covers addr.
bool connect_allowed(const CompiledPolicy& p, const Request& q) {
  const CompiledNetRule* best = nullptr;
  for (const auto& r : p.net) {
    if (r.space != NetSpace::allow) continue;
    bool covers = true;
    unsigned bits = r.prefix_len;
    for (unsigned i = 0; i < 16 && bits > 0 && covers; ++i) {
      const unsigned take = bits >= 8 ? 8 : bits;
      const auto mask = static_cast<uint8_t>(0xff << (8 - take));
      covers = (r.addr[i] & mask) == (q.addr[i] & mask);
      bits -= take;
    }
    if (covers && (!best || r.prefix_len > best->prefix_len)) best = &r;
  }
  if (!best) return false;
  return std::any_of(best->ranges.begin(), best->ranges.end(), [&](const ac_port_range& pr) {
    return q.port >= pr.first && q.port <= pr.last && (pr.protocols & q.proto_bit);
  });
}

}  // namespace

Decision decide(const CompiledPolicy& policy, const std::string& workspace, const Request& q) {
  Decision d;
  if (q.op == Operation::connect) {
    d.allowed = connect_allowed(policy, q);
    d.access = d.allowed ? AC_ACCESS_CONNECT : 0;
    d.reason = d.allowed ? AC_REASON_RULE_ALLOW : AC_REASON_DEFAULT_DENY;
    return d;
  }
  // What each hook needs (agentcage.bpf.c, metadata.bpf.h).
  uint32_t all = AC_ACCESS_READ, any_ok = 0;
  bool ancestor_ok = false;
  switch (q.op) {
    case Operation::read:
      break;
    case Operation::write:
      all = AC_ACCESS_WRITE;
      break;
    case Operation::exec:
      all = AC_ACCESS_EXEC;
      break;
    case Operation::stat:
      any_ok = AC_ACCESS_EXEC | AC_ACCESS_CONNECT;
      ancestor_ok = true;
      break;
    case Operation::connect:
      break;
  }
  const Key key = request_key(q.path);
  uint32_t access = path_access(policy, workspace, key);
  if ((policy.flags & AC_POLICY_F_NAMES) && name_rule_matching(policy.names, q.path)) {
    access |= AC_ACCESS_DENY;
    d.by_name = true;
  }
  d.access = access;
  if (access & kUnresolved) {
    d.reason = AC_REASON_PATH_TOO_LONG;
  } else if (access & AC_ACCESS_DENY) {
    d.reason = AC_REASON_RULE_DENY;
  } else if ((any_ok && (access & any_ok)) || (access && (access & all) == all)) {
    d.allowed = true;
    d.reason = AC_REASON_RULE_ALLOW;
  } else if (ancestor_ok && ancestor(policy, workspace, key)) {
    d.allowed = true;
    d.by_ancestor = true;
    d.reason = AC_REASON_RULE_ALLOW;
  } else {
    d.reason = AC_REASON_DEFAULT_DENY;
  }
  return d;
}

}  // namespace agentcage::bpf

namespace agentcage::bpf {
namespace {

bool within(const std::string& inner, const std::string& outer) { return path_within(inner, outer); }

std::string shown(const policy::PathEntry& e) { return e.in_workspace ? "${workspace}" + e.path : e.path; }

// The longest entry of `list` that covers `path` (absolute entries) or its
// part below the workspace (workspace entries).
const policy::PathEntry* covering(const std::vector<policy::PathEntry>& list, const std::string& path,
                                  const std::string& workspace) {
  const policy::PathEntry* best = nullptr;
  size_t best_len = 0;
  for (const auto& e : list) {
    std::string full;
    if (!e.in_workspace)
      full = e.path;
    else if (!workspace.empty())
      full = workspace + e.path;
    else
      continue;
    if (within(path, full) && (!best || full.size() > best_len)) {
      best = &e;
      best_len = full.size();
    }
  }
  return best;
}

std::string address_text(const std::array<uint8_t, 16>& a, int family, uint8_t prefix) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family, a.data(), buf, sizeof buf);
  return std::string(buf) + "/" + std::to_string(prefix);
}

// v4-mapped as the maps hold it
std::array<uint8_t, 16> mapped(const policy::NetRule& r, uint8_t& prefix) {
  std::array<uint8_t, 16> a{};
  if (r.family == AF_INET) {
    a[10] = a[11] = 0xff;
    std::copy(r.addr.begin(), r.addr.begin() + 4, a.begin() + 12);
    prefix = static_cast<uint8_t>(96 + r.prefix_len);
  } else {
    a = r.addr;
    prefix = r.prefix_len;
  }
  return a;
}

}  // namespace

Explanation explain(const policy::Policy& policy, const CompiledPolicy& compiled,
                    const std::string& workspace, const Request& q) {
  Explanation x;
  x.decision = decide(compiled, workspace, q);
  const Decision& d = x.decision;
  if (q.op == Operation::connect) {
    if (!d.allowed) {
      x.detail = "no network.allow entry covers this address, port and protocol";
      return x;
    }
    const policy::NetRule* best = nullptr;
    uint8_t best_prefix = 0;
    for (const auto& r : policy.network_allow) {
      if (r.kind != policy::NetRule::Kind::cidr) continue;
      uint8_t prefix = 0;
      const auto a = mapped(r, prefix);
      CompiledPolicy one;
      CompiledNetRule c;
      c.addr = a;
      c.prefix_len = prefix;
      const uint8_t bit = r.protocol == policy::Protocol::tcp   ? AC_PROTO_TCP
                          : r.protocol == policy::Protocol::udp ? AC_PROTO_UDP
                                                                : AC_PROTO_ANY;
      if (r.ports.empty()) c.ranges.push_back(ac_port_range{1, 65535, bit, {}});
      for (const auto& pr : r.ports) c.ranges.push_back(ac_port_range{pr.first, pr.last, bit, {}});
      one.net.push_back(std::move(c));
      if (decide(one, "", q).allowed && (!best || prefix > best_prefix)) {
        best = &r;
        best_prefix = prefix;
      }
    }
    if (best) {
      x.rule = "network.allow " + address_text(best->addr, best->family, best->prefix_len);
      x.pos = best->pos;
      x.detail = "the entry covers this address, port and protocol";
    }
    return x;
  }

  const std::string& path = q.path;
  if (d.reason == AC_REASON_PATH_TOO_LONG) {
    x.detail = "the path lies in the workspace and is too long to match exactly (over " +
               std::to_string(AC_PATH_KEY_MAX) + " bytes): denied whatever the rules say";
    return x;
  }
  if (d.reason == AC_REASON_RULE_DENY) {
    if (d.by_name) {
      const NameRule* n = name_rule_matching(compiled.names, path);
      for (const auto& e : policy.deny_names)
        if (n && e.text == n->text &&
            (e.kind == policy::NamePattern::Kind::suffix) == (n->kind == NameRule::Kind::suffix)) {
          x.rule = "files.deny '" + pattern_text(*n) + "'";
          x.pos = e.pos;
          x.detail = n->kind == NameRule::Kind::exact ? "a component of the path is named " + n->text
                                                      : "a component of the path ends in " + n->text;
          return x;
        }
    }
    // The outermost deny entry: it is the one that denies everything under it.
    const policy::PathEntry* best = nullptr;
    for (const auto& e : policy.deny) {
      const std::string full = e.in_workspace ? workspace + e.path : e.path;
      if ((e.in_workspace && workspace.empty()) || !within(path, full)) continue;
      if (!best || full.size() < (best->in_workspace ? workspace + best->path : best->path).size()) best = &e;
    }
    if (best) {
      x.rule = "files.deny " + shown(*best);
      x.pos = best->pos;
      x.detail = "a deny entry covers the path; it wins over every allow around or inside it";
    }
    return x;
  }
  if (d.reason == AC_REASON_DEFAULT_DENY) {
    std::string have;
    if (d.access & AC_ACCESS_WRITE)
      have = "read and write";
    else if (d.access & AC_ACCESS_READ)
      have = (d.access & AC_ACCESS_EXEC) ? "read and exec" : "read";
    x.detail = have.empty()
                   ? "no rule allows it (default deny)"
                   : "the rules grant " + have + " here, not what this operation needs (default deny)";
    return x;
  }
  // Allowed: the most specific entry that grants what the operation needs.
  if (d.by_ancestor) {
    x.detail = "a directory on the way to an allowed path (or to the workspace): it may be stat'ed, not read";
    return x;
  }
  if (q.op == Operation::exec ||
      ((q.op == Operation::read || q.op == Operation::stat) && (d.access & AC_ACCESS_EXEC))) {
    const policy::ExecEntry* best = nullptr;  // the most specific: the program before its directory
    for (const auto& e : policy.exec_allow)
      if (within(path, e.resolved) && (!best || e.resolved.size() > best->resolved.size())) best = &e;
    if (best) {
      const policy::ExecEntry& e = *best;
      x.rule = "exec.allow " + e.path;
      x.pos = e.pos;
      x.detail = e.resolved != path     ? "a program under an allowed directory (and readable)"
                 : e.resolved == e.path ? "the program is allowed (and readable)"
                                        : "the program is allowed, as " + e.path + " resolves to it";
      return x;
    }
  }
  const policy::PathEntry* w = covering(policy.write, path, workspace);
  const policy::PathEntry* r = covering(policy.read, path, workspace);
  const policy::PathEntry* best = w;
  if (q.op != Operation::write && r) {
    auto len = [&](const policy::PathEntry* e) {
      return e ? (e->in_workspace ? workspace + e->path : e->path).size() : 0;
    };
    if (!w || len(r) > len(w)) best = r;
  }
  if (best) {
    x.rule = std::string(best == w ? "files.write " : "files.read ") + shown(*best);
    x.pos = best->pos;
    x.detail = "the entry covers the path";
  }
  return x;
}

Result<Request> parse_connect_target(const std::string& text) {
  const std::string form = "expected ADDR:PORT[/tcp|/udp] (IPv6: [ADDR]:PORT), got '" + text + "'";
  Request q;
  q.op = Operation::connect;
  std::string rest = text;
  if (const size_t slash = rest.rfind('/'); slash != std::string::npos) {
    const std::string proto = rest.substr(slash + 1);
    if (proto == "tcp")
      q.proto_bit = AC_PROTO_TCP;
    else if (proto == "udp")
      q.proto_bit = AC_PROTO_UDP;
    else
      return Error{"unknown protocol '" + proto + "': " + form, EINVAL};
    rest.resize(slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 >= rest.size()) return Error{form, EINVAL};
  std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535)
    return Error{"invalid port '" + port + "': " + form, EINVAL};
  q.port = static_cast<uint16_t>(std::stoul(port));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), q.addr.data()) != 1)
      return Error{"invalid IPv6 address: " + form, EINVAL};
    return q;
  }
  uint8_t v4[4];
  if (::inet_pton(AF_INET, host.c_str(), v4) != 1)
    return Error{"invalid address '" + host + "': " + form, EINVAL};
  q.addr = {};
  q.addr[10] = q.addr[11] = 0xff;
  std::copy(v4, v4 + 4, q.addr.begin() + 12);
  return q;
}

}  // namespace agentcage::bpf
