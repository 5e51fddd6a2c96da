// SPDX-License-Identifier: Apache-2.0
// Caller-supplied labels of a run (`agentcage run --label KEY=VALUE`, the
// control protocol's "labels"): carried into the result document and the
// audit log, never into metric labels (their values are unbounded). The one
// rule for what a label may be.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "util/result.h"

namespace agentcage::core {

using Labels = std::map<std::string, std::string>;

inline constexpr size_t kMaxLabels = 16;
inline constexpr size_t kMaxLabelKeyBytes = 63;
inline constexpr size_t kMaxLabelValueBytes = 256;
inline constexpr const char* kLabelKeyRule = "a lowercase letter or digit, then up to 62 of a-z 0-9 _ . -";

// Empty when `key` is a valid label key, else why not.
std::string label_key_error(std::string_view key);
// Empty when `value` is a valid label value (valid UTF-8 without control
// characters, at most kMaxLabelValueBytes bytes), else why not.
std::string label_value_error(std::string_view value);
// "KEY=VALUE" (the first '=' splits), both checked.
Result<std::pair<std::string, std::string>> parse_label(std::string_view text);
// Adds one label to `labels`: a repeated key or one too many is an error.
Status add_label(Labels& labels, std::string key, std::string value);

}  // namespace agentcage::core
