// SPDX-License-Identifier: Apache-2.0
// The container state an OCI runtime writes on a hook's stdin
// (runtime-spec runtime.md, "State"): which container, in which bundle, with
// which init process. Read by `agentcage oci-hook`.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "util/result.h"

namespace agentcage::oci {

// A state is a few hundred bytes plus the annotations; more than this is not
// a runtime talking.
inline constexpr size_t kMaxStateBytes = 1 << 20;

struct State {
  std::string oci_version, id, status;
  int pid = 0;  // the init's pid in the runtime's pid namespace; 0 when the runtime gave none
  std::filesystem::path bundle;
  std::map<std::string, std::string> annotations;
};

// The state a runtime writes on a hook's stdin (runtime-spec runtime.md#state). Strict: a
// missing id or bundle, a non-absolute bundle, a negative pid, wrong types → Error saying which.
// The status is copied, never interpreted: runc says "creating" and crun "created" at
// createRuntime (tests/data/oci/README.md).
Result<State> parse_state(std::string_view json);

}  // namespace agentcage::oci
