// SPDX-License-Identifier: Apache-2.0
// Removing what runs whose agentcage died left behind (run/runner.h).

#include <cerrno>
#include <filesystem>
#include <ostream>

#include "cgroup/cgroup.h"
#include "run/artifacts.h"
#include "run/runner.h"
#include "run/state.h"
#include "run/workspace.h"
#include "scope/scope.h"

namespace agentcage::run {

namespace fs = std::filesystem;

void reap_stale_runs(bpf::Enforcer& enforcer, const Paths& paths, std::ostream& err) {
  auto stale = find_stale_runs(paths.state_dir);
  if (!stale) {
    err << "agentcage: warning: looking for stale runs: " << stale.error().message << "\n";
    return;
  }
  for (auto& s : *stale) {
    if (!s.record) {
      if (s.record_missing) {
        s.forget();
      } else {
        err << "agentcage: warning: stale run " << s.run_id << ": " << s.problem
            << " (left in place: " << s.record_path << ")\n";
      }
      continue;
    }
    const RunRecord& rec = *s.record;
    std::string problem;
    if (!rec.cgroup.empty())
      if (Status st = cgroup::remove_tree(rec.cgroup); !st) problem = st.error().message;
    if (problem.empty()) {
      // The cgroup is gone, so the scope goes (scope::Ending::drained checks).
      scope::Confinement c;
      c.cgroup_id = rec.cgroup_id;
      c.cgroup = rec.cgroup;
      c.slot = rec.policy_slot.value_or(0);
      c.transient = rec.policy_slot.has_value();
      auto released = scope::release(enforcer, c, scope::Ending::drained);
      if (!released)
        problem = released.error().message;
      else if (released->kept)
        problem = "processes remain in " + rec.cgroup + ": its scope stays";
    }
    if (problem.empty() && !rec.workspace.empty() && rec.workspace_tmpfs_bytes) {
      // The tmpfs goes first, copied out when it was to be kept (run/workspace.h).
      std::string not_kept;
      if (Status st =
              unmount_workspace(rec.workspace, !rec.remove_workspace, *rec.workspace_tmpfs_bytes, not_kept);
          !st)
        problem = st.error().message;
      else if (!not_kept.empty())
        err << "agentcage: warning: stale run " << s.run_id
            << ": the workspace could not be kept, it was removed: " << not_kept << "\n";
      if (!not_kept.empty()) (void)remove_tree(rec.workspace);
    }
    const bool callers = !rec.workspace.empty() && (rec.workspace_ino || rec.restore_uid);
    if (problem.empty() && callers) {
      // The caller's --workspace: only the directory the run had, reached
      // without a symbolic link (run/workspace.h); a path that leads
      // elsewhere now is left alone, and said so.
      auto fd = open_callers_workspace(rec.workspace, rec.workspace_dev, rec.workspace_ino);
      if (!fd && fd.error().code != ENOENT)
        err << "agentcage: warning: stale run " << s.run_id << ": " << fd.error().message << "\n";
      else if (fd)
        for (const auto& p : hand_back_callers_workspace(fd->get(), rec.workspace, rec))
          err << "agentcage: warning: stale run " << s.run_id << ": " << p << "\n";
    } else if (problem.empty() && !rec.workspace.empty()) {
      std::error_code ec;
      // A kept workspace is handed back as at the end of a run
      // (run/workspace.h). (A workspace agentcage made: below its own
      // root-owned directory.)
      if (!rec.remove_workspace && fs::exists(rec.workspace, ec))
        for (const auto& p : hand_back_kept_workspace(rec.workspace, rec))
          err << "agentcage: warning: stale run " << s.run_id << ": " << p << "\n";
      if (rec.remove_workspace)
        if (Status st = remove_tree(rec.workspace); !st) problem = st.error().message;
    }
    if (!problem.empty()) {
      err << "agentcage: warning: cannot reap stale run " << s.run_id << ": " << problem << "\n";
      continue;
    }
    err << "agentcage: reaped stale run " << s.run_id << " (its agentcage, pid " << rec.owner_pid
        << ", died): killed its processes, removed its cgroup, scope"
        << (rec.remove_workspace ? " and workspace" : "") << "\n";
    s.forget();
  }
}

}  // namespace agentcage::run
