// SPDX-License-Identifier: Apache-2.0
// Why agentcage refused to run or apply something rather than run it
// unconfined, as one closed set. The names are the values of
// agentcage_fail_closed_total{reason} and of the control protocol's run_end
// "fail_closed": a contract with dashboards and clients, never renamed.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace agentcage::core {

enum class FailClosedReason {
  bpf_unavailable,  // the BPF LSM programs could not be loaded or adopted
  lsm_inactive,     // the kernel's BPF LSM is not in the active LSM list
  cgroup,           // the run's cgroup or its limits could not be set up
  scope,            // the cgroup could not be put under its policy
  policy_invalid,   // the policy could not be read, validated or compiled
  sandbox,          // the run's process could not take on its restrictions before exec
  internal,         // anything else on the way to a confined process
};

inline constexpr std::array kFailClosedReasons = {
    FailClosedReason::bpf_unavailable, FailClosedReason::lsm_inactive,   FailClosedReason::cgroup,
    FailClosedReason::scope,           FailClosedReason::policy_invalid, FailClosedReason::sandbox,
    FailClosedReason::internal};

std::string_view name(FailClosedReason reason);
// The reason named `text`; unset for anything else.
std::optional<FailClosedReason> parse_fail_closed_reason(std::string_view text);

}  // namespace agentcage::core
