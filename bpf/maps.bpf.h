/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Map definitions. Included by exactly one BPF object (agentcage.bpf.c).
 * Layouts and key semantics are documented in include/agentcage/abi.h; the
 * userspace agent writes scopes, policies, config and path_rules and reads
 * counters, stats and events.
 */
#ifndef AGENTCAGE_MAPS_BPF_H
#define AGENTCAGE_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "agentcage/abi.h"

/* ac_scopes and ac_policies are not preallocated: a replaced or deleted
 * element is freed only after an RCU grace period, so a hook that found it
 * reads one consistent entry until it returns. Preallocated elements go back
 * to the free list at once and can be refilled by the next update while a
 * hook still reads them. Lookups (the unscoped fast path) cost the same. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AC_MAX_SCOPES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); /* cgroup id */
	__type(value, struct ac_scope);
} ac_scopes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AC_MAX_POLICIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32); /* policy slot */
	__type(value, struct ac_policy);
} ac_policies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ac_config);
} ac_settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, AC_MAX_PATH_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* required for LPM tries */
	__type(key, struct ac_path_key);
	__type(value, struct ac_path_rule);
} ac_path_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, AC_MAX_SCOPES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ac_path_key); /* rules_id_be = scope's workspace_tag */
	__type(value, struct ac_workspace);
} ac_workspaces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, AC_MAX_NET_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ac_net_key);
	__type(value, struct ac_net_rule);
} ac_net_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, AC_MAX_POLICIES *AC_HOOK_COUNT);
	__type(key, __u32); /* policy_slot * AC_HOOK_COUNT + hook */
	__type(value, struct ac_counters);
} ac_decision_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, AC_STAT_COUNT);
	__type(key, __u32); /* enum ac_stat */
	__type(value, __u64);
} ac_stats SEC(".maps");

/* Audit records. The size is a default; the loader may resize it before
 * load (a power of two multiple of the page size). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} ac_events SEC(".maps");

/* Per-scope deny/audit report, see struct ac_scope_report. Entries exist only
 * for live scopes (userspace creates and deletes them), so memory follows the
 * number of live scopes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AC_MAX_SCOPES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); /* scope_id */
	__type(value, struct ac_scope_report);
} ac_scope_reports SEC(".maps");

/* Where a decision record is built before it is copied into the scope's
 * report and offered to ac_events: the deciding task's own storage, so the
 * report's records never depend on room in the shared ring buffer (which
 * only the daemon drains) and no other task, on this CPU or any, can write
 * into a record being built. busy guards against an interrupt on the same
 * task building a record meanwhile (interrupts nest, so a plain flag is
 * enough). Created on a task's first reported decision, freed with the task;
 * the allow path never touches it. */
struct ac_task_record {
	__u32 busy;
	__u32 pad;
	struct ac_event_decision rec;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ac_task_record);
} ac_task_records SEC(".maps");

/* Per-CPU scratch for path resolution: too big for the 512-byte BPF stack.
 * LSM programs here are non-sleepable, so a program keeps its CPU for its
 * whole run and the slot is not shared with a concurrent invocation. */
struct ac_scratch {
	/* The workspace-relative key (the path with the workspace cut off). */
	struct ac_path_key rel;
	struct ac_net_key net;
	struct ac_path_key key;
	/* Room for a bounded read that starts near the end of key.path: the
	 * name copy writes at most 255 bytes from an offset < 256, so key.path
	 * plus spill must span 511 bytes (see path.bpf.h). */
	__u8 spill[264];
	__u64 dentries[AC_PATH_MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ac_scratch);
} ac_scratch_buf SEC(".maps");

#endif /* AGENTCAGE_MAPS_BPF_H */
