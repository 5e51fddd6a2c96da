// SPDX-License-Identifier: Apache-2.0
// Located diagnostics for the YAML files agentcage reads (policies, the
// daemon configuration): where in the file, what is wrong, and the collector
// that keeps them for one file, in order and bounded.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace agentcage::yaml {

// A place in a file, 1-based (yaml-cpp marks are 0-based). Line 0 means
// "the whole file" (read errors, size limit).
struct Position {
  int line = 0;
  int column = 0;
  // Which file, for a document made of several (a policy and the files it
  // includes: policy::Policy::source_of): 0 is the document's own file.
  int source = 0;
};

// "LINE:COL".
std::string format_position(Position pos);

struct Diagnostic {
  std::string file;
  Position pos;  // line 0: about the whole file (unreadable, too large)
  std::string message;
  // "file:line:col: message", or "file: message" when pos.line is 0.
  std::string format() const;
};

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

}  // namespace agentcage::yaml
