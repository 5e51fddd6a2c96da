// SPDX-License-Identifier: Apache-2.0
// `agentcage doctor`: can this host enforce? Each check says what it found
// and, when it fails, exactly what to change.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/lsm.h"

namespace agentcage::doctor {

enum class Outcome { ok, warn, fail };

struct Check {
  std::string name;
  Outcome status = Outcome::ok;
  std::string detail;  // what was found
  std::string fix;     // what to do (empty when ok)
};

struct Report {
  std::vector<Check> checks;
  // True only when no check failed: the programs loaded, attached and a
  // real process in a scoped cgroup was denied.
  bool ready() const;
};

// ---- individual checks (pure where possible, for unit tests) ------------

struct KernelVersion {
  unsigned major = 0, minor = 0;
};
bool parse_kernel_release(std::string_view release, KernelVersion& out);

Check check_kernel(std::string_view release);
Check check_btf(bool vmlinux_btf_present);
Check check_lsm(const bpf::LsmState& lsm);
// controllers: content of the root's cgroup.controllers, or nullptr-like
// empty optional when no cgroup2 is mounted (root empty).
Check check_cgroup(const std::string& root, const std::string& root_error,
                   const std::vector<std::string>& controllers);
// cap_eff: the CapEff bitmask from /proc/self/status.
Check check_privileges(unsigned euid, uint64_t cap_eff);
Check check_bpffs(std::string_view mountinfo);

// Loads and attaches the programs, scopes a fresh cgroup with an empty
// policy, starts a process in it and verifies the kernel denies it a file
// open while the decision is counted. Needs root.
Check check_enforcement();

// All checks, in order.
Report run();

std::string format_text(const Report& report);
std::string format_json(const Report& report);

}  // namespace agentcage::doctor
