// SPDX-License-Identifier: Apache-2.0
// The checks that run before yaml-cpp builds a tree. They make loading safe
// for any input: yaml-cpp recurses per nesting level, expands nothing itself
// but hands out shared alias nodes (walking an alias bomb is exponential),
// and silently accepts extra documents. load_document (document.h) runs both
// passes; they are separate for tests and the fuzzer's clarity.
#pragma once

#include <cstddef>
#include <string_view>

#include "yaml/diagnostic.h"

namespace agentcage::yaml {

// Deepest nesting of collections (flow or block) an input may have. A valid
// policy needs 6 (spec > network > allow > rule > ports); 32 leaves room for
// mistakes to be reported as type errors rather than as "too deep".
inline constexpr int kMaxNesting = 32;

// What kind of file is being read, for the messages, and its size limit.
struct InputKind {
  // "policy": "policy is N bytes", "policy files are UTF-8 text", "a policy
  // file holds exactly one document", "empty policy".
  std::string_view noun;
  // "policies": "aliases (*name) are not allowed in policies".
  std::string_view place;
  // Larger inputs are rejected without being parsed.
  size_t max_bytes = 0;
  // An input without any document (empty, only comments) is valid and loads
  // as a null node; otherwise it is an error.
  bool empty_is_valid = false;
};

// Byte-level checks, before any parsing: size limit, NUL bytes, control
// characters and invalid UTF-8 (binary files), and [ / { nesting deeper
// than kMaxNesting. Returns false (after reporting) when the text must not
// be given to yaml-cpp.
bool check_text(std::string_view text, const InputKind& kind, Reporter& reporter);

// One streaming pass of yaml-cpp's event parser, no tree: reports syntax
// errors, an input without any document (unless kind.empty_is_valid), a
// second document, anchors, aliases, explicit tags and nesting deeper than
// kMaxNesting. Returns false (after reporting) unless the text is at most one
// document of plain nodes, which is then safe to load as a tree.
bool check_events(std::string_view text, const InputKind& kind, Reporter& reporter);

}  // namespace agentcage::yaml
