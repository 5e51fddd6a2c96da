// SPDX-License-Identifier: Apache-2.0
// Internal to policy/draft*.cpp: the Plan that turns observations into the
// rules of a draft (draft_rules.h), as draft.h describes. draft.cpp sorts
// observations into what they need and settles each against the final
// rules (and network and programs); draft_paths.cpp owns the files rules:
// the two rule spaces, what no rule may name, directories, collapsing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "policy/draft.h"
#include "policy/draft_rules.h"

namespace agentcage::policy::draft {

// ---- paths in two rule spaces ------------------------------------------------

enum class Space { absolute, workspace };

// A path a rule may name: absolute, or below the workspace as "/" (the
// workspace itself) or "/sub/path".
struct Loc {
  Space space = Space::absolute;
  std::string path;
  auto operator<=>(const Loc&) const = default;
};

inline std::string shown(const Loc& l) {
  if (l.space == Space::absolute) return l.path;
  return l.path == "/" ? "${workspace}" : "${workspace}" + l.path;
}

// Whole components: /usr/lib covers /usr/lib/x, not /usr/lib64.
inline bool within(std::string_view p, std::string_view d) {
  if (d == "/") return true;
  return p.starts_with(d) && (p.size() == d.size() || p[d.size()] == '/');
}

inline std::string parent(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == 0 ? "/" : p.substr(0, slash);
}

inline size_t depth(const std::string& p) {
  return p == "/" ? 0 : static_cast<size_t>(std::count(p.begin(), p.end(), '/'));
}

// Locs looked up by one hash, for sets every path is asked about.
class LocSet {
 public:
  bool insert(const Loc& l) { return set_.insert(key(l)).second; }
  bool contains(const Loc& l) const { return set_.contains(key(l)); }
  // Every directory strictly above `l` in its space. In a set filled only
  // this way a directory already there has its own above it too: the walk
  // stops at the first one.
  void insert_above(Loc l) {
    while (l.path != "/") {
      l.path = parent(l.path);
      if (!insert(l)) return;
    }
  }

 private:
  static std::string key(const Loc& l) { return (l.space == Space::absolute ? "a" : "w") + l.path; }
  std::unordered_set<std::string> set_;
};

// The longest rule of `rules` that `p` lies within, or nullptr.
const Loc* covering(const std::set<Loc>& rules, Loc p);

// ---- the plan ---------------------------------------------------------------

enum class Need { read, write, stat, watch, mmap };

struct PathNeed {
  Need need;
  Loc loc;
  const Observation* obs;
  bool directory = false;  // the target is a directory (Plan::is_directory)
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

class Plan {
 public:
  Plan(const std::vector<Observation>& observations, const DraftOptions& options);

  const draft::Rules& rules() const { return out_; }
  std::vector<DraftCheck> checks() const;

 private:
  void read_workspaces(const std::vector<Observation>& observations);
  void classify(const Observation& o);
  void drop_denied();
  void plan_writes_and_programs();
  void plan_reads();
  void plan_network();
  void mark_directory_rules();
  std::set<Loc> nameable(const std::set<Loc>& rules) const;
  void exec_need(const Observation& o, const Loc& loc);
  void connect_need(const Observation& o);
  const std::string& workspace_of(const Observation& o) const;
  std::optional<Loc> locate(const Observation& o) const;
  bool is_directory(const Loc& loc) const;
  std::optional<std::string> unruleable(const Loc& loc) const;
  bool eligible(const Loc& dir) const;
  std::set<Loc> collapse_reads(std::set<Loc> reads) const;
  std::set<Loc> collapse_writes(const std::set<Loc>& writes) const;
  bool readable(const Loc& loc) const;
  bool stat_ok(const Loc& loc, const Observation& o) const;
  void add_ancestors(const Loc& loc);
  void settle(const PathNeed& n);
  // A target as the comments show it: in its run's workspace as ${workspace}/...
  std::string display(const Observation& o) const {
    const std::string& ws = workspace_of(o);
    if (!ws.empty() && within(o.target, ws)) return "${workspace}" + o.target.substr(ws.size());
    return o.target;
  }
  void leave(const Observation& o, const std::string& why) { out_.left[{label(o), why}].add(o, display(o)); }
  void because(const std::string& rule, const Observation& o) { out_.why[rule][label(o)].add(o, display(o)); }
  void check(std::string op, const Observation& o, std::string access, std::string target = "") {
    checks_.try_emplace(
        {std::move(op), target.empty() ? o.target : target, std::move(access), workspace_of(o)}, o.origin);
  }

  const DraftOptions& options_;
  std::map<std::string, std::string> workspaces_;   // as recorded -> as a rule space ("": not one)
  std::unordered_set<std::string> near_workspace_;  // every workspace and each directory above one

  std::vector<PathNeed> paths_;
  std::vector<std::pair<const Observation*, Loc>> execs_;  // exec observations, until is_directory knows
  std::map<std::string, std::vector<const Observation*>> exec_needs_;
  std::vector<NetNeed> net_needs_;
  std::vector<UnixNeed> unix_needs_;
  std::set<Loc> denied_;             // what the observed policy denied by rule
  LocSet above_denied_;              // the directories above it
  LocSet flagged_;                   // paths a record says are directories
  LocSet above_observed_;            // the directories above every observed path
  std::set<std::string> ancestors_;  // directories on the way to an absolute rule

  std::set<Loc> read_, write_;
  draft::Rules out_;  // read and write filled in from read_ and write_ at the end
  // (op, target, access, workspace) -> origin
  std::map<std::tuple<std::string, std::string, std::string, std::string>, std::string> checks_;
};

}  // namespace agentcage::policy::draft
