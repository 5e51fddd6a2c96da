// SPDX-License-Identifier: Apache-2.0
// Compile-time checks that the shared ABI header has the layout both sides
// assume. A failure here means bpf/include/agentcage/abi.h changed shape:
// update the offsets deliberately and bump AC_ABI_VERSION (a field or value
// that changes meaning bumps it too).
#include <agentcage/abi.h>

#include <cstddef>

namespace {

static_assert(sizeof(ac_scope) == 32);
static_assert(offsetof(ac_scope, workspace_tag) == 16);
static_assert(sizeof(ac_workspace) == 8);
static_assert(sizeof(ac_net_key) == 8 + 16);
static_assert(sizeof(ac_port_range) == 8);
static_assert(sizeof(ac_net_rule) == 8 + 8 * AC_NET_MAX_RANGES);
static_assert((AC_NET_MAX_RANGES & (AC_NET_MAX_RANGES - 1)) == 0, "BPF masks indexes with size-1");
static_assert(offsetof(ac_scope, policy_slot) == 8);
static_assert(offsetof(ac_scope, level) == 12);
static_assert(sizeof(ac_policy) == 24 + AC_POLICY_NAME_MAX);
static_assert(offsetof(ac_policy, digest) == 16);
static_assert(sizeof(ac_config) == 24);
static_assert(sizeof(ac_path_key) == 8 + AC_PATH_KEY_MAX);
static_assert(sizeof(ac_path_key) <= 8 + 256, "LPM trie data is capped at 256 bytes");
static_assert(offsetof(ac_path_key, path) == 8);
static_assert(sizeof(ac_path_rule) == 8);
static_assert(sizeof(ac_counters) == 8 * (int{AC_DECISION_COUNT} + int{AC_REASON_COUNT}));
// Reasons are metric labels and event fields: existing values never move.
static_assert(AC_REASON_PROTECTED == 7 && AC_REASON_PATH_TOO_LONG == 8 && AC_REASON_PATH_DETACHED == 9 &&
              AC_REASON_SCRATCH == 10 && AC_REASON_INCOMPLETE == 11);
static_assert(AC_REASON_COUNT == 12 && sizeof(ac_counters) == 8 * 15);
// Hooks are metric labels and event fields: existing values never move.
static_assert(AC_HOOK_SCOPE_ESCAPE == 8 && AC_HOOK_SOCKET_BIND == 9 && AC_HOOK_SOCKET_LISTEN == 10 &&
              AC_HOOK_NETLINK_SEND == 11 && AC_HOOK_IPC == 12 && AC_HOOK_KEY == 13 &&
              AC_HOOK_FILE_STAT == 14 && AC_HOOK_FILE_WATCH == 15 && AC_HOOK_PROC == 16 &&
              AC_HOOK_NATIVE_CODE == 17 && AC_HOOK_DEBUG == 18 && AC_HOOK_INGRESS == 19 &&
              AC_HOOK_TTY == 20 && AC_HOOK_FILE_RECEIVE == 21 && AC_HOOK_COUNT == 22);
static_assert(offsetof(ac_scope, dns_port) == 20 && offsetof(ac_scope, arm_tgid) == 24);
static_assert(sizeof(ac_pin_key) == 32 && offsetof(ac_pin_key, port) == 24 && sizeof(ac_pin) == 8);
static_assert(sizeof(ac_dns_origin) == 24);
static_assert(sizeof(ac_binding_key) == AC_BINDING_PATH_MAX && AC_BINDING_PATH_MAX <= 512,
              "a hash key is at most 512 bytes");
static_assert(sizeof(ac_binding) == 32 && offsetof(ac_binding, level) == 8 && offsetof(ac_binding, confined) == 16);
static_assert(AC_SLOT_NONE >= AC_MAX_POLICIES, "no policy is ever installed in AC_SLOT_NONE");
static_assert(AC_ABI_VERSION == 16, "the layout above is ABI version 16");
// The lengths entry of name rules is an ac_path_rule-sized value of the same trie.
static_assert(sizeof(ac_name_lengths) == sizeof(ac_path_rule));
static_assert(2 + AC_NAME_RULE_MAX <= AC_PATH_KEY_MAX, "a name entry fits a path key");
static_assert((AC_NAME_RULE_MAX & (AC_NAME_RULE_MAX - 1)) == 0, "BPF masks name lengths with size-1");
static_assert((AC_RULES_NS_NAME & AC_RULES_ID_MASK) == 0 && AC_RULES_NS_NAME != AC_RULES_NS_WORKSPACE &&
              AC_RULES_NS_NAME != AC_RULES_NS_ABSTRACT && AC_RULES_NS_NAME != AC_RULES_NS_ANCESTOR);
static_assert((AC_RULES_NS_ANCESTOR & AC_RULES_ID_MASK) == 0, "a namespace bit is not part of a rules id");
// Target kinds are JSON values and event fields: existing values never move.
static_assert(AC_TARGET_UNIX == 3 && AC_TARGET_UNIX_ABSTRACT == 4);
static_assert(sizeof(ac_event_header) == 24);
static_assert(offsetof(ac_event_decision, scope_id) == 24);
static_assert(offsetof(ac_event_decision, hook) == 48);
static_assert(offsetof(ac_event_decision, error) == 52);
static_assert(offsetof(ac_event_decision, comm) == 56);
static_assert(offsetof(ac_event_decision, family) == 72);
static_assert(offsetof(ac_event_decision, addr) == 80);
static_assert(offsetof(ac_event_decision, target) == 96);
static_assert(offsetof(ac_event_decision, access) == 96 + AC_EVENT_TARGET_MAX);
static_assert(sizeof(ac_event_decision) == 96 + AC_EVENT_TARGET_MAX + 8);
static_assert(sizeof(ac_event_decision) % 8 == 0);
static_assert(offsetof(ac_scope_report, window_start_ns) == 16 * AC_HOOK_COUNT + 8);
static_assert(offsetof(ac_scope_report, events_suppressed) == 16 * AC_HOOK_COUNT + 16);
static_assert(offsetof(ac_scope_report, records) == 16 * AC_HOOK_COUNT + 24);
static_assert(sizeof(ac_scope_report) % 8 == 0);
static_assert((AC_REPORT_RECORDS & (AC_REPORT_RECORDS - 1)) == 0, "BPF masks indexes with size-1");
static_assert((AC_PATH_MAX_DEPTH & (AC_PATH_MAX_DEPTH - 1)) == 0, "BPF masks indexes with depth-1");
static_assert((AC_EVENT_TARGET_MAX & (AC_EVENT_TARGET_MAX - 1)) == 0, "BPF masks indexes with size-1");

}  // namespace
