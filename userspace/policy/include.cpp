// SPDX-License-Identifier: Apache-2.0
#include "policy/include.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

namespace agentcage::policy {
namespace {

namespace fs = std::filesystem;

// Tightest of two stated limits: a value beats none and `unlimited`.
template <class T>
void tighten(std::optional<T>& mine, bool& mine_unlimited, const std::optional<T>& theirs,
             bool theirs_unlimited) {
  if (theirs) {
    if (!mine || *theirs < *mine) mine = theirs;
    mine_unlimited = false;
  } else if (theirs_unlimited && !mine) {
    mine_unlimited = true;
  }
}

template <class T>
void fill(std::optional<T>& mine, bool& mine_unlimited, const std::optional<T>& theirs,
          bool theirs_unlimited) {
  if (mine || mine_unlimited) return;  // stated by the including file
  mine = theirs;
  mine_unlimited = theirs_unlimited;
}

// Entries of `from` whose file is not one `into` has already (a file two
// includes share is merged once), with Position::source renumbered by
// `index` (from's source -> into's; -1: skip).
template <class Entry>
void append(std::vector<Entry>& into, std::vector<Entry>& from, const std::vector<int>& index) {
  for (auto& e : from) {
    const size_t k = static_cast<size_t>(e.pos.source) < index.size() ? static_cast<size_t>(e.pos.source) : 0;
    if (index[k] < 0) continue;
    e.pos.source = index[k];
    into.push_back(std::move(e));
  }
}

}  // namespace

std::string resolve_include(const std::string& including, const std::string& entry) {
  fs::path p(entry);
  if (p.is_relative() && !including.empty()) p = fs::path(including).parent_path() / p;
  if (p.is_relative()) {
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec);
    if (!ec) p = cwd / p;
  }
  p = p.lexically_normal();
  // The real path of what exists of it: the same name for a file that is
  // there and for one that was just removed.
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(p, ec);
  return ec ? p.string() : real.string();
}

void merge_included(Policy& into, Policy&& included, const std::string& path, std::string text, Position pos,
                    IncludedLimits& limits) {
  auto merged_already = [&](const std::string& p) {
    return std::any_of(into.includes.begin(), into.includes.end(),
                       [&](const Policy::Included& i) { return i.path == p; });
  };
  // A file included twice (a and b both include common.yaml) is merged
  // once: its entries are there already.
  if (merged_already(path)) return;
  // Where each of included's sources goes in into.includes: the file
  // itself, then the files it included, each new one appended once.
  std::vector<int> index(included.includes.size() + 1, -1);
  into.includes.push_back(Policy::Included{path, std::move(text), pos});
  index[0] = static_cast<int>(into.includes.size());
  for (size_t k = 0; k < included.includes.size(); ++k) {
    Policy::Included& nested = included.includes[k];
    if (merged_already(nested.path)) continue;
    const size_t at = static_cast<size_t>(nested.pos.source);
    nested.pos.source = at < index.size() && index[at] > 0 ? index[at] : index[0];
    into.includes.push_back(std::move(nested));
    index[k + 1] = static_cast<int>(into.includes.size());
  }
  append(into.exec_allow, included.exec_allow, index);
  append(into.read, included.read, index);
  append(into.write, included.write, index);
  append(into.deny, included.deny, index);
  append(into.deny_names, included.deny_names, index);
  append(into.network_allow, included.network_allow, index);
  append(into.network_listen, included.network_listen, index);
  for (const auto& group : included.syscalls_allow)
    if (std::find(into.syscalls_allow.begin(), into.syscalls_allow.end(), group) == into.syscalls_allow.end())
      into.syscalls_allow.push_back(group);
  if (included.native_code == Permit::allow) into.native_code = Permit::allow;
  if (included.debugging == Permit::allow) into.debugging = Permit::allow;
  Limits& l = limits.limits;
  const Limits& t = included.limits;
  tighten(l.memory_bytes, l.unlimited.memory, t.memory_bytes, t.unlimited.memory);
  tighten(l.pids, l.unlimited.pids, t.pids, t.unlimited.pids);
  tighten(l.cpus, l.unlimited.cpu, t.cpus, t.unlimited.cpu);
  tighten(l.timeout, l.unlimited.timeout, t.timeout, t.unlimited.timeout);
  tighten(l.disk_bytes, l.unlimited.disk, t.disk_bytes, t.unlimited.disk);
}

void apply_included_limits(Policy& into, const IncludedLimits& limits) {
  Limits& m = into.limits;
  const Limits& t = limits.limits;
  fill(m.memory_bytes, m.unlimited.memory, t.memory_bytes, t.unlimited.memory);
  fill(m.pids, m.unlimited.pids, t.pids, t.unlimited.pids);
  fill(m.cpus, m.unlimited.cpu, t.cpus, t.unlimited.cpu);
  fill(m.timeout, m.unlimited.timeout, t.timeout, t.unlimited.timeout);
  fill(m.disk_bytes, m.unlimited.disk, t.disk_bytes, t.unlimited.disk);
}

}  // namespace agentcage::policy
