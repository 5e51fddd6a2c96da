// SPDX-License-Identifier: Apache-2.0
// `agentcage run` for a user who is not root: the run goes through the
// daemon (control protocol "run", daemon/run_service.h) with this process's
// stdin, stdout and stderr, under a policy of the daemon's policy directory
// (by name), within the daemon's caps. The options, output and exit
// statuses are those of a direct run; the result document comes back in the
// daemon's answer and goes where --result / --result-fd say.
#pragma once

#include <iosfwd>

#include "run/options.h"

namespace agentcage::run {

// What a caller who is not root cannot ask for, as a one-line error with
// its fix; empty when the options can go through the daemon.
// `policy_dir_given`: --policy-dir was on the command line.
std::string remote_refusal(const RunOptions& opts, bool policy_dir_given);

// Runs opts.command through the daemon at `control_socket`; returns the
// exit status (125 with a message when the daemon cannot be asked or refuses).
int run_via_daemon(const RunOptions& opts, const std::string& control_socket, std::ostream& err);

}  // namespace agentcage::run
