// SPDX-License-Identifier: Apache-2.0
#include "util/text.h"

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace agentcage {

size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

namespace {

// A well-formed n-byte sequence at s[i] that a terminal or a text renderer
// treats as a control: C1 controls U+0080..U+009F (some terminals read U+009B
// as CSI, U+0085 is a line break to some readers); the bidirectional
// formatting characters, which reorder what is displayed after them or
// around them: the marks U+061C, U+200E, U+200F, the embeddings and
// overrides U+202A..U+202E and the isolates U+2066..U+2069; the line and
// paragraph separators U+2028, U+2029 (a line break to some readers); and
// U+FEFF (a byte order mark, invisible).
bool is_terminal_control(std::string_view s, size_t i, size_t n) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  if (n == 2) return (byte(0) == 0xC2 && byte(1) <= 0x9F) || (byte(0) == 0xD8 && byte(1) == 0x9C);
  if (n == 3 && byte(0) == 0xE2) {
    if (byte(1) == 0x80) return byte(2) == 0x8E || byte(2) == 0x8F || (byte(2) >= 0xA8 && byte(2) <= 0xAE);
    if (byte(1) == 0x81) return byte(2) >= 0xA6 && byte(2) <= 0xA9;
  }
  if (n == 3) return byte(0) == 0xEF && byte(1) == 0xBB && byte(2) == 0xBF;
  return false;
}

}  // namespace

std::string escape(std::string_view text, size_t max) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (i >= max) {
      out += "...";
      break;
    }
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0 || b < 0x20 || b == 0x7f || is_terminal_control(text, i, n)) {
      // A terminal control sequence is escaped byte by byte, so none of it
      // reaches a terminal raw.
      const size_t k = n == 0 ? 1 : n;
      for (size_t j = 0; j < k; ++j) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x",
                      static_cast<unsigned>(static_cast<unsigned char>(text[i + j])));
        out += buf;
      }
      i += k;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string json_display_safe(std::string json) {
  size_t i = 0;
  for (; i < json.size(); ++i) {  // most lines have nothing to escape: no copy
    const auto b = static_cast<unsigned char>(json[i]);
    if (b == 0x7f || b >= 0x80) break;
  }
  if (i == json.size()) return json;
  std::string out = json.substr(0, i);
  while (i < json.size()) {
    const auto b = static_cast<unsigned char>(json[i]);
    const size_t n = b < 0x80 ? 1 : utf8_sequence_length(json, i);
    if (b == 0x7f || (n >= 2 && is_terminal_control(json, i, n))) {
      uint32_t cp = b;
      if (n == 2) cp = ((b & 0x1Fu) << 6) | (static_cast<unsigned char>(json[i + 1]) & 0x3Fu);
      if (n == 3)
        cp = ((b & 0x0Fu) << 12) | ((static_cast<unsigned char>(json[i + 1]) & 0x3Fu) << 6) |
             (static_cast<unsigned char>(json[i + 2]) & 0x3Fu);
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(json, i, n == 0 ? 1 : n);
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

std::string quote(std::string_view text, size_t max) { return "'" + escape(text, max) + "'"; }

std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t n = utf8_sequence_length(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool normal_absolute_path(std::string_view path) {
  if (path.size() < 2 || path.size() >= 4096 || path.front() != '/' || path.back() == '/') return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return path.find('\0') == std::string_view::npos;
}

std::string rfc3339_utc(int64_t unix_ns, int digits) {
  using namespace std::chrono;
  const nanoseconds since_epoch{unix_ns < 0 ? 0 : unix_ns};
  const sys_days day = floor<days>(sys_time<nanoseconds>(since_epoch));
  const year_month_day date{day};
  const hh_mm_ss<nanoseconds> time{since_epoch - day.time_since_epoch()};
  if (digits < 1) digits = 1;
  if (digits > 9) digits = 9;
  long long fraction = time.subseconds().count();
  for (int d = digits; d < 9; ++d) fraction /= 10;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%0*lldZ", static_cast<int>(date.year()),
                static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                static_cast<int>(time.hours().count()), static_cast<int>(time.minutes().count()),
                static_cast<int>(time.seconds().count()), digits, fraction);
  return buf;
}

}  // namespace agentcage
