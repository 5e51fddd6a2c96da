// `agentcage run` telling the daemon, when one is running, that a run
// started and how it ended (for agentcage_runs_total, the run duration
// histogram, fail-closed counts and run ids in audit events). Best effort: a
// run never waits more than about a second for the daemon and never fails
// because of it; without a daemon nothing happens.
#pragma once

#include <cstdint>
#include <string>

#include "run/result.h"

namespace agentcage::control {

void notify_run_start(const std::string& run_id, const std::string& policy, uint64_t scope_id);
void notify_run_end(const run::RunResult& result);

}  // namespace agentcage::control
