// SPDX-License-Identifier: Apache-2.0
// The run's seccomp filter: every group of policy/syscalls.h the policy
// does not allow fails with EPERM. Built with libseccomp in the parent,
// before the child exists; the child only installs the finished program
// (no allocation after clone3), after no_new_privs and before exec, with
// SECCOMP_FILTER_FLAG_NEW_LISTENER: a denied call becomes a notification
// that agentcage answers with EPERM and counts (run/seccomp_notify.h).
// Without a listener the kernel fails such calls with ENOSYS: never
// installed that way.
#pragma once

#include <linux/filter.h>

#include <span>
#include <string>
#include <vector>

#include "util/result.h"

namespace agentcage::run {

// The classic-BPF program of a filter that denies the groups not named in
// `allowed` (validated group names) for the build's native architecture;
// calls from any other ABI (i386 through int 0x80, x32) are denied too.
Result<std::vector<sock_filter>> build_seccomp_filter(std::span<const std::string> allowed);

}  // namespace agentcage::run
