// SPDX-License-Identifier: Apache-2.0
// Symbolic names of errno values and signals, as JSON fields and messages
// show them.
#pragma once

#include <string>

namespace agentcage {

// "EACCES" for 13; "E<n>" when unknown.
std::string errno_name(int err);
// "SIGKILL" for 9; "SIG<n>" when unknown.
std::string signal_name(int sig);

}  // namespace agentcage
