// SPDX-License-Identifier: Apache-2.0
// `agentcage run --record`: every decision record of the run, not only the
// first few its report keeps or the ones the audit log's budget lets
// through. The scope gets a ring buffer of its own (Enforcer::record_scope,
// ac_scope_rings in abi.h) before its first process starts; the runner
// drains it while the run goes on and once more after the cgroup is empty.
// Records are kept once per distinct operation (hook, decision, reason,
// target, access, address), with a count: what `agentcage policy suggest`
// needs, in memory that follows the run's distinct operations, not its
// length.
#pragma once

#include <agentcage/abi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/event_reader.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::run {

// At most this many distinct operations are kept; more are counted
// (`distinct_dropped`) and make the recording incomplete.
inline constexpr size_t kRecordingMaxDistinct = 65536;

// The records, once per distinct operation (hook, decision, reason, target,
// access, address), with a count, in first-seen order. Pure: unit-tested.
class RecordSet {
 public:
  void add(const ac_event_decision& record);
  uint64_t total() const { return total_; }
  size_t distinct() const { return entries_.size(); }
  uint64_t dropped() const { return dropped_; }  // past kRecordingMaxDistinct
  // The result's "recording" object: {"complete", "total", "distinct",
  // "lost", "records": [record + "count"]}. `lost_elsewhere`: records lost
  // before they reached this set (the kernel's records_unrecorded,
  // malformed ones); complete only when nothing was lost anywhere.
  nlohmann::json json(uint64_t lost_elsewhere) const;

 private:
  using Key = std::tuple<uint8_t, uint8_t, uint8_t, uint8_t, uint32_t, uint16_t, uint16_t, uint16_t,
                         std::string, std::string>;
  static Key key_of(const ac_event_decision& r);
  struct Entry {
    ac_event_decision first;
    uint64_t count = 0;
  };
  std::map<Key, size_t> index_;
  std::vector<Entry> entries_;
  uint64_t total_ = 0;
  uint64_t dropped_ = 0;
};

// A recorded scope's ring buffer and its reader.
class Recording {
 public:
  // Reads the scope's ring buffer `ring` (Enforcer::record_scope).
  static Result<std::unique_ptr<Recording>> open(UniqueFd ring);

  // For the runner's poll loop: readable when records wait.
  int poll_fd() const;
  // Take every record waiting; never blocks.
  Status drain();

  // RecordSet::json; `unrecorded`: what the kernel could not put into the
  // ring buffer (ScopeReport::records_unrecorded).
  nlohmann::json json(uint64_t unrecorded) const;

 private:
  Recording() = default;
  UniqueFd ring_;
  std::unique_ptr<bpf::EventReader> reader_;
  RecordSet set_;
};

}  // namespace agentcage::run
