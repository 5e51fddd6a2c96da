// SPDX-License-Identifier: Apache-2.0
#include "telemetry/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <sstream>

#include "bpf/names.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace agentcage::telemetry {

std::vector<CounterTracker::Delta> CounterTracker::observe(uint32_t slot, const std::string& identity,
                                                           const bpf::SlotCounters& now) {
  std::vector<Delta> out;
  auto it = seen_.find(slot);
  bool fresh = it == seen_.end() || it->second.identity != identity;
  if (!fresh) {
    // Any counter lower than before: the slot was reset in between.
    for (uint32_t h = 0; h < AC_HOOK_COUNT && !fresh; ++h)
      for (uint32_t d = 0; d < AC_DECISION_COUNT && !fresh; ++d)
        fresh = now.hooks[h].decisions[d] < it->second.values[h][d];
  }
  Seen& s = seen_[slot];
  for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h)
    for (uint32_t d = 0; d < AC_DECISION_COUNT; ++d) {
      uint64_t cur = now.hooks[h].decisions[d];
      uint64_t delta = fresh ? cur : cur - s.values[h][d];
      if (delta) out.push_back({h, d, delta});
      s.values[h][d] = cur;
    }
  s.identity = identity;
  return out;
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  decisions_ =
      &BuildCounter()
           .Name("agentcage_decisions_total")
           .Help(
               "Decisions of the BPF LSM programs on scoped tasks, by hook, decision and policy (exact, "
               "from the kernel's per-CPU counters)")
           .Register(*registry_);
  events_ =
      &BuildCounter()
           .Name("agentcage_events_total")
           .Help(
               "Decision records delivered through the ring buffer (denials and audit-mode would-be denials)")
           .Register(*registry_);
  events_lost_ =
      &BuildCounter()
           .Name("agentcage_events_lost_total")
           .Help(
               "Decision records the ring buffer could not take (counted in the kernel; the decision was "
               "made regardless)")
           .Register(*registry_)
           .Add({});
  events_suppressed_ =
      &BuildCounter()
           .Name("agentcage_events_suppressed_total")
           .Help(
               "Decision records kept out of the ring buffer because their run had used its budget of "
               "records per second (counted in the kernel, per run in the run's result; the decision and "
               "its counters are exact regardless)")
           .Register(*registry_)
           .Add({});
  runs_ = &BuildCounter()
               .Name("agentcage_runs_total")
               .Help(
                   "Finished agentcage runs by policy and outcome (ok, error, timeout, oom, signal, denied, "
                   "setup_failed)")
               .Register(*registry_);
  run_duration_ = &BuildHistogram()
                       .Name("agentcage_run_duration_seconds")
                       .Help("Wall-clock duration of finished runs")
                       .Register(*registry_);
  runs_active_ = &BuildGauge()
                      .Name("agentcage_runs_active")
                      .Help("Runs in progress on this host")
                      .Register(*registry_)
                      .Add({});
  reloads_ = &BuildCounter()
                  .Name("agentcage_policy_reloads_total")
                  .Help("Policy file loads and reloads by result (success, failure)")
                  .Register(*registry_);
  policies_loaded_ = &BuildGauge()
                          .Name("agentcage_policies_loaded")
                          .Help("Policies from the policy directory installed in the kernel")
                          .Register(*registry_)
                          .Add({});
  scopes_active_ = &BuildGauge()
                        .Name("agentcage_scopes_active")
                        .Help("Cgroups currently confined (runs and attachments)")
                        .Register(*registry_)
                        .Add({});
  enforcement_ready_ =
      &BuildGauge()
           .Name("agentcage_enforcement_ready")
           .Help("1 while the BPF LSM programs are attached and the BPF LSM is active, else 0")
           .Register(*registry_)
           .Add({});
  fail_closed_ =
      &BuildCounter()
           .Name("agentcage_fail_closed_total")
           .Help("Times agentcage refused to run or apply something because it could not enforce, by reason")
           .Register(*registry_);
  BuildGauge()
      .Name("agentcage_build_info")
      .Help("agentcage version (always 1)")
      .Register(*registry_)
      .Add({{"version", AGENTCAGE_VERSION}})
      .Set(1);
  // Series that exist from the start, so rate() and absent() work before the
  // first event of their kind.
  for (bool ok : {true, false}) reloads_->Add({{"result", ok ? "success" : "failure"}});
  for (core::FailClosedReason r : core::kFailClosedReasons)
    fail_closed_->Add({{"reason", std::string(core::name(r))}});
}

Metrics::~Metrics() = default;

Status Metrics::listen(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
    exposer_->RegisterCollectable(registry_);
  } catch (const std::exception& e) {
    exposer_.reset();
    return Error{"metrics: cannot listen on " + address + ": " + e.what(), EADDRINUSE};
  }
  return {};
}

int Metrics::port() const {
  if (!exposer_) return 0;
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void Metrics::decisions(const std::string& policy, uint32_t hook, uint32_t decision, uint64_t n) {
  decisions_
      ->Add({{"hook", std::string(bpf::hook_name(hook))},
             {"decision", std::string(bpf::decision_name(decision))},
             {"policy", policy}})
      .Increment(static_cast<double>(n));
}

void Metrics::run_denials(const std::string& policy, std::string_view hook, uint64_t n) {
  decisions_->Add({{"hook", std::string(hook)}, {"decision", "deny"}, {"policy", policy}})
      .Increment(static_cast<double>(n));
}

void Metrics::event(const std::string& policy, uint32_t hook, uint32_t decision) {
  events_
      ->Add({{"hook", std::string(bpf::hook_name(hook))},
             {"decision", std::string(bpf::decision_name(decision))},
             {"policy", policy}})
      .Increment();
}

void Metrics::events_lost(uint64_t n) { events_lost_->Increment(static_cast<double>(n)); }
void Metrics::events_suppressed(uint64_t n) { events_suppressed_->Increment(static_cast<double>(n)); }

void Metrics::run_finished(const std::string& policy, core::RunOutcome outcome, double seconds) {
  runs_->Add({{"policy", policy}, {"outcome", std::string(core::name(outcome))}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.1, 0.5, 1,   2.5, 5,    10,  30,
                                                                   60,  120, 300, 600, 1800, 3600};
  run_duration_->Add({{"policy", policy}}, kBuckets).Observe(seconds);
}

void Metrics::runs_active(double n) { runs_active_->Set(n); }
void Metrics::policy_reload(bool success) {
  reloads_->Add({{"result", success ? "success" : "failure"}}).Increment();
}
void Metrics::policies_loaded(double n) { policies_loaded_->Set(n); }
void Metrics::scopes_active(double n) { scopes_active_->Set(n); }
void Metrics::enforcement_ready(bool ready) { enforcement_ready_->Set(ready ? 1 : 0); }
void Metrics::fail_closed(core::FailClosedReason reason) {
  fail_closed_->Add({{"reason", std::string(core::name(reason))}}).Increment();
}

std::string Metrics::text() const {
  prometheus::TextSerializer s;
  return s.Serialize(registry_->Collect());
}

}  // namespace agentcage::telemetry
