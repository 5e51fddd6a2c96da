// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logger to stderr. libbpf's own log is routed here too, so
// a verifier rejection shows up with the rest of agentcage's messages.
#pragma once

#include <initializer_list>
#include <string_view>

namespace agentcage::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

// A journal field a message carries besides its text, for `journalctl
// AGENTCAGE_POLICY=python-sandbox` and the like: NAME (upper case, digits,
// '_') becomes AGENTCAGE_NAME. Only written to the journal; the text must
// say the same on its own.
struct Field {
  std::string_view name;
  std::string_view value;
};

void set_level(Level level);
Level level();
void write(Level level, std::string_view message, std::initializer_list<Field> fields = {});

inline void debug(std::string_view m) { write(Level::debug, m); }
inline void info(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::info, m, f); }
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::warn, m, f); }
inline void error(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::error, m, f); }

// When stderr is a journald stream (JOURNAL_STREAM names it, as systemd sets
// it for a unit's stderr), each line gets its syslog priority as a "<N>"
// prefix, so `journalctl -p err` shows the errors; a message with fields is
// sent as one structured entry (sd_journal_send: MESSAGE, PRIORITY,
// SYSLOG_IDENTIFIER and its AGENTCAGE_* fields) instead, and written to
// stderr as usual if the journal does not take it. Call once, at start.
void detect_journal();
bool to_journal();

// The message also goes to the journal as a structured entry when journald
// runs, whatever stderr is: for a process whose stderr its caller may drop
// (an OCI hook: crun does not show a failed hook's output). False when the
// journal did not take it.
bool also_to_journal(Level level, std::string_view message, std::initializer_list<Field> fields = {});

// Route libbpf's messages through this logger (warnings at warn, debug
// output only at debug level). libbpf's print hook is process-wide by design.
void route_libbpf();

}  // namespace agentcage::log
