// SPDX-License-Identifier: Apache-2.0
#include "daemon/bindings.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "cgroup/cgroup.h"
#include "util/log.h"

namespace agentcage::daemon {

namespace fs = std::filesystem;

scope::BindingSpec Bindings::spec_for(const BindingConfig& b, const PolicyDirectory& dir,
                                      std::string& why_none) const {
  scope::BindingSpec spec;
  spec.path = b.cgroup;
  if (!b.workspace.empty()) {
    // What the rules compare against: the directory's real path, when it exists.
    std::error_code ec;
    fs::path real = fs::canonical(b.workspace, ec);
    spec.workspace = ec ? fs::path(b.workspace).lexically_normal().string() : real.string();
  }
  const std::optional<uint32_t> slot = dir.named_slot(b.policy);
  if (!slot) {
    why_none = "policy " + b.policy + " is not loaded (no valid " + b.policy + ".yaml in " + dir.path() + ")";
  } else if (const std::string domain = dir.domain_rule(b.policy); !domain.empty()) {
    why_none = "policy " + b.policy + " allows destinations by name (" + domain +
               "), which only a run's own resolver answers; allow the unit's destinations by cidr";
  } else if (spec.workspace.empty() && dir.uses_workspace(b.policy)) {
    why_none = "policy " + b.policy + " has ${workspace} rules and the binding names no workspace: DIR";
  } else if (auto problem = dir.workspace_problem(b.policy, spec.workspace)) {
    why_none = *problem;
  } else {
    spec.policy = scope::NamedPolicy{b.policy, *slot};
  }
  return spec;
}

void Bindings::reconcile(bpf::Enforcer& enf, const PolicyDirectory& dir) {
  auto root = cgroup::find_cgroup2_root();
  if (!root) {
    log::error("bindings: " + root.error().message);
    return;
  }
  std::vector<scope::BindingSpec> specs;
  std::vector<std::string> why(config_.size());
  for (size_t i = 0; i < config_.size(); ++i) specs.push_back(spec_for(config_[i], dir, why[i]));
  auto done = scope::reconcile_bindings(enf, *root, specs);
  if (!done) {
    log::error("bindings: " + done.error().message + " (bound cgroups made meanwhile are still confined by the "
               "kernel; retried every second)");
    return;
  }
  if (done->scopes_removed)
    log::info("bindings: removed " + std::to_string(done->scopes_removed) +
              " scope(s) of bound cgroups that are gone (units stopped or restarted) or no longer bound");
  std::vector<telemetry::BindingMetric> metrics;
  for (size_t i = 0; i < config_.size(); ++i) {
    const BindingConfig& b = config_[i];
    const scope::BindingStatus& now = done->bindings[i];
    Seen& seen = seen_[b.name];
    const std::string cgroup_path = fs::path(root->string() + b.cgroup).string();
    const std::string where = "binding " + b.name + " (" + cgroup_path + ")";
    const std::string cgroup_id = std::to_string(now.cgroup_id);
    // What journalctl AGENTCAGE_BINDING=NAME finds.
    const std::initializer_list<log::Field> fields = {
        {"BINDING", b.name}, {"CGROUP", cgroup_path}, {"CGROUP_ID", cgroup_id}, {"POLICY", b.policy}};
    if (why[i] != seen.why_no_policy && !why[i].empty())
      log::error(where + ": " + why[i] + "; its cgroup is confined with NO policy: every operation in it is "
                 "denied until that is fixed",
                 fields);
    else if (why[i] != seen.why_no_policy)
      log::info(where + ": policy " + b.policy + " applies");
    seen.why_no_policy = why[i];
    if (now.late && now.state == scope::BindingState::confined) {
      if (now.late_populated) {
        ++seen.late;
        log::error(where + ": cgroup " + std::to_string(now.cgroup_id) + " was confined LATE: processes were "
                   "already running in it unconfined (it existed before the binding, or the daemon was not "
                   "there when it was made); restart the unit to run it confined from its start",
                   fields);
      } else {
        log::warn(where + ": cgroup " + std::to_string(now.cgroup_id) +
                  " existed before its binding and was confined now (no process had run in it)", fields);
      }
    }
    if (now.state == scope::BindingState::refused &&
        (seen.status.state != now.state || seen.status.detail != now.detail || seen.status.cgroup_id != now.cgroup_id))
      log::error(where + ": cgroup " + std::to_string(now.cgroup_id) + " is NOT confined by its binding: " +
                 now.detail, fields);
    else if (now.state == scope::BindingState::confined && !now.late && now.cgroup_id != seen.status.cgroup_id)
      log::info(where + ": cgroup " + std::to_string(now.cgroup_id) + " confined since its creation");
    if (now.kernel_failed > seen.status.kernel_failed)
      log::error(where + ": the kernel could not register " +
                 std::to_string(now.kernel_failed - seen.status.kernel_failed) +
                 " cgroup(s) at their creation (scope map full?); the daemon confines them late",
                 fields);
    if (!now.detail.empty() && now.state == scope::BindingState::confined && now.detail != seen.status.detail)
      log::warn(where + ": " + now.detail, fields);
    seen.status = now;
    metrics.push_back({b.name, now.state == scope::BindingState::refused, seen.late, now.kernel_confined});
  }
  metrics_.bindings(metrics);
}

nlohmann::json Bindings::status_json() const {
  auto out = nlohmann::json::array();
  for (const auto& b : config_) {
    auto it = seen_.find(b.name);
    nlohmann::json j{{"binding", b.name}, {"cgroup", b.cgroup}, {"policy", b.policy}};
    if (it == seen_.end()) {
      j["state"] = "unknown";
    } else {
      const auto& st = it->second.status;
      j["state"] = st.state == scope::BindingState::absent     ? "absent"
                   : st.state == scope::BindingState::confined ? "confined"
                                                               : "refused";
      if (st.cgroup_id) j["cgroup_id"] = st.cgroup_id;
      j["policy_applies"] = it->second.why_no_policy.empty();
      if (!it->second.why_no_policy.empty()) j["no_policy_because"] = it->second.why_no_policy;
      if (!st.detail.empty()) j["detail"] = st.detail;
      j["late_with_processes"] = it->second.late;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace agentcage::daemon
