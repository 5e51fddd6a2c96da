// SPDX-License-Identifier: Apache-2.0
// The client half of the control socket (control/protocol.h is the
// protocol): connect to the daemon, send one request line, read answer lines.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::control {

// Connects to the daemon's socket (non-blocking connect; a daemon that does
// not accept within timeout_ms counts as not running).
Result<UniqueFd> connect_control(const std::string& socket_path, int timeout_ms);
// Sends one request and reads one response line.
Result<nlohmann::json> call(const std::string& socket_path, const nlohmann::json& request, int timeout_ms);

// A streaming answer (events): the connection, the first line (the daemon's
// accepting reply, an object with "ok": true) and what was read past it.
struct Stream {
  UniqueFd fd;
  nlohmann::json head;
  std::string buffer;  // pass to read_line for the lines that follow
};
// Sends one request and reads the daemon's first answer line. A refusal
// ("ok": false) is an error carrying the daemon's message; so is a daemon
// that cannot be reached, closes the connection, or answers something else.
Result<Stream> open_stream(const std::string& socket_path, const nlohmann::json& request, int timeout_ms);
// Sends one request with descriptors attached (SCM_RIGHTS, e.g. a run's
// stdin, stdout and stderr) and reads one answer line, waiting up to
// timeout_ms (-1: as long as it takes, e.g. until the run ends).
Result<nlohmann::json> call_with_fds(const std::string& socket_path, const nlohmann::json& request, const int* fds,
                                     size_t count, int timeout_ms);

// Reads one line from fd (blocking up to timeout_ms; -1: forever), at most
// max bytes. An empty result with ok() means EOF.
Result<std::string> read_line(int fd, std::string& buffer, int timeout_ms, size_t max = 1u << 20);
Status write_all(int fd, std::string_view data, int timeout_ms);

// $AGENTCAGE_CONTROL_SOCKET, else core::kDefaultControlSocket.
std::string default_control_socket();

}  // namespace agentcage::control
