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

/* A recorded scope's own ring buffer (struct ac_scope_report,
 * ac_scope_rings in abi.h): looked up only when a record is made. */
struct ac_scope_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, AC_SCOPE_RING_BYTES);
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, AC_MAX_RECORDED_SCOPES);
	__type(key, __u64); /* scope_id */
	__array(values, struct ac_scope_ring);
} ac_scope_rings SEC(".maps");

/* Addresses a scope's resolver pinned (abi.h). Not preallocated: most hosts
 * hold few. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AC_MAX_PINS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ac_pin_key);
	__type(value, struct ac_pin);
} ac_pins SEC(".maps");

/* Where a redirected DNS socket meant to send (abi.h), in the socket's own storage. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ac_dns_origin);
} ac_dns_origin SEC(".maps");

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

/* The same for decisions no task makes (ac_finish_no_task): one per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ac_task_record);
} ac_cpu_records SEC(".maps");

/*
 * State of the path walk and the copy (path.bpf.h), kept in a map value
 * rather than on the stack. The bpf_loop callbacks must not decide on state
 * the verifier believes it knows: 6.1's verifier checks a callback once,
 * with the caller's stack as it is before the first iteration (depth 0, len
 * 0), and rewrites branches it saw never taken into unconditional jumps.
 * With the state on the stack, "depth >= AC_PATH_MAX_DEPTH" was dead code on
 * 6.1 (Debian 6.1.0-56): a path deeper than 64 components wrapped around the
 * dentry ring and resolved to a different path (a 65-component file under
 * /tmp resolved as "/<file name>/<its path without /tmp and the name>").
 * "len >= AC_PATH_KEY_MAX" in the copy was exposed the same way. Map values
 * are unknown to the verifier, so every branch stays. 6.12 verifies
 * callbacks until their state converges and was not affected.
 */
struct ac_walk_state {
	__u64 dentry;  /* struct dentry * to look at next */
	__u64 mnt;     /* struct mount * it is on */
	__u32 depth;   /* components recorded in scratch.dentries */
	__u32 status;  /* enum ac_walk_status */
	__u32 len;     /* copy: bytes of path text written to scratch.key.path */
	__u32 strict;  /* the walk must end at ns_root (or an internal mount) */
	__u64 ns_root; /* struct mount *: root of the task's mount namespace */
};

/*
 * Scratch for one decision: path resolution and addresses, too big for the
 * 512-byte BPF stack. It is the deciding task's own (task storage), never
 * shared per CPU: BPF LSM programs run with migration disabled, not
 * preemption, so on a preemptible kernel (preempt=full, PREEMPT_RT) another
 * task scheduled on the same CPU between resolving a path and looking it up
 * would overwrite a per-CPU buffer, and the first task's decision (and
 * record) would be made on the other task's path. Only an interrupt on the
 * same task could run a hook in between; busy turns that into a denial
 * (AC_REASON_SCRATCH, see ac_scratch_get). Created on a scoped task's first
 * path or address decision, freed with the task.
 */
/* Mounts of a dentry's superblock that may show it (metadata.bpf.h): for
 * the hooks that get a dentry and no mount. */
#define AC_MOUNT_CANDIDATES 4
struct ac_mounts {
	__u64 ns[AC_MOUNT_CANDIDATES];	     /* struct mount * in the task's namespace */
	__u64 internal[AC_MOUNT_CANDIDATES]; /* kernel-internal struct mount * */
	__u32 n_ns;
	__u32 n_internal;
};

struct ac_scratch {
	__u32 busy;
	/* The access of the path request being judged, for its record. Kept
	 * here, not on the stack: the verifier does not track a map value's
	 * bytes, so each hook's different constants do not multiply its
	 * states. */
	__u32 need;
	struct ac_walk_state walk;
	/* The workspace-relative key (the path with the workspace cut off). */
	struct ac_path_key rel;
	struct ac_net_key net;
	struct ac_path_key key;
	/* A name rule's key (ac_path_name_denied): a component of the path in
	 * key, looked up without touching key. It also lies in the room the
	 * copy below may spill into, which is harmless: every name lookup
	 * writes its key first. */
	struct ac_path_key name;
	/* Room for a bounded read that starts near the end of key.path: the
	 * name copy writes at most 255 bytes from an offset < 256, so key.path
	 * and what follows it (name, spill) must span 511 bytes (see
	 * path.bpf.h). */
	__u8 spill[264];
	__u64 dentries[AC_PATH_MAX_DEPTH];
	struct ac_mounts mounts;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ac_scratch);
} ac_task_scratch SEC(".maps");

#endif /* AGENTCAGE_MAPS_BPF_H */
