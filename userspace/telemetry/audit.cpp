// SPDX-License-Identifier: Apache-2.0
#include "telemetry/audit.h"

#include <time.h>

#include "bpf/record.h"
#include "util/text.h"

namespace agentcage::telemetry {

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
  j["time"] = rfc3339_utc(ctx.realtime_ns, 9);
  j["run_id"] = ctx.run_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.run_id);
  j["policy"] = ctx.policy.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.policy);
  if (!ctx.labels.empty()) j["labels"] = ctx.labels;
  if (!ctx.container_id.empty()) j["container_id"] = ctx.container_id;
  return j;
}

std::string event_line(const ac_event_decision& ev, const EventContext& ctx) {
  return json_display_safe(
             event_json(ev, ctx).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) +
         "\n";
}

std::string refused_name_line(const std::string& name, uint64_t count, const EventContext& ctx) {
  nlohmann::json j = {{"time", rfc3339_utc(ctx.realtime_ns, 9)},
                      {"run_id", ctx.run_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.run_id)},
                      {"policy", ctx.policy.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.policy)},
                      {"hook", "dns"},
                      {"decision", "deny"},
                      {"reason", "default_deny"},
                      {"target", name},
                      {"target_kind", "name"},
                      {"count", count}};
  if (!ctx.labels.empty()) j["labels"] = ctx.labels;
  return json_display_safe(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) + "\n";
}

}  // namespace agentcage::telemetry
