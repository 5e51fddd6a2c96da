// SPDX-License-Identifier: Apache-2.0
// draft_policy and draft_checks (draft.h): observed operations -> the
// narrowest rules that allow them, collapsed as draft.h says (draft_yaml.cpp
// writes them). Both run the same Plan, so every check names an operation
// the draft allows.
#include "policy/draft.h"

#include <arpa/inet.h>
#include <linux/limits.h>
#include <netinet/in.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "policy/draft_rules.h"
#include "policy/name.h"
#include "policy/policy.h"
#include "policy/syscalls.h"
#include "policy/values.h"
#include "util/text.h"

namespace agentcage::policy {
namespace {

using draft::label;
using draft::port_ranges;
using draft::Tally;

// ---- paths in two rule spaces ------------------------------------------------

enum class Space { absolute, workspace };

// A path a rule may name: absolute, or below the workspace as "/" (the
// workspace itself) or "/sub/path".
struct Loc {
  Space space = Space::absolute;
  std::string path;
  auto operator<=>(const Loc&) const = default;
};

std::string shown(const Loc& l) {
  if (l.space == Space::absolute) return l.path;
  return l.path == "/" ? "${workspace}" : "${workspace}" + l.path;
}

// Whole components: /usr/lib covers /usr/lib/x, not /usr/lib64.
bool within(std::string_view p, std::string_view d) {
  if (d == "/") return true;
  return p.starts_with(d) && (p.size() == d.size() || p[d.size()] == '/');
}
bool within(const Loc& p, const Loc& d) { return p.space == d.space && within(p.path, d.path); }

std::string parent(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == 0 ? "/" : p.substr(0, slash);
}

size_t depth(const std::string& p) {
  return p == "/" ? 0 : static_cast<size_t>(std::count(p.begin(), p.end(), '/'));
}

std::string_view top_component(const std::string& p) {
  const size_t end = p.find('/', 1);
  return std::string_view(p).substr(1, end == std::string::npos ? std::string::npos : end - 1);
}

// The longest rule of `rules` that `p` lies within, or nullptr.
const Loc* covering(const std::set<Loc>& rules, Loc p) {
  for (;;) {
    if (auto it = rules.find(p); it != rules.end()) return &*it;
    if (p.path == "/") return nullptr;
    p.path = parent(p.path);
  }
}

// `rules` without those another one covers.
std::set<Loc> drop_covered(const std::set<Loc>& rules) {
  std::set<Loc> out;
  for (const Loc& r : rules)
    if (r.path == "/" || !covering(rules, Loc{r.space, parent(r.path)})) out.insert(r);
  return out;
}

// Top-level directories whose files always stay exact (configuration and
// secrets, devices, kernel state), and those of installed files, where a
// directory two levels down (/usr/lib, /opt/app) may become one rule.
constexpr std::string_view kExactTrees[] = {"etc", "proc", "sys", "dev", "run", "boot"};
constexpr std::string_view kInstalledTrees[] = {"usr", "opt",   "bin",   "sbin",
                                                "lib", "lib32", "lib64", "libx32"};

template <class List>
bool listed(const List& list, std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

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

// ---- the plan ---------------------------------------------------------------

enum class Need { read, write, stat, mmap };

struct PathNeed {
  Need need;
  Loc loc;
  const Observation* obs;
};

struct NetNeed {
  std::string cidr;      // "192.0.2.7/32", "2001:db8::1/128"
  std::string protocol;  // "tcp", "udp", "" (any)
  uint16_t port;
  const Observation* obs;
};

struct UnixNeed {
  std::string name;  // "/run/x.sock" or "@name"
  const Observation* obs;
};

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

class Plan {
 public:
  Plan(const std::vector<Observation>& observations, const DraftOptions& options);

  const draft::Rules& rules() const { return out_; }
  std::vector<DraftCheck> checks() const;

 private:
  void classify(const Observation& o);
  void drop_denied();
  void plan_writes_and_programs();
  void plan_reads();
  void plan_network();
  std::set<Loc> nameable(const std::set<Loc>& rules) const;
  void exec_need(const Observation& o, const Loc& loc);
  void connect_need(const Observation& o);
  std::optional<Loc> locate(const std::string& target) const;
  std::optional<std::string> unruleable(const Loc& loc) const;
  bool eligible(const Loc& dir, bool for_write) const;
  std::set<Loc> collapse_reads(std::set<Loc> reads) const;
  std::set<Loc> collapse_writes(const std::set<Loc>& writes) const;
  bool readable(const Loc& loc) const;
  bool stat_ok(const Loc& loc) const;
  void add_ancestors(const Loc& loc);
  void settle(const PathNeed& n);
  // A target as the comments show it: in the workspace as ${workspace}/...
  std::string display(const std::string& target) const {
    if (workspace_ && within(target, *workspace_)) return "${workspace}" + target.substr(workspace_->size());
    return target;
  }
  void leave(const Observation& o, const std::string& why) {
    out_.left[{label(o), why}].add(o, display(o.target));
  }
  void because(const std::string& rule, const Observation& o) {
    out_.why[rule][label(o)].add(o, display(o.target));
  }
  void check(std::string op, const Observation& o, std::string access, std::string target = "") {
    checks_.try_emplace({std::move(op), target.empty() ? o.target : target, std::move(access)}, o.origin);
  }

  const DraftOptions& options_;
  std::optional<std::string> workspace_;

  std::vector<PathNeed> paths_;
  std::map<std::string, std::vector<const Observation*>> exec_needs_;
  std::vector<NetNeed> net_needs_;
  std::vector<UnixNeed> unix_needs_;
  std::set<Loc> denied_;             // what the observed policy denied by rule
  std::set<std::string> ancestors_;  // directories on the way to an absolute rule

  std::set<Loc> read_, write_;
  draft::Rules out_;  // read and write filled in from read_ and write_ at the end
  std::map<std::tuple<std::string, std::string, std::string>, std::string> checks_;  // -> origin
};

Plan::Plan(const std::vector<Observation>& observations, const DraftOptions& options) : options_(options) {
  out_.name = options.name;
  if (!valid_policy_name(out_.name)) {
    out_.assumed.insert("'" + escape(out_.name, 64) + "' is not a policy name (" +
                        std::string(kPolicyNameRule) + "): the draft is named 'suggested'");
    out_.name = "suggested";
  }
  if (options.workspace) {
    std::string ws = *options.workspace;
    while (ws.size() > 1 && ws.back() == '/') ws.pop_back();
    if (auto n = normalize_path(ws, PATH_MAX); n && *n == ws && ws != "/")
      workspace_ = ws;
    else
      out_.assumed.insert("the workspace '" + escape(ws, 120) +
                          "' is not an absolute directory: paths stay absolute");
  }

  for (const Observation& o : observations) classify(o);
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
  for (const Loc& r : read_) out_.read.insert(shown(r));
  for (const Loc& w : write_) out_.write.insert(shown(w));
}

// A path no rule may name still counts toward collapsing its directory
// (a[1].txt is a file read there too); it is dropped afterwards unless that
// directory became the rule. Not "/" or a top-level path, which would
// swallow everything below it first.
bool countable(const Loc& l) { return l.space == Space::workspace || depth(l.path) > 1; }

std::set<Loc> Plan::nameable(const std::set<Loc>& rules) const {
  std::set<Loc> out;
  for (const Loc& r : rules)
    if (!unruleable(r)) out.insert(r);
  return out;
}

// A path the observed policy denied by rule gets no rule, whoever else was
// denied it by default (an audit log of runs under several policies).
void Plan::drop_denied() {
  std::erase_if(paths_, [&](const PathNeed& n) {
    for (const Loc& d : denied_)
      if (within(n.loc, d)) {
        leave(*n.obs, "the observed policy denies this path by rule: left denied");
        return true;
      }
    return false;
  });
}

// Writes, exact, then programs (exec.allow refuses one under a write rule),
// then writes collapsed (never over a program).
void Plan::plan_writes_and_programs() {
  std::set<Loc> writes;
  for (const PathNeed& n : paths_)
    if (n.need == Need::write && countable(n.loc)) writes.insert(n.loc);
  const std::set<Loc> exact_writes = nameable(drop_covered(writes));
  for (const auto& [path, obs] : exec_needs_) {
    if (covering(exact_writes, Loc{Space::absolute, path})) {
      for (const Observation* o : obs)
        leave(*o, "the run also writes this program, and exec.allow refuses a program the run could replace");
      continue;
    }
    out_.exec.insert(path);
  }
  write_ = nameable(collapse_writes(writes));
  for (const UnixNeed& u : unix_needs_) out_.unix_sockets.insert(u.name);
}

// Reads (an executable mapping of a file the run may write stays denied),
// stats that need a read rule, then reads collapsed.
void Plan::plan_reads() {
  for (const PathNeed& n : paths_) {
    if (n.need != Need::read && n.need != Need::mmap) continue;
    if (n.need == Need::mmap && covering(write_, n.loc)) continue;
    if (countable(n.loc) && !readable(n.loc)) read_.insert(n.loc);
  }
  for (const Loc& w : write_) add_ancestors(w);
  for (const Loc& r : nameable(read_)) add_ancestors(r);
  for (const auto& e : out_.exec) add_ancestors(Loc{Space::absolute, e});
  for (const auto& u : out_.unix_sockets)
    if (u.front() == '/') add_ancestors(Loc{Space::absolute, u});
  // A stat needs no rule on the way to another: deepest first, so that a
  // stat that needs a rule makes the directories above it stat'able.
  std::vector<const PathNeed*> stats;
  for (const PathNeed& n : paths_)
    if (n.need == Need::stat) stats.push_back(&n);
  std::stable_sort(stats.begin(), stats.end(), [](const PathNeed* a, const PathNeed* b) {
    return std::make_tuple(depth(b->loc.path), a->loc) < std::make_tuple(depth(a->loc.path), b->loc);
  });
  for (const PathNeed* n : stats) {
    if (stat_ok(n->loc) || unruleable(n->loc)) continue;
    read_.insert(n->loc);
    add_ancestors(n->loc);
  }
  const std::set<Loc> collapsed = collapse_reads(std::move(read_));
  read_.clear();
  for (const Loc& r : nameable(drop_covered(collapsed)))
    if (!covering(write_, r) && !(r.space == Space::absolute && out_.exec.contains(r.path))) read_.insert(r);
}

// Ports by network and protocol. At most AC_NET_MAX_RANGES port ranges
// reach one network (the compiler merges entries of the same network): the
// rest stays denied.
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
    because("net " + n.cidr + " " + n.protocol, *n.obs);
    const std::string& proto = n.obs->protocol;
    if (proto.empty() || proto == "tcp" || proto == "udp")
      check("connect", *n.obs, "", n.obs->target + "/" + (proto.empty() ? "tcp" : proto));
  }
  std::erase_if(out_.net, [](const auto& entry) { return entry.second.empty(); });
}

void Plan::classify(const Observation& o) {
  if (o.reason != "default_deny" && o.reason != "no_policy" && !o.reason.empty()) {
    if (o.reason == "rule_deny" && o.target_kind == "path")
      if (auto loc = locate(o.target)) denied_.insert(*loc);
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
    auto loc = locate(o.target);
    if (!loc) {
      leave(o, "not a path a rule can name");
      return;
    }
    if (h == "exec") return exec_need(o, *loc);
    Need need = Need::read;
    if (h == "file_change" || (is_open(o) && (o.access & kAccessWrite)))
      need = Need::write;
    else if (h == "mmap_exec")
      need = Need::mmap;
    else if (h == "file_stat")
      need = Need::stat;
    if (is_open(o) && o.access == 0)
      out_.assumed.insert(h + " records without \"access\" (from an older agentcage) were taken as reads");
    paths_.push_back(PathNeed{need, *loc, &o});
    return;
  }
  if (h == "socket_connect" || h == "socket_send" || h == "unix_connect") return connect_need(o);
  leave(o, hook_why(o));
}

void Plan::exec_need(const Observation& o, const Loc& loc) {
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
    if (o.target_kind == "unix" && workspace_ && within(o.target, *workspace_)) {
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

std::optional<Loc> Plan::locate(const std::string& target) const {
  if (target.empty() || target.front() != '/') return std::nullopt;
  if (auto n = normalize_path(target, PATH_MAX); !n || *n != target) return std::nullopt;
  if (workspace_ && within(target, *workspace_))
    return Loc{Space::workspace,
               target.size() == workspace_->size() ? "/" : target.substr(workspace_->size())};
  return Loc{Space::absolute, target};
}

// Why no files rule may name `loc`, or nullopt.
std::optional<std::string> Plan::unruleable(const Loc& loc) const {
  if (loc.space == Space::absolute) {
    if (depth(loc.path) <= 1) return "a rule for / or a whole top-level directory is never drafted";
    if (top_component(loc.path) == "proc") {
      const std::string_view pid = std::string_view(loc.path).substr(6, loc.path.find('/', 6) - 6);
      if (pid.find_first_not_of("0123456789") == std::string_view::npos)
        return "a /proc/PID path names one process (the run's own are readable without a rule, others never)";
    }
  }
  if (auto parsed = parse_file_path(shown(loc)); !parsed) return parsed.error().message;
  return std::nullopt;
}

bool Plan::eligible(const Loc& dir, bool for_write) const {
  if (unruleable(dir)) return false;
  if (dir.space == Space::absolute) {
    const std::string_view top = top_component(dir.path);
    if (listed(kExactTrees, top)) return false;
    if (depth(dir.path) < (listed(kInstalledTrees, top) ? 2u : 3u)) return false;
    // Other runs' workspaces are the workspace's siblings.
    if (workspace_ && within(*workspace_, dir.path)) return false;
    if (for_write)
      for (const auto& e : out_.exec)
        if (within(e, dir.path)) return false;
  }
  for (const Loc& d : denied_)
    if (within(d, dir)) return false;
  return true;
}

std::set<Loc> Plan::collapse_reads(std::set<Loc> reads) const {
  if (options_.collapse == 0) return reads;
  reads = drop_covered(reads);
  for (;;) {
    std::map<Loc, size_t> children;
    for (const Loc& r : reads)
      if (r.path != "/") ++children[Loc{r.space, parent(r.path)}];
    std::vector<Loc> deepest;
    size_t deepest_depth = 0;
    for (const auto& [dir, n] : children) {
      if (n < options_.collapse || !eligible(dir, false)) continue;
      const size_t d = depth(dir.path);
      if (deepest.empty() || d > deepest_depth) {
        deepest = {dir};
        deepest_depth = d;
      } else if (d == deepest_depth) {
        deepest.push_back(dir);
      }
    }
    if (deepest.empty()) return reads;
    for (const Loc& dir : deepest) {
      std::erase_if(reads, [&](const Loc& r) { return within(r, dir); });
      reads.insert(dir);
    }
  }
}

std::set<Loc> Plan::collapse_writes(const std::set<Loc>& writes) const {
  if (options_.collapse == 0) return writes;
  std::map<Loc, size_t> children;
  for (const Loc& w : writes)
    if (w.path != "/") ++children[Loc{w.space, parent(w.path)}];
  std::set<Loc> out = writes;
  for (const auto& [dir, n] : children)
    if (n >= options_.collapse && eligible(dir, true)) out.insert(dir);
  return drop_covered(out);
}

// What a read rule gives: a read or write rule around it, or the program.
bool Plan::readable(const Loc& loc) const {
  return covering(read_, loc) || covering(write_, loc) ||
         (loc.space == Space::absolute && out_.exec.contains(loc.path));
}

// A stat needs what a read needs, or the unix socket's rule, or is of a
// directory on the way to an absolute rule or to the workspace.
bool Plan::stat_ok(const Loc& loc) const {
  if (readable(loc)) return true;
  if (loc.space == Space::workspace) return loc.path == "/";
  return out_.unix_sockets.contains(loc.path) || ancestors_.contains(loc.path) ||
         (workspace_ && within(*workspace_, loc.path));
}

void Plan::add_ancestors(const Loc& loc) {
  if (loc.space != Space::absolute) return;
  for (std::string p = loc.path; p != "/";) {
    p = parent(p);
    ancestors_.insert(p);
  }
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
      if (best || program) {
        because(best ? owner : "exec " + n.loc.path, o);
        check("open", o, "read");
        return;
      }
      break;
    case Need::stat:
      if (stat_ok(n.loc)) {
        if (best || program)
          because(best ? owner : "exec " + n.loc.path, o);
        else if (n.loc.space == Space::absolute && out_.unix_sockets.contains(n.loc.path))
          because("unix " + n.loc.path, o);
        check("stat", o, "");
        return;
      }
      break;
  }
  leave(o, unruleable(n.loc).value_or("no rule drafted"));
}

std::vector<DraftCheck> Plan::checks() const {
  std::vector<DraftCheck> out;
  for (const auto& [key, origin] : checks_)
    out.push_back(DraftCheck{std::get<0>(key), std::get<1>(key), std::get<2>(key), origin});
  return out;
}

}  // namespace

Draft draft_policy(const std::vector<Observation>& observations, const DraftOptions& options) {
  const Plan plan(observations, options);
  Draft d{draft::render_yaml(plan.rules(), options), draft::render_notes(plan.rules())};
  if (const size_t max = ParseOptions{}.max_bytes; d.yaml.size() > max)
    d.notes.push_back("the draft has " + std::to_string(d.yaml.size()) +
                      " bytes, more than a policy file may (" + std::to_string(max) +
                      "): collapse more (a lower threshold)");
  return d;
}

std::vector<DraftCheck> draft_checks(const std::vector<Observation>& observations,
                                     const DraftOptions& options) {
  return Plan(observations, options).checks();
}

}  // namespace agentcage::policy
