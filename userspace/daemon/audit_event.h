// SPDX-License-Identifier: Apache-2.0
// One audit line as the control socket's clients get it, with the member of
// the control group whose run it is about: a member is shown only the lines
// of its own runs (the events op), root every line.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace agentcage::daemon {

struct AuditEvent {
  std::string line;  // one JSON object and its newline (telemetry/audit.h)
  // The uid of the client a run through the daemon is for; none for root's
  // runs, containers and the daemon's own lines (root only).
  std::optional<uid_t> owner;
};

}  // namespace agentcage::daemon
