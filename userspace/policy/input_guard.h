// Internal to the policy parser: the checks that run before yaml-cpp builds
// a tree, and the error collector they share with the validator. They make
// parsing safe for any input: yaml-cpp recurses per nesting level, expands
// nothing itself but hands out shared alias nodes (walking an alias bomb is
// exponential), and silently accepts duplicate keys and extra documents.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/policy.h"

namespace YAML {
struct Mark;
}

namespace agentcage::policy::detail {

// A yaml-cpp mark (0-based) as a Position (1-based); {0, 0} for a null mark.
Position pos_of(const YAML::Mark& mark);

// Deepest nesting of collections (flow or block) a policy may have. A valid
// policy needs 6 (spec > network > allow > rule > ports); 32 leaves room for
// mistakes to be reported as type errors rather than as "too deep".
inline constexpr int kMaxNesting = 32;

// Collects diagnostics for one file. Keeps the first kMaxErrors (a broken
// 256 KiB file could otherwise produce a hundred thousand) and counts the rest.
class Reporter {
 public:
  static constexpr size_t kMaxErrors = 100;

  explicit Reporter(std::string file) : file_(std::move(file)) {}
  void error(Position pos, std::string message);
  bool has_errors() const { return !errors_.empty(); }
  size_t count() const { return errors_.size() + dropped_; }
  bool full() const { return errors_.size() >= kMaxErrors; }
  const std::string& file() const { return file_; }
  // Sorted by position (stable: same-position errors keep their order), plus
  // a final line-0 note when errors were dropped.
  std::vector<Diagnostic> take();

 private:
  std::string file_;
  std::vector<Diagnostic> errors_;
  size_t dropped_ = 0;
};

// Byte-level checks, before any parsing: size limit, NUL bytes, control
// characters and invalid UTF-8 (binary files), and [ / { nesting deeper
// than kMaxNesting. Returns false (after reporting) when the text must not
// be given to yaml-cpp.
bool check_text(std::string_view text, size_t max_bytes, Reporter& reporter);

// One streaming pass of yaml-cpp's event parser, no tree: reports syntax
// errors, an input without any document, a second document, anchors,
// aliases, explicit tags and nesting deeper than kMaxNesting. Returns false
// (after reporting) unless the text is exactly one document of plain nodes,
// which is then safe to load as a tree.
bool check_events(std::string_view text, Reporter& reporter);

}  // namespace agentcage::policy::detail
