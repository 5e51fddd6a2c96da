// SPDX-License-Identifier: Apache-2.0
// The daemon's bindings (`attach:` in its configuration): which policy each
// bound cgroup gets, from the policy directory's named slots, handed to
// scope::reconcile_bindings (scope/bind.h) at start, after every policy
// change and every second; what happened said in the log (once per change)
// and in metrics. A binding whose policy cannot confine it (not loaded,
// invalid, with domain rules, ${workspace} rules and no workspace, or a
// workspace the policy denies) fails closed: its cgroup is confined with no
// policy, so every operation in it is denied (no_policy), never left open.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "daemon/config.h"
#include "daemon/policy_dir.h"
#include "scope/bind.h"
#include "telemetry/metrics.h"

namespace agentcage::daemon {

class Bindings {
 public:
  Bindings(std::vector<BindingConfig> config, telemetry::Metrics& metrics)
      : config_(std::move(config)), metrics_(metrics) {}
  // A new `attach:` (a configuration reload): applied at the next reconcile,
  // which removes the bindings no longer there.
  void configure(std::vector<BindingConfig> config) { config_ = std::move(config); }
  // Bring the kernel and the bound cgroups in line with the configuration
  // and `dir`'s policies (scope/bind.h steps 1-4), then log and count.
  void reconcile(bpf::Enforcer& enforcer, const PolicyDirectory& dir);
  // The "bindings" part of the status answer.
  nlohmann::json status_json() const;
  bool empty() const { return config_.empty(); }

 private:
  // The policy binding `b` gets, or why it gets none (then it denies all).
  scope::BindingSpec spec_for(const BindingConfig& b, const PolicyDirectory& dir, std::string& why_none) const;

  struct Seen {
    scope::BindingStatus status;
    std::string why_no_policy;
    uint64_t late = 0;  // late confinements with processes in the cgroup
  };
  std::vector<BindingConfig> config_;
  telemetry::Metrics& metrics_;
  std::map<std::string, Seen> seen_;  // by name
};

}  // namespace agentcage::daemon
