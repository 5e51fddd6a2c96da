// SPDX-License-Identifier: Apache-2.0
#include "run/result.h"

#include "bpf/names.h"
#include "bpf/record.h"
#include "core/run_outcome.h"
#include "util/sys_names.h"
#include "util/text.h"

namespace agentcage::run {
namespace {

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json to_json(const RunResult& r) {
  using nlohmann::json;
  json j;
  j["run_id"] = r.run_id;
  j["policy"] = r.policy_name;
  j["policy_file"] = r.policy_file;
  j["command"] = r.command;
  j["workspace"] = r.workspace;
  j["workspace_kept"] = r.workspace_kept;
  j["workspace_error"] = opt(r.workspace_error);
  j["cgroup"] = r.cgroup;
  j["scope_id"] = r.scope_id;
  j["uid"] = r.uid;
  j["gid"] = r.gid;
  j["limits"] = {{"memory_bytes", opt(r.memory_max_bytes)},
                 {"pids", opt(r.pids_max)},
                 {"cpus", opt(r.cpus)},
                 {"timeout_ms", opt(r.timeout_ms)},
                 {"disk_bytes", opt(r.disk_max_bytes)}};

  j["exit_code"] = r.exit_code;
  j["started"] = r.started;
  j["exit_status"] = opt(r.exit_status);
  j["signal"] = r.signal ? json(signal_name(*r.signal)) : json(nullptr);
  j["signal_number"] = opt(r.signal);
  j["timed_out"] = r.timed_out;
  j["oom_killed"] = r.oom_killed;
  j["oom_kills"] = r.oom_kills;
  j["interrupted_by"] = r.interrupted_by > 0 ? json(signal_name(r.interrupted_by)) : json(nullptr);
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  j["error_errno"] = r.error_errno ? json(errno_name(r.error_errno)) : json(nullptr);

  j["wall_time_ms"] = static_cast<double>(r.wall_time_us) / 1000.0;
  auto ms = [](const std::optional<uint64_t>& us) {
    return us ? json(static_cast<double>(*us) / 1000.0) : json(nullptr);
  };
  j["cpu_time_ms"] = {
      {"user", ms(r.cpu_user_us)}, {"system", ms(r.cpu_system_us)}, {"total", ms(r.cpu_total_us)}};
  j["peak_memory_bytes"] = opt(r.peak_memory_bytes);
  j["peak_memory_source"] = r.peak_memory_source.empty() ? json(nullptr) : json(r.peak_memory_source);

  // Without a report: zeros and no records ("reported": false says why).
  const bpf::ScopeReport report = r.report.value_or(bpf::ScopeReport{});
  json denials;
  denials["reported"] = r.report.has_value();
  json by_hook = json::object(), audited_by_hook = json::object();
  for (unsigned h = 0; h < AC_HOOK_COUNT; ++h) {
    if (report.denied[h]) by_hook[std::string(bpf::hook_name(h))] = report.denied[h];
    if (report.audited[h]) audited_by_hook[std::string(bpf::hook_name(h))] = report.audited[h];
  }
  denials["total"] = report.denied_total();
  denials["by_hook"] = by_hook;
  denials["audited_total"] = report.audited_total();
  denials["audited_by_hook"] = audited_by_hook;
  denials["records_total"] = report.records_taken;
  denials["events_suppressed"] = report.events_suppressed;
  json records = json::array();
  for (const auto& rec : report.records) records.push_back(bpf::record_json(rec));
  denials["records"] = std::move(records);
  j["denials"] = std::move(denials);
  return j;
}

std::string result_text(const RunResult& r) {
  return to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string denial_summary(const RunResult& r) {
  if (!r.report || r.report->denied_total() == 0) return "";
  // Long enough for a real path, short enough that a flood stays one line.
  constexpr size_t kTargetMax = 160;
  std::string line = "agentcage: policy " + escape(r.policy_name, 64) + " denied " +
                     std::to_string(r.report->denied_total()) + " operation(s)";
  const char* sep = ": ";
  for (const auto& rec : r.report->records) {
    line += sep;
    line += bpf::hook_name(rec.hook);
    line += " ";
    line += escape(bpf::record_target(rec), kTargetMax);
    sep = ", ";
  }
  if (r.report->records_taken > r.report->records.size()) line += ", ...";
  return line + "\n";
}

control::RunEnd run_end_notice(const RunResult& res) {
  control::RunEnd end;
  end.run_id = res.run_id;
  end.policy = res.policy_name;
  end.outcome = core::run_outcome(res.exit_code, res.timed_out, res.oom_killed, res.signal);
  end.exit_code = res.exit_code;
  end.duration_seconds = static_cast<double>(res.wall_time_us) / 1e6;
  if (res.exit_code == 125) end.fail_closed = res.fail_closed_reason;
  return end;
}

}  // namespace agentcage::run
