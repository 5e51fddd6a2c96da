// SPDX-License-Identifier: Apache-2.0
#include "scope/attach.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "bpf/compile.h"
#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "policy/locate.h"
#include "policy/policy.h"

namespace agentcage::scope {

namespace fs = std::filesystem;

Result<fs::path> resolve_cgroup(const fs::path& root, const std::string& arg) {
  if (arg.empty()) return Error{"--cgroup: empty path", EINVAL};
  fs::path given = fs::path(arg).is_absolute() ? fs::path(arg) : root / arg;
  std::error_code ec;
  fs::path canon = fs::canonical(given, ec);
  if (ec) return Error{"--cgroup: " + given.string() + ": " + ec.message(), ec.value()};
  fs::path canon_root = fs::canonical(root, ec);
  if (ec) return Error{"cgroup root " + root.string() + ": " + ec.message(), ec.value()};
  auto rel = canon.lexically_relative(canon_root);
  if (rel.empty() || *rel.begin() == "..")
    return Error{
        "--cgroup: " + canon.string() + " is not inside the cgroup v2 hierarchy at " + canon_root.string(),
        EINVAL};
  if (rel == ".")
    return Error{"--cgroup: refusing to confine the root cgroup (that would confine the whole host)", EINVAL};
  struct stat st {};
  if (::stat((canon / "cgroup.procs").c_str(), &st) != 0)
    return Error{"--cgroup: " + canon.string() + " is not a cgroup (no cgroup.procs)", ENOTDIR};
  return canon;
}

namespace {

// Whether this process is in the initial pid namespace: its status's NSpid
// line has one id (one per namespace level).
Result<bool> in_initial_pid_namespace() {
  auto text = cgroup::read_file("/proc/self/status");
  if (!text) return text.error();
  const size_t at = text->find("\nNSpid:");
  if (at == std::string::npos) return true;  // kernels before 4.1 have no NSpid: no nesting to see
  const size_t end = text->find('\n', at + 1);
  std::istringstream ids(text->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7));
  size_t n = 0;
  for (std::string id; ids >> id;) ++n;
  return n == 1;
}

}  // namespace

Status check_arm_pid(const CgroupRef& cgroup, pid_t pid) {
  auto initial = in_initial_pid_namespace();
  if (!initial) return initial.error();
  if (!*initial)
    return Error{"this agentcage runs in a pid namespace of its own, so it cannot name the process whose exec "
                 "arms a scope (the kernel compares the host's pids): run it in the host's pid namespace "
                 "(hostPID: true in Kubernetes)",
                 EINVAL};
  auto procs = cgroup::cgroup_procs(cgroup.path);
  if (!procs) return procs.error();
  if (procs->size() != 1 || procs->front() != pid) {
    std::string listed;
    for (pid_t p : *procs) listed += (listed.empty() ? "" : " ") + std::to_string(p);
    return Error{"process " + std::to_string(pid) + " must be the one process of cgroup " + cgroup.path.string() +
                     " to arm its scope at exec, and the cgroup holds [" + listed + "]",
                 EBUSY};
  }
  return {};
}

Result<CgroupRef> find_cgroup(const std::string& arg) {
  auto root = cgroup::find_cgroup2_root();
  if (!root) return root.error();
  auto dir = resolve_cgroup(*root, arg);
  if (!dir) return dir.error();
  auto id = cgroup::cgroup_id(*dir);
  if (!id) return id.error();
  auto level = cgroup::cgroup_level(*root, *dir);
  if (!level) return level.error();
  return CgroupRef{*id, *level, *dir};
}

Result<Attached> attach(const AttachRequest& req, std::vector<std::string>& diagnostics) {
  auto file = policy::locate_policy(req.policy,
                                    req.policy_dir.empty() ? policy::default_policy_dir() : req.policy_dir);
  if (!file) return file.error();
  auto parsed = policy::load_policy_file(*file);
  if (!parsed.ok()) {
    for (const auto& d : parsed.errors) diagnostics.push_back(d.format());
    return Error{"policy " + *file + " is invalid; nothing was changed", EINVAL};
  }
  if (const policy::NetRule* domain = policy::first_domain_rule(*parsed.policy))
    return Error{"policy " + *file + " allows destinations by name (" +
                     parsed.policy->source_of(domain->pos) + ":" + std::to_string(domain->pos.line) + ":" +
                     std::to_string(domain->pos.column) + ": domain " + domain->domain +
                     "); a name rule is answered by a resolver of each run's own, which an attached "
                     "cgroup has none of. Run the workload with `agentcage run`, or allow its "
                     "destinations by cidr for an attachment; nothing was changed",
                 EINVAL};
  if (req.mode) parsed.policy->mode = *req.mode;
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled) return compiled.error();
  const bool uses_workspace =
      std::any_of(compiled->paths.begin(), compiled->paths.end(),
                  [](const bpf::PathRule& r) { return r.space == bpf::RuleSpace::workspace; });
  std::string workspace;
  if (!req.workspace.empty()) {
    std::error_code ec;
    fs::path ws = fs::canonical(req.workspace, ec);
    if (ec || !fs::is_directory(ws))
      return Error{"--workspace " + req.workspace + ": not an existing directory", ENOTDIR};
    if (ws == "/") return Error{"--workspace cannot be /", EINVAL};
    workspace = ws.string();
  } else if (uses_workspace) {
    return Error{"policy " + parsed.policy->name +
                     " has ${workspace} rules; pass --workspace DIR to say what they mean for this cgroup",
                 EINVAL};
  }

  auto cg = find_cgroup(req.cgroup);
  if (!cg) return cg.error();
  auto enforcer = bpf::Enforcer::open_shared();
  if (!enforcer) return enforcer.error();
  auto confined =
      confine(**enforcer, *cg, TransientPolicy{parsed.policy->name, std::move(*compiled), false}, workspace);
  if (!confined) return confined.error();
  return Attached{cg->path, cg->id,    parsed.policy->name, parsed.policy->mode,
                  *file,    workspace, confined->slot};
}

Result<Detached> detach(const std::string& cgroup) {
  auto cg = find_cgroup(cgroup);
  if (!cg) return cg.error();
  auto enforcer = bpf::Enforcer::open_shared();
  if (!enforcer) return enforcer.error();
  auto released = release(**enforcer, *cg, Ending::detach);
  if (!released) return released.error();
  return Detached{cg->path, std::move(*released)};
}

}  // namespace agentcage::scope
