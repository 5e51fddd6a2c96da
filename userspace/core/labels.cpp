// SPDX-License-Identifier: Apache-2.0
#include "core/labels.h"

#include <cerrno>

#include "util/text.h"

namespace agentcage::core {

std::string label_key_error(std::string_view key) {
  if (key.empty()) return "a label key is empty";
  if (key.size() > kMaxLabelKeyBytes)
    return "label key " + quote(key) + " is longer than " + std::to_string(kMaxLabelKeyBytes) + " bytes";
  auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  bool ok = lower_or_digit(key.front());
  for (char c : key) ok = ok && (lower_or_digit(c) || c == '_' || c == '.' || c == '-');
  if (!ok) return "label key " + quote(key) + " is not " + kLabelKeyRule;
  return "";
}

std::string label_value_error(std::string_view value) {
  if (value.size() > kMaxLabelValueBytes)
    return "a label value is longer than " + std::to_string(kMaxLabelValueBytes) + " bytes";
  if (valid_utf8(value) != value) return "a label value is not valid UTF-8";
  for (unsigned char c : value)
    if (c < 0x20 || c == 0x7f) return "a label value contains a control character";
  return "";
}

Result<std::pair<std::string, std::string>> parse_label(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) return Error{"label " + quote(text) + " is not KEY=VALUE", EINVAL};
  std::string key(text.substr(0, eq)), value(text.substr(eq + 1));
  if (std::string why = label_key_error(key); !why.empty()) return Error{why, EINVAL};
  if (std::string why = label_value_error(value); !why.empty())
    return Error{why + " (label " + key + ")", EINVAL};
  return std::make_pair(std::move(key), std::move(value));
}

Status add_label(Labels& labels, std::string key, std::string value) {
  if (labels.count(key)) return Error{"label " + key + " is given twice", EINVAL};
  if (labels.size() >= kMaxLabels) return Error{"more than " + std::to_string(kMaxLabels) + " labels", E2BIG};
  labels.emplace(std::move(key), std::move(value));
  return {};
}

}  // namespace agentcage::core
