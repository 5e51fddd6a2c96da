// SPDX-License-Identifier: Apache-2.0
// Audit events: one JSON object per line for every decision record the
// kernel delivered (denials and audit-mode would-be denials): the record's
// JSON (bpf/record.h) plus what the consumer knows (time, run_id, policy).
// Field names are a contract (docs/daemon.md): fields are added, never renamed.
//
//   {"time":"2025-01-02T03:04:05.123456789Z","scope_id":1234,"run_id":"0123456789abcdef",
//    "policy":"python-sandbox","policy_slot":3,"hook":"file_open","decision":"deny",
//    "reason":"default_deny","pid":42,"tid":42,"uid":1879048192,"comm":"python3",
//    "target":"/etc/passwd","target_kind":"path","errno":13,"errno_name":"EACCES","cgroup_id":1234}
#pragma once

#include <agentcage/abi.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/labels.h"

namespace agentcage::telemetry {

// What the consumer knows beyond the record itself.
struct EventContext {
  int64_t realtime_ns = 0;  // the record's time on CLOCK_REALTIME
  std::string policy;       // the slot's policy name ("" when unknown)
  std::string run_id;       // "" when the scope is not a known run
  core::Labels labels;      // the run's caller-supplied labels ("labels", when any)
  std::string container_id;  // the container the scope confines ("container_id", when one)
};

// Offset that turns the records' CLOCK_BOOTTIME stamps into CLOCK_REALTIME.
int64_t boot_to_realtime_offset_ns();

// bpf::record_json(ev) with the context's fields added.
nlohmann::json event_json(const ac_event_decision& ev, const EventContext& ctx);
// event_json(...).dump() + "\n"; invalid UTF-8 is replaced, never an exception.
std::string event_line(const ac_event_decision& ev, const EventContext& ctx);

// A name a run's resolver refused (counted by the run, not by the kernel),
// as one line of the same shape, written when the run ends:
//   {"time":...,"run_id":...,"policy":...,"hook":"dns","decision":"deny",
//    "reason":"default_deny","target":"exfil.example.net","target_kind":"name","count":3}
std::string refused_name_line(const std::string& name, uint64_t count, const EventContext& ctx);

}  // namespace agentcage::telemetry
