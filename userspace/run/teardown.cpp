// SPDX-License-Identifier: Apache-2.0
// Releasing what a run created, newest first, in one place (run/steps.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "run/artifacts.h"
#include "run/steps.h"
#include "run/workspace.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const fs::path& p) {
  auto r = cgroup::read_file(p);
  if (!r) return std::nullopt;
  return *r;
}

void collect_stats(const cgroup::Cgroup& cg, RunResult& res, std::optional<uint64_t> sampled_peak) {
  const fs::path& p = cg.path();
  if (auto cpu = read_text(p / "cpu.stat")) {
    res.cpu_total_us = cgroup::keyed_value(*cpu, "usage_usec");
    res.cpu_user_us = cgroup::keyed_value(*cpu, "user_usec");
    res.cpu_system_us = cgroup::keyed_value(*cpu, "system_usec");
  }
  if (auto peak = read_text(p / "memory.peak")) {
    uint64_t v = 0;
    std::istringstream(*peak) >> v;
    res.peak_memory_bytes = v;
    res.peak_memory_source = "memory.peak";
  } else if (sampled_peak) {
    res.peak_memory_bytes = sampled_peak;
    res.peak_memory_source = "memory.current sampled every 100 ms";
  }
  if (auto events = read_text(p / "memory.events")) {
    res.oom_kills = cgroup::keyed_value(*events, "oom_kill").value_or(0);
    res.oom_killed = res.oom_kills > 0;
  }
}

}  // namespace

std::vector<std::string> teardown(Resources& r, RunResult& res, bool collect,
                                  std::optional<uint64_t> sampled_peak, bool keep_workspace,
                                  bool defer_removal) {
  std::vector<std::string> problems;
  bool drained = true;
  if (r.cg) {
    if (Status st = cgroup::kill_and_drain(r.cg->path()); !st) {
      problems.push_back(st.error().message);
      drained = false;
    }
    if (collect) collect_stats(*r.cg, res, sampled_peak);
  }
  // Nothing of the run can make a call any more (killed and drained), so
  // the count is final; until then the listener stayed open, so that a
  // survivor's denied call failed with EPERM, counted, not with ENOSYS.
  if (r.seccomp) {
    if (drained) (void)r.seccomp->answer_pending();
    if (collect) res.syscalls = r.seccomp->report();
    if (drained) r.seccomp.reset();
  }
  // The last records of a recorded run: nothing of it is left to make more.
  if (r.recording && collect) {
    if (Status st = r.recording->drain(); !st)
      problems.push_back("reading the recording: " + st.error().message);
  }
  if (r.dns && collect) res.dns = r.dns->report();
  if (r.confinement && defer_removal && drained && collect) {
    // The answer needs only the report: the scope and its slot go after it,
    // with the cgroup (nothing is left in the scope to decide on).
    if (auto report = scope::report(*r.enforcer, *r.confinement))
      res.report = std::move(*report);
    else
      problems.push_back("reading the scope report: " + report.error().message);
  } else if (r.confinement) {
    // The report, then the scope (only from an empty cgroup: survivors stay
    // confined), then its slot; scope/scope.h keeps that order.
    auto released = scope::release(*r.enforcer, *r.confinement, scope::Ending::drained);
    if (!released) {
      problems.push_back(released.error().message);
    } else {
      if (collect) {
        if (released->report)
          res.report = std::move(released->report);
        else
          problems.push_back("reading the scope report: " + released->report_error);
      }
      if (!released->kept)
        r.confinement.reset();
      else if (drained)
        problems.push_back("processes remain in " + r.cg->path().string() + ": its scope stays");
    }
  }
  if (r.recording && collect) {
    // Complete only when the kernel's count of records the ring buffer had
    // no room for was read, and says none.
    res.recording = r.recording->json(res.report ? res.report->records_unrecorded : 0);
    if (!res.report) (*res.recording)["complete"] = false;
  }
  if (r.cg && drained && !r.confinement && !defer_removal) {
    if (Status st = r.cg->remove(); !st)
      problems.push_back(st.error().message);
    else
      r.cg.reset();
  }
  if (!r.record.workspace.empty() && drained && r.io_dir) {
    // --io-dir: the workspace goes back to the caller's directory before it
    // goes. Once, whatever happens: a retry must not copy twice.
    UniqueFd io = std::move(r.io_dir);
    IoReport& report = res.io ? *res.io : res.io.emplace();
    UniqueFd ws(::open(r.record.workspace.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    IoCopy done;
    Status st;
    if (!ws) {
      st = Error::from_errno("opening the workspace");
    } else {
      // As the caller: every file it writes is the caller's own doing.
      const IoOwner who = r.io_owner;
      const int src = ws.get(), dst = io.get();
      const uint64_t budget = res.disk_max_bytes.value_or(UINT64_MAX);
      CopyChild how;
      how.become = [who] { return become_io_owner(who); };
      how.keep = {src, dst};
      st = run_copy_child(
          how, [&](IoCopy& mine) { return copy_out(src, dst, who, budget, mine); }, done);
    }
    report.copied_out = done.entries;
    report.copied_out_bytes = done.bytes;
    for (auto& s : done.skipped)
      if (report.skipped.size() < 20) report.skipped.push_back(std::move(s));
    report.skipped_total += done.skipped_total;
    // Not a cleanup problem: the run's own things still all go.
    if (!st) report.error = "copying the workspace back to " + report.dir + ": " + st.error().message;
  }
  r.workspace_removal_deferred =
      defer_removal && !r.record.workspace.empty() && r.workspace_created && !keep_workspace;
  const size_t before_workspace = problems.size();
  if (!r.record.workspace.empty() && drained && !r.workspace_removal_deferred) {
    bool kept = !r.workspace_created || keep_workspace;
    if (r.record.workspace_tmpfs_bytes) {
      // The tmpfs goes first; a kept one is copied onto the disk before.
      std::string not_kept;
      if (Status st = unmount_workspace(r.record.workspace, kept, *r.record.workspace_tmpfs_bytes, not_kept);
          !st) {
        problems.push_back(st.error().message);
        return problems;
      }
      if (!not_kept.empty()) {
        res.workspace_error = "the workspace could not be kept, it was removed: " + not_kept;
        kept = false;
      }
    }
    if (kept && r.callers_workspace) {
      // The caller's --workspace: through the directory the run had, not
      // by its path (run/workspace.h); its owner and mode come back too.
      auto left = hand_back_callers_workspace(r.callers_workspace.get(), r.record.workspace, r.record);
      problems.insert(problems.end(), left.begin(), left.end());
    } else if (kept) {
      // Nothing of the run runs any more (drained): what it left is made
      // safe to hand back (run/workspace.h).
      auto left = hand_back_kept_workspace(r.record.workspace, r.record);
      problems.insert(problems.end(), left.begin(), left.end());
    }
    if (!kept)
      if (Status st = remove_tree(r.record.workspace); !st)
        problems.push_back("removing workspace " + r.record.workspace + ": " + st.error().message);
    // Handed back (or removed): never again, not even by a reaper after
    // another problem kept the record (the caller owns the directory now).
    if (problems.size() == before_workspace) {
      r.record.workspace.clear();
      if (!problems.empty() && r.lease)
        if (Status st = r.lease->write(r.record); !st) problems.push_back(st.error().message);
    }
  }
  if (problems.empty() && !defer_removal) {
    if (r.lease) r.lease->finish();
    r.lease.reset();
    r.uid_lease.reset();
  }
  return problems;
}

}  // namespace agentcage::run
