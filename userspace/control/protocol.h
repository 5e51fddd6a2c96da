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
#include "util/unique_fd.h"

namespace agentcage::control {

// A request line longer than this is refused and the connection closed.
inline constexpr size_t kMaxRequestBytes = 16 * 1024;

enum class Op { status, events, attach, detach, run_start, run_end, reload };
std::string_view op_name(Op op);
// Operations the configured group may use; everything else needs uid 0
// (attach/detach change enforcement; run_* and reload feed the daemon).
bool op_allowed_for_group(Op op);

struct Request {
  Op op = Op::status;
  bool follow = false;      // events
  std::string cgroup;       // attach, detach
  std::string policy;       // attach, run_start, run_end: a policy name
  std::string workspace;    // attach (optional)
  std::string run_id;       // run_start, run_end
  uint64_t scope_id = 0;    // run_start
  core::RunOutcome outcome = core::RunOutcome::ok;  // run_end
  int exit_code = 0;        // run_end
  double duration_seconds = 0;            // run_end
  std::optional<core::FailClosedReason> fail_closed;  // run_end
};

// Parses and validates one request line (without its '\n').
Result<Request> parse_request(std::string_view line);
nlohmann::json to_json(const Request& r);

// ---- client side ------------------------------------------------------------

// Connects to the daemon's socket (non-blocking connect; a daemon that does
// not accept within timeout_ms counts as not running).
Result<UniqueFd> connect_control(const std::string& socket_path, int timeout_ms);
// Sends one request and reads one response line.
Result<nlohmann::json> call(const std::string& socket_path, const nlohmann::json& request, int timeout_ms);
// Reads one line from fd (blocking up to timeout_ms; -1: forever), at most
// max bytes. An empty result with ok() means EOF.
Result<std::string> read_line(int fd, std::string& buffer, int timeout_ms, size_t max = 1u << 20);
Status write_all(int fd, std::string_view data, int timeout_ms);

// $AGENTCAGE_CONTROL_SOCKET, else core::kDefaultControlSocket.
std::string default_control_socket();

}  // namespace agentcage::control
