// SPDX-License-Identifier: Apache-2.0
#include "core/fail_closed.h"

namespace agentcage::core {

std::string_view name(FailClosedReason reason) {
  switch (reason) {
    case FailClosedReason::bpf_unavailable:
      return "bpf_unavailable";
    case FailClosedReason::lsm_inactive:
      return "lsm_inactive";
    case FailClosedReason::cgroup:
      return "cgroup";
    case FailClosedReason::scope:
      return "scope";
    case FailClosedReason::policy_invalid:
      return "policy_invalid";
    case FailClosedReason::sandbox:
      return "sandbox";
    case FailClosedReason::internal:
      return "internal";
  }
  return "unknown";
}

std::optional<FailClosedReason> parse_fail_closed_reason(std::string_view text) {
  for (FailClosedReason r : kFailClosedReasons)
    if (name(r) == text) return r;
  return std::nullopt;
}

}  // namespace agentcage::core
