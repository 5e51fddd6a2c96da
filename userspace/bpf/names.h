// SPDX-License-Identifier: Apache-2.0
// Stable names of the ABI enumerations: metric label values, JSON fields and
// CLI output use these (documented in the README; never rename one).
#pragma once

#include <agentcage/abi.h>

#include <cstdint>
#include <string_view>

namespace agentcage::bpf {

// "exec", "file_open", "socket_connect", "file_change", "mmap_exec",
// "socket_send", "socket_create", "unix_connect", "scope_escape", "socket_bind",
// "socket_listen", "netlink_send"; "unknown".
std::string_view hook_name(uint32_t hook);
// "allow", "deny", "audit"; "unknown".
std::string_view decision_name(uint32_t decision);
// "rule_allow", "default_deny", "rule_deny", "no_policy", "path_too_deep",
// "path_unreadable", "internal", "protected", "path_too_long",
// "path_detached", "scratch_unavailable"; "unknown".
std::string_view reason_name(uint32_t reason);
// "none", "path", "inet", "unix", "unix_abstract"; "unknown".
std::string_view target_kind_name(uint32_t kind);

}  // namespace agentcage::bpf
