// SPDX-License-Identifier: Apache-2.0
#include "core/run_outcome.h"

namespace agentcage::core {

std::string_view name(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::ok:
      return "ok";
    case RunOutcome::error:
      return "error";
    case RunOutcome::timeout:
      return "timeout";
    case RunOutcome::oom:
      return "oom";
    case RunOutcome::signal:
      return "signal";
    case RunOutcome::denied:
      return "denied";
    case RunOutcome::setup_failed:
      return "setup_failed";
  }
  return "unknown";
}

std::optional<RunOutcome> parse_run_outcome(std::string_view text) {
  for (RunOutcome o : kRunOutcomes)
    if (name(o) == text) return o;
  return std::nullopt;
}

RunOutcome run_outcome(int exit_code, bool timed_out, bool oom_killed, std::optional<int> signal) {
  if (exit_code == 125) return RunOutcome::setup_failed;
  if (timed_out) return RunOutcome::timeout;
  if (oom_killed && signal) return RunOutcome::oom;
  if (signal) return RunOutcome::signal;
  if (exit_code == 126 || exit_code == 127) return RunOutcome::denied;
  if (exit_code == 0) return RunOutcome::ok;
  if (exit_code > 128) return RunOutcome::signal;  // agentcage itself was interrupted (SIGINT/SIGTERM/SIGHUP)
  return RunOutcome::error;
}

}  // namespace agentcage::core
