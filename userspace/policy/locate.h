// SPDX-License-Identifier: Apache-2.0
// Where `--policy NAME|FILE` points (run, attach).
//
// A value with a '/' or ending in .yaml/.yml is a FILE, used as given. Any
// other value must be a valid policy NAME (name.h: so it cannot leave the
// directory either), looked up as NAME.yaml in the policy directory:
// $AGENTCAGE_POLICY_DIR, else core::kDefaultPolicyDir.
#pragma once

#include <string>

#include "util/result.h"

namespace agentcage::policy {

// $AGENTCAGE_POLICY_DIR if set and non-empty, else core::kDefaultPolicyDir.
std::string default_policy_dir();

// Whether `ref` is a FILE (a '/' or a .yaml/.yml ending) rather than a NAME.
bool is_file_ref(const std::string& ref);

// The file `ref` names, without touching the file system.
Result<std::string> resolve_policy(const std::string& ref, const std::string& policy_dir);

// resolve_policy, then check that the file exists; the error says where a
// NAME was looked for and how to point elsewhere.
Result<std::string> locate_policy(const std::string& ref,
                                  const std::string& policy_dir = default_policy_dir());

}  // namespace agentcage::policy
