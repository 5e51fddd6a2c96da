// SPDX-License-Identifier: Apache-2.0
#include "run/result.h"

#include <algorithm>
#include <cerrno>
#include <vector>

#include "bpf/names.h"
#include "bpf/record.h"
#include "core/fail_closed.h"
#include "core/run_outcome.h"
#include "util/sys_names.h"
#include "util/text.h"

namespace agentcage::run {
namespace {

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// A denied call in the shape of a decision record (bpf/record.h), so that
// readers handle one shape: hook "syscall", the call's name as the target.
nlohmann::json syscall_record_json(const RunResult& r, const SyscallDenial& d) {
  nlohmann::json j;
  j["scope_id"] = r.scope_id;
  j["policy_slot"] = opt(r.policy_slot);
  j["hook"] = "syscall";
  j["decision"] = "deny";
  j["reason"] = "default_deny";
  j["pid"] = d.pid;
  j["tid"] = d.tid;
  j["uid"] = d.uid;
  j["comm"] = valid_utf8(d.comm);
  j["target"] = d.name;
  j["target_kind"] = "syscall";
  j["errno"] = EPERM;
  j["errno_name"] = errno_name(EPERM);
  j["cgroup_id"] = r.scope_id;
  return j;
}

// RFC 3339 in UTC with milliseconds, or null for a time never set.
nlohmann::json timestamp(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point{}) return nullptr;
  return rfc3339_utc(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(), 3);
}

// The result's "dns" (run/dns.h).
nlohmann::json dns_json(const DnsReport& r) {
  return {
      {"queries", r.stats.queries}, {"forwarded", r.stats.forwarded}, {"refused", r.stats.refused},
      {"failed", r.stats.failed},   {"malformed", r.stats.malformed}, {"other_types", r.stats.other_types},
      {"pinned", r.pinned},         {"pin_errors", r.pin_errors},     {"not_pinned", r.not_pinned}};
}

}  // namespace

nlohmann::json to_json(const RunResult& r) {
  using nlohmann::json;
  json j;
  j["version"] = kResultVersion;
  j["agentcage_version"] = AGENTCAGE_VERSION;
  j["run_id"] = r.run_id;
  j["labels"] = r.labels;
  j["started_at"] = timestamp(r.started_at);
  j["ended_at"] = timestamp(r.ended_at);
  j["policy"] = r.policy_name;
  j["mode"] = r.mode.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.mode);
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
  j["output_truncated"] = r.output_truncated;
  j["interrupted_by"] = r.interrupted_by > 0 ? json(signal_name(r.interrupted_by)) : json(nullptr);
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  j["error_errno"] = r.error_errno ? json(errno_name(r.error_errno)) : json(nullptr);
  j["fail_closed"] = r.exit_code == 125 && r.fail_closed_reason
                         ? json(std::string(core::name(*r.fail_closed_reason)))
                         : json(nullptr);
  if (r.io)
    j["io"] = {{"dir", r.io->dir},
               {"copied_in", r.io->copied_in},
               {"copied_in_bytes", r.io->copied_in_bytes},
               {"copied_out", r.io->copied_out},
               {"copied_out_bytes", r.io->copied_out_bytes},
               {"skipped", r.io->skipped},
               {"skipped_total", r.io->skipped_total},
               {"error", opt(r.io->error)}};
  else
    j["io"] = nullptr;

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
  // Denied system calls (seccomp) count as denials of the pseudo-hook
  // "syscall": counted by agentcage, not by the BPF programs.
  const SyscallReport calls = r.syscalls.value_or(SyscallReport{});
  if (calls.total) by_hook["syscall"] = calls.total;
  // Names the run's resolver refused count as denials of the pseudo-hook
  // "dns": counted by agentcage, like denied system calls.
  const uint64_t names_refused = r.dns ? r.dns->refused_total : 0;
  if (names_refused) by_hook["dns"] = names_refused;
  denials["total"] = report.denied_total() + calls.total + names_refused;
  denials["by_hook"] = by_hook;
  denials["audited_total"] = report.audited_total();
  denials["audited_by_hook"] = audited_by_hook;
  denials["records_total"] = report.records_taken + calls.records_taken;
  denials["events_suppressed"] = report.events_suppressed;
  json records = json::array();
  for (const auto& rec : report.records) records.push_back(bpf::record_json(rec));
  for (const auto& d : calls.records) records.push_back(syscall_record_json(r, d));
  denials["records"] = std::move(records);
  if (r.syscalls) {
    json by_name = json::object();
    for (const auto& [name, count] : calls.by_name) by_name[name] = count;
    denials["syscalls"] = {{"total", calls.total}, {"by_name", std::move(by_name)}};
  } else {
    denials["syscalls"] = nullptr;
  }
  if (r.dns) {
    json by_name = json::object();
    for (const auto& [name, count] : r.dns->refused_by_name) by_name[name] = count;
    denials["dns"] = {{"total", r.dns->refused_total}, {"by_name", std::move(by_name)}};
    if (!r.dns->refused_why.empty()) denials["dns"]["why"] = r.dns->refused_why;
  } else {
    denials["dns"] = nullptr;
  }
  j["denials"] = std::move(denials);
  j["recording"] = r.recording ? *r.recording : nlohmann::json(nullptr);
  j["dns"] = r.dns ? dns_json(*r.dns) : nlohmann::json(nullptr);
  return j;
}

std::string result_text(const RunResult& r) {
  return json_display_safe(to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) + "\n";
}

namespace {

// Names a wildcard matched and its veto refused (run/dns.h): the policy's
// author expected them allowed, so each says why (the first few).
std::string vetoed_names(const RunResult& r) {
  if (!r.dns) return "";
  constexpr size_t kShown = 4;
  std::string out;
  size_t shown = 0;
  for (const auto& [name, why] : r.dns->refused_why) {
    if (shown++ == kShown) {
      out += "agentcage: dns: ... and " + std::to_string(r.dns->refused_why.size() - kShown) +
             " more (the result's denials.dns.why)\n";
      break;
    }
    out += "agentcage: dns: " + escape(name, 160) + " was refused, " + escape(why, 200) +
           "; allow it by an exact rule if you mean to\n";
  }
  return out;
}

}  // namespace

std::string denial_summary(const RunResult& r) {
  const bpf::ScopeReport report = r.report.value_or(bpf::ScopeReport{});
  const SyscallReport calls = r.syscalls.value_or(SyscallReport{});
  const uint64_t total = report.denied_total() + calls.total;
  if (total == 0) return vetoed_names(r);
  // Long enough for a real path, short enough that a flood stays one line.
  constexpr size_t kTargetMax = 160;
  std::string line =
      "agentcage: policy " + escape(r.policy_name, 64) + " denied " + std::to_string(total) + " operation(s)";
  const char* sep = ": ";
  for (const auto& rec : report.records) {
    line += sep;
    line += bpf::hook_name(rec.hook);
    line += " ";
    line += escape(bpf::record_target(rec), kTargetMax);
    sep = ", ";
  }
  for (const auto& d : calls.records) {
    line += sep;
    line += "syscall ";
    line += escape(d.name, kTargetMax);
    sep = ", ";
  }
  if (report.records_taken > report.records.size() || calls.records_taken > calls.records.size())
    line += ", ...";
  return line + "\n" + vetoed_names(r);
}

control::RunEnd run_end_notice(const RunResult& res) {
  control::RunEnd end;
  end.run_id = res.run_id;
  end.policy = res.policy_name;
  end.outcome = core::run_outcome(res.exit_code, res.timed_out, res.oom_killed, res.signal);
  end.exit_code = res.exit_code;
  end.duration_seconds = static_cast<double>(res.wall_time_us) / 1e6;
  if (res.exit_code == 125) end.fail_closed = res.fail_closed_reason;
  if (res.syscalls) end.syscalls_denied = res.syscalls->total;
  end.policy_slot = res.policy_slot;
  if (res.dns && res.dns->refused_total) {
    // The most refused names (ties by name), for the daemon's audit lines.
    std::vector<std::pair<std::string, uint64_t>> names(res.dns->refused_by_name.begin(),
                                                        res.dns->refused_by_name.end());
    std::stable_sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (names.size() > control::kMaxRefusedNames) names.resize(control::kMaxRefusedNames);
    end.dns_refused.total = res.dns->refused_total;
    end.dns_refused.by_name.insert(names.begin(), names.end());
  }
  return end;
}

}  // namespace agentcage::run
