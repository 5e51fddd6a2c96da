// SPDX-License-Identifier: Apache-2.0
// The daemon's Prometheus metrics (prometheus-cpp, pulled from /metrics).
// Names and labels are a contract shared with dashboards/ and alert rules:
// never rename one. Labels are bounded: policy, hook, decision, outcome,
// result, reason, binding (names the configuration gives) -- never pids,
// paths, run ids or cgroup ids.
#pragma once

#include <agentcage/abi.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "core/fail_closed.h"
#include "core/run_outcome.h"
#include "telemetry/metrics_server.h"
#include "util/result.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <class T>
class Family;
}  // namespace prometheus

namespace agentcage::telemetry {

// Turns absolute per-slot kernel counters into monotonic Prometheus counters.
// A slot's counters restart from zero when its slot is handed to another
// transient policy (Enforcer::put_transient_policy resets them) and may be
// observed for the first time at any value. Pure bookkeeping, unit-tested.
class CounterTracker {
 public:
  struct Delta {
    uint32_t hook, decision;
    uint64_t amount;
  };
  // The increase since the last observation of `slot` under `identity`
  // (policy name). A new identity or a value lower than before means the slot
  // was reset: the whole current value is new.
  std::vector<Delta> observe(uint32_t slot, const std::string& identity, const bpf::SlotCounters& now);
  void forget(uint32_t slot) { seen_.erase(slot); }

 private:
  struct Seen {
    std::string identity;
    std::array<std::array<uint64_t, AC_DECISION_COUNT>, AC_HOOK_COUNT> values{};
  };
  std::map<uint32_t, Seen> seen_;
};

// Where a fail-closed refusal happened (agentcage_fail_closed_total{source}).
enum class FailClosedSource {
  run,          // a run refused to start (exit status 125)
  policy_file,  // a policy file of the directory was rejected
  daemon,       // the daemon could not adopt or load the programs (retried every few seconds)
};

// A policy of the daemon's directory, as the per-policy gauges show it.
struct PolicyState {
  std::string name;
  bool valid = false;           // the file's current content is what enforces
  double loaded_at = 0;         // when the enforcing content was installed (Unix seconds; 0: never)
  std::string mode;             // "enforce" or "audit" (of the enforcing content; "" when none)
};

// A binding of the daemon's `attach:` (scope/bind.h), as its metrics show it.
struct BindingMetric {
  std::string name;        // as the configuration names it (bounded by the configuration)
  bool unconfined = false;  // a cgroup exists at its path and its binding does not confine it
  uint64_t late = 0;        // times a cgroup was confined late with processes already in it (absolute)
  uint64_t confined = 0;    // cgroups confined at their creation, kernel count (absolute)
};

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serve /metrics as OPTIONS say (telemetry/metrics_server.h).
  Status listen(const ServeOptions& options);
  // Stops serving /metrics (listen() may be called again).
  void stop_listening();
  // The port actually bound (0 when not listening).
  int port() const;

  void decisions(const std::string& policy, uint32_t hook, uint32_t decision, uint64_t n);
  void event(const std::string& policy, uint32_t hook, uint32_t decision);
  // A run's denied system calls: agentcage_decisions_total{hook="syscall",decision="deny"}.
  // Denials a run counted itself (the kernel has no counter for them):
  // hook "syscall" (its seccomp filter), "dns" (names its resolver refused).
  void run_denials(const std::string& policy, std::string_view hook, uint64_t n);
  void events_lost(uint64_t n);
  void events_suppressed(uint64_t n);
  void run_finished(const std::string& policy, core::RunOutcome outcome, double seconds);
  void runs_active(double n);
  void policy_reload(bool success);
  // The daemon's configuration file read again: counted, and whether it now
  // runs with the file as it is (agentcage_config_last_reload_successful).
  void config_reload(bool success);
  void policies_loaded(double n);
  void scopes_active(double n);
  // agentcage_containers_active: the containers the daemon confines now.
  void containers_active(double n);
  // agentcage_container_operations_total{op,result}: a container confined
  // (op "confine": its createRuntime hook's attach), released (op "release":
  // its poststop hook's detach) or swept (op "sweep": its cgroup went without
  // a poststop), each a success or a failure (a refused confine keeps the
  // container from starting).
  enum class ContainerOp { confine, release, sweep };
  void container_operation(ContainerOp op, bool success);
  void enforcement_ready(bool ready);
  void fail_closed(core::FailClosedReason reason, FailClosedSource source);
  // agentcage_bpf_map_entries / _capacity{map}.
  void map_fill(const std::vector<bpf::MapFill>& maps);
  // The per-policy gauges; policies not listed lose their series.
  void policy_states(const std::vector<PolicyState>& policies);
  // The daemon's own drops so far (absolute counts): audit lines its full
  // buffer could not take, lines a slow `agentcage events` stream missed.
  void daemon_drops(uint64_t audit_log, uint64_t event_streams);
  // agentcage_binding_unconfined{binding}, agentcage_binding_late_total and
  // agentcage_binding_confined_total; bindings not listed lose their series.
  void bindings(const std::vector<BindingMetric>& bindings);
  // process_* of this process (start time, CPU, memory, descriptors), from /proc/self.
  void process();

  // The registry's current text exposition (what /metrics serves).
  std::string text() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsServer> server_;
  prometheus::Family<prometheus::Counter>* decisions_;
  prometheus::Family<prometheus::Counter>* events_;
  prometheus::Counter* events_lost_;
  prometheus::Counter* events_suppressed_;
  prometheus::Family<prometheus::Counter>* runs_;
  prometheus::Family<prometheus::Counter>* config_reloads_;
  prometheus::Gauge* config_last_reload_ok_;
  prometheus::Family<prometheus::Histogram>* run_duration_;
  prometheus::Gauge* runs_active_;
  prometheus::Family<prometheus::Counter>* reloads_;
  prometheus::Gauge* policies_loaded_;
  prometheus::Gauge* scopes_active_;
  prometheus::Gauge* containers_active_;
  prometheus::Family<prometheus::Counter>* container_ops_;
  prometheus::Gauge* enforcement_ready_;
  prometheus::Family<prometheus::Counter>* fail_closed_;
  prometheus::Family<prometheus::Gauge>* map_entries_;
  prometheus::Family<prometheus::Gauge>* map_capacity_;
  prometheus::Family<prometheus::Gauge>* policy_valid_;
  prometheus::Family<prometheus::Gauge>* policy_loaded_at_;
  prometheus::Family<prometheus::Gauge>* policy_info_;
  std::map<std::string, std::string> policy_modes_;  // the info series each policy has now
  prometheus::Family<prometheus::Counter>* drops_;
  prometheus::Family<prometheus::Gauge>* binding_unconfined_;
  prometheus::Family<prometheus::Counter>* binding_late_;
  prometheus::Family<prometheus::Counter>* binding_confined_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> bindings_seen_;  // name -> (late, confined) counted
  uint64_t audit_drops_seen_ = 0, stream_drops_seen_ = 0;
  prometheus::Counter* cpu_seconds_;
  double cpu_seen_ = 0;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* virtual_bytes_;
  prometheus::Gauge* open_fds_;
  prometheus::Gauge* max_fds_;
};

}  // namespace agentcage::telemetry
