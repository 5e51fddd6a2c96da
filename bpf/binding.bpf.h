/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Bindings (ac_bindings, abi.h): a cgroup path the daemon's configuration
 * binds to a policy is confined in the kernel, inside the mkdir that makes
 * the cgroup. systemd makes a unit's cgroup, then forks the unit's process
 * into it: a daemon reacting to the new directory would race that fork; the
 * tracepoint runs before mkdir returns, so no process can ever run in the
 * cgroup unconfined.
 */
#ifndef AGENTCAGE_BINDING_BPF_H
#define AGENTCAGE_BINDING_BPF_H

#include "maps.bpf.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AC_MAX_BINDINGS);
	__type(key, struct ac_binding_key);
	__type(value, struct ac_binding);
} ac_bindings SEC(".maps");

/* The path being looked up: too big for the stack. A tracepoint program
 * runs with migration disabled and cgroup_mkdir never fires in interrupt
 * context, so one buffer per CPU is enough. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ac_binding_key);
} ac_binding_key_buf SEC(".maps");

/* An all-zero scope report, the value a new scope's report starts from
 * (never written). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ac_scope_report);
} ac_zero_report SEC(".maps");

/* cgroup_mkdir(cgrp, path): fired by cgroup_mkdir() once the new cgroup is
 * live, before the mkdir system call returns; path is the cgroup's path from
 * its hierarchy's root. Only the v2 hierarchy (hierarchy id 0) binds. */
SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(ac_cgroup_mkdir, struct cgroup *cgrp, const char *path)
{
	__u32 zero = 0;

	if (BPF_CORE_READ(cgrp, root, hierarchy_id) != 0)
		return 0;
	struct ac_binding_key *k = bpf_map_lookup_elem(&ac_binding_key_buf, &zero);
	if (!k)
		return 0;
	__builtin_memset(k, 0, sizeof(*k));
	/* A path that fills the buffer may have been cut off: no binding is
	 * that long (the daemon takes at most AC_BINDING_PATH_MAX - 2 bytes),
	 * and a cut one must not match a shorter binding. */
	long n = bpf_probe_read_kernel_str(k->path, sizeof(k->path), path);
	if (n <= 0 || n >= (long)sizeof(k->path))
		return 0;
	struct ac_binding *b = bpf_map_lookup_elem(&ac_bindings, k);
	if (!b)
		return 0;
	__u64 id = BPF_CORE_READ(cgrp, kn, id);
	int level = BPF_CORE_READ(cgrp, level);
	if (!id || level != b->level) {
		__sync_fetch_and_add(&b->failed, 1);
		return 0;
	}
	struct ac_scope s = {
		.scope_id = id,
		.policy_slot = b->policy_slot,
		.level = b->level,
		.flags = AC_SCOPE_F_BOUND | AC_SCOPE_F_INCOMPLETE,
		.workspace_tag = b->workspace_tag,
		.arm_tgid = 0, /* armed: confined from the mkdir on */
	};
	/* The report first, as Enforcer::add_scope does: no decision on the
	 * scope can miss it. */
	struct ac_scope_report *zeros = bpf_map_lookup_elem(&ac_zero_report, &zero);
	if (!zeros || bpf_map_update_elem(&ac_scope_reports, &id, zeros, BPF_NOEXIST)) {
		__sync_fetch_and_add(&b->failed, 1);
		return 0;
	}
	if (bpf_map_update_elem(&ac_scopes, &id, &s, BPF_NOEXIST)) {
		bpf_map_delete_elem(&ac_scope_reports, &id);
		__sync_fetch_and_add(&b->failed, 1);
		return 0;
	}
	__sync_fetch_and_add(&b->confined, 1);
	return 0;
}

#endif /* AGENTCAGE_BINDING_BPF_H */
