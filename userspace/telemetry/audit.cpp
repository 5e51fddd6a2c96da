// SPDX-License-Identifier: Apache-2.0
#include "telemetry/audit.h"

#include <time.h>

#include <cstdio>

#include "bpf/record.h"

namespace agentcage::telemetry {

std::string rfc3339_ns(int64_t realtime_ns) {
  if (realtime_ns < 0) realtime_ns = 0;
  time_t secs = static_cast<time_t>(realtime_ns / 1000000000);
  long nanos = static_cast<long>(realtime_ns % 1000000000);
  struct tm tm {};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, nanos);
  return buf;
}

int64_t boot_to_realtime_offset_ns() {
  auto ns = [](clockid_t c) {
    timespec ts{};
    ::clock_gettime(c, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  // Bracket the boot clock reading with two real-time readings.
  int64_t r1 = ns(CLOCK_REALTIME), b = ns(CLOCK_BOOTTIME), r2 = ns(CLOCK_REALTIME);
  return r1 + (r2 - r1) / 2 - b;
}

nlohmann::json event_json(const ac_event_decision& ev, const EventContext& ctx) {
  nlohmann::json j = bpf::record_json(ev);
  j["time"] = rfc3339_ns(ctx.realtime_ns);
  j["run_id"] = ctx.run_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.run_id);
  j["policy"] = ctx.policy.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.policy);
  if (!ctx.labels.empty()) j["labels"] = ctx.labels;
  if (!ctx.container_id.empty()) j["container_id"] = ctx.container_id;
  return j;
}

std::string event_line(const ac_event_decision& ev, const EventContext& ctx) {
  return event_json(ev, ctx).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string refused_name_line(const std::string& name, uint64_t count, const EventContext& ctx) {
  nlohmann::json j = {{"time", rfc3339_ns(ctx.realtime_ns)},
                      {"run_id", ctx.run_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.run_id)},
                      {"policy", ctx.policy.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.policy)},
                      {"hook", "dns"},
                      {"decision", "deny"},
                      {"reason", "default_deny"},
                      {"target", name},
                      {"target_kind", "name"},
                      {"count", count}};
  if (!ctx.labels.empty()) j["labels"] = ctx.labels;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace agentcage::telemetry
