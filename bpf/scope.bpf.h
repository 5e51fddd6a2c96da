/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Scope membership and decision accounting, shared by every hook.
 */
#ifndef AGENTCAGE_SCOPE_BPF_H
#define AGENTCAGE_SCOPE_BPF_H

#include "maps.bpf.h"
#include <bpf/bpf_core_read.h>

#define EACCES 13

/* What a hook knows about the task it decides for. */
struct ac_ctx {
	__u64 scope_id;
	__u64 cgroup_id;
	__u32 policy_slot;
	__u32 rules_id;
	__u32 policy_flags;
	__u32 workspace_tag;
	__u8 hook;
	__u8 pad;
	__u16 scope_flags; /* AC_SCOPE_F_* of the scope */
	__u64 scope_cgroup; /* id of the cgroup registered as the scope */
	__u32 scope_level;  /* its cgroup level */
	__u16 dns_port;     /* the scope's resolver (AC_SCOPE_F_DNS) */
	__u16 pad2;
};

/* Whether the current task is in a scope, and under which policy. */
enum ac_scope_state {
	AC_SCOPE_NONE = 0,	/* in no scope: the fast path, allow */
	AC_SCOPE_POLICY = 1,	/* in a scope whose slot holds a policy */
	AC_SCOPE_NO_POLICY = 2, /* in a scope whose slot is empty: fail closed */
};

/*
 * Fill *c to decide on `hook` in the scope registered at cgroup cg, for
 * someone outside it: a host task reaching in, or no task at all (softirq).
 * c->cgroup_id is the scope's own; a caller with a task sets its own.
 * AC_SCOPE_NONE when no scope is registered there (it ended, and its
 * processes with it) or it is pending (not a scope yet). ac_current_scope fills *c for a task inside a scope
 * with the same fields in its own loop: its constant returns keep the
 * verifier's state count down in every program (returning this function's
 * state from there made inode_readlink exceed the instruction limit).
 */
/*
 * Is scope s pending (struct ac_scope, arm_tgid): not a scope yet, for any
 * program? With `arm` (bprm_check_security, for a task inside s's cgroup:
 * that is where it was found), the exec of the task group s waits for arms
 * it, and s is a scope from that exec on, the exec included. Every writer
 * writes 0, and only after reading its own tgid there, so threads of that
 * process exec'ing at once agree: the plain aligned store is the
 * compare-and-swap (the BPF ISA we target has none on 32 bits).
 */
static __always_inline int ac_scope_pending(struct ac_scope *s, int arm)
{
	__u32 tgid = *(volatile __u32 *)&s->arm_tgid;
	if (!tgid)
		return 0;
	if (!arm || (__u32)(bpf_get_current_pid_tgid() >> 32) != tgid)
		return 1;
	*(volatile __u32 *)&s->arm_tgid = 0;
	return 0;
}

static __always_inline enum ac_scope_state ac_scope_at(struct ac_ctx *c, __u64 cg, __u8 hook)
{
	struct ac_scope *s = bpf_map_lookup_elem(&ac_scopes, &cg);
	if (!s || ac_scope_pending(s, 0))
		return AC_SCOPE_NONE;
	c->scope_id = s->scope_id;
	c->policy_slot = s->policy_slot;
	c->workspace_tag = s->workspace_tag;
	c->scope_flags = s->flags;
	c->dns_port = s->dns_port;
	c->scope_cgroup = cg;
	c->cgroup_id = cg;
	c->hook = hook;
	struct ac_policy *p = bpf_map_lookup_elem(&ac_policies, &c->policy_slot);
	if (!p) {
		c->rules_id = 0;
		c->policy_flags = 0;
		return AC_SCOPE_NO_POLICY;
	}
	/* Read once: every lookup of this decision uses this rules_id, so a
	 * concurrent swap is seen whole or not at all. */
	c->rules_id = p->rules_id;
	c->policy_flags = p->flags;
	return AC_SCOPE_POLICY;
}

/*
 * Find the scope covering the current task: its own cgroup or the nearest
 * registered ancestor at one of the levels userspace marked in config.
 * Fills *c unless it returns AC_SCOPE_NONE. The loop visits only the levels
 * between config.min_level and config.max_level, which is one level in the
 * common case, so an unscoped task pays one array lookup plus one hash
 * lookup per occupied level.
 *
 * Outermost scope wins: a nested registration can never loosen what an
 * enclosing scope imposes. A pending scope is skipped as if it were not
 * registered (ac_scope_pending); `arm` lets this task arm one.
 */
static __always_inline enum ac_scope_state ac_task_scope(struct ac_ctx *c, __u8 hook, int arm)
{
	__u32 zero = 0;
	struct ac_config *cfg = bpf_map_lookup_elem(&ac_settings, &zero);
	if (!cfg || !cfg->scope_levels)
		return AC_SCOPE_NONE;

	__u32 lo = cfg->min_level, hi = cfg->max_level;
	for (__u32 i = 0; i <= AC_MAX_SCOPE_LEVEL; i++) {
		__u32 level = lo + i;
		if (level > hi || level > AC_MAX_SCOPE_LEVEL)
			return AC_SCOPE_NONE;
		if (!(cfg->scope_levels & (1ULL << level)))
			continue;
		/* 0: the task's cgroup is shallower than level, so no
		 * deeper level can hold one of its ancestors either. */
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);
		if (!id)
			return AC_SCOPE_NONE;
		struct ac_scope *s = bpf_map_lookup_elem(&ac_scopes, &id);
		if (!s || ac_scope_pending(s, arm))
			continue;
		c->scope_id = s->scope_id;
		c->policy_slot = s->policy_slot;
		c->workspace_tag = s->workspace_tag;
		c->scope_flags = s->flags;
		c->dns_port = s->dns_port;
		c->scope_cgroup = id;
		c->scope_level = level;
		c->cgroup_id = bpf_get_current_cgroup_id();
		c->hook = hook;
		struct ac_policy *p = bpf_map_lookup_elem(&ac_policies, &c->policy_slot);
		if (p) {
			/* Read once: every lookup of this decision uses this
			 * rules_id, so a concurrent swap is seen whole or not
			 * at all. */
			c->rules_id = p->rules_id;
			c->policy_flags = p->flags;
		} else {
			c->rules_id = 0;
			c->policy_flags = 0;
			return AC_SCOPE_NO_POLICY;
		}
		return AC_SCOPE_POLICY;
	}
	return AC_SCOPE_NONE;
}

static __always_inline enum ac_scope_state ac_current_scope(struct ac_ctx *c, __u8 hook)
{
	return ac_task_scope(c, hook, 0);
}

/* ac_current_scope for an exec (bprm_check_security): a pending scope
 * waiting for the current task group's exec is armed first, so this exec
 * is the first act decided in it. */
static __always_inline enum ac_scope_state ac_current_scope_arming(struct ac_ctx *c, __u8 hook)
{
	return ac_task_scope(c, hook, 1);
}

static __always_inline void ac_stat_inc(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&ac_stats, &stat);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline void ac_count(const struct ac_ctx *c, __u8 decision, __u8 reason)
{
	__u32 idx = c->policy_slot * AC_HOOK_COUNT + c->hook;
	struct ac_counters *cnt = bpf_map_lookup_elem(&ac_decision_counts, &idx);
	if (!cnt)
		return;
	if (decision < AC_DECISION_COUNT)
		__sync_fetch_and_add(&cnt->decisions[decision], 1);
	if (reason < AC_REASON_COUNT)
		__sync_fetch_and_add(&cnt->reasons[reason], 1);
}

/*
 * The current task's scratch (struct ac_scratch), marked busy until
 * ac_scratch_put. NULL when it cannot be had: no memory for it, the helper
 * refused (6.1's task storage helper returns NULL while another task on this
 * CPU, preempted inside it, holds its per-CPU lock), or an interrupt on this
 * task is deciding with it. The caller then denies with AC_REASON_SCRATCH:
 * never a decision on someone else's path. Interrupts nest, so a plain flag
 * is enough; no other task can reach this storage.
 */
static __always_inline struct ac_scratch *ac_scratch_get(void)
{
	struct ac_scratch *s = bpf_task_storage_get(&ac_task_scratch, bpf_get_current_task_btf(), 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s || s->busy)
		return NULL;
	s->busy = 1;
	return s;
}

static __always_inline void ac_scratch_put(struct ac_scratch *s)
{
	if (s)
		s->busy = 0;
}

/* Fill what every record carries into record buffer t, marked busy until
 * ac_event_submit; no task's fields (ac_event_begin adds them). */
static __always_inline struct ac_event_decision *
ac_event_fill(struct ac_task_record *t, const struct ac_ctx *c, __u8 decision, __u8 reason,
	      __s32 error)
{
	t->busy = 1;
	struct ac_event_decision *e = &t->rec;
	e->hdr.type = AC_EVENT_DECISION;
	e->hdr.size = sizeof(*e);
	e->hdr.abi = AC_ABI_VERSION;
	e->hdr.time_ns = bpf_ktime_get_boot_ns();
	e->hdr.cgroup_id = c->cgroup_id;
	e->scope_id = c->scope_id;
	e->policy_slot = c->policy_slot;
	e->pid = 0;
	e->tid = 0;
	e->uid = 0;
	e->hook = c->hook;
	e->decision = decision;
	e->reason = reason;
	e->target_kind = AC_TARGET_NONE;
	e->error = error;
	e->family = 0;
	e->port = 0;
	e->protocol = 0;
	e->target_len = 0;
	e->access = 0;
	e->pad = 0;
	__builtin_memset(e->addr, 0, sizeof(e->addr));
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	/* The whole text, not just its first byte: the buffer holds an
	 * earlier record, and every byte of this one is copied out. */
	__builtin_memset(e->target, 0, sizeof(e->target));
	return e;
}

/* Start a decision record in the task's own storage (struct
 * ac_task_record): NULL only when that storage cannot be had (no memory, or
 * an interrupt on this task is building one): the loss is counted and the
 * decision goes ahead without waiting. Process context only. */
static __always_inline struct ac_event_decision *
ac_event_begin(const struct ac_ctx *c, __u8 decision, __u8 reason, __s32 error)
{
	struct ac_task_record *t = bpf_task_storage_get(
		&ac_task_records, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t || t->busy) {
		ac_stat_inc(AC_STAT_EVENTS_LOST);
		return NULL;
	}
	struct ac_event_decision *e = ac_event_fill(t, c, decision, reason, error);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

/* Copy text resolved into scratch.key (a path, or an abstract unix name)
 * into a record as its target of `kind`. */
static __always_inline void ac_event_text(struct ac_event_decision *e, __u8 kind,
					  const struct ac_scratch *s, __u32 text_len)
{
	if (!s)
		return;
	e->target_kind = kind;
	e->target_len = text_len > AC_PATH_KEY_MAX ? AC_PATH_KEY_MAX : text_len;
	bpf_probe_read_kernel(e->target, AC_PATH_KEY_MAX, s->key.path);
	e->target[e->target_len & (AC_EVENT_TARGET_MAX - 1)] = 0;
}

/* May the scope put one more record into the shared ring buffer? At most
 * AC_SCOPE_EVENT_BUDGET per window (see struct ac_scope_report): a plain
 * read then an add, as the ISA we target has no fetch-and-add with a result;
 * a window that has run out is restarted by whoever sees it first. */
static __always_inline int ac_event_budget(struct ac_scope_report *r, __u64 now)
{
	if (now - r->window_start_ns >= AC_SCOPE_EVENT_WINDOW_NS) {
		r->window_start_ns = now;
		r->window_events = 0;
	}
	__u32 n = r->window_events;
	__sync_fetch_and_add(&r->window_events, 1);
	return n < AC_SCOPE_EVENT_BUDGET;
}

/* A recorded scope (`agentcage run --record`) gets every record in its
 * own ring buffer too, outside the audit log's budget (ac_scope_rings); a
 * record it has no room for is counted in the scope's report. A global
 * function: checked once by the verifier, not in every state of every
 * hook that reports (inline, it cost file_open on 6.1 a tenth of its
 * budget). 6.1 passes the record as plain memory: the key is copied. */
__noinline int ac_event_record(const struct ac_event_decision *e)
{
	if (!e)
		return 0;
	__u64 scope_id = e->scope_id;
	void *ring = bpf_map_lookup_elem(&ac_scope_rings, &scope_id);
	if (!ring || !bpf_ringbuf_output(ring, (void *)e, sizeof(*e), 0))
		return 0;
	struct ac_scope_report *r = bpf_map_lookup_elem(&ac_scope_reports, &scope_id);
	if (r)
		__sync_fetch_and_add(&r->records_unrecorded, 1);
	return 0;
}

static __always_inline void ac_event_submit(struct ac_event_decision *e)
{
	/* Keep the scope's first few records for its report (the run's
	 * result), whatever the state of the shared ring buffer. */
	__u64 scope_id = e->scope_id;
	struct ac_scope_report *r = bpf_map_lookup_elem(&ac_scope_reports, &scope_id);
	if (r) {
		/* No fetch-and-add with a result on the BPF ISA we target (v2),
		 * so claim a place by reading the count: two CPUs denying in
		 * one scope at the same instant may write the same place (one
		 * record of the two is kept). The count itself stays exact. */
		__u32 idx = r->records_taken;
		if (idx < AC_REPORT_RECORDS)
			__builtin_memcpy(&r->records[idx & (AC_REPORT_RECORDS - 1)], e, sizeof(*e));
		__sync_fetch_and_add(&r->records_taken, 1);
		ac_event_record(e);
	}
	/* Then a copy for the daemon's audit log, within the scope's budget
	 * (the rest counted exactly, per scope and in total); a full ring
	 * buffer is counted, never waited on. */
	if (r && !ac_event_budget(r, e->hdr.time_ns)) {
		__sync_fetch_and_add(&r->events_suppressed, 1);
		ac_stat_inc(AC_STAT_EVENTS_SUPPRESSED);
	} else if (bpf_ringbuf_output(&ac_events, e, sizeof(*e), 0))
		ac_stat_inc(AC_STAT_EVENTS_LOST);
	else
		ac_stat_inc(AC_STAT_EVENTS_SENT);
	struct ac_task_record *t = (void *)e - __builtin_offsetof(struct ac_task_record, rec);
	t->busy = 0;
}

/*
 * Turn "allowed?" into the hook's return value: count it, apply audit mode,
 * and say whether a record should be emitted (*decision != ALLOW).
 */
static __always_inline int ac_verdict(const struct ac_ctx *c, int allowed, __u8 reason,
				      __u8 *decision)
{
	if (allowed) {
		*decision = AC_DECISION_ALLOW;
		ac_count(c, AC_DECISION_ALLOW, reason);
		return 0;
	}
	__u64 scope_id = c->scope_id;
	struct ac_scope_report *r = bpf_map_lookup_elem(&ac_scope_reports, &scope_id);
	__u32 hook = c->hook < AC_HOOK_COUNT ? c->hook : 0;
	if (c->policy_flags & AC_POLICY_F_AUDIT) {
		*decision = AC_DECISION_AUDIT;
		ac_count(c, AC_DECISION_AUDIT, reason);
		if (r)
			__sync_fetch_and_add(&r->audited[hook], 1);
		return 0;
	}
	*decision = AC_DECISION_DENY;
	ac_count(c, AC_DECISION_DENY, reason);
	if (r)
		__sync_fetch_and_add(&r->denied[hook], 1);
	return -EACCES;
}

/*
 * The tail every decision shares: count it and apply audit mode
 * (ac_verdict); when it is reported (a denial, or audit mode's would-be
 * denial), reserve its record and fill what every record carries. Returns
 * that record, for the caller to add its target to and hand to
 * ac_event_submit (always: it also releases the task's record), or NULL
 * (allowed, or no record could be had: counted, never waited on). *ret gets the hook's return value
 * either way.
 */
static __always_inline struct ac_event_decision *ac_finish(const struct ac_ctx *c, int allowed,
							   __u8 reason, int *ret)
{
	__u8 decision;
	*ret = ac_verdict(c, allowed, reason, &decision);
	if (decision == AC_DECISION_ALLOW)
		return NULL;
	return ac_event_begin(c, decision, reason, *ret);
}

/*
 * ac_finish where no task decides (a packet arriving, in softirq): the
 * record names no process and is built in this CPU's buffer
 * (ac_cpu_records), which nothing else on the CPU holds meanwhile (softirqs
 * do not nest; a busy buffer is counted as a lost record).
 */
static __always_inline struct ac_event_decision *ac_finish_no_task(const struct ac_ctx *c,
								   int allowed, __u8 reason,
								   int *ret)
{
	__u8 decision;
	*ret = ac_verdict(c, allowed, reason, &decision);
	if (decision == AC_DECISION_ALLOW)
		return NULL;
	__u32 zero = 0;
	struct ac_task_record *t = bpf_map_lookup_elem(&ac_cpu_records, &zero);
	if (!t || t->busy) {
		ac_stat_inc(AC_STAT_EVENTS_LOST);
		return NULL;
	}
	return ac_event_fill(t, c, decision, reason, *ret);
}

/* A decision without a target on hook `hook`: allowed or denied for
 * `reason`, counted and reported. Returns 0 or -EACCES. */
static __always_inline int ac_decide_on_hook(struct ac_ctx *c, __u8 hook, int allowed, __u8 reason)
{
	int ret;
	c->hook = hook;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e)
		ac_event_submit(e);
	return ret;
}

/* The same on the hook c was filled for, allowed only in a scope that holds
 * a policy: a denial is `protected` (never allowed in a scope), or
 * `no_policy` when the scope's slot is empty. */
static __always_inline int ac_decide_plain(struct ac_ctx *c, enum ac_scope_state scoped,
					   int allowed)
{
	__u8 reason = scoped != AC_SCOPE_POLICY ? AC_REASON_NO_POLICY
		      : allowed			? AC_REASON_RULE_ALLOW
						: AC_REASON_PROTECTED;
	return ac_decide_on_hook(c, c->hook, scoped == AC_SCOPE_POLICY && allowed, reason);
}

/*
 * Is cgroup cg in the scope c was filled for (the scope's cgroup or one
 * below it)? Its ancestor at the scope's level is the scope's cgroup. 0
 * when that cannot be read.
 */
static __always_inline int ac_cgroup_at_level_is(struct cgroup *cg, __u32 level, __u64 id_wanted)
{
	if (!cg || level > AC_MAX_SCOPE_LEVEL || BPF_CORE_READ(cg, level) < (int)level)
		return 0;
	struct cgroup *anc = NULL;
	__u64 slot = (__u64)cg + bpf_core_field_offset(struct cgroup, ancestors) +
		     sizeof(anc) * (level & AC_MAX_SCOPE_LEVEL);
	if (bpf_probe_read_kernel(&anc, sizeof(anc), (void *)slot) || !anc)
		return 0;
	__u64 id = BPF_CORE_READ(anc, kn, id);
	return id && id == id_wanted;
}

static __always_inline int ac_cgroup_in_scope(const struct ac_ctx *c, struct cgroup *cg)
{
	return ac_cgroup_at_level_is(cg, c->scope_level, c->scope_cgroup);
}

/* Is task t one of the scope's processes? */
static __always_inline int ac_task_in_scope(const struct ac_ctx *c, struct task_struct *t)
{
	return ac_cgroup_in_scope(c, BPF_CORE_READ(t, cgroups, dfl_cgrp));
}

#endif /* AGENTCAGE_SCOPE_BPF_H */
