// SPDX-License-Identifier: Apache-2.0
// What a run derives from its policy file's bytes alone (the parsed policy,
// its compiled rules, its seccomp filter), prepared ahead of the run. The
// daemon's fork server (daemon/run_forker.h) prepares the policy of each run
// before it clones the runner, which inherits this process's cache: a run
// through the daemon under a policy it ran before skips parsing, compiling
// and building the filter. The cache is keyed by the file's path and holds
// its bytes: check_request (run/steps.cpp) reads the file as always and uses
// an entry only when the bytes it read are exactly the cached ones, and
// every file the policy includes still holds the bytes it was prepared
// from, so a changed, replaced or removed file is parsed afresh, never
// served stale.
#pragma once

#include <linux/filter.h>

#include <string>
#include <string_view>
#include <vector>

#include "bpf/compiled.h"
#include "policy/policy.h"
#include "util/result.h"

namespace agentcage::run {

struct PreparedPolicy {
  policy::Policy policy;
  bpf::CompiledPolicy compiled;
  std::vector<sock_filter> seccomp_filter;
};

// This process's entry for `path` when it was prepared from exactly `text`
// (and its includes from what they hold now); nullptr otherwise.
const PreparedPolicy* prepared_policy(const std::string& path, std::string_view text);

// Reads the policy file `path`, parses and compiles it and builds its seccomp
// filter, and caches the outcome (at most kMaxPreparedPolicies files: when
// full, the cache starts afresh). A file that cannot be read or is invalid
// is an error and leaves no entry; the run reports it itself.
Status prepare_policy(const std::string& path);

inline constexpr size_t kMaxPreparedPolicies = 64;

}  // namespace agentcage::run
