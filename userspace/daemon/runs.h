// SPDX-License-Identifier: Apache-2.0
// The runs the daemon knows of: which scope id is which run id (for the
// audit line's run_id and the status answer), from the run_start
// notification and from the run records in STATE_DIR/runs, and how many runs
// are alive on the host.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include <sys/types.h>

#include "core/labels.h"

namespace agentcage::daemon {

class RunIndex {
 public:
  explicit RunIndex(std::string state_dir) : dir_(std::move(state_dir) + "/runs") {}

  // Live runs from their records (a run is alive while its lock is held), so
  // runs_active counts every run on the host, with or without notifications.
  // Learns the run ids of the live runs on the way.
  size_t scan();
  // The run id of a scope; an unknown scope rescans the records, at most
  // once a second (an event storm must not turn into a directory walk each).
  std::optional<std::string> run_id(uint64_t scope_id);
  // A run_start notification (with the run's labels). `owner`: the uid of
  // the control group's member a run through the daemon is for (none: a
  // root's run, which no member sees).
  void note(uint64_t scope_id, const std::string& run_id, const core::Labels& labels = {},
            std::optional<uid_t> owner = std::nullopt);
  // The labels of a scope's run (empty when none or unknown).
  core::Labels labels(uint64_t scope_id) const;
  // The labels of a run by its id (empty when none or unknown).
  core::Labels labels_of_run(const std::string& run_id) const;
  // The member a scope's run (a run by its id) is for; none when root's
  // or unknown.
  std::optional<uid_t> owner(uint64_t scope_id) const;
  std::optional<uid_t> owner_of_run(const std::string& run_id) const;
  const std::map<uint64_t, std::string>& ids() const { return run_ids_; }

 private:
  using Clock = std::chrono::steady_clock;

  std::string dir_;
  std::map<uint64_t, std::string> run_ids_;  // scope id -> run id
  std::map<uint64_t, core::Labels> labels_;  // scope id -> labels (runs that have some)
  std::map<uint64_t, uid_t> owners_;         // scope id -> member (runs through the daemon)
  std::deque<uint64_t> order_;               // oldest first, to bound run_ids_
  Clock::time_point last_scan_{};
};

}  // namespace agentcage::daemon
