// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logger to stderr. libbpf's own log is routed here too, so
// a verifier rejection shows up with the rest of agentcage's messages.
#pragma once

#include <string_view>

namespace agentcage::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_level(Level level);
Level level();
void write(Level level, std::string_view message);

inline void debug(std::string_view m) { write(Level::debug, m); }
inline void info(std::string_view m) { write(Level::info, m); }
inline void warn(std::string_view m) { write(Level::warn, m); }
inline void error(std::string_view m) { write(Level::error, m); }

// When stderr is a journald stream (JOURNAL_STREAM names it, as systemd sets
// it for a unit's stderr), each line gets its syslog priority as a "<N>"
// prefix, so `journalctl -p err` shows the errors. Call once, at start.
void detect_journal();
bool to_journal();

// Route libbpf's messages through this logger (warnings at warn, debug
// output only at debug level). libbpf's print hook is process-wide by design.
void route_libbpf();

}  // namespace agentcage::log
