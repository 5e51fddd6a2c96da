/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Looking a request up in its policy's rules, consistently while the policy
 * is swapped: the lookups of one decision all use one rules id, and are
 * repeated under the new id when the slot changed while they ran.
 */
#ifndef AGENTCAGE_RULES_BPF_H
#define AGENTCAGE_RULES_BPF_H

#include "maps.bpf.h"
#include "scope.bpf.h"
#include "path.bpf.h"
#include <bpf/bpf_endian.h>

/* Rule lookups of one decision, at most, before it fails closed (reason
 * AC_REASON_INTERNAL) because the slot keeps changing under it. */
#define AC_POLICY_TRIES 4

/* Whether the slot still points at the rules id a decision looked up. */
enum ac_policy_state {
	AC_POLICY_GONE = -1,   /* the slot has no policy any more */
	AC_POLICY_CHANGED = 0, /* a new rules id: look up again under it */
	AC_POLICY_HELD = 1,    /* the lookups saw the whole policy */
};

/*
 * After a decision's rule lookups: does the slot still point at the rules id
 * they used? AC_POLICY_CHANGED loads the slot's new rules id and flags into
 * *c.
 *
 * The id was read when the hook started, and a swap (Enforcer::put_policy)
 * writes the new rules, switches the slot, then deletes the old rules, with
 * no grace period for hooks that read the old id just before the switch.
 * Such a hook may look up rules that are being deleted under it and get
 * part of the old policy: an allowed file denied, or a denied file allowed
 * when its deny entry goes before the enclosing allow. If the slot still
 * holds the id after the lookups, the switch, and so every deletion of those
 * rules, came after them (ids are never reused): the answer is the whole old
 * policy. Otherwise the new rules were complete before the switch, and the
 * caller looks them up. Relies on loads not being reordered with loads
 * (x86-64); BPF ISA v2 has no barrier to state it.
 */
static __always_inline enum ac_policy_state ac_policy_current(struct ac_ctx *c)
{
	struct ac_policy *p = bpf_map_lookup_elem(&ac_policies, &c->policy_slot);
	if (!p)
		return AC_POLICY_GONE;
	__u32 id = p->rules_id;
	if (id == c->rules_id)
		return AC_POLICY_HELD;
	c->rules_id = id;
	c->policy_flags = p->flags;
	return AC_POLICY_CHANGED;
}

/* Reason for a decision whose policy could not be read consistently. */
static __always_inline __u8 ac_policy_reason(enum ac_policy_state state)
{
	return state == AC_POLICY_GONE ? AC_REASON_NO_POLICY : AC_REASON_INTERNAL;
}

/* Does the merged rule allow this port and protocol? A constant-bound loop:
 * the verifier then sees a constant index for every range. */
static __always_inline int ac_port_allowed(const struct ac_net_rule *r, __u16 port, __u8 proto_bit)
{
	__u32 count = r->count;
#pragma unroll
	for (__u32 k = 0; k < AC_NET_MAX_RANGES; k++) {
		const struct ac_port_range *pr = &r->ranges[k];
		if (k < count && port >= pr->first && port <= pr->last &&
		    (pr->protocols & proto_bit))
			return 1;
	}
	return 0;
}

/* Which rules a request is looked up in. */
enum ac_rules_kind {
	AC_RULES_PATH = 0,     /* scratch.key: a resolved path (absolute + workspace rules) */
	AC_RULES_NET = 1,      /* scratch.net: an inet destination */
	AC_RULES_ABSTRACT = 2, /* scratch.key: an abstract unix name */
	AC_RULES_LISTEN = 3,   /* scratch.net: a local inet address to bind or listen on */
};

/* One request. Callers pass a literal, so after inlining `kind` is a
 * constant and only its branch of ac_rules_access is compiled in. */
struct ac_lookup {
	__u8 kind;           /* enum ac_rules_kind */
	__u8 proto_bit;      /* NET, LISTEN: AC_PROTO_* of the socket */
	__u16 port;          /* NET: destination port, LISTEN: local port, host order */
	__u32 workspace_tag; /* PATH: the scope's workspace (0: absolute rules only) */
	__u32 text_len;      /* PATH: as ac_resolve reported; ABSTRACT: the name's length */
};

/*
 * The access bits the rules under c->rules_id grant for the request (0: no
 * rule). An inet destination gets AC_ACCESS_CONNECT when a CIDR rule allows
 * its port and protocol, a local address AC_ACCESS_BIND when a network.listen
 * rule does; an abstract name the bits of the rule for exactly that name.
 */
static __always_inline __u32 ac_rules_access(const struct ac_ctx *c, struct ac_scratch *s,
					     const struct ac_lookup *q)
{
	if (q->kind == AC_RULES_NET) {
		s->net.rules_id_be = bpf_htonl(c->rules_id & AC_RULES_ID_MASK);
		struct ac_net_rule *rule = bpf_map_lookup_elem(&ac_net_rules, &s->net);
		return rule && ac_port_allowed(rule, q->port, q->proto_bit) ? AC_ACCESS_CONNECT : 0;
	}
	if (q->kind == AC_RULES_LISTEN) {
		s->net.rules_id_be =
			bpf_htonl((c->rules_id & AC_RULES_ID_MASK) | AC_RULES_NS_LISTEN);
		struct ac_net_rule *rule = bpf_map_lookup_elem(&ac_net_rules, &s->net);
		return rule && ac_port_allowed(rule, q->port, q->proto_bit) ? AC_ACCESS_BIND : 0;
	}
	if (q->kind == AC_RULES_ABSTRACT) {
		s->key.rules_id_be =
			bpf_htonl((c->rules_id & AC_RULES_ID_MASK) | AC_RULES_NS_ABSTRACT);
		struct ac_path_rule *r = bpf_map_lookup_elem(&ac_path_rules, &s->key);
		/* exact name only: the rule records its length */
		return r && r->aux == q->text_len ? r->access : 0;
	}
	__u32 access = ac_path_access(s, c->rules_id, q->workspace_tag, q->text_len);
	/* As bits, not branches: 1 denies, 3 denies as unchecked. */
	if (c->policy_flags & AC_POLICY_F_NAMES) {
		__u32 r = (__u32)ac_path_name_denied(c->rules_id);
		access |= ((0u - (r & 1)) & AC_ACCESS_DENY) | ((r & 2) << 29);
	}
	return access;
}

/*
 * Look the request up until the slot holds still across the lookups (see
 * ac_policy_current), at most AC_POLICY_TRIES times. *access gets the rules'
 * answer when AC_POLICY_HELD is returned, else 0: the caller then denies
 * with ac_policy_reason().
 */
static __always_inline enum ac_policy_state ac_rules_lookup(struct ac_ctx *c, struct ac_scratch *s,
							    struct ac_lookup q, __u32 *access)
{
	enum ac_policy_state state = AC_POLICY_CHANGED;
	*access = 0;
	for (int k = 0; k < AC_POLICY_TRIES && state == AC_POLICY_CHANGED; k++) {
		*access = ac_rules_access(c, s, &q);
		state = ac_policy_current(c);
	}
	if (state != AC_POLICY_HELD)
		*access = 0;
	return state;
}

#endif /* AGENTCAGE_RULES_BPF_H */
