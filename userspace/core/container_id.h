// SPDX-License-Identifier: Apache-2.0
// A container's id as its runtime names it (the OCI state's "id": 64 hex
// digits from podman, Docker and the CRI runtimes, a chosen name from runc
// and crun): carried by the control protocol's attach/detach, the container
// records, the audit log and `agentcage status`, never into metric labels
// (unbounded values). The one rule for what a container id may be: it is also
// a file name (container/record.h), so no '/' and no leading '.'.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace agentcage::core {

inline constexpr size_t kMaxContainerIdBytes = 128;
inline constexpr const char* kContainerIdRule =
    "1 to 128 bytes of A-Z a-z 0-9 _ . -, not starting with '.' or '-'";

// Empty when `id` is a valid container id, else why not.
std::string container_id_error(std::string_view id);

}  // namespace agentcage::core
