// SPDX-License-Identifier: Apache-2.0
// draft_policy and draft_checks (draft.h): observed operations -> the
// narrowest rules that allow them, collapsed as draft.h says (the Plan of
// draft_plan.h: its files rules in draft_paths.cpp; draft_yaml.cpp writes
// them). Both run the same Plan, so every check names an operation the
// draft allows.
#include "policy/draft.h"

#include <arpa/inet.h>
#include <linux/limits.h>
#include <netinet/in.h>

#include <algorithm>

#include "policy/draft_plan.h"
#include "policy/name.h"
#include "policy/policy.h"
#include "policy/syscalls.h"
#include "policy/values.h"
#include "util/text.h"

namespace agentcage::policy::draft {
namespace {

// The name holds U+FFFD, the record's stand-in for bytes that were not
// UTF-8 (or is not UTF-8 at all): a rule would name another file.
bool mangled(std::string_view name) {
  if (name.find("\xEF\xBF\xBD") != std::string_view::npos) return true;
  for (size_t i = 0; i < name.size();) {
    const size_t n = utf8_sequence_length(name, i);
    if (n == 0) return true;
    i += n;
  }
  return false;
}

constexpr const char* kMangled =
    "the name was not valid UTF-8 (the record holds U+FFFD in its place): the rule would name another file";
constexpr const char* kDirectoryRead =
    "a stat of a directory, or a listing of one no collapse may make a rule of (draft.h): not drafted (a "
    "files rule on a directory allows everything below it); add it by hand if the program needs it";
constexpr const char* kDirectoryChange =
    "a change of a directory outside the workspace: not drafted (a files.write rule on a directory allows "
    "changing everything below it); add it by hand if the program needs it";

bool is_open(const Observation& o) { return o.hook == "file_open" || o.hook == "file_receive"; }

// Why a record with this reason gets no rule.
std::string reason_why(const std::string& reason) {
  if (reason == "rule_deny") return "denied by a deny rule of the observed policy: left denied";
  if (reason == "protected") return "protected: no policy allows it inside a scope";
  if (reason == "path_too_deep" || reason == "path_too_long")
    return "the path is too deep or too long for the kernel to match any rule";
  return "reason " + reason + ": decided before any rule";
}

// Why an operation of this hook gets no rule; names the switch that would
// allow it where there is one (and leaves it off).
std::string hook_why(const Observation& o) {
  if (o.hook == "syscall") {
    for (const SyscallGroup& g : syscall_groups())
      if (std::find(g.syscalls.begin(), g.syscalls.end(), o.target) != g.syscalls.end())
        return "the seccomp filter denies it; syscalls.allow: [" + std::string(g.name) +
               "] would let it through (not enabled: a draft never lifts a protection)";
    return "the seccomp filter denies it";
  }
  if (o.hook == "native_code")
    return "exec.native_code: allow would permit it (left at deny: a draft never lifts a protection)";
  if (o.hook == "debug")
    return "exec.debugging: allow would permit it (left at deny: a draft never lifts a protection)";
  if (o.hook == "socket_bind" || o.hook == "socket_listen")
    return "network.listen would let the run offer this address (not drafted: a listener there is public)";
  if (o.hook == "ingress")
    return "something outside the run reached one of its private sockets: no rule allows that";
  if (o.hook == "file_receive") return "a received descriptor that no path names: no rule kind allows it";
  return "no rule kind allows it";
}

// "192.0.2.7:443", "[2001:db8::1]:443", "[::ffff:192.0.2.7]:443" as a /32 or
// /128 network (an IPv4-mapped address as IPv4, which also matches it) and
// a port.
std::optional<std::pair<std::string, uint16_t>> parse_destination(const std::string& target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon + 1 >= target.size() || target.size() - colon > 6)
    return std::nullopt;
  const std::string port_text = target.substr(colon + 1);
  if (port_text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long port = std::stoul(port_text);
  if (port > 65535) return std::nullopt;
  std::string host = target.substr(0, colon);
  char buf[INET6_ADDRSTRLEN] = {};
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    in6_addr a6{};
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6) != 1) return std::nullopt;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      ::inet_ntop(AF_INET, &a6.s6_addr[12], buf, sizeof buf);
      return std::make_pair(std::string(buf) + "/32", static_cast<uint16_t>(port));
    }
    ::inet_ntop(AF_INET6, &a6, buf, sizeof buf);
    return std::make_pair(std::string(buf) + "/128", static_cast<uint16_t>(port));
  }
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) != 1) return std::nullopt;
  ::inet_ntop(AF_INET, &a4, buf, sizeof buf);
  return std::make_pair(std::string(buf) + "/32", static_cast<uint16_t>(port));
}

}  // namespace

Plan::Plan(const std::vector<Observation>& observations, const DraftOptions& options) : options_(options) {
  out_.name = options.name;
  if (!valid_policy_name(out_.name)) {
    out_.assumed.insert("'" + escape(out_.name, 64) + "' is not a policy name (" +
                        std::string(kPolicyNameRule) + "): the draft is named 'suggested'");
    out_.name = "suggested";
  }
  read_workspaces(observations);
  for (const Observation& o : observations) classify(o);
  for (PathNeed& n : paths_) n.directory = n.obs->directory || is_directory(n.loc);
  for (const auto& [o, loc] : execs_) exec_need(*o, loc);
  drop_denied();
  plan_writes_and_programs();
  plan_reads();
  for (const PathNeed& n : paths_) settle(n);
  for (const auto& [path, obs] : exec_needs_)
    if (out_.exec.contains(path))
      for (const Observation* o : obs) {
        because("exec " + path, *o);
        check("exec", *o, "");
      }
  for (const UnixNeed& u : unix_needs_) because("unix " + u.name, *u.obs);
  plan_network();
  mark_directory_rules();
  for (const Loc& r : read_) out_.read.insert(shown(r));
  for (const Loc& w : write_) out_.write.insert(shown(w));
}

// Each run's workspace as a rule space: absolute and normalised, else its
// paths stay absolute (a note). No rule at or above one, or the root.
void Plan::read_workspaces(const std::vector<Observation>& observations) {
  std::string root = options_.workspace_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (auto n = normalize_path(root, PATH_MAX); n && *n == root && root.starts_with('/'))
    for (std::string p = root; !p.empty(); p = p == "/" ? "" : parent(p)) near_workspace_.insert(p);
  for (const Observation& o : observations) {
    if (o.workspace.empty() || workspaces_.contains(o.workspace)) continue;
    std::string ws = o.workspace;
    while (ws.size() > 1 && ws.back() == '/') ws.pop_back();
    if (auto n = normalize_path(ws, PATH_MAX); !n || *n != ws || ws.front() != '/' || ws == "/") {
      out_.assumed.insert("the workspace '" + escape(ws, 120) +
                          "' is not an absolute directory: its run's paths stay absolute");
      ws.clear();
    }
    for (std::string p = ws; !p.empty(); p = p == "/" ? "" : parent(p)) near_workspace_.insert(p);
    workspaces_.emplace(o.workspace, std::move(ws));
  }
}

const std::string& Plan::workspace_of(const Observation& o) const {
  static const std::string none;
  if (o.workspace.empty()) return none;
  auto it = workspaces_.find(o.workspace);
  return it == workspaces_.end() ? none : it->second;
}

// Ports by network and protocol. At most AC_NET_MAX_RANGES port ranges
// reach one network (the compiler merges entries of the same network): the
// rest stays denied. An entry that allows more than it says gets a comment.
void Plan::plan_network() {
  std::map<std::string, size_t> ranges_of;
  for (const NetNeed& n : net_needs_) out_.net[{n.cidr, n.protocol}].insert(n.port);
  for (auto& [key, ports] : out_.net) {
    size_t& used = ranges_of[key.first];
    std::set<uint16_t> kept;
    for (const auto& [first, last] : port_ranges(ports)) {
      if (used == AC_NET_MAX_RANGES) break;
      ++used;
      for (uint32_t p = first; p <= last; ++p) kept.insert(static_cast<uint16_t>(p));
    }
    ports = std::move(kept);
  }
  for (const NetNeed& n : net_needs_) {
    if (!out_.net[{n.cidr, n.protocol}].contains(n.port)) {
      leave(*n.obs, "more than " + std::to_string(AC_NET_MAX_RANGES) +
                        " port ranges to one address: the compiler takes no more");
      continue;
    }
    const std::string rule = "net " + n.cidr + " " + n.protocol;
    because(rule, *n.obs);
    if (n.cidr == "0.0.0.0/32" || n.cidr == "::/128") {
      const std::string any = n.cidr.substr(0, n.cidr.find('/'));
      out_.caution[rule].insert(any +
                                " is the any-address: a connection to it reaches the services listening "
                                "on this host");
      out_.review[{label(*n.obs), "allowed, but " + any +
                                      " is the any-address: it reaches the services listening on this host "
                                      "(its loopback ones too); check that the program needs them"}]
          .add(*n.obs, display(*n.obs));
    }
    if (n.protocol.empty())
      out_.caution[rule].insert("no protocol: allows tcp and udp (and every other protocol) too");
    const std::string& proto = n.obs->protocol;
    if (proto.empty() || proto == "tcp" || proto == "udp")
      check("connect", *n.obs, "", n.obs->target + "/" + (proto.empty() ? "tcp" : proto));
  }
  std::erase_if(out_.net, [](const auto& entry) { return entry.second.empty(); });
}

void Plan::classify(const Observation& o) {
  if (o.reason != "default_deny" && o.reason != "no_policy" && !o.reason.empty()) {
    if (o.reason == "rule_deny" && o.target_kind == "path")
      if (auto loc = locate(o)) {
        denied_.insert(*loc);
        above_denied_.insert_above(*loc);
        above_observed_.insert_above(*loc);
      }
    leave(o, reason_why(o.reason));
    return;
  }
  const std::string& h = o.hook;
  if (h == "exec" || h == "file_open" || h == "file_receive" || h == "file_change" || h == "mmap_exec" ||
      h == "file_stat" || h == "file_watch") {
    if (o.target_kind != "path") {
      leave(o, hook_why(o));
      return;
    }
    if (mangled(o.target)) {
      leave(o, kMangled);
      return;
    }
    auto loc = locate(o);
    if (!loc) {
      leave(o, "not a path a rule can name");
      return;
    }
    above_observed_.insert_above(*loc);
    if (o.directory) flagged_.insert(*loc);
    if (h == "exec") {
      execs_.emplace_back(&o, *loc);
      return;
    }
    Need need = Need::read;
    if (h == "file_change" || (is_open(o) && (o.access & kAccessWrite)))
      need = Need::write;
    else if (h == "mmap_exec")
      need = Need::mmap;
    else if (h == "file_stat")
      need = Need::stat;
    else if (h == "file_watch")
      need = Need::watch;
    if (is_open(o) && o.access == 0)
      out_.assumed.insert(h + " records without \"access\" (from an older agentcage) were taken as reads");
    paths_.push_back(PathNeed{need, *loc, &o});
    return;
  }
  if (h == "socket_connect" || h == "socket_send" || h == "unix_connect") return connect_need(o);
  leave(o, hook_why(o));
}

// A program file: not a directory, not in the workspace, a path exec.allow
// takes, not the dynamic loader.
void Plan::exec_need(const Observation& o, const Loc& loc) {
  if (loc.path == "/" || o.directory || is_directory(loc)) {
    leave(o, "a directory, not a program file: exec.allow names programs");
    return;
  }
  if (loc.space == Space::workspace) {
    leave(o, "a program in the workspace never runs: files the run wrote are not programs it may run");
    return;
  }
  if (auto p = parse_exec_path(o.target); !p || *p != o.target) {
    leave(o, p ? "not a path exec.allow can name" : p.error().message);
    return;
  }
  // The compiler keys a program by its path, at most a rule's length.
  if (o.target.size() > kMaxRulePathBytes) {
    leave(o, "a program path longer than a rule may be (" + std::to_string(kMaxRulePathBytes) + " bytes)");
    return;
  }
  if (is_dynamic_loader(o.target)) {
    leave(o,
          "the dynamic loader runs any file it can read: exec.allow refuses it (allow the programs "
          "themselves)");
    return;
  }
  exec_needs_[o.target].push_back(&o);
}

void Plan::connect_need(const Observation& o) {
  if (o.target_kind == "inet") {
    auto dest = parse_destination(o.target);
    if (!dest) {
      leave(o, "not an address and port");
      return;
    }
    if (dest->second == 0) {
      leave(o, "port 0: no network rule names it");
      return;
    }
    std::string protocol = o.protocol == "tcp" || o.protocol == "udp" ? o.protocol : "";
    if (o.protocol.empty())
      out_.assumed.insert(
          o.hook + " records without \"protocol\" (from an older agentcage) got entries for any protocol");
    net_needs_.push_back(NetNeed{dest->first, protocol, dest->second, &o});
    return;
  }
  if (o.target_kind == "unix" || o.target_kind == "unix_abstract") {
    if (mangled(o.target)) {
      leave(o, kMangled);
      return;
    }
    const std::string& ws = workspace_of(o);
    if (o.target_kind == "unix" && !ws.empty() && within(o.target, ws)) {
      leave(o,
            "a unix socket in the workspace: network.allow cannot name it (the run's own sockets reach each "
            "other without a rule)");
      return;
    }
    auto t = parse_unix_target(o.target);
    if (!t || t->abstract != (o.target_kind == "unix_abstract") || (!t->abstract && t->name != o.target)) {
      leave(o, t ? "not a socket name network.allow can name" : t.error().message);
      return;
    }
    unix_needs_.push_back(UnixNeed{o.target, &o});
    return;
  }
  leave(o, "no address recorded");
}

// One path operation against the final rules: the rule it owes its
// allowance to and its check, or a note on why it stays denied.
void Plan::settle(const PathNeed& n) {
  const Observation& o = *n.obs;
  const Loc* r = covering(read_, n.loc);
  const Loc* w = covering(write_, n.loc);
  // The longer of the two decides in the kernel.
  const Loc* best = w && (!r || w->path.size() >= r->path.size()) ? w : r;
  const std::string owner = !best ? "" : (best == w ? "write " : "read ") + shown(*best);
  const bool program = n.loc.space == Space::absolute && out_.exec.contains(n.loc.path);
  switch (n.need) {
    case Need::write:
      if (w) {
        because("write " + shown(*w), o);
        check(o.hook == "file_change" ? "change" : "open", o, o.hook == "file_change" ? "" : "write");
        return;
      }
      break;
    case Need::mmap:
      if (w) return leave(o, "an executable mapping of a file the run may write is always refused");
      [[fallthrough]];
    case Need::read:
    case Need::watch:
      if (best || program) {
        because(best ? owner : "exec " + n.loc.path, o);
        check("open", o, "read");
        return;
      }
      break;
    case Need::stat:
      if (stat_ok(n.loc, o)) {
        if (best || program)
          because(best ? owner : "exec " + n.loc.path, o);
        else if (n.loc.space == Space::absolute && out_.unix_sockets.contains(n.loc.path))
          because("unix " + n.loc.path, o);
        check("stat", o, "");
        return;
      }
      break;
  }
  const char* directory = n.need == Need::write ? kDirectoryChange : kDirectoryRead;
  leave(o, unruleable(n.loc).value_or(n.directory ? directory : "no rule drafted"));
}

std::vector<DraftCheck> Plan::checks() const {
  std::vector<DraftCheck> out;
  for (const auto& [key, origin] : checks_)
    out.push_back(DraftCheck{std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), origin});
  return out;
}

}  // namespace agentcage::policy::draft

namespace agentcage::policy {

Draft draft_policy(const std::vector<Observation>& observations, const DraftOptions& options) {
  const draft::Plan plan(observations, options);
  Draft d{draft::render_yaml(plan.rules(), options), draft::render_notes(plan.rules()), plan.checks()};
  if (const size_t max = ParseOptions{}.max_bytes; d.yaml.size() > max)
    d.notes.push_back("the draft has " + std::to_string(d.yaml.size()) +
                      " bytes, more than a policy file may (" + std::to_string(max) +
                      "): collapse more (a lower threshold)");
  return d;
}

std::vector<DraftCheck> draft_checks(const std::vector<Observation>& observations,
                                     const DraftOptions& options) {
  return draft::Plan(observations, options).checks();
}

}  // namespace agentcage::policy
