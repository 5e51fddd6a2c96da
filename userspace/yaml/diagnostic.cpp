// SPDX-License-Identifier: Apache-2.0
#include "yaml/diagnostic.h"

#include <algorithm>

namespace agentcage::yaml {

std::string format_position(Position pos) {
  return std::to_string(pos.line) + ":" + std::to_string(pos.column);
}

std::string Diagnostic::format() const {
  if (pos.line <= 0) return file + ": " + message;
  return file + ":" + format_position(pos) + ": " + message;
}

void Reporter::error(Position pos, std::string message) {
  if (errors_.size() >= kMaxErrors) {
    ++dropped_;
    return;
  }
  errors_.push_back(Diagnostic{file_, pos, std::move(message)});
}

std::vector<Diagnostic> Reporter::take() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return a.pos.line != b.pos.line ? a.pos.line < b.pos.line : a.pos.column < b.pos.column;
  });
  if (dropped_ > 0) {
    errors_.push_back(Diagnostic{file_, {}, std::to_string(dropped_) + " more errors not shown"});
  }
  dropped_ = 0;
  return std::move(errors_);
}

}  // namespace agentcage::yaml
