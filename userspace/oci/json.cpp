// SPDX-License-Identifier: Apache-2.0
#include "oci/json.h"

#include <cerrno>
#include <set>
#include <vector>

#include "util/text.h"

namespace agentcage::oci {

using nlohmann::ordered_json;

Result<ordered_json> parse_json(std::string_view text, const std::string& what) {
  // One set of keys per object being read; the innermost is on top (keys
  // only occur in objects, so arrays need no entry).
  std::vector<std::set<std::string>> keys;
  std::string repeated;
  auto watch = [&](int, ordered_json::parse_event_t event, ordered_json& parsed) {
    using E = ordered_json::parse_event_t;
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end && !keys.empty()) keys.pop_back();
    if (event == E::key && !keys.empty() && repeated.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  ordered_json doc;
  try {
    doc = ordered_json::parse(text, watch);
  } catch (const ordered_json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...",
    // ending with the bytes last read as they were: escaped here, as they are
    // the input's (a terminal escape, a byte that is not UTF-8).
    std::string msg = e.what();
    if (auto at = msg.find("] "); at != std::string::npos) msg.erase(0, at + 2);
    return Error{what + ": not valid JSON: " + escape(msg, 512), EINVAL};
  }
  if (!repeated.empty()) return Error{what + ": the key " + quote(repeated) + " appears twice in one object", EINVAL};
  return doc;
}

std::string json_type(const ordered_json& v) { return v.type_name(); }

}  // namespace agentcage::oci
