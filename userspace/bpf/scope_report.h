// SPDX-License-Identifier: Apache-2.0
// A scope's deny/audit report, as read from ac_scope_reports (abi.h).
#pragma once

#include <agentcage/abi.h>

#include <array>
#include <cstdint>
#include <vector>

namespace agentcage::bpf {

// Read before the scope is removed: the report goes with the scope.
struct ScopeReport {
  std::array<uint64_t, AC_HOOK_COUNT> denied{};
  std::array<uint64_t, AC_HOOK_COUNT> audited{};
  uint32_t records_taken = 0;  // may exceed records.size()
  // Records kept out of the shared ring buffer (the daemon's audit log)
  // because the scope had used its budget (AC_SCOPE_EVENT_BUDGET); exact.
  uint64_t events_suppressed = 0;
  // A recorded scope's records its own ring buffer had no room for (its
  // reader fell behind; Enforcer::record_scope); exact.
  uint64_t records_unrecorded = 0;
  std::vector<ac_event_decision> records;  // the first AC_REPORT_RECORDS

  uint64_t denied_total() const { return sum(denied); }
  uint64_t audited_total() const { return sum(audited); }

 private:
  static uint64_t sum(const std::array<uint64_t, AC_HOOK_COUNT>& counts) {
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    return total;
  }
};

}  // namespace agentcage::bpf
