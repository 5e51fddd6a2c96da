// SPDX-License-Identifier: Apache-2.0
// `agentcage daemon`: the long-running host agent. It adopts (or loads and
// pins) the shared program set, keeps the policy directory's policies in
// named slots (inotify hot reload), consumes the ring buffer -- as its only
// consumer -- into the JSON audit log, the live event stream and the
// metrics, serves the control socket and reaps stale runs. Enforcement lives
// in the pinned programs and maps: the daemon may die or restart at any time
// without a gap. See docs/daemon.md.
#pragma once

#include <iosfwd>
#include <string>

#include "daemon/config.h"
#include "daemon/run_forker.h"

namespace agentcage::daemon {

// Runs until SIGTERM/SIGINT. Returns the process exit status: 0 after a
// clean stop, 1 when it could not start (message on stderr). Runs through
// the daemon are `command_line` called with `agentcage run ...` words in a
// runner forked from the fork server (daemon/run_forker.h); without it (or
// once the server is gone), runners are exec'd.
// `config_file` ("" : none, the defaults) is read again on SIGHUP and by
// the reload op (config_changes: what applies at once, what waits).
int run_daemon(const Config& config, const std::string& config_file, const CommandLine& command_line);

// `agentcage daemon [--config FILE]`: loads the configuration (defaults
// without FILE) and runs the daemon.
int daemon_command(const std::string& config_file, const CommandLine& command_line);

}  // namespace agentcage::daemon
