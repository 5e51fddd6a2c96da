#include "run/runner.h"

#include "bpf/names.h"
#include "bpf/record.h"
#include "policy/locate.h"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "bpf/compile.h"
#include "control/notify.h"
#include "bpf/enforcer.h"
#include "bpf/lsm.h"
#include "cgroup/cgroup.h"
#include "core/fail_closed.h"
#include "policy/policy.h"
#include "run/sandbox.h"
#include "run/state.h"
#include "scope/scope.h"
#include "util/log.h"
#include "util/sys_names.h"
#include "util/unique_fd.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

uint64_t random64() {
  uint64_t v = 0;
  while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
    if (errno != EINTR) return static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ ::getpid();
  return v;
}

uint64_t unix_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

std::optional<std::string> read_text(const fs::path& p) {
  auto r = cgroup::read_file(p);
  if (!r) return std::nullopt;
  return *r;
}

// Blocks the signals that end a run (taken through a signalfd) for the
// lifetime of the object and ignores SIGPIPE, so agentcage always gets to
// clean up. The child restores everything before exec.
class SignalGuard {
 public:
  SignalGuard() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, s);
    ::sigprocmask(SIG_BLOCK, &set_, &old_mask_);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, &old_pipe_);
    fd_.reset(::signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ~SignalGuard() {
    fd_.reset();
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  int fd() const { return fd_.get(); }
  // The first pending signal, or 0.
  int take() const {
    signalfd_siginfo si{};
    if (fd_ && ::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
      return static_cast<int>(si.ssi_signo);
    return 0;
  }

 private:
  sigset_t set_{}, old_mask_{};
  struct sigaction old_pipe_ {};
  UniqueFd fd_;
};

struct Failure {
  int code = kExitSetup;
  std::string reason;
  std::string fix;
  int err = 0;
};

Failure enforcer_failure(const Error& e) {
  Failure f{kExitSetup, "cannot enforce: " + e.message, {}, e.code};
  if (e.code == EPERM)
    f.fix = "this kernel refuses BPF LSM programs; run on a host whose kernel allows them (Debian 12/13 stock "
            "kernels do; `agentcage doctor` checks), or in the VM: tests/vm/run -- agentcage run ...";
  else if (e.code == bpf::kErrNoBpffs)
    f.fix = "mount -t bpf bpf /sys/fs/bpf, then re-run (`agentcage doctor` checks everything else)";
  else if (e.code == ENOTSUP || e.code == EOPNOTSUPP)
    f.fix = "activate the BPF LSM: " + bpf::lsm_fix_hint(bpf::read_lsm_state());
  else
    f.fix = "run `agentcage doctor` for a full diagnosis";
  return f;
}

// Everything a run creates, released in reverse order by teardown().
struct Resources {
  std::unique_ptr<bpf::Enforcer> enforcer;
  std::optional<RunLease> lease;
  RunRecord record;
  std::optional<UidLease> uid_lease;
  bool workspace_created = false;  // by agentcage (else: the caller's --workspace)
  std::optional<cgroup::Cgroup> cg;
  std::optional<scope::Confinement> confinement;
};

// The controllers a run's cgroup gets, when the hierarchy offers them.
const std::vector<std::string> kControllers = {"memory", "pids", "cpu"};

// Creates <root>/<rel> (each level) and enables the controllers each level
// offers for its children. A controller in `required` that cannot be enabled
// is an error (its limit could not be enforced).
Result<fs::path> prepare_cgroup_parent(const fs::path& root, const std::string& rel,
                                       const std::vector<std::string>& required) {
  fs::path relp = fs::path(rel).lexically_normal();
  if (rel.empty() || relp.is_absolute() || (!relp.empty() && *relp.begin() == ".."))
    return Error{"AGENTCAGE_CGROUP_PARENT must be a relative path below the cgroup2 root, not \"" + rel + "\"",
                 EINVAL};
  fs::path cur = root;
  auto enable_here = [&](const fs::path& dir) -> Status {
    auto available = cgroup::read_controllers(dir / "cgroup.controllers");
    auto enabled = cgroup::read_controllers(dir / "cgroup.subtree_control");
    if (!available || !enabled) return (!available ? available.error() : enabled.error()).wrap("cgroup");
    for (const auto& c : kControllers) {
      bool is_required = std::find(required.begin(), required.end(), c) != required.end();
      if (std::find(enabled->begin(), enabled->end(), c) != enabled->end()) continue;
      if (std::find(available->begin(), available->end(), c) == available->end()) {
        if (is_required)
          return Error{"cgroup: the " + c + " controller is not available in " + dir.string() +
                           " (needed for the " + c + " limit)",
                       ENOTSUP};
        continue;
      }
      Status st = cgroup::write_file(dir / "cgroup.subtree_control", "+" + c);
      if (!st && is_required) return st;
    }
    return {};
  };
  for (const auto& part : relp) {
    if (part.empty() || part == ".") continue;
    if (Status st = enable_here(cur); !st) return st.error();
    cur /= part;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return Error::from_errno("cgroup: creating " + cur.string());
  }
  if (Status st = enable_here(cur); !st) return st.error();
  return cur;
}

Status write_limits(const cgroup::Cgroup& cg, const policy::Limits& limits) {
  const fs::path& p = cg.path();
  if (limits.memory_bytes) {
    if (Status st = cgroup::write_file(p / "memory.max", std::to_string(*limits.memory_bytes)); !st) return st;
    // No swapping around the limit. The file is missing when the kernel
    // does not account swap; then there is nothing to turn off.
    std::error_code ec;
    if (fs::exists(p / "memory.swap.max", ec))
      if (Status st = cgroup::write_file(p / "memory.swap.max", "0"); !st) return st;
    // An OOM kill takes the whole run, not one arbitrary process of it.
    if (fs::exists(p / "memory.oom.group", ec))
      if (Status st = cgroup::write_file(p / "memory.oom.group", "1"); !st) return st;
  }
  if (limits.pids)
    if (Status st = cgroup::write_file(p / "pids.max", std::to_string(*limits.pids)); !st) return st;
  if (limits.cpus) {
    constexpr uint64_t kPeriodUs = 100000;
    auto quota = static_cast<uint64_t>(*limits.cpus * static_cast<double>(kPeriodUs) + 0.5);
    if (quota < 1000) quota = 1000;  // the kernel's minimum quota is 1 ms
    if (Status st = cgroup::write_file(p / "cpu.max", std::to_string(quota) + " " + std::to_string(kPeriodUs)); !st)
      return st;
  }
  return {};
}

void collect_stats(const cgroup::Cgroup& cg, RunResult& res, std::optional<uint64_t> sampled_peak) {
  const fs::path& p = cg.path();
  if (auto cpu = read_text(p / "cpu.stat")) {
    res.cpu_total_us = keyed_value(*cpu, "usage_usec");
    res.cpu_user_us = keyed_value(*cpu, "user_usec");
    res.cpu_system_us = keyed_value(*cpu, "system_usec");
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
    res.oom_kills = keyed_value(*events, "oom_kill").value_or(0);
    res.oom_killed = res.oom_kills > 0;
  }
}

// Undo everything in `r`, newest first. With `collect`, first gather the
// measurements and the denial report into `res`. Returns what could not be
// removed (empty: nothing left behind). Safe to call again.
std::vector<std::string> teardown(Resources& r, RunResult& res, bool collect,
                                  std::optional<uint64_t> sampled_peak, bool keep_workspace) {
  std::vector<std::string> problems;
  bool drained = true;
  if (r.cg) {
    if (Status st = cgroup::kill_and_drain(r.cg->path()); !st) {
      problems.push_back(st.error().message);
      drained = false;
    }
    if (collect) collect_stats(*r.cg, res, sampled_peak);
  }
  if (r.confinement) {
    // The report, then the scope (only from an empty cgroup: survivors stay
    // confined), then its slot; scope/scope.h keeps that order.
    auto released = scope::release(*r.enforcer, *r.confinement, scope::Ending::drained);
    if (!released) {
      problems.push_back(released.error().message);
    } else {
      if (collect) {
        if (released->report) res.report = std::move(released->report);
        else problems.push_back("reading the scope report: " + released->report_error);
      }
      if (!released->kept) r.confinement.reset();
      else if (drained) problems.push_back("processes remain in " + r.cg->path().string() + ": its scope stays");
    }
  }
  if (r.cg && drained && !r.confinement) {
    if (Status st = r.cg->remove(); !st) problems.push_back(st.error().message);
    else r.cg.reset();
  }
  if (!r.record.workspace.empty() && drained) {
    std::error_code ec;
    if (r.workspace_created && !keep_workspace) {
      fs::remove_all(r.record.workspace, ec);
      if (ec) problems.push_back("removing workspace " + r.record.workspace + ": " + ec.message());
    } else if (r.record.restore_uid) {
      if (::chown(r.record.workspace.c_str(), *r.record.restore_uid, *r.record.restore_gid) != 0 ||
          ::chmod(r.record.workspace.c_str(), static_cast<mode_t>(*r.record.restore_mode)) != 0)
        problems.push_back("restoring owner and mode of " + r.record.workspace + ": " + std::strerror(errno));
    }
    if (problems.empty()) r.record.workspace.clear();
  }
  if (problems.empty()) {
    if (r.lease) r.lease->finish();
    r.lease.reset();
    r.uid_lease.reset();
  }
  return problems;
}

}  // namespace

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
        err << "agentcage: warning: stale run " << s.run_id << ": " << s.problem << " (left in place: "
            << s.record_path << ")\n";
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
      if (!released) problem = released.error().message;
      else if (released->kept) problem = "processes remain in " + rec.cgroup + ": its scope stays";
    }
    if (problem.empty() && !rec.workspace.empty()) {
      std::error_code ec;
      if (rec.remove_workspace) fs::remove_all(rec.workspace, ec);
      else if (rec.restore_uid && fs::exists(rec.workspace, ec)) {
        (void)::chown(rec.workspace.c_str(), *rec.restore_uid, *rec.restore_gid);
        (void)::chmod(rec.workspace.c_str(), static_cast<mode_t>(*rec.restore_mode));
      }
      if (ec) problem = "removing " + rec.workspace + ": " + ec.message();
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

namespace {

Result<Identity> resolve_identity(const RunOptions& opts, Resources& r, uint64_t seed) {
  if (!opts.user) {
    auto lease = UidLease::acquire(opts.paths.state_dir, kDynamicUidBase, kDynamicUidCount, seed);
    if (!lease) return lease.error();
    uid_t uid = lease->uid();
    r.uid_lease = std::move(*lease);
    return Identity{uid, static_cast<gid_t>(uid), "dynamic uid " + std::to_string(uid)};
  }
  auto spec = parse_user_spec(*opts.user);
  if (!spec) return spec.error();
  if (spec->uid) return Identity{*spec->uid, *spec->gid, "uid " + std::to_string(*spec->uid)};
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getpwnam_r(spec->name->c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr)
    return Error{"--user: no user named " + policy::quote(*spec->name) + " in the passwd database", rc ? rc : ENOENT};
  return Identity{pw.pw_uid, pw.pw_gid, "user " + *spec->name};
}

// The workspace: a fresh private directory, or the caller's, handed to the
// sandbox identity for the run.
Status prepare_workspace(const RunOptions& opts, const Identity& id, Resources& r) {
  if (!opts.workspace) {
    if (Status st = make_private_dir(opts.paths.workspace_root, 0711); !st) return st.error().wrap("workspace");
    std::error_code ec;
    fs::path root = fs::canonical(opts.paths.workspace_root, ec);
    if (ec) return Error{"workspace: resolving " + opts.paths.workspace_root + ": " + ec.message(), ec.value()};
    fs::path dir = root / r.record.run_id;
    if (::mkdir(dir.c_str(), 0700) != 0) return Error::from_errno("workspace: creating " + dir.string());
    r.workspace_created = true;
    r.record.workspace = dir.string();
    r.record.remove_workspace = !opts.keep;
    if (Status st = r.lease->write(r.record); !st) return st;
    if (::chown(dir.c_str(), id.uid, id.gid) != 0) return Error::from_errno("workspace: chown " + dir.string());
    return {};
  }
  std::error_code ec;
  fs::path dir = fs::canonical(*opts.workspace, ec);
  if (ec) return Error{"--workspace " + *opts.workspace + ": " + ec.message(), ec.value()};
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Error::from_errno("--workspace " + dir.string());
  if (!S_ISDIR(st.st_mode)) return Error{"--workspace " + dir.string() + " is not a directory", ENOTDIR};
  if (dir == "/") return Error{"--workspace / would make the whole host writable", EINVAL};
  r.record.workspace = dir.string();
  if (st.st_uid != id.uid || st.st_gid != id.gid || (st.st_mode & 0700) != 0700) {
    // Hand the directory (not its contents) to the sandbox identity for the
    // run; the record lets a reaper restore it if agentcage dies.
    r.record.restore_uid = st.st_uid;
    r.record.restore_gid = st.st_gid;
    r.record.restore_mode = st.st_mode & 07777;
    if (Status s = r.lease->write(r.record); !s) return s;
    if (::chown(dir.c_str(), id.uid, id.gid) != 0 || ::chmod(dir.c_str(), 0700) != 0)
      return Error::from_errno("--workspace: handing " + dir.string() + " to " + id.name);
  }
  return {};
}

std::string describe_exec_failure(const std::string& command, int err, bool denied_by_policy,
                                  const std::string& policy_name) {
  std::string what = command + ": " + std::strerror(err);
  if (denied_by_policy) return what + " (exec denied by policy " + policy_name + ")";
  if (err == ENOENT) return what + " (not found in the sandbox PATH " + kSandboxPath + ")";
  if (err == ENOEXEC) return what + " (not an executable format; add a #! line)";
  return what;
}

}  // namespace

int run_command(const RunOptions& opts, RunResult& res, std::ostream& err) {
  Resources r;
  // What a 125 at this point means for agentcage_fail_closed_total{reason}
  // (unset: a usage error, not a refusal to run unconfined).
  std::optional<core::FailClosedReason> closed;
  auto fail = [&](const Failure& f) {
    if (f.code == kExitSetup) res.fail_closed_reason = closed;
    res.exit_code = f.code;
    res.error = f.reason;
    res.error_errno = f.err;
    err << "agentcage: " << f.reason << "\n";
    if (!f.fix.empty()) err << "agentcage: fix: " << f.fix << "\n";
    auto left = teardown(r, res, false, std::nullopt, opts.keep);
    for (const auto& p : left) err << "agentcage: cleanup: " << p << "\n";
    return f.code;
  };

  res.command = opts.command;
  if (opts.command.empty() || opts.command[0].empty())
    return fail({kExitSetup, "no COMMAND given", "agentcage run --policy NAME|FILE -- COMMAND [ARGS...]"});

  // ---- what to run, checked before anything is created ------------------
  closed = core::FailClosedReason::policy_invalid;
  auto policy_path = policy::resolve_policy(opts.policy, opts.paths.policy_dir);
  if (!policy_path) return fail({kExitSetup, policy_path.error().message, "see agentcage run --help"});
  res.policy_file = *policy_path;
  std::error_code ec;
  if (!fs::exists(*policy_path, ec) && *policy_path != opts.policy)
    return fail({kExitSetup, "no policy named " + policy::quote(opts.policy) + " (" + *policy_path + " does not exist)",
                 "pass a policy file path, install NAME.yaml into " + opts.paths.policy_dir +
                     ", or point AGENTCAGE_POLICY_DIR / --policy-dir at your policies"});
  auto parsed = policy::load_policy_file(*policy_path);
  if (!parsed.ok()) {
    for (const auto& d : parsed.errors) err << d.format() << "\n";
    return fail({kExitSetup, "policy " + *policy_path + " is not valid (errors above)",
                 "correct it; `agentcage policy check FILE` validates without running anything"});
  }
  const policy::Policy& pol = *parsed.policy;
  res.policy_name = pol.name;
  closed.reset();
  auto limits = effective_limits(pol.limits, opts);
  if (!limits) return fail({kExitSetup, limits.error().message, "see agentcage run --help"});
  res.memory_max_bytes = limits->memory_bytes;
  res.pids_max = limits->pids;
  res.cpus = limits->cpus;
  if (limits->timeout) res.timeout_ms = static_cast<uint64_t>(limits->timeout->count());
  for (const auto& e : opts.env)
    if (auto kv = parse_env_assignment(e); !kv) return fail({kExitSetup, kv.error().message, "see agentcage run --help"});
  closed = core::FailClosedReason::policy_invalid;
  auto compiled = bpf::compile(pol);
  if (!compiled) return fail({kExitSetup, "policy " + *policy_path + ": " + compiled.error().message, ""});

  closed.reset();
  if (::geteuid() != 0)
    return fail({kExitSetup, "agentcage run needs root (BPF LSM programs, cgroups, the sandbox identity)",
                 "run it as root (sudo agentcage run ...)", EPERM});

  SignalGuard signals;
  if (signals.fd() < 0) return fail({kExitSetup, "signalfd: " + std::string(std::strerror(errno)), ""});

  // ---- enforcement ----------------------------------------------------------
  closed = core::FailClosedReason::internal;
  auto enforcer = bpf::Enforcer::open_shared();
  if (!enforcer) {
    closed = bpf::unavailable_reason(bpf::read_lsm_state());
    return fail(enforcer_failure(enforcer.error()));
  }
  r.enforcer = std::move(*enforcer);
  reap_stale_runs(*r.enforcer, opts.paths, err);

  // ---- identity, record, workspace, cgroup, scope ------------------------------
  const uint64_t seed = random64();
  res.run_id = r.record.run_id = format_run_id(seed);
  r.record.owner_pid = ::getpid();
  r.record.started_unix_ms = unix_ms();
  auto lease = RunLease::create(opts.paths.state_dir, res.run_id);
  if (!lease) return fail({kExitSetup, lease.error().message, "run as root with a writable " + opts.paths.state_dir});
  r.lease = std::move(*lease);
  if (Status st = r.lease->write(r.record); !st) return fail({kExitSetup, st.error().message, ""});

  auto id = resolve_identity(opts, r, seed >> 16);
  if (!id) return fail({kExitSetup, id.error().message, "pass --user NAME|UID[:GID]", id.error().code});
  res.uid = id->uid;
  res.gid = id->gid;

  if (Status st = prepare_workspace(opts, *id, r); !st)
    return fail({kExitSetup, st.error().message,
                 opts.workspace ? "pass an existing directory agentcage (root) may chown"
                                : "make " + opts.paths.workspace_root + " creatable by root, or set AGENTCAGE_WORKSPACE_ROOT",
                 st.error().code});
  res.workspace = r.record.workspace;

  closed = core::FailClosedReason::cgroup;
  auto root = cgroup::find_cgroup2_root();
  if (!root) return fail({kExitSetup, root.error().message, "mount cgroup v2: mount -t cgroup2 none /sys/fs/cgroup"});
  std::vector<std::string> required;
  if (limits->memory_bytes) required.push_back("memory");
  if (limits->pids) required.push_back("pids");
  if (limits->cpus) required.push_back("cpu");
  auto parent = prepare_cgroup_parent(*root, opts.paths.cgroup_parent, required);
  if (!parent)
    return fail({kExitSetup, parent.error().message,
                 "enable the controller for " + root->string() +
                     "'s children (echo +memory +pids +cpu > cgroup.subtree_control), or drop the limit",
                 parent.error().code});
  r.record.cgroup = (*parent / res.run_id).string();
  if (Status st = r.lease->write(r.record); !st) return fail({kExitSetup, st.error().message, ""});
  auto cg = cgroup::Cgroup::create(*root, *parent, res.run_id);
  if (!cg) return fail({kExitSetup, cg.error().message, "run as root on a writable cgroup v2 hierarchy", cg.error().code});
  r.cg = std::move(*cg);
  res.cgroup = r.cg->path().string();
  res.scope_id = r.cg->id();
  r.record.cgroup_id = r.cg->id();
  if (Status st = r.lease->write(r.record); !st) return fail({kExitSetup, st.error().message, ""});
  if (Status st = write_limits(*r.cg, *limits); !st)
    return fail({kExitSetup, st.error().message, "check the cgroup controllers (agentcage doctor)", st.error().code});

  closed = core::FailClosedReason::scope;
  // share_named: the same policy installed by name (the daemon's policy
  // directory) with exactly these rules runs on that slot, so the daemon's
  // hot reloads apply to this run too; otherwise a transient slot.
  auto confined = scope::confine(*r.enforcer, scope::CgroupRef{r.cg->id(), r.cg->level(), r.cg->path()},
                                 scope::TransientPolicy{pol.name, std::move(*compiled), true}, r.record.workspace);
  if (!confined)
    return fail({kExitSetup, "registering the scope: " + confined.error().message, "run `agentcage doctor`",
                 confined.error().code});
  r.confinement = *confined;
  if (confined->transient) {
    // For the reaper, should this agentcage die (the scope is found by the
    // cgroup id already in the record; the slot is released with it).
    r.record.policy_slot = confined->slot;
    if (Status st = r.lease->write(r.record); !st) return fail({kExitSetup, st.error().message, ""});
  }

  closed = core::FailClosedReason::internal;
  control::notify_run_start(res.run_id, res.policy_name, res.scope_id);

  // ---- the process ------------------------------------------------------------
  auto env = sandbox_environment(r.record.workspace, opts.env);
  if (!env) return fail({kExitSetup, env.error().message, ""});
  ChildPlan plan(id->uid, id->gid, r.record.workspace, exec_candidates(opts.command[0], kSandboxPath),
                 opts.command, std::move(*env));
  if (int sig = signals.take()) {
    res.interrupted_by = sig;
    return fail({128 + sig, "interrupted by " + signal_name(sig) + " before COMMAND started", ""});
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return fail({kExitSetup, "pipe2: " + std::string(std::strerror(errno)), ""});
  UniqueFd report_rd(pipefd[0]), report_wr(pipefd[1]);
  const pid_t self = ::getpid();
  const auto started = Clock::now();
  auto pid = cgroup::spawn_in_cgroup(r.cg->fd(), [&]() -> int { child_main(plan, report_wr.get(), self); });
  if (!pid) return fail({kExitSetup, pid.error().message, "", pid.error().code});
  report_wr.reset();
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, *pid, 0)));

  ChildFailure report{};
  ssize_t got;
  do got = ::read(report_rd.get(), &report, sizeof report);
  while (got < 0 && errno == EINTR);
  report_rd.reset();

  if (got != 0) {
    // The child did not exec: it reported why, or died trying.
    (void)cgroup::wait_for(*pid);
    auto left = teardown(r, res, true, std::nullopt, opts.keep);
    for (const auto& p : left) err << "agentcage: cleanup: " << p << "\n";
    res.wall_time_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
    if (got == static_cast<ssize_t>(sizeof report) && report.step == static_cast<int32_t>(ChildStep::exec)) {
      // The child did nothing but exec, so any denial in its scope is the
      // exec's: bprm_check_security (exec) or the open of the program file
      // (file_open, when the policy does not let it read the file).
      const bool denied = res.report && res.report->denied_total() > 0;
      int code = denied ? kExitCannotExec : exit_code_for_exec_errno(report.err);
      res.exit_code = code;
      res.error = describe_exec_failure(opts.command[0], report.err, denied, pol.name);
      res.error_errno = report.err;
      err << "agentcage: " << res.error << "\n";
      return code;
    }
    Failure f{kExitSetup, "sandbox setup failed", "", 0};
    if (got == static_cast<ssize_t>(sizeof report)) {
      f.reason += " while " + std::string(describe(static_cast<ChildStep>(report.step))) + ": " +
                  std::strerror(report.err);
      f.err = report.err;
    } else {
      f.reason += ": the child died before reporting";
    }
    res.exit_code = f.code;
    res.error = f.reason;
    res.error_errno = f.err;
    err << "agentcage: " << f.reason << "\n";
    return f.code;
  }
  res.started = true;

  // ---- wait: main process exit, timeout, or a signal to agentcage --------------
  UniqueFd timer;
  if (limits->timeout) {
    timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
    itimerspec its{};
    auto ms = limits->timeout->count();
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (ms % 1000) * 1000000;
    if (!timer || ::timerfd_settime(timer.get(), 0, &its, nullptr) != 0) {
      (void)r.cg->kill_all();
      (void)cgroup::wait_for(*pid);
      return fail({kExitSetup, "timerfd: " + std::string(std::strerror(errno)), ""});
    }
  }
  std::error_code peak_ec;
  const bool have_peak_file = fs::exists(r.cg->path() / "memory.peak", peak_ec);
  std::optional<uint64_t> sampled_peak;
  int wait_status = 0;
  bool reaped = false;
  while (!reaped) {
    pollfd fds[3] = {{signals.fd(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}, {timer.get(), POLLIN, 0}};
    // Without a pidfd (kernel < 5.3) poll for the exit every 50 ms.
    int wait_ms = !pidfd ? 50 : have_peak_file ? -1 : 100;
    int n = ::poll(fds, 3, wait_ms);
    if (n < 0 && errno != EINTR) {
      (void)r.cg->kill_all();
    }
    if (fds[0].revents & POLLIN) {
      if (int sig = signals.take(); sig && !res.timed_out && res.interrupted_by == 0) {
        res.interrupted_by = sig;
        err << "agentcage: " << signal_name(sig) << " received: ending the run\n";
      }
      (void)r.cg->kill_all();
    }
    if (fds[2].revents & POLLIN) {
      uint64_t expirations = 0;
      (void)!::read(timer.get(), &expirations, sizeof expirations);
      if (res.interrupted_by == 0) res.timed_out = true;
      (void)r.cg->kill_all();
    }
    if (!have_peak_file) {
      if (auto cur = read_text(r.cg->path() / "memory.current")) {
        uint64_t v = 0;
        std::istringstream(*cur) >> v;
        if (!sampled_peak || v > *sampled_peak) sampled_peak = v;
      }
    }
    pid_t w = ::waitpid(*pid, &wait_status, WNOHANG);
    if (w == *pid) reaped = true;
    else if (w < 0 && errno != EINTR) {
      err << "agentcage: waitpid: " << std::strerror(errno) << "\n";
      break;
    }
  }

  // ---- end: kill what remains, measure, report, remove everything -----------
  auto left = teardown(r, res, true, sampled_peak, opts.keep);
  res.wall_time_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
  for (const auto& p : left) err << "agentcage: cleanup: " << p << "\n";
  if (!left.empty())
    err << "agentcage: the run was not fully removed; the next agentcage run retries (record in "
        << opts.paths.state_dir << "/runs)\n";

  res.exit_status = exited_code(wait_status);
  res.signal = killed_by(wait_status);
  res.exit_code = exit_code(Outcome{wait_status, res.timed_out, res.interrupted_by});
  if (res.timed_out)
    err << "agentcage: timed out after " << limits->timeout->count() << " ms: killed the run\n";
  else if (res.oom_killed && res.signal && *res.signal == SIGKILL)
    err << "agentcage: out of memory (limit " << (res.memory_max_bytes ? std::to_string(*res.memory_max_bytes) : "none")
        << " bytes): the run was OOM-killed\n";
  res.workspace_kept = fs::exists(res.workspace, peak_ec);
  return res.exit_code;
}

int run_main(const RunOptions& opts, std::ostream& err) {
  // 0, 1 and 2 must be open: otherwise a pipe or lock agentcage opens could
  // land there and be handed to COMMAND as its stdin/stdout/stderr.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) < 0) return kExitSetup;
  // The result file is opened before anything runs: a run whose result
  // cannot be delivered does not start (125). It is written to a temporary
  // name next to it and renamed into place at the end.
  std::string tmp;
  UniqueFd out;
  if (opts.result_file) {
    tmp = *opts.result_file + ".tmp." + std::to_string(::getpid());
    out.reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666));
    if (!out) {
      err << "agentcage: --result " << *opts.result_file << ": cannot create " << tmp << ": "
          << std::strerror(errno) << "\n";
      return kExitSetup;
    }
  }
  RunResult res;
  int code = run_command(opts, res, err);
  res.exit_code = code;
  control::notify_run_end(run_end_notice(res));
  if (res.report && res.report->denied_total() > 0) {
    err << "agentcage: policy " << res.policy_name << " denied " << res.report->denied_total() << " operation(s)";
    const char* sep = ": ";
    for (const auto& rec : res.report->records) {
      err << sep << bpf::hook_name(rec.hook) << " " << bpf::record_target(rec);
      sep = ", ";
    }
    if (res.report->records_taken > res.report->records.size()) err << ", ...";
    err << "\n";
  }
  if (out) {
    const std::string text = to_json(res).dump(2) + "\n";
    size_t off = 0;
    while (off < text.size()) {
      ssize_t n = ::write(out.get(), text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    bool ok = off == text.size() && ::close(out.release()) == 0;
    if (!ok || ::rename(tmp.c_str(), opts.result_file->c_str()) != 0) {
      err << "agentcage: writing the result to " << *opts.result_file << ": " << std::strerror(errno) << "\n";
      ::unlink(tmp.c_str());
    }
  }
  return code;
}

}  // namespace agentcage::run
