// SPDX-License-Identifier: Apache-2.0
// Shared state for kernel tests: one loaded Enforcer for the whole binary
// (loading verifies every program, which is slow under TCG), and the rule
// for when a test may skip.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"

namespace agentcage::kt {

// The loaded programs, or null with skip_reason() set.
bpf::Enforcer* enforcer();

// A test cgroup as the Enforcer's scope operations take it.
inline bpf::ScopeCgroup scope_cgroup(const cgroup::Cgroup& cg) { return {cg.fd(), cg.id(), cg.level()}; }
const std::string& skip_reason();

// Kernel tests must run in CI and whenever AGENTCAGE_REQUIRE_KERNEL=1
// (scripts/test sets it inside the VM); elsewhere they skip with a reason
// on a host that cannot enforce.
bool kernel_required();

}  // namespace agentcage::kt

// In a test body or SetUp: skip or fail when the kernel cannot enforce.
#define AC_REQUIRE_ENFORCER()                                                    \
  do {                                                                           \
    if (::agentcage::kt::enforcer() == nullptr) {                                \
      if (::agentcage::kt::kernel_required())                                    \
        FAIL() << "kernel test cannot run: " << ::agentcage::kt::skip_reason();  \
      GTEST_SKIP() << "host cannot enforce: " << ::agentcage::kt::skip_reason(); \
    }                                                                            \
  } while (0)
