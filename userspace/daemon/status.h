// SPDX-License-Identifier: Apache-2.0
// `agentcage status`: what is loaded and enforcing, as JSON (the daemon's
// "status" answer, or gathered directly from the pinned maps when no daemon
// runs) and as text.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"

namespace agentcage::daemon {

struct Readiness {
  bool ready = false;
  std::string detail;  // why not ready
};
// Programs attached (every pinned link of a shared set present and pointing
// at a live program) and the BPF LSM active.
Readiness check_ready(const bpf::Enforcer& enforcer);

// The kernel side: enforcement, programs, policies, scopes, counters, event
// statistics. `run_ids` maps scope ids to run ids where known.
nlohmann::json kernel_status(const bpf::Enforcer& enforcer, const std::map<uint64_t, std::string>& run_ids);

// Human-readable form of a status document (kernel_status + "daemon").
std::string format_status_text(const nlohmann::json& status);

}  // namespace agentcage::daemon
