// SPDX-License-Identifier: Apache-2.0
// Where run cgroups live, and what agentcage may write on the way there.
//
// Two layouts (docs/run.md, docs/daemon.md "Running under systemd"):
//  - fixed: runs under <cgroup2 root>/<parent> (default agentcage/runs);
//    agentcage creates each level and enables the controllers it lacks, from
//    the root down. Used by direct `agentcage run` and by a daemon without a
//    delegated cgroup (no systemd: containers, the test VM).
//  - delegated: the daemon's own cgroup D was delegated to it by its service
//    manager (systemd's Delegate=, which marks D with the trusted.delegate
//    extended attribute). The daemon moves every process of D into the leaf
//    D/daemon, then runs through it live in D/runs/<id>. Nothing above D is
//    ever written: D's parent and the root belong to systemd.
//
// The rule that protects a manager's cgroups holds for every run, whatever
// its parent: prepare_parent never writes above the deepest cgroup on the way
// that is marked delegated (its boundary), and a controller the boundary was
// not given is an error naming the unit setting that gives it.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage::cgroup {

namespace fs = std::filesystem;

// The controllers a run's cgroup gets when the hierarchy offers them (a
// limit needs its controller: memory.max, pids.max, cpu.max).
inline const std::vector<std::string> kRunControllers = {"memory", "pids", "cpu"};

// The extended attribute systemd's system manager puts on the cgroup of a
// unit with Delegate= (Debian bookworm's systemd 252 does). Only
// CAP_SYS_ADMIN can set a trusted.* attribute, so no delegatee can forge it
// on a cgroup above its own. (systemd also sets user.delegate, which the
// owner of a cgroup can set: not trusted here.)
inline constexpr const char* kDelegateXattr = "trusted.delegate";

// Whether `dir` carries kDelegateXattr with the value "1".
bool marked_delegated(const fs::path& dir);
using DelegationMark = std::function<bool(const fs::path&)>;

// The cgroup v2 path of this process in a /proc/PID/cgroup text: the "0::"
// line's path without its leading '/' ("" for the root). nullopt without
// such a line (cgroup v1 only). Exposed for unit tests.
std::optional<std::string> parse_proc_cgroup(std::string_view text);
// This process's cgroup, relative to the cgroup2 root ("" for the root).
Result<std::string> own_cgroup();

// The deepest of `dir` and its ancestors strictly below `root` that `marked`
// says is delegated; nullopt when none is (the root itself is never a
// delegated cgroup). Levels that do not exist are skipped.
std::optional<fs::path> delegation_boundary(const fs::path& root, const fs::path& dir,
                                            const DelegationMark& marked = marked_delegated);

// Creates <root>/<rel> level by level and enables, at each level from the
// delegation boundary of <root>/<rel> down (from the root when there is
// none), the kRunControllers it offers and has not enabled yet: a level
// whose controllers are enabled already is never written, and nothing above
// the boundary is written or created (a parent that enables every one of
// them already is returned at once: the levels above must enable them too).
// A controller in `required` that cannot be had is an error (its limit could
// not be enforced); `rel` must be relative and stay below the root. Returns
// <root>/<rel>.
Result<fs::path> prepare_parent(const fs::path& root, const std::string& rel,
                                const std::vector<std::string>& required,
                                const DelegationMark& marked = marked_delegated);
// What to do when prepare_parent failed for a missing controller: enable it
// for the root's children, or (below a delegated cgroup) give that cgroup's
// unit the controller with Delegate=.
std::string controller_fix(const fs::path& root, const std::string& rel,
                           const DelegationMark& marked = marked_delegated);

// The daemon's `cgroup_layout` setting.
enum class LayoutSetting {
  automatic,  // "auto": delegated when the daemon's cgroup is marked delegated, else fixed
  delegated,  // the daemon's cgroup must be marked delegated; otherwise it does not start
  fixed,      // runs under cgroup_parent, as a direct run's are
};
std::optional<LayoutSetting> parse_layout_setting(std::string_view word);
std::string_view layout_setting_name(LayoutSetting s);

// Where a daemon's runs live, decided from its setting and its own cgroup.
struct Layout {
  bool delegated = false;
  std::string parent;    // runs' parent, relative to the cgroup2 root
  std::string delegate;  // delegated: D, relative to the root
  std::string leaf;      // delegated: D/daemon, where the daemon and its children live
  std::string reason;    // why this layout, for the daemon's log
  std::string warning;   // delegated: what D lacks (a controller), with the fix
};
// `own` is the daemon's cgroup and `boundary` the deepest marked cgroup at or
// above it (relative to the root; nullopt: none); `fixed_parent` is
// cgroup_parent. Pure: unit-tested on the host.
Result<Layout> choose_layout(LayoutSetting setting, const std::string& fixed_parent, const std::string& own,
                             const std::optional<std::string>& boundary);

// The delegated layout's first step, before any controller is enabled in
// D: moves every process of D (and this process, wherever it is below D)
// into D/<leaf> (created if need be), so that D has no process of its own
// (cgroup v2's no-internal-processes rule). Pids that exit meanwhile are
// skipped; D must be empty at the end.
Status enter_leaf(const fs::path& delegate, const std::string& leaf);

// The whole of it for the daemon: reads its own cgroup, chooses the layout
// and, when delegated, enters the leaf and prepares D/runs. Returns the
// layout (`parent` is what AGENTCAGE_CGROUP_PARENT of its runners says).
Result<Layout> settle_daemon_layout(LayoutSetting setting, const std::string& fixed_parent);

}  // namespace agentcage::cgroup
