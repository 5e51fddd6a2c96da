// SPDX-License-Identifier: Apache-2.0
// The one JSON reader of oci/: a document parsed with nlohmann::json, whose
// objects must not repeat a key. A repeated key is refused because readers
// disagree on it (Go and nlohmann keep the last, others the first): an
// annotation the runtime sees twice must not mean one policy to the runtime
// and another to agentcage.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "util/result.h"

namespace agentcage::oci {

// `text` as JSON, key order kept. WHAT names the document in errors
// ("config.json: ...").
Result<nlohmann::ordered_json> parse_json(std::string_view text, const std::string& what);

// "string", "number", ... for messages.
std::string json_type(const nlohmann::ordered_json& v);

}  // namespace agentcage::oci
