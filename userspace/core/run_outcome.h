// SPDX-License-Identifier: Apache-2.0
// How a finished `agentcage run` ended, as one closed set. The names are the
// values of agentcage_runs_total{outcome} and of the control protocol's
// run_end "outcome": a contract with dashboards and clients, never renamed.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace agentcage::core {

enum class RunOutcome { ok, error, timeout, oom, signal, denied, setup_failed };

inline constexpr std::array kRunOutcomes = {RunOutcome::ok,          RunOutcome::error,  RunOutcome::timeout,
                                            RunOutcome::oom,         RunOutcome::signal, RunOutcome::denied,
                                            RunOutcome::setup_failed};

std::string_view name(RunOutcome outcome);
// The outcome named `text`; unset for anything else.
std::optional<RunOutcome> parse_run_outcome(std::string_view text);

// The outcome of a run from agentcage's exit status and how it ended.
RunOutcome run_outcome(int exit_code, bool timed_out, bool oom_killed, std::optional<int> signal);

}  // namespace agentcage::core
