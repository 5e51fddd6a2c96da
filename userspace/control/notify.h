// SPDX-License-Identifier: Apache-2.0
// `agentcage run` telling the daemon, when one is running, that a run
// started and how it ended (for agentcage_runs_total, the run duration
// histogram, fail-closed counts and run ids in audit events). Best effort: a
// run never waits more than about a second for the daemon and never fails
// because of it; without a daemon nothing happens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "control/protocol.h"
#include "core/fail_closed.h"
#include "core/labels.h"
#include "core/run_outcome.h"

namespace agentcage::control {

// How a run ended, as the daemon counts it (filled by run/).
struct RunEnd {
  std::string run_id;  // "" or malformed: the run failed before it had one
  std::string policy;  // the policy's name; anything invalid is sent as "unknown"
  core::RunOutcome outcome = core::RunOutcome::ok;
  int exit_code = 0;  // agentcage's exit status
  double duration_seconds = 0;
  std::optional<core::FailClosedReason> fail_closed;  // why a 125 refused to run
  uint64_t syscalls_denied = 0;                       // the run's seccomp denials
  RefusedNames dns_refused;  // names its resolver refused: the most refused kMaxRefusedNames
  // The policy slot its scope ran on, whose counters the daemon reads
  // before it answers (under the name of whatever policy the slot holds
  // when it reads them); none when it had no scope.
  std::optional<uint32_t> policy_slot;
};

// A runner the daemon started gets a channel of its own for these notices
// (a SOCK_SEQPACKET socket at the descriptor AGENTCAGE_NOTIFY_FD names):
// no connection to the control socket, no waiting for an answer, and the
// daemon reads the channel before it answers the run's client, so the
// run's end is counted by then. Takes the descriptor (close-on-exec from
// here: COMMAND never inherits it) and removes the variable; without it, or
// with a descriptor that is not such a socket (said on stderr), notices go
// to the control socket. Call once, before the run starts.
void adopt_notify_channel();
// Whether this process adopted such a channel: it is a runner of the daemon.
bool notify_channel_adopted();

// `labels` go into the audit lines of the run's decisions.
void notify_run_start(const std::string& run_id, const std::string& policy, uint64_t scope_id,
                      const core::Labels& labels);
void notify_run_end(const RunEnd& end);

}  // namespace agentcage::control
