#include "scope/attach.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <ostream>

#include "bpf/compile.h"
#include "bpf/enforcer.h"
#include "bpf/names.h"
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
    return Error{"--cgroup: " + canon.string() + " is not inside the cgroup v2 hierarchy at " +
                     canon_root.string(),
                 EINVAL};
  if (rel == ".")
    return Error{"--cgroup: refusing to confine the root cgroup (that would confine the whole host)", EINVAL};
  struct stat st{};
  if (::stat((canon / "cgroup.procs").c_str(), &st) != 0)
    return Error{"--cgroup: " + canon.string() + " is not a cgroup (no cgroup.procs)", ENOTDIR};
  return canon;
}

int attach_command(const AttachRequest& req, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& msg) {
    err << "agentcage attach: " << msg << '\n';
    return 1;
  };
  auto file = policy::locate_policy(
      req.policy, req.policy_dir.empty() ? policy::default_policy_dir() : req.policy_dir);
  if (!file) return fail(file.error().message);
  auto parsed = policy::load_policy_file(*file);
  if (!parsed.ok()) {
    for (const auto& d : parsed.errors) err << d.format() << '\n';
    return fail("policy " + *file + " is invalid; nothing was changed");
  }
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled) return fail(compiled.error().message);
  const bool uses_workspace =
      std::any_of(compiled->paths.begin(), compiled->paths.end(),
                  [](const bpf::PathRule& r) { return r.space == bpf::RuleSpace::workspace; });
  std::string workspace;
  if (!req.workspace.empty()) {
    std::error_code ec;
    fs::path ws = fs::canonical(req.workspace, ec);
    if (ec || !fs::is_directory(ws)) return fail("--workspace " + req.workspace + ": not an existing directory");
    if (ws == "/") return fail("--workspace cannot be /");
    workspace = ws.string();
  } else if (uses_workspace) {
    return fail("policy " + parsed.policy->name +
                " has ${workspace} rules; pass --workspace DIR to say what they mean for this cgroup");
  }

  auto root = cgroup::find_cgroup2_root();
  if (!root) return fail(root.error().message);
  auto dir = resolve_cgroup(*root, req.cgroup);
  if (!dir) return fail(dir.error().message);
  auto id = cgroup::cgroup_id(*dir);
  if (!id) return fail(id.error().message);
  auto level = cgroup::cgroup_level(*root, *dir);
  if (!level) return fail(level.error().message);

  auto enforcer = bpf::Enforcer::open_shared();
  if (!enforcer) return fail(enforcer.error().message);
  uint32_t slot = 0;
  Status st = (*enforcer)->with_lock([&]() -> Status {
    auto scopes = (*enforcer)->scopes();
    if (!scopes) return scopes.error();
    for (const auto& s : *scopes)
      if (s.cgroup_id == *id)
        return Error{dir->string() + " is already confined (policy slot " + std::to_string(s.policy_slot) +
                         "); run `agentcage detach --cgroup " + req.cgroup + "` first",
                     EEXIST};
    auto acquired = (*enforcer)->acquire_policy(parsed.policy->name, *compiled);
    if (!acquired) return acquired.error();
    slot = *acquired;
    if (Status s = (*enforcer)->add_scope(*id, *level, *id, slot, workspace); !s) {
      static_cast<void>((*enforcer)->release_policy(slot));
      return s;
    }
    return {};
  });
  if (!st) return fail(st.error().message);
  out << "attached: " << dir->string() << " (cgroup id " << *id << ") is confined by policy "
      << parsed.policy->name << " (" << policy::to_string(parsed.policy->mode) << ", from " << *file << ")";
  if (!workspace.empty()) out << ", workspace " << workspace;
  out << "\n";
  return 0;
}

int detach_command(const std::string& cgroup, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& msg) {
    err << "agentcage detach: " << msg << '\n';
    return 1;
  };
  auto root = cgroup::find_cgroup2_root();
  if (!root) return fail(root.error().message);
  auto dir = resolve_cgroup(*root, cgroup);
  if (!dir) return fail(dir.error().message);
  auto id = cgroup::cgroup_id(*dir);
  if (!id) return fail(id.error().message);

  auto enforcer = bpf::Enforcer::open_shared();
  if (!enforcer) return fail(enforcer.error().message);
  bpf::ScopeReport report;
  std::string policy_name;
  Status st = (*enforcer)->with_lock([&]() -> Status {
    auto scopes = (*enforcer)->scopes();
    if (!scopes) return scopes.error();
    auto it = std::find_if(scopes->begin(), scopes->end(), [&](const bpf::ScopeInfo& s) { return s.cgroup_id == *id; });
    if (it == scopes->end()) return Error{dir->string() + " is not confined by agentcage", ENOENT};
    if (auto r = (*enforcer)->scope_report(it->scope_id)) report = *r;
    if (auto pols = (*enforcer)->policies())
      for (const auto& p : *pols)
        if (p.slot == it->policy_slot) policy_name = p.name;
    if (Status s = (*enforcer)->remove_scope(*id); !s) return s;
    return (*enforcer)->release_policy(it->policy_slot);
  });
  if (!st) return fail(st.error().message);
  out << "detached: " << dir->string() << " is no longer confined (was policy "
      << (policy_name.empty() ? "?" : policy_name) << ")";
  uint64_t denied = 0, audited = 0;
  for (size_t h = 0; h < AC_HOOK_COUNT; ++h) {
    denied += report.denied[h];
    audited += report.audited[h];
  }
  out << "; while attached: " << denied << " denied, " << audited << " audited";
  std::string sep = " (";
  for (size_t h = 0; h < AC_HOOK_COUNT; ++h) {
    if (report.denied[h] + report.audited[h] == 0) continue;
    out << sep << bpf::hook_name(static_cast<uint32_t>(h)) << ' ' << report.denied[h] + report.audited[h];
    sep = ", ";
  }
  if (sep != " (") out << ')';
  out << "\n";
  return 0;
}

}  // namespace agentcage::scope
