// SPDX-License-Identifier: Apache-2.0
#include "policy/name.h"

#include "util/text.h"

namespace agentcage::policy {

bool valid_policy_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxPolicyNameBytes) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return name.front() != '-' && name.back() != '-';
}

std::optional<std::string> likely_policy_name(std::string_view name) {
  std::string guess(name.substr(0, kMaxPolicyNameBytes + 1));
  for (char& c : guess) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c == '_') c = '-';
  }
  if (!valid_policy_name(guess)) return std::nullopt;
  return guess;
}

std::string did_you_mean_policy_name(std::string_view name) {
  const auto guess = likely_policy_name(name);
  return guess && *guess != name ? " (did you mean " + quote(*guess) + "?)" : std::string();
}

bool is_policy_file_name(std::string_view n) { return n.size() > 5 && n[0] != '.' && n.ends_with(".yaml"); }

}  // namespace agentcage::policy
