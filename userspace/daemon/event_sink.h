// SPDX-License-Identifier: Apache-2.0
// The daemon's event sink: the ring buffer's only consumer. Every decision
// record becomes one audit line (the JSON shape of telemetry/audit.h), goes
// to the audit log (buffered, bounded), to the ring of recent events, and to
// the clients streaming events; it is counted in the metrics with its
// policy's name. The per-slot kernel counters become the decision metrics
// here too (telemetry::CounterTracker), and the kernel's lost-event count.
//
// Ordering rules, kept here:
//   1. collect_counters() before a policy slot is removed or a transient slot
//      may go (a run's end): the slot's last decisions go with it.
//   2. baseline() a fresh slot before a policy is installed in it: its
//      counters then count from the install, not from a previous owner.
#pragma once

#include <agentcage/abi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "bpf/enforcer.h"
#include "bpf/event_reader.h"
#include "daemon/audit_event.h"
#include "daemon/containers.h"
#include "daemon/runs.h"
#include "telemetry/metrics.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

class EventSink {
 public:
  // `audit_log`: a file, or "-" for stdout. `recent_events`: how many lines
  // the ring of recent events keeps (0: none).
  EventSink(std::string audit_log, size_t recent_events, telemetry::Metrics& metrics, RunIndex& runs,
            const ContainerIndex& containers);

  // Opens (or, on SIGUSR1, reopens) the audit log.
  Status open_audit_log();
  // Another audit log (the configuration read again): what is buffered
  // goes to the old one first; if the new one cannot be opened, the old one
  // stays in use and the error says why.
  Status move_audit_log(const std::string& audit_log);
  // How many lines the ring of recent events keeps from now on.
  void set_recent_events(size_t n);
  // Starts consuming `enforcer`'s ring buffer. Returns the fd to wait on
  // (-1: no reader; the error is logged).
  int attach(bpf::Enforcer& enforcer);
  // Where each audit line goes besides the log and the ring (the streaming
  // clients).
  void set_stream(std::function<void(const AuditEvent&)> stream) { stream_ = std::move(stream); }

  // Drains the ring buffer and writes the audit log.
  void consume();
  void flush_audit();

  void collect_counters();
  // One slot's (a run's at its end): the same, for one slot instead of
  // every slot, under the name of the policy the slot holds now.
  void collect_counters(uint32_t slot);
  void baseline(uint32_t slot, const std::string& name);
  void forget(uint32_t slot) { tracker_.forget(slot); }
  void name_slot(uint32_t slot, const std::string& name) { slot_names_[slot] = name; }
  // The names a run's resolver refused, one audit line each (at the run's end).
  void refused_names(const std::string& run_id, const std::string& policy,
                     const std::map<std::string, uint64_t>& by_name);
  // The kernel's lost and suppressed event counts into the metrics (every tick).
  void count_lost();

  const std::deque<AuditEvent>& recent() const { return recent_; }
  uint64_t delivered() const { return delivered_; }
  uint64_t malformed() const { return reader_ ? reader_->malformed() : 0; }
  uint64_t audit_dropped() const { return audit_dropped_; }

 private:
  // One slot's counters into the metrics, under `name` (the policy it holds).
  void collect_slot(uint32_t slot, const std::string& name);
  using Clock = std::chrono::steady_clock;
  void on_event(const ac_event_decision& ev);
  // One audit line to the log, the ring of recent events and the streams;
  // `owner`: the member whose run it is about (daemon/audit_event.h).
  void emit(std::string line, std::optional<uid_t> owner);
  std::string slot_name(uint32_t slot);

  std::string audit_log_;
  size_t recent_max_;
  telemetry::Metrics& metrics_;
  RunIndex& runs_;
  const ContainerIndex& containers_;
  bpf::Enforcer* enf_ = nullptr;
  std::unique_ptr<bpf::EventReader> reader_;
  std::function<void(const AuditEvent&)> stream_;
  telemetry::CounterTracker tracker_;
  std::map<uint32_t, std::string> slot_names_;  // last known name of every slot
  UniqueFd audit_fd_;
  std::string audit_buf_;
  std::deque<AuditEvent> recent_;
  // A kernel stat mirrored into a Prometheus counter.
  struct StatSeen {
    uint64_t seen = 0;
    bool initialised = false;
  };
  void mirror_stat(ac_stat which, StatSeen& s, void (telemetry::Metrics::*add)(uint64_t));
  uint64_t delivered_ = 0, audit_dropped_ = 0;
  StatSeen lost_, suppressed_;
  int64_t boot_offset_ns_ = 0;
  Clock::time_point last_slot_refresh_{};
};

}  // namespace agentcage::daemon
