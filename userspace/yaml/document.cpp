// SPDX-License-Identifier: Apache-2.0
#include "yaml/document.h"

#include <algorithm>
#include <utility>

#include "util/suggest.h"
#include "util/text.h"

namespace agentcage::yaml {

Position pos_of(const YAML::Mark& mark) {
  if (mark.is_null()) return {};
  return {mark.line + 1, mark.column + 1};
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "a scalar (" + quote(node.Scalar(), 40) + ")";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::optional<YAML::Node> load_document(std::string_view text, const InputKind& kind, Reporter& reporter) {
  if (!check_text(text, kind, reporter) || !check_events(text, kind, reporter)) return std::nullopt;
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    // The event pass parsed the same text, so this is not expected; report
    // it the same way rather than trusting that.
    reporter.error(pos_of(e.mark), "YAML syntax error: " + escape(e.msg, 200));
    return std::nullopt;
  }
}

const Field* find(const Fields& fields, std::string_view key) {
  const auto it = fields.find(key);
  return it == fields.end() ? nullptr : &it->second;
}

Fields mapping_fields(const YAML::Node& map, const Keys& keys, Reporter& reporter) {
  const std::string where = keys.where.empty() ? std::string() : " " + std::string(keys.where);
  const std::string noun(keys.noun);
  Fields known;
  std::map<std::string, Position, std::less<>> seen;
  for (const auto& entry : map) {
    const YAML::Node& key = entry.first;
    Position pos = pos_of(key.Mark());
    if (pos.line == 0) pos = pos_of(map.Mark());
    if (!key.IsScalar()) {
      reporter.error(pos, "keys must be strings, got " + describe(key) + where);
      continue;
    }
    const std::string& name = key.Scalar();
    if (const auto first = seen.find(name); first != seen.end()) {
      reporter.error(pos, "duplicate " + noun + " " + quote(name) + where + " (first at " +
                              format_position(first->second) + ")");
      continue;
    }
    seen.emplace(name, pos);
    if (std::find(keys.allowed.begin(), keys.allowed.end(), name) == keys.allowed.end()) {
      // (No suggestion once the error list is full: it would be dropped.)
      const std::string hint = reporter.full() ? std::string() : did_you_mean(name, keys.allowed);
      reporter.error(pos, "unknown " + noun + " " + quote(name) + where + hint);
      continue;
    }
    known.emplace(name, Field{pos, entry.second});
  }
  return known;
}

}  // namespace agentcage::yaml
