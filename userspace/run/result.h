// SPDX-License-Identifier: Apache-2.0
// The result of one `agentcage run`, and its JSON form (--result FILE).
// Field names are a user contract: see docs/run.md.
#pragma once

#include <agentcage/abi.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/scope_report.h"
#include "control/notify.h"
#include "core/fail_closed.h"
#include "core/labels.h"
#include "run/dns.h"
#include "run/seccomp_notify.h"

namespace agentcage::run {

// The result document's version ("version"): bumped when a field changes
// meaning or goes; new fields do not bump it. docs/schema/result.schema.json.
inline constexpr int kResultVersion = 1;

// What --io-dir copied in and back (run/artifacts.h).
struct IoReport {
  std::string dir;
  uint64_t copied_in = 0, copied_in_bytes = 0, copied_out = 0, copied_out_bytes = 0;
  std::vector<std::string> skipped;  // the first entries left out, and why
  uint64_t skipped_total = 0;
  std::optional<std::string> error;  // why the copy back stopped
};

struct RunResult {
  std::string run_id;
  core::Labels labels;
  // Wall-clock time, for the result's started_at / ended_at (RFC 3339, UTC).
  std::chrono::system_clock::time_point started_at{}, ended_at{};
  std::optional<IoReport> io;
  std::string policy_name;
  std::string mode;  // "enforce" or "audit": what the run ran under (--mode or the policy's)
  std::string policy_file;
  std::vector<std::string> command;
  std::string workspace;
  bool workspace_kept = false;          // still exists after the run
  std::string cgroup;                   // path of the run's cgroup (removed at the end)
  uint64_t scope_id = 0;                // the scope's id in audit events (= the cgroup's id)
  std::optional<uint32_t> policy_slot;  // the slot the scope's policy ran on
  uint32_t uid = 0, gid = 0;

  // The effective limits (command line over policy); unset = none.
  std::optional<uint64_t> memory_max_bytes;
  std::optional<uint32_t> pids_max;
  std::optional<double> cpus;
  std::optional<uint64_t> timeout_ms;
  std::optional<uint64_t> disk_max_bytes;  // the workspace tmpfs size (limits.disk)
  // Why a workspace the caller asked to keep was removed instead (--keep of
  // a tmpfs workspace whose contents could not be copied out).
  std::optional<std::string> workspace_error;

  // How it ended.
  int exit_code = 0;               // agentcage's own exit status
  bool started = false;            // COMMAND was executed
  std::optional<int> exit_status;  // COMMAND's exit status when it exited
  std::optional<int> signal;       // signal that killed COMMAND
  bool timed_out = false;
  bool oom_killed = false;        // memory.events oom_kill > 0
  bool output_truncated = false;  // relayed output cut at limits.disk (run/stdio.h)
  uint64_t oom_kills = 0;
  int interrupted_by = 0;  // signal that made agentcage end the run
  std::string error;       // why agentcage failed (exit 125/126/127)
  // Why a 125 refused to run unconfined (unset for usage errors): the
  // result's "fail_closed" and agentcage_fail_closed_total{reason}.
  std::optional<core::FailClosedReason> fail_closed_reason;
  int error_errno = 0;

  // Measurements from the run's cgroup.
  uint64_t wall_time_us = 0;
  std::optional<uint64_t> cpu_user_us, cpu_system_us, cpu_total_us;  // cpu.stat
  std::optional<uint64_t> peak_memory_bytes;
  std::string peak_memory_source;  // "memory.peak" | "memory.current" | "" (unavailable)

  // The scope's deny/audit report, read before the scope was removed (unset
  // when the run got no scope or its report could not be read).
  std::optional<bpf::ScopeReport> report;
  // The run's denied system calls (seccomp), counted by agentcage; unset
  // when the run never got its filter.
  std::optional<SyscallReport> syscalls;
  // --record: the result's "recording" (run/recording.h Recording::json);
  // unset without --record.
  std::optional<nlohmann::json> recording;
  // A policy with domain rules: the run's resolver ("dns") and the names it
  // refused ("denials.dns"); unset otherwise.
  std::optional<DnsReport> dns;
};

nlohmann::json to_json(const RunResult& result);
// The result document as written (--result): to_json indented, one newline
// at the end. Always valid JSON in valid UTF-8, whatever bytes the run put in
// names and paths (ill-formed UTF-8 becomes U+FFFD); never throws for them.
std::string result_text(const RunResult& result);

// The one line `agentcage run` prints to stderr when the policy denied
// something ("agentcage: policy P denied N operation(s): hook target, ...\n"),
// or "" when it denied nothing. Targets and names come from the run, so
// control characters and ill-formed UTF-8 are escaped (\xNN) and each target
// is cut short: nothing the run chose reaches the caller's terminal raw.
std::string denial_summary(const RunResult& result);

// What the daemon is told about this run's end (control/notify.h).
control::RunEnd run_end_notice(const RunResult& result);

}  // namespace agentcage::run
