// SPDX-License-Identifier: Apache-2.0
// The setup steps of a run, up to the confined, empty cgroup (run/steps.h).
#include <fcntl.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <ostream>

#include "bpf/compile.h"
#include "bpf/lsm.h"
#include "cgroup/delegation.h"
#include "control/notify.h"
#include "policy/locate.h"
#include "run/policy_cache.h"
#include "run/runner.h"
#include "run/steps.h"
#include "run/workspace.h"

namespace agentcage::run {
namespace {

namespace fs = std::filesystem;
using core::FailClosedReason;

uint64_t random64() {
  uint64_t v = 0;
  while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
    if (errno != EINTR)
      return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^ ::getpid();
  return v;
}

uint64_t unix_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

Failure enforcer_failure(const Error& e) {
  Failure f{
      kExitSetup, "cannot enforce: " + e.message, {}, e.code, bpf::unavailable_reason(bpf::read_lsm_state())};
  if (e.code == EPERM)
    f.fix =
        "this kernel refuses BPF LSM programs; run on a host whose kernel allows them (Debian 12/13 stock "
        "kernels do; `agentcage doctor` checks), or in the VM: tests/vm/run -- agentcage run ...";
  else if (e.code == bpf::kErrNoBpffs)
    f.fix = "mount -t bpf bpf " + std::string(core::kDefaultBpffs) +
            ", then re-run (`agentcage doctor` checks everything else)";
  else if (e.code == ENOTSUP || e.code == EOPNOTSUPP)
    f.fix = "activate the BPF LSM: " + bpf::lsm_fix_hint(bpf::read_lsm_state());
  else
    f.fix = "run `agentcage doctor` for a full diagnosis";
  return f;
}

// A 125 that is not a refusal to run unconfined (usage errors, not root):
// no fail-closed reason.
Failure failure(std::string reason, std::string fix, int err = 0) {
  return Failure{kExitSetup, std::move(reason), std::move(fix), err, std::nullopt};
}

// A 125 because agentcage could not set up enforcement for the run.
Failure refused(FailClosedReason why, std::string reason, std::string fix = {}, int err = 0) {
  return Failure{kExitSetup, std::move(reason), std::move(fix), err, why};
}

// Writes the record again (the reaper's view of what exists so far).
Step save_record(Run& run, FailClosedReason why) {
  if (Status st = run.resources.lease->write(run.resources.record); !st)
    return refused(why, st.error().message);
  run.resources.record_start_unsaved = false;
  return {};
}

bool same_cgroup_limits(const policy::Limits& a, const policy::Limits& b) {
  return a.memory_bytes == b.memory_bytes && a.pids == b.pids && a.cpus == b.cpus;
}

// The cgroup's limits. `before`: what is written there already (a spare
// run's: run/runner.h); a limit it has and `limits` has not goes back to
// the kernel's default.
Status write_limits(const cgroup::Cgroup& cg, const policy::Limits& limits, const policy::Limits& before) {
  const fs::path& p = cg.path();
  // A file of the memory controller the kernel may lack (swap not
  // accounted, say): then there is nothing to turn off.
  const auto write_if_there = [&p](const char* file, const std::string& value) -> Status {
    std::error_code ec;
    if (!fs::exists(p / file, ec)) return {};
    return cgroup::write_file(p / file, value);
  };
  if (limits.memory_bytes || before.memory_bytes) {
    const bool on = limits.memory_bytes.has_value();
    if (Status st = cgroup::write_file(p / "memory.max", on ? std::to_string(*limits.memory_bytes) : "max");
        !st)
      return st;
    // No swapping around the limit.
    if (Status st = write_if_there("memory.swap.max", on ? "0" : "max"); !st) return st;
    // An OOM kill takes the whole run, not one arbitrary process of it.
    if (Status st = write_if_there("memory.oom.group", on ? "1" : "0"); !st) return st;
  }
  if (limits.pids || before.pids)
    if (Status st = cgroup::write_file(p / "pids.max", limits.pids ? std::to_string(*limits.pids) : "max");
        !st)
      return st;
  if (limits.cpus || before.cpus) {
    constexpr uint64_t kPeriodUs = 100000;
    std::string quota = "max";
    if (limits.cpus) {
      auto us = static_cast<uint64_t>(*limits.cpus * static_cast<double>(kPeriodUs) + 0.5);
      quota = std::to_string(std::max<uint64_t>(us, 1000));  // the kernel's minimum quota is 1 ms
    }
    if (Status st = cgroup::write_file(p / "cpu.max", quota + " " + std::to_string(kPeriodUs)); !st)
      return st;
  }
  return {};
}

}  // namespace

Step check_request(Run& run) {
  const RunOptions& opts = run.opts;
  RunResult& res = run.res;
  res.command = opts.command;
  if (opts.command.empty() || opts.command[0].empty())
    return failure("no COMMAND given", "agentcage run --policy NAME|FILE -- COMMAND [ARGS...]");

  const auto invalid = FailClosedReason::policy_invalid;
  auto policy_path = policy::resolve_policy(opts.policy, opts.paths.policy_dir);
  if (!policy_path) return refused(invalid, policy_path.error().message, "see agentcage run --help");
  run.policy_path = res.policy_file = *policy_path;
  std::error_code ec;
  if (!fs::exists(*policy_path, ec) && *policy_path != opts.policy)
    return refused(invalid,
                   "no policy named " + policy::quote(opts.policy) + " (" + *policy_path + " does not exist)",
                   "pass a policy file path, install NAME.yaml into " + opts.paths.policy_dir +
                       ", or point AGENTCAGE_POLICY_DIR / --policy-dir at your policies");
  // Prepared ahead (run/policy_cache.h) only when the file holds exactly
  // the bytes it was prepared from.
  auto text = policy::read_policy_text(*policy_path);
  const PreparedPolicy* prepared = text ? prepared_policy(*policy_path, *text) : nullptr;
  if (prepared) {
    run.policy = prepared->policy;
  } else {
    auto parsed = text ? policy::parse_policy(*text, *policy_path) : policy::load_policy_file(*policy_path);
    if (!parsed.ok()) {
      for (const auto& d : parsed.errors) run.err << d.format() << "\n";
      return refused(invalid, "policy " + *policy_path + " is not valid (errors above)",
                     "correct it; `agentcage policy check FILE` validates without running anything");
    }
    run.policy = std::move(*parsed.policy);
  }
  res.policy_name = run.policy->name;
  if (opts.mode) run.policy->mode = *opts.mode;  // this run only
  res.mode = policy::to_string(run.policy->mode);

  // Usage errors: no fail-closed reason.
  auto limits = effective_limits(run.policy->limits, opts);
  if (!limits) return failure(limits.error().message, "see agentcage run --help");
  run.limits = *limits;
  res.memory_max_bytes = limits->memory_bytes;
  res.pids_max = limits->pids;
  res.cpus = limits->cpus;
  if (limits->timeout) res.timeout_ms = static_cast<uint64_t>(limits->timeout->count());
  res.disk_max_bytes = limits->disk_bytes;
  for (const auto& e : opts.env)
    if (auto kv = parse_env_assignment(e); !kv)
      return failure(kv.error().message, "see agentcage run --help");
  if (opts.io_dir && opts.workspace)
    return failure(
        "--io-dir and --workspace are alternatives: --io-dir is copied into a fresh workspace and back",
        "give one");
  if (opts.io_owner && !opts.io_dir) return failure("--io-owner goes with --io-dir", "add --io-dir DIR");
  if (policy::first_domain_rule(*run.policy))
    if (Status st = refuse_inet_stdio(); !st) return failure(st.error().message, "", st.error().code);
  if (opts.io_owner) {
    auto spec = parse_user_spec(*opts.io_owner);
    if (!spec || !spec->uid || !spec->gid)
      return failure("--io-owner " + policy::quote(*opts.io_owner) + ": expected UID:GID (numbers)",
                     "e.g. --io-owner 1000:1000");
  }

  if (prepared) {
    run.compiled = prepared->compiled;
    run.compiled->flags = bpf::policy_flags(*run.policy);  // --mode
    run.seccomp_filter = prepared->seccomp_filter;
    return {};
  }
  auto compiled = bpf::compile(*run.policy);
  if (!compiled) return refused(invalid, compiled.error().message);  // located: FILE:LINE:COL
  run.compiled = std::move(*compiled);
  return {};
}

Step await_go_ahead(Run&) {
  // No result, no message: the daemon does not know this process, so
  // nobody waits for either.
  if (!await_start_gate()) ::_exit(kExitSetup);
  return {};
}

Step check_root(Run&) {
  if (::geteuid() != 0)
    return failure("agentcage run needs root (BPF LSM programs, cgroups, the sandbox identity)",
                   "run it as root (sudo agentcage run ...)", EPERM);
  return {};
}

Step block_signals(Run& run) {
  run.signals.emplace();
  if (run.signals->fd() < 0) return failure("signalfd: " + std::string(std::strerror(errno)), "");
  return {};
}

Step open_enforcement(Run& run) {
  if (auto prepared = take_prepared_enforcer()) {
    // A runner of the daemon's fork server (run/policy_cache.h): the set
    // was adopted ahead, and the daemon reaps stale runs itself (at its
    // start, every minute, and after a runner that left something).
    run.resources.enforcer = std::move(prepared);
    return {};
  }
  auto enforcer = bpf::Enforcer::open_shared();
  if (!enforcer) return enforcer_failure(enforcer.error());
  run.resources.enforcer = std::move(*enforcer);
  // What the reaper says names other runs (their ids, cgroups, workspaces):
  // a runner of the daemon (started by exec once its fork server is gone)
  // writes to its client's stderr, and a client is not told of other
  // tenants' runs. It reaps silently.
  std::ostream discard(nullptr);
  reap_stale_runs(*run.resources.enforcer, run.opts.paths,
                  control::notify_channel_adopted() ? discard : run.err);
  return {};
}

Step create_record(Run& run) {
  Resources& r = run.resources;
  r.record.started_unix_ms = unix_ms();
  if (r.lease) {
    // Prepared ahead (adopt_spare): the run starts now. The record says so
    // with the workspace's next write (prepare_workspace).
    run.res.run_id = r.record.run_id;
    r.record.spare = false;
    return {};
  }
  run.seed = random64();
  run.res.run_id = r.record.run_id = format_run_id(run.seed);
  r.record.owner_pid = ::getpid();
  auto lease = RunLease::create(run.opts.paths.state_dir, run.res.run_id);
  if (!lease)
    return refused(FailClosedReason::internal, lease.error().message,
                   "run as root with a writable " + run.opts.paths.state_dir);
  r.lease = std::move(*lease);
  return save_record(run, FailClosedReason::internal);
}

Step choose_identity(Run& run) {
  const RunOptions& opts = run.opts;
  auto fail = [](const Error& e) {
    return refused(FailClosedReason::internal, e.message, "pass --user NAME|UID[:GID]", e.code);
  };
  if (run.identity) {
    // Leased ahead (adopt_spare).
  } else if (!opts.user) {
    auto lease = UidLease::acquire(opts.paths.state_dir, kDynamicUidBase, kDynamicUidCount, run.seed >> 16,
                                   run.res.run_id);
    if (!lease) return fail(lease.error());
    uid_t uid = lease->uid();
    run.resources.uid_lease = std::move(*lease);
    run.resources.record.sandbox_uid = uid;
    run.identity = Identity{uid, static_cast<gid_t>(uid), "dynamic uid " + std::to_string(uid)};
  } else {
    auto spec = parse_user_spec(*opts.user);
    if (!spec) return fail(spec.error());
    if (spec->uid) {
      run.identity = Identity{*spec->uid, *spec->gid, "uid " + std::to_string(*spec->uid)};
    } else {
      struct passwd pw {};
      struct passwd* found = nullptr;
      std::vector<char> buf(16384);
      int rc = ::getpwnam_r(spec->name->c_str(), &pw, buf.data(), buf.size(), &found);
      if (rc != 0 || found == nullptr)
        return fail(Error{"--user: no user named " + policy::quote(*spec->name) + " in the passwd database",
                          rc ? rc : ENOENT});
      run.identity = Identity{pw.pw_uid, pw.pw_gid, "user " + *spec->name};
    }
    // Leased uids are one run's each: a fixed identity among them would
    // share DAC and signals with whichever run holds that uid.
    const uint64_t uid = run.identity->uid, gid = run.identity->gid;
    for (uint64_t id : {uid, gid})
      if (id >= kDynamicUidBase && id < uint64_t{kDynamicUidBase} + kDynamicUidCount)
        return refused(
            FailClosedReason::internal,
            "--user " + policy::quote(*opts.user) + ": " + std::to_string(id) +
                " is in agentcage's range of dynamic uids and gids (" + std::to_string(kDynamicUidBase) +
                ".." + std::to_string(uint64_t{kDynamicUidBase} + kDynamicUidCount - 1) +
                "), each leased to one run at a time",
            "pick a uid and gid outside that range, or leave --user out for a dynamic uid of the run's own",
            EINVAL);
  }
  run.res.uid = run.identity->uid;
  run.res.gid = run.identity->gid;
  return {};
}

namespace {

// The workspace: a fresh private directory, or the caller's, handed to the
// sandbox identity for the run.
Status make_workspace(const RunOptions& opts, const Identity& id, const policy::Limits& limits,
                      Resources& r) {
  if (!opts.workspace) {
    // Made ahead, empty and the identity's (adopt_spare), or now.
    const bool made = r.workspace_created;
    if (!made) {
      if (Status st = make_private_dir(opts.paths.workspace_root, 0711); !st)
        return st.error().wrap("workspace");
      std::error_code ec;
      fs::path root = fs::canonical(opts.paths.workspace_root, ec);
      if (ec)
        return Error{"workspace: resolving " + opts.paths.workspace_root + ": " + ec.message(), ec.value()};
      fs::path dir = root / r.record.run_id;
      if (::mkdir(dir.c_str(), 0700) != 0) return Error::from_errno("workspace: creating " + dir.string());
      r.workspace_created = true;
      r.record.workspace = dir.string();
    }
    // A spare run's has its tmpfs already when it has one (in its record,
    // run/runner.h): of the very size (or none, and none wanted), it is the
    // run's, and its record on file differs only in that the run started;
    // of another size, it goes first (empty: nothing is lost).
    if (made && r.record.workspace_tmpfs_bytes == limits.disk_bytes &&
        r.record.remove_workspace == !opts.keep) {
      r.record_start_unsaved = true;
      return {};
    }
    if (made && r.record.workspace_tmpfs_bytes) {
      if (::umount2(r.record.workspace.c_str(), MNT_DETACH) != 0)
        return Error::from_errno("workspace: unmounting the spare run's tmpfs from " + r.record.workspace);
      r.record.workspace_tmpfs_bytes.reset();
    }
    r.record.remove_workspace = !opts.keep;
    // The tmpfs is recorded with the directory, before it is mounted: a
    // reaper must unmount before it removes anything (and one that finds
    // nothing mounted there only removes the directory).
    if (limits.disk_bytes) r.record.workspace_tmpfs_bytes = *limits.disk_bytes;
    if (Status st = r.lease->write(r.record); !st) return st;
    if (!made && ::chown(r.record.workspace.c_str(), id.uid, id.gid) != 0)
      return Error::from_errno("workspace: chown " + r.record.workspace);
    if (limits.disk_bytes)
      if (Status st = mount_workspace(r.record.workspace, *limits.disk_bytes, id.uid, id.gid); !st) return st;
    return {};
  }
  std::error_code ec;
  fs::path dir = fs::canonical(*opts.workspace, ec);
  if (ec) return Error{"--workspace " + *opts.workspace + ": " + ec.message(), ec.value()};
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Error::from_errno("--workspace " + dir.string());
  if (!S_ISDIR(st.st_mode)) return Error{"--workspace " + dir.string() + " is not a directory", ENOTDIR};
  if (dir == "/") return Error{"--workspace / would make the whole host writable", EINVAL};
  // From here the directory itself, not its path: a directory on the way
  // may be someone else's, who can swap it for a link to anywhere.
  auto opened = open_callers_workspace(dir.string());
  if (!opened) return opened.error().wrap("--workspace");
  if (::fstat(opened->get(), &st) != 0) return Error::from_errno("--workspace " + dir.string());
  if (limits.disk_bytes)
    if (Status bound = check_workspace_bound(opened->get(), dir.string(), *limits.disk_bytes); !bound) return bound;
  r.record.workspace = dir.string();
  r.record.workspace_dev = static_cast<uint64_t>(st.st_dev);
  r.record.workspace_ino = static_cast<uint64_t>(st.st_ino);
  r.callers_workspace = std::move(*opened);
  if (st.st_uid != id.uid || st.st_gid != id.gid || (st.st_mode & 0700) != 0700) {
    // Hand the directory (not its contents) to the sandbox identity for the
    // run; the record lets a reaper restore it if agentcage dies.
    r.record.restore_uid = st.st_uid;
    r.record.restore_gid = st.st_gid;
    r.record.restore_mode = st.st_mode & 07777;
    if (Status s = r.lease->write(r.record); !s) return s;
    if (::fchown(r.callers_workspace.get(), id.uid, id.gid) != 0 ||
        ::fchmod(r.callers_workspace.get(), 0700) != 0)
      return Error::from_errno("--workspace: handing " + dir.string() + " to " + id.name);
  }
  return {};
}

}  // namespace

Step prepare_workspace(Run& run) {
  const RunOptions& opts = run.opts;
  if (Status st = make_workspace(opts, *run.identity, *run.limits, run.resources); !st) {
    std::string fix = opts.workspace ? "pass an existing directory agentcage (root) may chown"
                                     : "make " + opts.paths.workspace_root +
                                           " creatable by root, or set AGENTCAGE_WORKSPACE_ROOT";
    if (st.error().code == EFBIG)
      fix =
          "mount a file system no larger than the disk limit there (mount -t tmpfs -o size=SIZE tmpfs "
          "DIR), raise it with --disk SIZE, or pass --disk unlimited to let the run fill that file system";
    return refused(FailClosedReason::internal, st.error().message, fix, st.error().code);
  }
  run.res.workspace = run.resources.record.workspace;
  return {};
}

Step create_cgroup(Run& run) {
  Resources& r = run.resources;
  RunResult& res = run.res;
  const policy::Limits& limits = *run.limits;
  const auto why = FailClosedReason::cgroup;
  // (A spare run found it ahead.)
  auto root = run.cgroup_root ? Result<std::filesystem::path>(*run.cgroup_root) : cgroup::find_cgroup2_root();
  if (!root)
    return refused(why, root.error().message, "mount cgroup v2: mount -t cgroup2 none /sys/fs/cgroup");
  run.cgroup_root = *root;
  // A spare run's cgroup with these very limits (its parent has their
  // controllers): nothing to write.
  const bool written = r.cg && run.spare_limits && same_cgroup_limits(*run.spare_limits, limits);
  if (written) {
    res.cgroup = r.cg->path().string();
    res.scope_id = r.cg->id();
    return {};
  }
  std::vector<std::string> required;
  if (limits.memory_bytes) required.push_back("memory");
  if (limits.pids) required.push_back("pids");
  if (limits.cpus) required.push_back("cpu");
  // Nothing above a delegated cgroup on the way is written (cgroup/delegation.h).
  auto parent = cgroup::prepare_parent(*root, run.opts.paths.cgroup_parent, required);
  if (!parent)
    return refused(why, parent.error().message, cgroup::controller_fix(*root, run.opts.paths.cgroup_parent),
                   parent.error().code);
  if (!r.cg) {  // else made ahead, empty, and in the record (adopt_spare)
    r.record.cgroup = (*parent / r.record.run_id).string();
    if (Step st = save_record(run, why); !st) return st;
    auto cg = cgroup::Cgroup::create(*root, *parent, r.record.run_id);
    if (!cg)
      return refused(why, cg.error().message, "run as root on a writable cgroup v2 hierarchy",
                     cg.error().code);
    r.cg = std::move(*cg);
    r.record.cgroup_id = r.cg->id();
    if (Step st = save_record(run, why); !st) return st;
  }
  res.cgroup = r.cg->path().string();
  res.scope_id = r.cg->id();
  if (Status st = write_limits(*r.cg, limits, run.spare_limits.value_or(policy::Limits{})); !st)
    return refused(why, st.error().message, "check the cgroup controllers (agentcage doctor)",
                   st.error().code);
  return {};
}

Step fill_workspace(Run& run) {
  const RunOptions& opts = run.opts;
  if (!opts.io_dir) return {};
  Resources& r = run.resources;
  const auto why = FailClosedReason::internal;
  IoOwner who;
  if (opts.io_owner) {
    auto spec = parse_user_spec(*opts.io_owner);
    who = IoOwner{*spec->uid, *spec->gid};
  } else {
    struct stat st {};
    if (::lstat(opts.io_dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return refused(why, "--io-dir " + policy::quote(*opts.io_dir) + ": not a directory",
                     "pass an existing directory", errno ? errno : ENOTDIR);
    who = IoOwner{st.st_uid, st.st_gid};
  }
  auto dir = open_io_dir(*opts.io_dir, who);
  if (!dir)
    return refused(why, dir.error().message,
                   "pass a directory its owner can write, by a path without symbolic links",
                   dir.error().code);
  UniqueFd ws(::open(r.record.workspace.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!ws) return refused(why, "opening the workspace: " + std::string(std::strerror(errno)), "", errno);
  IoReport& io = run.res.io.emplace();
  io.dir = *opts.io_dir;
  IoCopy done;
  const uint64_t budget = run.limits->disk_bytes.value_or(UINT64_MAX);
  const int src = dir->get(), dst = ws.get();
  const uid_t uid = run.identity->uid;
  const gid_t gid = run.identity->gid;
  // In the run's cgroup: the copies' pages are the run's (its memory limit).
  CopyChild how;
  how.cgroup_fd = r.cg->fd();
  how.signal_fd = run.signals->fd();
  how.keep = {src, dst};
  Status st = run_copy_child(
      how, [&](IoCopy& mine) { return copy_in(src, who, dst, uid, gid, budget, mine); }, done);
  io.copied_in = done.entries;
  io.copied_in_bytes = done.bytes;
  io.skipped = done.skipped;
  io.skipped_total = done.skipped_total;
  if (!st)
    return refused(
        why, "copying --io-dir into the workspace: " + st.error().message,
        st.error().code == EFBIG ? "raise the disk limit (--disk) or make the directory smaller" : "",
        st.error().code);
  r.io_dir = std::move(*dir);
  r.io_owner = who;
  return {};
}

Step confine(Run& run) {
  Resources& r = run.resources;
  const auto why = FailClosedReason::scope;
  // share_named: the same policy installed by name (the daemon's policy
  // directory) with exactly these rules runs on that slot, so the daemon's
  // hot reloads apply to this run too; otherwise a transient slot.
  // The command starts in an IPC namespace of its own (spawn in wait.cpp).
  scope::CgroupRef ref{r.cg->id(), r.cg->level(), r.cg->path(), true};
  // (Right below the run parent, where only runs live: the receive filter
  // is kept there, not attached and detached per run.)
  ref.filter_at_parent = true;
  if (policy::first_domain_rule(*run.policy)) {
    // The resolver first: the scope's DNS goes to its port from the start.
    auto dns = RunDns::open(*run.policy, *r.enforcer, r.cg->id(), run.opts.paths.resolv_conf);
    if (!dns)
      return refused(why, "starting the run's resolver for the policy's domain rules: " + dns.error().message,
                     dns.error().code == ELIBACC
                         ? "install ldns (Debian: apt install libldns3)"
                         : "check the nameserver lines of " + run.opts.paths.resolv_conf +
                               " (or set AGENTCAGE_RESOLV_CONF), and that 127.0.0.1 has a free port",
                     dns.error().code);
    r.dns = std::move(*dns);
    ref.dns_port = r.dns->port();
    ref.dns_ipv6 = r.dns->has_ipv6();
  }
  auto confined = scope::confine(*r.enforcer, ref,
                                 scope::TransientPolicy{run.policy->name, std::move(*run.compiled), true},
                                 r.record.workspace);
  if (!confined)
    return refused(why, "registering the scope: " + confined.error().message, "run `agentcage doctor`",
                   confined.error().code);
  r.confinement = *confined;
  run.res.policy_slot = confined->slot;
  if (run.opts.record) {
    // Before COMMAND exists, so that the recording misses nothing.
    auto ring = scope::record(*r.enforcer, *confined);
    auto recording =
        ring ? Recording::open(std::move(*ring)) : Result<std::unique_ptr<Recording>>(ring.error());
    if (!recording) {
      // The scope is r.confinement's: teardown takes it down.
      return refused(why, "starting the run's recording (--record): " + recording.error().message,
                     "run `agentcage doctor`", recording.error().code);
    }
    r.recording = std::move(*recording);
  }
  if (confined->transient) {
    // For the reaper, should this agentcage die (the scope is found by the
    // cgroup id already in the record; the slot is released with it).
    r.record.policy_slot = confined->slot;
    if (Step st = save_record(run, why); !st) return st;
  }
  return {};
}

void save_started_record(Run& run) {
  Resources& r = run.resources;
  if (!r.record_start_unsaved || !r.lease) return;
  if (Status st = r.lease->write(r.record); !st)
    run.err << "agentcage: warning: saving the run's record: " << st.error().message
            << " (the record of the spare run it took names all it holds)\n";
  else
    r.record_start_unsaved = false;
}

}  // namespace agentcage::run
