// SPDX-License-Identifier: Apache-2.0
// The one YAML front end for the files agentcage reads (policies, the daemon
// configuration): a document loaded as a yaml-cpp tree only after the input
// guard (input_guard.h) passed it, and the entries of a mapping checked
// against the keys that are allowed there. Everything is reported to a
// Reporter with the position of the offending key or value.
//
//   yaml::Reporter reporter(filename);
//   auto root = yaml::load_document(text, kind, reporter);
//   if (root && root->IsMap()) {
//     const yaml::Fields fields = yaml::mapping_fields(*root, {kKeys, "setting"}, reporter);
//     if (const yaml::Field* f = yaml::find(fields, "name")) ...
//   }
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "yaml/diagnostic.h"
#include "yaml/input_guard.h"

namespace agentcage::yaml {

// A yaml-cpp mark (0-based) as a Position (1-based); {0, 0} for a null mark.
Position pos_of(const YAML::Mark& mark);

// What a node is, for "got ..." in messages: "null", "a scalar ('x')", "a
// list", "a mapping".
std::string describe(const YAML::Node& node);

// check_text, check_events, then the tree. Nothing (after reporting) when
// the input is rejected; a null node for an empty input when
// kind.empty_is_valid.
std::optional<YAML::Node> load_document(std::string_view text, const InputKind& kind, Reporter& reporter);

// A mapping entry: where its key is, and its value.
struct Field {
  Position key_pos;
  YAML::Node value;
};
using Fields = std::map<std::string, Field, std::less<>>;

// The field for `key`, or nullptr.
const Field* find(const Fields& fields, std::string_view key);

// The keys a mapping may have, and how to name them in messages.
struct Keys {
  std::span<const std::string_view> allowed;
  // "key": "unknown key 'x'", "duplicate key 'x'"; the daemon configuration
  // says "setting".
  std::string_view noun = "key";
  // Where the mapping is, appended to messages: "in spec", "at top level";
  // empty for a file that is one flat mapping.
  std::string_view where = {};
};

// The entries of `map` (a mapping node), the first occurrence of each
// allowed key. Reports keys that are not scalars, unknown keys (with the one
// did-you-mean rule, util/suggest.h) and duplicate keys ("first at
// LINE:COL"): yaml-cpp keeps every pair of a mapping, but its lookups would
// silently use the first one.
Fields mapping_fields(const YAML::Node& map, const Keys& keys, Reporter& reporter);

}  // namespace agentcage::yaml
