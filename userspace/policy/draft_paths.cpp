// SPDX-License-Identifier: Apache-2.0
// The files rules of a draft (draft_plan.h): paths located in their rule
// space, what no rule may name, which targets are directories, reads and
// writes collapsed where draft.h allows it, and what a stat or read needs.
#include <linux/limits.h>

#include <algorithm>
#include <iterator>

#include "policy/draft_plan.h"
#include "policy/values.h"

namespace agentcage::policy::draft {
namespace {

std::string_view top_component(const std::string& p) {
  const size_t end = p.find('/', 1);
  return std::string_view(p).substr(1, end == std::string::npos ? std::string::npos : end - 1);
}

// A component starting with '.' (/home/me/.ssh, /opt/x/.git): the path is
// normalised, so "/." is one.
bool hidden_component(std::string_view p) { return p.find("/.") != std::string_view::npos; }

constexpr const char* kDirectoryRule = "a directory: allows everything below it, observed or not";

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

// `rules` without those another one covers.
std::set<Loc> drop_covered(const std::set<Loc>& rules) {
  std::set<Loc> out;
  for (const Loc& r : rules)
    if (r.path == "/" || !covering(rules, Loc{r.space, parent(r.path)})) out.insert(r);
  return out;
}

// A path no rule may name still counts toward collapsing its directory
// (a[1].txt is a file read there too); it is dropped afterwards unless that
// directory became the rule. Not "/" or a top-level path, which would
// swallow everything below it first.
bool countable(const Loc& l) { return l.space == Space::workspace || depth(l.path) > 1; }

}  // namespace

const Loc* covering(const std::set<Loc>& rules, Loc p) {
  for (;;) {
    if (auto it = rules.find(p); it != rules.end()) return &*it;
    if (p.path == "/") return nullptr;
    p.path = parent(p.path);
  }
}

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
    for (Loc l = n.loc;; l.path = parent(l.path)) {
      if (denied_.contains(l)) {
        leave(*n.obs, "the observed policy denies this path by rule: left denied");
        return true;
      }
      if (l.path == "/") return false;
    }
  });
}

// Writes, exact, then programs (exec.allow refuses one under a write rule),
// then writes collapsed (below ${workspace} only, where no program is
// allowed). A directory changed outside the workspace gets no rule.
void Plan::plan_writes_and_programs() {
  std::set<Loc> writes;
  for (const PathNeed& n : paths_)
    if (n.need == Need::write && countable(n.loc) && !(n.directory && n.loc.space == Space::absolute))
      writes.insert(n.loc);
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
// stats and watches of files, and listings of directories a collapse could
// make a rule of (eligible: the rule says it covers everything below),
// collapsed; then the stats and watches that need a rule of their own. A
// stat or watch of a directory makes no rule here: one on the way to a rule
// needs none, another is a note unless a rule covers it. Stats count toward
// collapsing as reads do: an audit-mode run that can stat three files can
// read them too, so counting only reads would protect nothing, and a
// program's stats (Python's of every module source) are most of what it
// uses.
void Plan::plan_reads() {
  std::set<Loc> reads;
  for (const PathNeed& n : paths_) {
    if (n.need == Need::write) continue;
    if (n.directory && (n.need != Need::read || !eligible(n.loc))) continue;
    if (n.need == Need::mmap && covering(write_, n.loc)) continue;
    if (n.need == Need::stat && n.loc.space == Space::absolute && out_.unix_sockets.contains(n.loc.path))
      continue;
    if (countable(n.loc) && !readable(n.loc)) reads.insert(n.loc);
  }
  for (const Loc& r : nameable(drop_covered(collapse_reads(std::move(reads)))))
    if (!covering(write_, r) && !(r.space == Space::absolute && out_.exec.contains(r.path))) read_.insert(r);
  for (const Loc& w : write_) add_ancestors(w);
  for (const Loc& r : read_) add_ancestors(r);
  for (const auto& e : out_.exec) add_ancestors(Loc{Space::absolute, e});
  for (const auto& u : out_.unix_sockets)
    if (u.front() == '/') add_ancestors(Loc{Space::absolute, u});
  // A stat needs no rule on the way to another: deepest first, so that a
  // stat that needs a rule makes the directories above it stat'able.
  std::vector<const PathNeed*> alone;
  for (const PathNeed& n : paths_)
    if ((n.need == Need::stat || n.need == Need::watch) && !n.directory) alone.push_back(&n);
  std::stable_sort(alone.begin(), alone.end(), [](const PathNeed* a, const PathNeed* b) {
    return std::make_tuple(depth(b->loc.path), a->loc) < std::make_tuple(depth(a->loc.path), b->loc);
  });
  for (const PathNeed* n : alone) {
    const bool ok = n->need == Need::stat ? stat_ok(n->loc, *n->obs) : readable(n->loc);
    if (ok || unruleable(n->loc)) continue;
    read_.insert(n->loc);
    add_ancestors(n->loc);
  }
}

// A files rule on a directory says so: it allows what nobody observed.
void Plan::mark_directory_rules() {
  for (const auto& [rules, kind] : {std::pair{&read_, "read "}, std::pair{&write_, "write "}})
    for (const Loc& r : *rules)
      if (is_directory(r)) out_.caution[kind + shown(r)].insert(kDirectoryRule);
}

std::optional<Loc> Plan::locate(const Observation& o) const {
  const std::string& target = o.target;
  if (target.empty() || target.front() != '/') return std::nullopt;
  if (auto n = normalize_path(target, PATH_MAX); !n || *n != target) return std::nullopt;
  const std::string& ws = workspace_of(o);
  if (!ws.empty() && within(target, ws))
    return Loc{Space::workspace, target.size() == ws.size() ? "/" : target.substr(ws.size())};
  return Loc{Space::absolute, target};
}

// A record said so, or another observed path lies below it (the workspace
// always).
bool Plan::is_directory(const Loc& loc) const {
  return flagged_.contains(loc) || above_observed_.contains(loc) ||
         (loc.space == Space::workspace && loc.path == "/");
}

// Why no files rule may name `loc`, or nullopt.
std::optional<std::string> Plan::unruleable(const Loc& loc) const {
  if (loc.space == Space::absolute) {
    if (depth(loc.path) <= 1) return "a rule for / or a whole top-level directory is never drafted";
    if (near_workspace_.contains(loc.path))
      return "a workspace or a directory above one: a rule there reaches other runs' workspaces";
    if (top_component(loc.path) == "proc") {
      const std::string_view pid = std::string_view(loc.path).substr(6, loc.path.find('/', 6) - 6);
      if (pid.find_first_not_of("0123456789") == std::string_view::npos)
        return "a /proc/PID path names one process (the run's own are readable without a rule, others never)";
    }
  }
  if (auto parsed = parse_file_path(shown(loc)); !parsed) return parsed.error().message;
  return std::nullopt;
}

bool Plan::eligible(const Loc& dir) const {
  if (unruleable(dir)) return false;
  if (dir.space == Space::absolute) {
    const std::string_view top = top_component(dir.path);
    if (listed(kExactTrees, top) || hidden_component(dir.path)) return false;
    if (depth(dir.path) < (listed(kInstalledTrees, top) ? 2u : 3u)) return false;
  }
  return !denied_.contains(dir) && !above_denied_.contains(dir);
}

std::set<Loc> Plan::collapse_reads(std::set<Loc> reads) const {
  if (options_.collapse == 0) return reads;
  reads = drop_covered(reads);
  // Each round collapses the deepest directories that qualify; the ones at
  // that depth never qualify later, so there are at most as many rounds as
  // levels.
  for (;;) {
    std::map<Loc, size_t> children;
    for (const Loc& r : reads)
      if (r.path != "/") ++children[Loc{r.space, parent(r.path)}];
    std::vector<Loc> deepest;
    size_t deepest_depth = 0;
    for (const auto& [dir, n] : children) {
      if (n < options_.collapse || !eligible(dir)) continue;
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
      if (dir.path == "/") {
        std::erase_if(reads, [&](const Loc& r) { return r.space == dir.space; });
      } else {
        // What lies below dir sorts together, right after dir + "/".
        const std::string below = dir.path + "/";
        auto it = reads.lower_bound(Loc{dir.space, below});
        while (it != reads.end() && it->space == dir.space && it->path.starts_with(below))
          it = reads.erase(it);
        reads.erase(dir);
      }
      reads.insert(dir);
    }
  }
}

std::set<Loc> Plan::collapse_writes(const std::set<Loc>& writes) const {
  if (options_.collapse == 0) return writes;
  std::map<Loc, size_t> children;
  for (const Loc& w : writes)
    if (w.space == Space::workspace && w.path != "/") ++children[Loc{w.space, parent(w.path)}];
  std::set<Loc> out = writes;
  for (const auto& [dir, n] : children)
    if (n >= options_.collapse && eligible(dir)) out.insert(dir);
  return drop_covered(out);
}

// What a read rule gives: a read or write rule around it, or the program.
bool Plan::readable(const Loc& loc) const {
  return covering(read_, loc) || covering(write_, loc) ||
         (loc.space == Space::absolute && out_.exec.contains(loc.path));
}

// A stat needs what a read needs, or the unix socket's rule, or is of a
// directory on the way to an absolute rule or to the run's workspace.
bool Plan::stat_ok(const Loc& loc, const Observation& o) const {
  if (readable(loc)) return true;
  if (loc.space == Space::workspace) return loc.path == "/";
  const std::string& ws = workspace_of(o);
  return out_.unix_sockets.contains(loc.path) || ancestors_.contains(loc.path) ||
         (!ws.empty() && within(ws, loc.path));
}

void Plan::add_ancestors(const Loc& loc) {
  if (loc.space != Space::absolute) return;
  for (std::string p = loc.path; p != "/";) {
    p = parent(p);
    if (!ancestors_.insert(p).second) return;
  }
}

}  // namespace agentcage::policy::draft
