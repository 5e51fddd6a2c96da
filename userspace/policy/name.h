// SPDX-License-Identifier: Apache-2.0
// The one policy-name rule. A policy's name is its metadata.name, the NAME
// of `--policy NAME` (NAME.yaml in the policy directory), the daemon's
// policy-directory file stem, the "policy" of a control request and the
// metric label "policy": every one of them is checked here, so a name one
// place accepts is never refused by another.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace agentcage::policy {

// The rule in words, for messages and docs. The alphabet and length of a DNS
// label: safe as a file name, a metric label value and a JSON string, and no
// name can look like an option ("-x") or a hidden file (".x").
inline constexpr std::string_view kPolicyNameRule =
    "1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit";
inline constexpr size_t kMaxPolicyNameBytes = 63;

bool valid_policy_name(std::string_view name);

// The valid name `name` was probably meant to be: lower-cased with '_' as
// '-' ("My_Policy" -> "my-policy"). Nothing when that is not valid either.
std::optional<std::string> likely_policy_name(std::string_view name);

// " (did you mean 'my-policy'?)" for likely_policy_name, or "".
std::string did_you_mean_policy_name(std::string_view name);

// NAME.yaml, not hidden: the files a policy directory holds policies in (the
// daemon loads them, `policy check --dir` checks them). Whether NAME is a
// valid policy name is load_policy_dir_file's to say (policy.h).
bool is_policy_file_name(std::string_view file_name);

}  // namespace agentcage::policy
