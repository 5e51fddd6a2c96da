// SPDX-License-Identifier: Apache-2.0
// The system calls every run is denied (seccomp, a second layer under the
// LSM rules), in named groups: the one table. A policy relaxes groups by
// name (`syscalls: {allow: [io_uring]}`); run/seccomp.h turns the groups a
// run keeps denied into its filter.
//
// The baseline is what Docker's default profile denies an unprivileged
// container (calls that need capabilities a run never has, or reach kernel
// code no sandboxed program needs), plus io_uring, whose operations bypass
// the system-call layer and which has been a steady source of kernel bugs.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace agentcage::policy {

struct SyscallGroup {
  std::string_view name;
  std::string_view why;  // one line for docs and `--help`
  // Names as libseccomp knows them; a name the build's architecture lacks
  // is skipped there.
  std::span<const std::string_view> syscalls;
  // Only the group "personality": the call is denied for every argument
  // except the harmless ones (see run/seccomp.cpp), not outright.
  bool by_argument = false;
};

// Every group, in a fixed order.
std::span<const SyscallGroup> syscall_groups();
// The group named `name`, or nullptr.
const SyscallGroup* find_syscall_group(std::string_view name);
// The names, for did-you-mean.
std::vector<std::string_view> syscall_group_names();

}  // namespace agentcage::policy
