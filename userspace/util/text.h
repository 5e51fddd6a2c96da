// SPDX-License-Identifier: Apache-2.0
// User text in messages: UTF-8 well-formedness (the YAML input guard rejects
// files that are not UTF-8 before yaml-cpp sees them) and quoting that never
// copies broken or control bytes into a message. Hand-written because
// neither the standard library nor yaml-cpp exposes a UTF-8 validator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentcage {

// Length (1..4) of the well-formed UTF-8 sequence starting at s[i], or 0 when
// the bytes there are not one (stray continuation byte, overlong encoding,
// UTF-16 surrogate, code point above U+10FFFF, truncated sequence).
// Follows the table in the Unicode standard, section 3.9 (Table 3-7).
size_t utf8_sequence_length(std::string_view s, size_t i);

// `bytes` with every ill-formed UTF-8 sequence replaced by U+FFFD (for JSON
// that must dump without an error handler).
std::string valid_utf8(std::string_view bytes);

// `text` made safe to print in a message, on a terminal or in a comment
// line: control characters (C0, DEL, C1), bidirectional formatting
// characters (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069), the
// line and paragraph separators U+2028 and U+2029, U+FEFF and bytes that are
// not well-formed UTF-8 become \xNN (each byte), and the text is cut after
// `max` bytes with "...".
std::string escape(std::string_view text, size_t max);

// `json` (a JSON text of valid UTF-8, as nlohmann's dump with its replace
// handler makes it) with every character escape() hides, and DEL, written as
// a \uXXXX escape instead: the same JSON value, which no terminal or reader
// that splits on Unicode line breaks takes for a control (audit lines, the
// events a client follows, the result document).
std::string json_display_safe(std::string json);

// `text` quoted for an error message: in single quotes, escaped as above,
// cut after `max` bytes with "...".
std::string quote(std::string_view text, size_t max = 64);

// Whether `path` is an absolute path in normal form other than "/": no
// empty, "." or ".." component, no trailing '/', under 4096 bytes. A path
// checked as text, where nothing on this host resolves it (a container's).
bool normal_absolute_path(std::string_view path);

// RFC 3339 in UTC of `unix_ns` nanoseconds since the epoch (before it: the
// epoch), with `digits` (1..9) digits of the second's fraction, cut, not
// rounded: "2026-11-27T06:50:00.123Z" for 3. From the civil calendar alone
// (<chrono>): no time zone file is read, as gmtime_r would at its first call.
std::string rfc3339_utc(int64_t unix_ns, int digits);

}  // namespace agentcage
