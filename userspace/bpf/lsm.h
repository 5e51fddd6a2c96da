// SPDX-License-Identifier: Apache-2.0
// Is the BPF LSM in the kernel's active LSM list?
#pragma once

#include <string>
#include <string_view>

#include "core/fail_closed.h"

namespace agentcage::bpf {

inline constexpr const char* kLsmListPath = "/sys/kernel/security/lsm";

struct LsmState {
  bool readable = false;    // the list could be read
  bool bpf_active = false;  // "bpf" is in it
  std::string list;         // as the kernel reports it, e.g. "lockdown,capability,bpf"
  std::string detail;       // why it could not be read
};

// Parse the content of /sys/kernel/security/lsm.
LsmState parse_lsm_list(std::string_view content);
LsmState read_lsm_state(const std::string& path = kLsmListPath);

// A concrete fix for a host where bpf is not active: the lsm= boot parameter
// to add, derived from the current list.
std::string lsm_fix_hint(const LsmState& state);

// Why enforcement is unavailable when the programs could not be opened:
// lsm_inactive when the list is readable and lacks bpf, else bpf_unavailable.
core::FailClosedReason unavailable_reason(const LsmState& state);

}  // namespace agentcage::bpf
