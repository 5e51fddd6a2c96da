// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets assert about their outputs, in one place: a failed
// check traps, which libFuzzer reports as a crash with the input.
#pragma once

#include <cstddef>
#include <string_view>

#include "util/text.h"

namespace agentcage::fuzz {

inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Well-formed UTF-8 throughout.
inline void check_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    check(n > 0);
    i += n;
  }
}

// Well-formed UTF-8 without a C0 control character or DEL: a message that
// can go on one line of a terminal or a log.
inline void check_printable(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    check(n > 0);
    check(static_cast<unsigned char>(text[i]) >= 0x20 && text[i] != 0x7f);
    i += n;
  }
}

}  // namespace agentcage::fuzz
