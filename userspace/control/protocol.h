// SPDX-License-Identifier: Apache-2.0
// The control socket's protocol: one JSON object per line, both ways.
// Requests come from other processes and are validated like any untrusted
// input: a size cap, a JSON object, a known "op", exactly the fields that op
// takes, each of the right type and within bounds. docs/daemon.md lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fail_closed.h"
#include "core/run_outcome.h"
#include "util/result.h"

namespace agentcage::control {

// A request line longer than this is refused and the connection closed.
inline constexpr size_t kMaxRequestBytes = 16 * 1024;

// run_end's "syscalls_denied" at most: 2^53, the largest count a Prometheus
// counter (a double) still holds exactly. No run gets near it (one denial per
// notification round trip), so a larger value is a client bug or a lie.
inline constexpr uint64_t kMaxSyscallsDenied = uint64_t{1} << 53;

enum class Op { status, events, attach, detach, run_start, run_end, reload };
std::string_view op_name(Op op);
// Operations the configured group may use; everything else needs uid 0
// (attach/detach change enforcement; run_* and reload feed the daemon).
bool op_allowed_for_group(Op op);

struct Request {
  Op op = Op::status;
  bool follow = false;                                // events
  std::string cgroup;                                 // attach, detach
  std::string policy;                                 // attach, run_start, run_end: a policy name
  std::string workspace;                              // attach (optional)
  std::string run_id;                                 // run_start, run_end
  uint64_t scope_id = 0;                              // run_start
  core::RunOutcome outcome = core::RunOutcome::ok;    // run_end
  int exit_code = 0;                                  // run_end
  double duration_seconds = 0;                        // run_end
  std::optional<core::FailClosedReason> fail_closed;  // run_end
  uint64_t syscalls_denied = 0;                       // run_end (optional): seccomp denials
};

// Parses and validates one request line (without its '\n').
Result<Request> parse_request(std::string_view line);
nlohmann::json to_json(const Request& r);

}  // namespace agentcage::control
