// SPDX-License-Identifier: Apache-2.0
#include "bpf/compile.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "bpf/keys.h"

namespace agentcage::bpf {
namespace {

bool within(std::string_view inner, std::string_view outer) { return path_within(inner, outer); }

// Fold enclosing rules into each rule of one path space.
std::vector<PathRule> fold(const std::map<std::string, uint32_t>& rules, RuleSpace space) {
  std::vector<PathRule> out;
  for (const auto& [path, own] : rules) {
    uint32_t access = 0;
    for (const auto& [outer, outer_access] : rules)
      if (within(path, outer)) access |= outer_access;
    if (access & AC_ACCESS_DENY) access = AC_ACCESS_DENY;  // deny wins over everything enclosed
    (void)own;
    out.push_back(PathRule{path, access, space});
  }
  return out;
}

// Workspace paths from the model: "" is the workspace itself ("/" as a key).
std::string ws_key(const std::string& p) { return p.empty() ? "/" : p; }

bool covers(const CompiledNetRule& outer, const CompiledNetRule& inner) {
  if (outer.prefix_len > inner.prefix_len) return false;
  unsigned bits = outer.prefix_len;
  for (unsigned i = 0; i < 16 && bits > 0; ++i) {
    unsigned take = bits >= 8 ? 8 : bits;
    uint8_t mask = static_cast<uint8_t>(0xff << (8 - take));
    if ((outer.addr[i] & mask) != (inner.addr[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

// The CIDR entries of one rule list as LPM entries in `space`: one entry per
// distinct network (IPv4 as ::ffff:0:0/96), each carrying the port ranges of
// every entry whose network covers it.
Result<std::vector<CompiledNetRule>> compile_cidrs(const policy::Policy& policy,
                                                   const std::vector<policy::NetRule>& rules, NetSpace space,
                                                   policy::Position& where) {
  std::vector<CompiledNetRule> nets;
  std::vector<std::vector<ac_port_range>> own;
  std::vector<policy::Position> origin;  // the entry each network first came from
  for (const auto& r : rules) {
    if (r.kind != policy::NetRule::Kind::cidr) continue;
    CompiledNetRule n;
    n.space = space;
    if (r.family == AF_INET) {
      n.addr[10] = 0xff;
      n.addr[11] = 0xff;
      std::memcpy(&n.addr[12], r.addr.data(), 4);
      n.prefix_len = static_cast<uint8_t>(96 + r.prefix_len);
    } else {
      n.addr = r.addr;
      n.prefix_len = r.prefix_len;
    }
    uint8_t protocols = r.protocol == policy::Protocol::tcp   ? AC_PROTO_TCP
                        : r.protocol == policy::Protocol::udp ? AC_PROTO_UDP
                                                              : AC_PROTO_ANY;
    std::vector<ac_port_range> ranges;
    if (r.ports.empty()) ranges.push_back(ac_port_range{1, 65535, protocols, {}});
    for (const auto& p : r.ports) ranges.push_back(ac_port_range{p.first, p.last, protocols, {}});
    auto same = std::find_if(nets.begin(), nets.end(), [&](const CompiledNetRule& x) {
      return x.prefix_len == n.prefix_len && x.addr == n.addr;
    });
    if (same != nets.end()) {
      auto& dst = own[static_cast<size_t>(same - nets.begin())];
      dst.insert(dst.end(), ranges.begin(), ranges.end());
    } else {
      nets.push_back(n);
      own.push_back(std::move(ranges));
      origin.push_back(r.pos);
    }
  }
  for (size_t i = 0; i < nets.size(); ++i) {
    std::set<std::tuple<uint16_t, uint16_t, uint8_t>> merged;
    for (size_t j = 0; j < nets.size(); ++j)
      if (covers(nets[j], nets[i]))
        for (const auto& pr : own[j]) merged.insert({pr.first, pr.last, pr.protocols});
    if (merged.size() > AC_NET_MAX_RANGES) {
      where = origin[i];
      return Error{"policy " + policy.name + ": a network destination is covered by " +
                       std::to_string(merged.size()) + " port ranges; at most " +
                       std::to_string(AC_NET_MAX_RANGES) + " are supported (merge ranges)",
                   E2BIG};
    }
    for (const auto& [first, last, protocols] : merged)
      nets[i].ranges.push_back(ac_port_range{first, last, protocols, {}});
  }
  return nets;
}

}  // namespace

// Where the entry a compiled path rule came from is written (the first
// entry with that path in that space).
static policy::Position position_of(const policy::Policy& policy, const PathRule& rule) {
  if (rule.space == RuleSpace::abstract_unix) {
    for (const auto* list : {&policy.network_allow, &policy.network_listen})
      for (const auto& r : *list)
        if (r.kind == policy::NetRule::Kind::unix_abstract && r.unix_name == rule.path) return r.pos;
    return {};
  }
  const bool ws = rule.space == RuleSpace::workspace;
  for (const auto* list : {&policy.read, &policy.write, &policy.deny})
    for (const auto& e : *list)
      if (e.in_workspace == ws && (ws ? ws_key(e.path) : e.path) == rule.path) return e.pos;
  if (ws) return {};
  for (const auto& e : policy.exec_allow)
    if (e.resolved == rule.path) return e.pos;
  for (const auto& r : policy.network_allow)
    if (r.kind == policy::NetRule::Kind::unix_path && r.unix_name == rule.path) return r.pos;
  return {};
}

// The compiler; on an error, `where` is the position of the entry at fault
// (line 0 when none is known).
// Name rules (files.deny "**/NAME", "**/*.EXT"): one entry per distinct
// rule, the suffix lengths within what the hooks try. A rule that a name
// pattern denies whole (a program, a read or write path with a matching
// component) would do nothing: an error at that rule, naming the pattern.
static Status compile_names(const policy::Policy& policy, CompiledPolicy& out, policy::Position& where) {
  std::set<size_t> lengths;
  for (const auto& n : policy.deny_names) {
    const bool suffix = n.kind == policy::NamePattern::Kind::suffix;
    if (suffix && lengths.insert(n.text.size()).second && lengths.size() > AC_NAME_SUFFIX_LENGTHS) {
      where = n.pos;
      return Error{"policy " + policy.name + ": '**/*" + n.text + "' makes " +
                       std::to_string(lengths.size()) + " different extension lengths; at most " +
                       std::to_string(AC_NAME_SUFFIX_LENGTHS) +
                       " are supported (each is one lookup per path component)",
                   E2BIG};
    }
    out.names.push_back(NameRule{suffix ? NameRule::Kind::suffix : NameRule::Kind::exact, n.text});
  }
  std::sort(out.names.begin(), out.names.end(), [](const NameRule& a, const NameRule& b) {
    return std::tie(a.kind, a.text) < std::tie(b.kind, b.text);
  });
  out.names.erase(std::unique(out.names.begin(), out.names.end()), out.names.end());
  if (policy.deny_names.empty()) return {};

  auto conflict = [&](const std::string& what, const std::string& path, policy::Position pos) -> Status {
    const NameRule* n = name_rule_matching(out.names, path);
    if (!n) return {};
    policy::Position at;  // the pattern's first entry
    for (const auto& d : policy.deny_names)
      if (d.text == n->text &&
          (d.kind == policy::NamePattern::Kind::suffix) == (n->kind == NameRule::Kind::suffix)) {
        at = d.pos;
        break;
      }
    where = pos;
    return Error{"policy " + policy.name + ": " + what + " is denied whole by files.deny '" +
                     pattern_text(*n) + "' (" + yaml::format_position(at) +
                     "), so the rule would do nothing; drop one of them",
                 EINVAL};
  };
  for (const auto& e : policy.exec_allow)
    if (Status st = conflict("exec.allow " + e.resolved, e.resolved, e.pos); !st) return st;
  for (const auto& r : policy.network_allow)
    if (r.kind == policy::NetRule::Kind::unix_path)
      if (Status st = conflict("network.allow unix " + r.unix_name, r.unix_name, r.pos); !st) return st;
  for (const auto* list : {&policy.read, &policy.write})
    for (const auto& e : *list) {
      const std::string key = list == &policy.read ? "files.read " : "files.write ";
      const std::string shown = e.in_workspace ? "${workspace}" + e.path : e.path;
      if (Status st = conflict(key + shown, e.path, e.pos); !st) return st;
    }
  return {};
}

static Result<CompiledPolicy> build(const policy::Policy& policy, policy::Position& where) {
  CompiledPolicy out;
  out.flags = policy_flags(policy);
  if (Status st = compile_names(policy, out, where); !st) return st.error();

  std::map<std::string, uint32_t> abs, ws;
  auto add = [&](const policy::PathEntry& e, uint32_t access) {
    (e.in_workspace ? ws[ws_key(e.path)] : abs[e.path]) |= access;
  };
  for (const auto& e : policy.read) add(e, AC_ACCESS_READ);
  for (const auto& e : policy.write) add(e, AC_ACCESS_READ | AC_ACCESS_WRITE);
  for (const auto& e : policy.deny) add(e, AC_ACCESS_DENY);
  // An allowed program stays readable and mappable: it is matched by the
  // file it resolves to, so a symlink to it or a copy elsewhere is not it.
  for (const auto& e : policy.exec_allow) abs[e.resolved] |= AC_ACCESS_READ | AC_ACCESS_EXEC;

  // Abstract unix names: exact, one entry per name with every bit it gets
  // (connect from network.allow, bind from network.listen).
  std::map<std::string, uint32_t> abstract;
  for (const auto& r : policy.network_allow) {
    if (r.kind == policy::NetRule::Kind::unix_path) abs[r.unix_name] |= AC_ACCESS_CONNECT;
    if (r.kind == policy::NetRule::Kind::unix_abstract) abstract[r.unix_name] |= AC_ACCESS_CONNECT;
  }
  for (const auto& r : policy.network_listen)
    if (r.kind == policy::NetRule::Kind::unix_abstract) abstract[r.unix_name] |= AC_ACCESS_BIND;
  std::vector<PathRule> unix_abstract;
  for (const auto& [name, access] : abstract)
    unix_abstract.push_back(PathRule{name, access, RuleSpace::abstract_unix});

  out.paths = fold(abs, RuleSpace::absolute);
  for (const auto& r : out.paths) {
    // A program the run could overwrite is no longer the program allowed,
    // and a directory of programs the run can write into runs what it wrote.
    if ((r.access & AC_ACCESS_EXEC) && (r.access & AC_ACCESS_WRITE)) {
      // Both come from entries that cover r.path (fold).
      const policy::ExecEntry* exec = nullptr;
      for (const auto& e : policy.exec_allow)
        if (within(r.path, e.resolved)) {
          exec = &e;
          break;
        }
      const policy::PathEntry* write = nullptr;
      for (const auto& w : policy.write)
        if (!w.in_workspace && within(r.path, w.path)) {
          write = &w;
          break;
        }
      if (exec) where = exec->pos;
      const std::string program = exec ? exec->resolved : r.path;
      const std::string rule =
          write ? " (" + yaml::format_position(write->pos) + ": " + write->path + ")" : "";
      if (exec && write && write->path.size() > exec->resolved.size())
        return Error{"policy " + policy.name + ": exec.allow " + program + " holds a files.write rule" +
                         rule + "; a run could write a program there and run it",
                     EINVAL};
      return Error{"policy " + policy.name + ": exec.allow " + program + " lies under a files.write rule" +
                       rule + "; a run could replace the program",
                   EINVAL};
    }
    if (auto key = make_path_key(0, r); !key) {
      where = position_of(policy, r);
      return key.error().wrap("policy " + policy.name);
    }
  }
  for (auto& r : fold(ws, RuleSpace::workspace)) {
    if (auto key = make_path_key(0, r); !key) {
      where = position_of(policy, r);
      return key.error().wrap("policy " + policy.name);
    }
    out.paths.push_back(std::move(r));
  }
  for (auto& r : unix_abstract) {
    if (auto key = make_path_key(0, r); !key) {
      where = position_of(policy, r);
      return key.error().wrap("policy " + policy.name);
    }
    out.paths.push_back(std::move(r));
  }

  auto allow = compile_cidrs(policy, policy.network_allow, NetSpace::allow, where);
  if (!allow) return allow.error();
  auto listen = compile_cidrs(policy, policy.network_listen, NetSpace::listen, where);
  if (!listen) return listen.error();
  out.net = std::move(*allow);
  out.net.insert(out.net.end(), listen->begin(), listen->end());
  return out;
}

const NameRule* name_rule_matching(const std::vector<NameRule>& names, std::string_view path) {
  for (size_t at = 0; at < path.size();) {
    const size_t end = std::min(path.find('/', at + 1), path.size());
    const std::string_view component = path.substr(at + 1, end - at - 1);
    for (const auto& n : names)
      if (n.kind == NameRule::Kind::exact ? component == n.text : component.ends_with(n.text)) return &n;
    at = end;
  }
  return nullptr;
}

bool path_within(std::string_view inner, std::string_view outer) {
  if (outer == "/") return true;
  return inner == outer ||
         (inner.size() > outer.size() && inner.starts_with(outer) && inner[outer.size()] == '/');
}

std::optional<std::string> workspace_problem(const CompiledPolicy& policy, const std::string& name,
                                             const std::string& workspace) {
  if (workspace.empty()) return std::nullopt;
  if (const NameRule* n = name_rule_matching(policy.names, workspace))
    return "the workspace " + workspace + " lies in a path that files.deny '" + pattern_text(*n) +
           "' of policy " + name + " denies: every file in it would be denied (fix: a workspace outside it)";
  // The run writes its workspace: a program there, or a directory of
  // programs around it, would run what the run wrote.
  for (const auto& r : policy.paths)
    if (r.space == RuleSpace::absolute && (r.access & AC_ACCESS_EXEC) &&
        (path_within(r.path, workspace) || path_within(workspace, r.path)))
      return "the workspace " + workspace + " and exec.allow " + r.path + " of policy " + name +
             " overlap: the run could write a program and run it (fix: a workspace outside every allowed "
             "program and directory of programs)";
  return std::nullopt;
}

std::string pattern_text(const NameRule& rule) {
  return rule.kind == NameRule::Kind::exact ? "**/" + rule.text : "**/*" + rule.text;
}

uint32_t policy_flags(const policy::Policy& policy) {
  uint32_t flags = policy.mode == policy::Mode::audit ? AC_POLICY_F_AUDIT : 0;
  if (policy.native_code == policy::Permit::allow) flags |= AC_POLICY_F_NATIVE_CODE;
  if (policy.debugging == policy::Permit::allow) flags |= AC_POLICY_F_DEBUG;
  if (!policy.deny_names.empty()) flags |= AC_POLICY_F_NAMES;
  return flags;
}

std::optional<yaml::Diagnostic> compile_problem(const policy::Policy& policy) {
  policy::Position where;
  auto compiled = build(policy, where);
  if (compiled) return std::nullopt;
  return yaml::Diagnostic{policy.source_of(where), where, compiled.error().message};
}

Result<CompiledPolicy> compile(const policy::Policy& policy) {
  policy::Position where;
  auto compiled = build(policy, where);
  if (compiled || policy.source.empty()) return compiled;
  return Error{yaml::Diagnostic{policy.source_of(where), where, compiled.error().message}.format(),
               compiled.error().code};
}

}  // namespace agentcage::bpf
