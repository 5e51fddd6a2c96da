// Where `--policy NAME|FILE` points.
//
// A value with a '/' or ending in .yaml/.yml is a file path. Anything else is
// a policy NAME, looked up as NAME.yaml in each directory of the policy path:
// $AGENTCAGE_POLICY_PATH (colon-separated) if set, else /etc/agentcage/policies.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace agentcage::policy {

inline constexpr const char* kDefaultPolicyDir = "/etc/agentcage/policies";

// The directories NAME lookups search, in order.
std::vector<std::string> policy_search_path();

// The file `arg` names. Errors list every place that was tried.
Result<std::string> locate_policy(const std::string& arg);

}  // namespace agentcage::policy
