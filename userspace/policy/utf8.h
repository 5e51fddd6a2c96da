// UTF-8 well-formedness, shared by the input guard (reject non-UTF-8 files
// before yaml-cpp sees them) and message formatting (never copy broken bytes
// into a message). Hand-written because neither the standard library nor yaml-cpp
// exposes a validator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentcage::policy::detail {

// Length (1..4) of the well-formed UTF-8 sequence starting at s[i], or 0 when
// the bytes there are not one (stray continuation byte, overlong encoding,
// UTF-16 surrogate, code point above U+10FFFF, truncated sequence).
// Follows the table in the Unicode standard, section 3.9 (Table 3-7).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
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

// `text` made safe to print in a message: control characters and bytes that
// are not well-formed UTF-8 become \xNN, and the text is cut after `max`
// bytes with "...". Defined in values.cpp.
std::string escape(std::string_view text, size_t max);

}  // namespace agentcage::policy::detail
