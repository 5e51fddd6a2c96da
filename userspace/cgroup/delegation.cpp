// SPDX-License-Identifier: Apache-2.0
// Run cgroups' layout and delegation (cgroup/delegation.h).
#include "cgroup/delegation.h"

#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "cgroup/cgroup.h"

namespace agentcage::cgroup {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string slash(const std::string& rel) { return "/" + rel; }

// The levels from the root down to <root>/<rel>, the root first.
std::vector<fs::path> levels_of(const fs::path& root, const fs::path& rel) {
  std::vector<fs::path> levels = {root};
  for (const auto& part : rel) {
    if (part.empty() || part == ".") continue;
    levels.push_back(levels.back() / part);
  }
  return levels;
}

// The index in `levels` (the root first) of the deepest existing level below
// the root that `marked` says is delegated; 0 (the root) when none is.
size_t boundary_index(const std::vector<fs::path>& levels, const DelegationMark& marked) {
  for (size_t i = levels.size(); i-- > 1;) {
    std::error_code ec;
    if (fs::is_directory(levels[i], ec) && marked(levels[i])) return i;
  }
  return 0;
}

}  // namespace

bool marked_delegated(const fs::path& dir) {
  char value[8] = {};
  ssize_t n = ::getxattr(dir.c_str(), kDelegateXattr, value, sizeof value);
  return n == 1 && value[0] == '1';
}

std::optional<std::string> parse_proc_cgroup(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    if (path.empty() || path.front() != '/') return std::nullopt;
    return path.substr(1);
  }
  return std::nullopt;
}

Result<std::string> own_cgroup() {
  auto text = read_file("/proc/self/cgroup");
  if (!text) return text.error().wrap("cgroup");
  auto path = parse_proc_cgroup(*text);
  if (!path) return Error{"cgroup: /proc/self/cgroup has no cgroup v2 entry (\"0::/PATH\")", ENOENT};
  return *path;
}

std::optional<fs::path> delegation_boundary(const fs::path& root, const fs::path& dir,
                                            const DelegationMark& marked) {
  fs::path rel = dir.lexically_normal().lexically_relative(root.lexically_normal());
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  const std::vector<fs::path> levels = levels_of(root, rel);
  if (size_t i = boundary_index(levels, marked)) return levels[i];
  return std::nullopt;
}

Result<fs::path> prepare_parent(const fs::path& root, const std::string& rel,
                                const std::vector<std::string>& required, const DelegationMark& marked) {
  fs::path relp = fs::path(rel).lexically_normal();
  if (rel.empty() || relp.is_absolute() || (!relp.empty() && *relp.begin() == ".."))
    return Error{
        "AGENTCAGE_CGROUP_PARENT must be a relative path below the cgroup2 root, not \"" + rel + "\"",
        EINVAL};
  const std::vector<fs::path> levels = levels_of(root, relp);
  // The common case, once per run: the parent is there and enables every
  // controller for its children already. The kernel lets a cgroup enable
  // only what its parent enabled, so every level above has them too:
  // nothing to read there, nothing to write.
  if (auto enabled = read_controllers(levels.back() / "cgroup.subtree_control"))
    if (std::all_of(kRunControllers.begin(), kRunControllers.end(),
                    [&](const std::string& c) { return contains(*enabled, c); }))
      return levels.back();
  // The first level agentcage may write: the delegation boundary, or the root.
  const size_t first = boundary_index(levels, marked);
  const bool delegated = first > 0;

  auto enable_here = [&](const fs::path& dir, bool top) -> Status {
    auto available = read_controllers(dir / "cgroup.controllers");
    auto enabled = read_controllers(dir / "cgroup.subtree_control");
    if (!available || !enabled) return (!available ? available.error() : enabled.error()).wrap("cgroup");
    for (const auto& c : kRunControllers) {
      if (contains(*enabled, c)) continue;
      const bool is_required = contains(required, c);
      if (!contains(*available, c)) {
        if (!is_required) continue;
        if (top && delegated)
          return Error{"cgroup: the " + c + " controller is not delegated to " + dir.string() +
                           " (needed for the " + c + " limit)",
                       ENOTSUP};
        return Error{"cgroup: the " + c + " controller is not available in " + dir.string() +
                         " (needed for the " + c + " limit)",
                     ENOTSUP};
      }
      Status st = write_file(dir / "cgroup.subtree_control", "+" + c);
      if (!st && is_required) return st;
    }
    return {};
  };
  for (size_t i = first; i < levels.size(); ++i) {
    if (i > first && ::mkdir(levels[i].c_str(), 0755) != 0 && errno != EEXIST)
      return Error::from_errno("cgroup: creating " + levels[i].string());
    if (Status st = enable_here(levels[i], i == first); !st) return st.error();
  }
  return levels.back();
}

std::string controller_fix(const fs::path& root, const std::string& rel, const DelegationMark& marked) {
  if (auto boundary = delegation_boundary(root, root / fs::path(rel).lexically_normal(), marked))
    return "give the unit whose cgroup is " + boundary->string() +
           " the controllers: Delegate=yes (or at least Delegate=memory pids cpu) in its [Service] section, "
           "then `systemctl daemon-reload` and restart it; or drop the limit";
  return "enable the controller for " + root.string() +
         "'s children (echo +memory +pids +cpu > cgroup.subtree_control), or drop the limit";
}

std::optional<LayoutSetting> parse_layout_setting(std::string_view word) {
  if (word == "auto") return LayoutSetting::automatic;
  if (word == "delegated") return LayoutSetting::delegated;
  if (word == "fixed") return LayoutSetting::fixed;
  return std::nullopt;
}

std::string_view layout_setting_name(LayoutSetting s) {
  switch (s) {
    case LayoutSetting::automatic:
      return "auto";
    case LayoutSetting::delegated:
      return "delegated";
    case LayoutSetting::fixed:
      return "fixed";
  }
  return "auto";
}

Result<Layout> choose_layout(LayoutSetting setting, const std::string& fixed_parent, const std::string& own,
                             const std::optional<std::string>& boundary) {
  const std::string setting_word = "cgroup_layout: " + std::string(layout_setting_name(setting));
  Layout fixed{false, fixed_parent, "", "", "", ""};
  if (setting == LayoutSetting::fixed) {
    fixed.reason = setting_word;
    return fixed;
  }
  // Only the daemon's own cgroup counts (or the leaf an earlier start made
  // in it): a delegated cgroup further up belongs to another manager (a
  // user's systemd, a container runtime), whose processes are not ours to move.
  std::optional<std::string> delegate;
  if (boundary && !boundary->empty()) {
    if (own == *boundary)
      delegate = own;
    else if (own == *boundary + "/daemon")
      delegate = *boundary;
  }
  if (!delegate) {
    std::string why = "the daemon's cgroup " + slash(own);
    if (boundary && !boundary->empty())
      why += " lies in " + slash(*boundary) + ", which is delegated to another manager, not to the daemon";
    else
      why += " is not delegated to it (no " + std::string(kDelegateXattr) + " attribute)";
    if (setting == LayoutSetting::delegated)
      return Error{setting_word + ", but " + why +
                       ": run the daemon as a systemd service with Delegate=yes "
                       "(packaging/systemd/agentcage.service), or set cgroup_layout: auto",
                   ENOTSUP};
    fixed.reason = setting_word + ": " + why;
    return fixed;
  }
  Layout d;
  d.delegated = true;
  d.delegate = *delegate;
  d.parent = *delegate + "/runs";
  d.leaf = *delegate + "/daemon";
  d.reason = setting_word + ": the daemon's cgroup " + slash(*delegate) + " is delegated to it (" +
             kDelegateXattr + ")";
  return d;
}

Status enter_leaf(const fs::path& delegate, const std::string& leaf) {
  const fs::path leaf_dir = delegate / leaf;
  if (::mkdir(leaf_dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Error::from_errno("cgroup: creating " + leaf_dir.string());
  const fs::path procs = leaf_dir / "cgroup.procs";
  // This process first ("0" is the writer), then whatever else is in D: a
  // process forking meanwhile leaves children behind, so read again until
  // D is empty.
  if (Status st = write_file(procs, "0"); !st) return st;
  for (int round = 0; round < 100; ++round) {
    auto text = read_file(delegate / "cgroup.procs");
    if (!text) return text.error().wrap("cgroup");
    std::istringstream in(*text);
    std::string pid;
    bool any = false;
    while (in >> pid) {
      any = true;
      if (Status st = write_file(procs, pid); !st && st.error().code != ESRCH) return st;
    }
    if (!any) return {};
  }
  return Error{"cgroup: processes keep appearing in " + delegate.string() + "; cannot empty it into " +
                   leaf_dir.string(),
               EBUSY};
}

Result<Layout> settle_daemon_layout(LayoutSetting setting, const std::string& fixed_parent) {
  if (setting == LayoutSetting::fixed) return choose_layout(setting, fixed_parent, "", std::nullopt);
  auto root = find_cgroup2_root();
  auto own = own_cgroup();
  if (!root || !own) {
    const Error& e = !root ? root.error() : own.error();
    if (setting == LayoutSetting::delegated) return e.wrap("cgroup_layout: delegated");
    Layout fixed{false, fixed_parent, "", "", "cgroup_layout: auto: " + e.message, ""};
    return fixed;
  }
  std::optional<std::string> boundary;
  if (auto b = delegation_boundary(*root, *root / *own)) boundary = b->lexically_relative(*root).string();
  auto layout = choose_layout(setting, fixed_parent, *own, boundary);
  if (!layout || !layout->delegated) return layout;
  const fs::path delegate = *root / layout->delegate;
  if (Status st = enter_leaf(delegate, "daemon"); !st)
    return st.error().wrap("the delegated cgroup " + delegate.string());
  // Controllers for the runs: whatever D was given, at D and at D/runs. A
  // missing one is not the daemon's failure: a run that needs it fails
  // closed then, with controller_fix; the log says so now.
  if (auto parent = prepare_parent(*root, layout->parent, {}); !parent)
    return parent.error().wrap("preparing the runs' cgroup");
  auto available = read_controllers(delegate / "cgroup.controllers");
  if (!available) return available.error().wrap("cgroup");
  std::string missing;
  for (const auto& c : kRunControllers)
    if (!contains(*available, c)) missing += (missing.empty() ? "" : " ") + c;
  if (!missing.empty())
    layout->warning = "the controllers " + missing + " are not delegated to " + delegate.string() +
                      ": runs with those limits are refused; " + controller_fix(*root, layout->parent);
  return layout;
}

}  // namespace agentcage::cgroup
