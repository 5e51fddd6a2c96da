// SPDX-License-Identifier: Apache-2.0
#include "bpf/names.h"

namespace agentcage::bpf {

std::string_view hook_name(uint32_t hook) {
  static constexpr std::string_view kNames[AC_HOOK_COUNT] = {
      "exec",         "file_open",   "socket_connect", "file_change",
      "mmap_exec",    "socket_send", "socket_create",  "unix_connect",
      "scope_escape", "socket_bind", "socket_listen",  "netlink_send",
      "ipc",          "key",         "file_stat",      "file_watch",
      "proc",         "native_code", "debug",          "ingress",
      "tty",          "file_receive"};
  return hook < AC_HOOK_COUNT ? kNames[hook] : "unknown";
}

std::string_view decision_name(uint32_t decision) {
  static constexpr std::string_view kNames[AC_DECISION_COUNT] = {"allow", "deny", "audit"};
  return decision < AC_DECISION_COUNT ? kNames[decision] : "unknown";
}

std::string_view reason_name(uint32_t reason) {
  static constexpr std::string_view kNames[AC_REASON_COUNT] = {
      "rule_allow", "default_deny", "rule_deny",     "no_policy",     "path_too_deep",      "path_unreadable",
      "internal",   "protected",    "path_too_long", "path_detached", "scratch_unavailable", "scope_incomplete"};
  return reason < AC_REASON_COUNT ? kNames[reason] : "unknown";
}

std::string_view target_kind_name(uint32_t kind) {
  switch (kind) {
    case AC_TARGET_NONE:
      return "none";
    case AC_TARGET_PATH:
      return "path";
    case AC_TARGET_INET:
      return "inet";
    case AC_TARGET_UNIX:
      return "unix";
    case AC_TARGET_UNIX_ABSTRACT:
      return "unix_abstract";
    default:
      return "unknown";
  }
}

}  // namespace agentcage::bpf
