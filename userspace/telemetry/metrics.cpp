// SPDX-License-Identifier: Apache-2.0
#include "telemetry/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
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
  config_reloads_ = &BuildCounter()
                         .Name("agentcage_config_reloads_total")
                         .Help("The daemon's configuration file read again (SIGHUP, agentcage reload) by result")
                         .Register(*registry_);
  for (const char* r : {"success", "failure"}) config_reloads_->Add({{"result", r}});
  config_last_reload_ok_ = &BuildGauge()
                                .Name("agentcage_config_last_reload_successful")
                                .Help("1 when the daemon runs with its configuration file as it is now, 0 when "
                                      "the last read of it was rejected")
                                .Register(*registry_)
                                .Add({});
  config_last_reload_ok_->Set(1);
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
  containers_active_ = &BuildGauge()
                            .Name("agentcage_containers_active")
                            .Help("Containers confined through agentcage oci-hook, not yet released")
                            .Register(*registry_)
                            .Add({});
  container_ops_ = &BuildCounter()
                        .Name("agentcage_container_operations_total")
                        .Help("Containers confined (their createRuntime hook), released (poststop) or swept "
                              "(cgroup gone without poststop), by result; a failed confine kept a container "
                              "from starting")
                        .Register(*registry_);
  for (const char* op : {"confine", "release", "sweep"})
    for (const char* result : {"success", "failure"}) container_ops_->Add({{"op", op}, {"result", result}});
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
      .Help("agentcage version, source revision and BPF object digest (always 1)")
      .Register(*registry_)
      .Add({{"version", AGENTCAGE_VERSION},
            {"revision", AGENTCAGE_REVISION},
            {"bpf_object", bpf::Enforcer::object_digest()}})
      .Set(1);
  map_entries_ = &BuildGauge()
                      .Name("agentcage_bpf_map_entries")
                      .Help("Entries in a BPF map that bounds what can be confined, installed or pinned")
                      .Register(*registry_);
  map_capacity_ = &BuildGauge()
                       .Name("agentcage_bpf_map_capacity")
                       .Help("The most entries that BPF map holds (max_entries)")
                       .Register(*registry_);
  policy_valid_ = &BuildGauge()
                       .Name("agentcage_policy_valid")
                       .Help("1 while a policy file's current content is what enforces, 0 while it is rejected")
                       .Register(*registry_);
  policy_loaded_at_ = &BuildGauge()
                           .Name("agentcage_policy_last_load_timestamp_seconds")
                           .Help("When a policy's enforcing content was installed (Unix time)")
                           .Register(*registry_);
  policy_info_ = &BuildGauge()
                      .Name("agentcage_policy_info")
                      .Help("A policy of the daemon's directory that enforces, with its mode (always 1)")
                      .Register(*registry_);
  drops_ = &BuildCounter()
                .Name("agentcage_daemon_dropped_total")
                .Help("What the daemon itself dropped: audit lines (its buffer full), lines a slow event stream missed")
                .Register(*registry_);
  for (const char* what : {"audit_log", "event_stream"}) drops_->Add({{"what", what}});
  binding_unconfined_ =
      &BuildGauge()
           .Name("agentcage_binding_unconfined")
           .Help("1 while a cgroup exists at a binding's path (attach: in the daemon's configuration) and is not "
                 "confined by it")
           .Register(*registry_);
  binding_late_ = &BuildCounter()
                       .Name("agentcage_binding_late_total")
                       .Help("Bound cgroups confined late, with processes already running in them unconfined")
                       .Register(*registry_);
  binding_confined_ = &BuildCounter()
                           .Name("agentcage_binding_confined_total")
                           .Help("Bound cgroups the kernel confined as they were created")
                           .Register(*registry_);
  cpu_seconds_ = &BuildCounter()
                      .Name("process_cpu_seconds_total")
                      .Help("User and system CPU time of the daemon")
                      .Register(*registry_)
                      .Add({});
  resident_bytes_ = &BuildGauge()
                         .Name("process_resident_memory_bytes")
                         .Help("Resident memory of the daemon")
                         .Register(*registry_)
                         .Add({});
  virtual_bytes_ = &BuildGauge()
                        .Name("process_virtual_memory_bytes")
                        .Help("Virtual memory of the daemon")
                        .Register(*registry_)
                        .Add({});
  open_fds_ = &BuildGauge().Name("process_open_fds").Help("Open file descriptors").Register(*registry_).Add({});
  max_fds_ = &BuildGauge()
                  .Name("process_max_fds")
                  .Help("The daemon's limit of open file descriptors")
                  .Register(*registry_)
                  .Add({});
  BuildGauge()
      .Name("process_start_time_seconds")
      .Help("When the daemon started (Unix time)")
      .Register(*registry_)
      .Add({})
      .Set(static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count()));
  // Series that exist from the start, so rate() and absent() work before the
  // first event of their kind.
  for (bool ok : {true, false}) reloads_->Add({{"result", ok ? "success" : "failure"}});
  using core::FailClosedReason;
  for (FailClosedReason r : core::kFailClosedReasons) fail_closed_->Add({{"reason", std::string(core::name(r))}, {"source", "run"}});
  for (FailClosedReason r : {FailClosedReason::policy_invalid, FailClosedReason::internal})
    fail_closed_->Add({{"reason", std::string(core::name(r))}, {"source", "policy_file"}});
  for (FailClosedReason r : {FailClosedReason::bpf_unavailable, FailClosedReason::lsm_inactive})
    fail_closed_->Add({{"reason", std::string(core::name(r))}, {"source", "daemon"}});
}

Metrics::~Metrics() = default;

Status Metrics::listen(const ServeOptions& options) {
  auto server = MetricsServer::start(options, [this] { return text(); });
  if (!server) return server.error();
  server_ = std::move(*server);
  return {};
}

void Metrics::stop_listening() { server_.reset(); }

int Metrics::port() const { return server_ ? server_->port() : 0; }

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
void Metrics::config_reload(bool success) {
  config_reloads_->Add({{"result", success ? "success" : "failure"}}).Increment();
  config_last_reload_ok_->Set(success ? 1 : 0);
}
void Metrics::policies_loaded(double n) { policies_loaded_->Set(n); }
void Metrics::scopes_active(double n) { scopes_active_->Set(n); }
void Metrics::containers_active(double n) { containers_active_->Set(n); }
void Metrics::container_operation(ContainerOp op, bool success) {
  const char* name = op == ContainerOp::confine ? "confine" : op == ContainerOp::release ? "release" : "sweep";
  container_ops_->Add({{"op", name}, {"result", success ? "success" : "failure"}}).Increment();
}
void Metrics::enforcement_ready(bool ready) { enforcement_ready_->Set(ready ? 1 : 0); }
void Metrics::fail_closed(core::FailClosedReason reason, FailClosedSource source) {
  const char* where = source == FailClosedSource::run           ? "run"
                      : source == FailClosedSource::policy_file ? "policy_file"
                                                                : "daemon";
  fail_closed_->Add({{"reason", std::string(core::name(reason))}, {"source", where}}).Increment();
}

std::string Metrics::text() const {
  prometheus::TextSerializer s;
  return s.Serialize(registry_->Collect());
}

void Metrics::map_fill(const std::vector<bpf::MapFill>& maps) {
  for (const auto& m : maps) {
    map_entries_->Add({{"map", m.map}}).Set(static_cast<double>(m.entries));
    map_capacity_->Add({{"map", m.map}}).Set(static_cast<double>(m.capacity));
  }
}

void Metrics::policy_states(const std::vector<PolicyState>& policies) {
  std::map<std::string, std::string> now;  // name -> mode ("" when nothing of it enforces)
  for (const auto& p : policies) now[p.name] = p.mode;
  // Series of policies that went, and info series whose mode changed.
  for (const auto& [name, mode] : policy_modes_) {
    auto it = now.find(name);
    if (!mode.empty() && (it == now.end() || it->second != mode))
      policy_info_->Remove(&policy_info_->Add({{"policy", name}, {"mode", mode}}));
    if (it == now.end())
      for (auto* family : {policy_valid_, policy_loaded_at_}) family->Remove(&family->Add({{"policy", name}}));
  }
  for (const auto& p : policies) {
    policy_valid_->Add({{"policy", p.name}}).Set(p.valid ? 1 : 0);
    policy_loaded_at_->Add({{"policy", p.name}}).Set(p.loaded_at);
    if (!p.mode.empty()) policy_info_->Add({{"policy", p.name}, {"mode", p.mode}}).Set(1);
  }
  policy_modes_ = std::move(now);
}

void Metrics::bindings(const std::vector<BindingMetric>& bindings) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> now;
  for (const auto& b : bindings) {
    binding_unconfined_->Add({{"binding", b.name}}).Set(b.unconfined ? 1 : 0);
    auto& [late_seen, confined_seen] = bindings_seen_[b.name];
    if (b.confined < confined_seen) confined_seen = 0;
    auto& late = binding_late_->Add({{"binding", b.name}});
    auto& confined = binding_confined_->Add({{"binding", b.name}});
    if (b.late > late_seen) late.Increment(static_cast<double>(b.late - late_seen));
    // The kernel's count starts again when the program set is loaded anew.
    if (b.confined > confined_seen) confined.Increment(static_cast<double>(b.confined - confined_seen));
    now[b.name] = {b.late, b.confined};
  }
  for (const auto& [name, seen] : bindings_seen_)
    if (!now.count(name)) {
      binding_unconfined_->Remove(&binding_unconfined_->Add({{"binding", name}}));
      binding_late_->Remove(&binding_late_->Add({{"binding", name}}));
      binding_confined_->Remove(&binding_confined_->Add({{"binding", name}}));
    }
  bindings_seen_ = std::move(now);
}

void Metrics::daemon_drops(uint64_t audit_log, uint64_t event_streams) {
  if (audit_log > audit_drops_seen_)
    drops_->Add({{"what", "audit_log"}}).Increment(static_cast<double>(audit_log - audit_drops_seen_));
  if (event_streams > stream_drops_seen_)
    drops_->Add({{"what", "event_stream"}}).Increment(static_cast<double>(event_streams - stream_drops_seen_));
  audit_drops_seen_ = audit_log;
  stream_drops_seen_ = event_streams;
}

void Metrics::process() {
  // /proc/self/stat: fields after the command's closing parenthesis, 14 and 15
  // (utime, stime in clock ticks), 23 (vsize, bytes), 24 (rss, pages).
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(text.substr(close + 2));
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    // f[0] is field 3 (state).
    if (f.size() > 21) {
      const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
      const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      if (cpu > cpu_seen_) cpu_seconds_->Increment(cpu - cpu_seen_), cpu_seen_ = cpu;
      virtual_bytes_->Set(std::stod(f[20]));
      resident_bytes_->Set(std::stod(f[21]) * static_cast<double>(::sysconf(_SC_PAGESIZE)));
    }
  }
  std::error_code ec;
  size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++fds;
  open_fds_->Set(static_cast<double>(fds > 0 ? fds - 1 : 0));  // not the directory's own descriptor
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) max_fds_->Set(static_cast<double>(lim.rlim_cur));
}

}  // namespace agentcage::telemetry
