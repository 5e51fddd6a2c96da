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

template <class Entry>
void append(std::vector<Entry>& into, std::vector<Entry>& from, int offset) {
  for (auto& e : from) {
    e.pos.source = e.pos.source == 0 ? offset : offset + e.pos.source;
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
  // The included file is source `offset`; the files it included follow it.
  const int offset = static_cast<int>(into.includes.size()) + 1;
  into.includes.push_back(Policy::Included{path, std::move(text), pos});
  for (auto& nested : included.includes) {
    nested.pos.source = nested.pos.source == 0 ? offset : offset + nested.pos.source;
    into.includes.push_back(std::move(nested));
  }
  append(into.exec_allow, included.exec_allow, offset);
  append(into.read, included.read, offset);
  append(into.write, included.write, offset);
  append(into.deny, included.deny, offset);
  append(into.deny_names, included.deny_names, offset);
  append(into.network_allow, included.network_allow, offset);
  append(into.network_listen, included.network_listen, offset);
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
