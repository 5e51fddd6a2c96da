/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Network decisions: inet destinations against CIDR/port/protocol rules,
 * unix sockets by the socket they reach, socket families and types.
 */
#ifndef AGENTCAGE_NET_BPF_H
#define AGENTCAGE_NET_BPF_H

#include "maps.bpf.h"
#include "scope.bpf.h"
#include "path.bpf.h"
#include "rules.bpf.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define AF_UNSPEC 0
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define AF_NETLINK 16
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define SOCK_RAW 3
#define SOCK_TYPE_MASK 0xf
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define NETLINK_ROUTE 0
#define IPPROTO_MPTCP 262
/* The kernel takes an AF_INET6 address without sin6_scope_id (RFC 2133). */
#define SIN6_LEN_RFC2133 24

#include "dns.bpf.h"

/* Report an inet target in an event. */
static __always_inline void ac_event_inet(struct ac_event_decision *e, __u16 family, __u16 port,
					  __u16 protocol, const __u8 *addr16)
{
	e->target_kind = AC_TARGET_INET;
	e->family = family;
	e->port = port;
	e->protocol = protocol;
	if (family == AF_INET)
		bpf_probe_read_kernel(e->addr, 4, addr16 + 12);
	else
		bpf_probe_read_kernel(e->addr, 16, addr16);
}

/*
 * addr[16] (IPv4 as ::ffff:a.b.c.d) and *port from the bytes of a sockaddr
 * already read into `sa`, taken as `family`. 0 when addrlen is too short
 * for that family: the caller then fails closed.
 */
static __always_inline int ac_inet_from(__u8 *addr, __u16 family, const struct sockaddr_in6 *sa,
					int addrlen, __u16 *port)
{
	if (family == AF_INET && addrlen >= (int)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		*port = bpf_ntohs(in->sin_port);
		__builtin_memset(addr, 0, 10);
		addr[10] = 0xff;
		addr[11] = 0xff;
		__builtin_memcpy(&addr[12], &in->sin_addr, 4);
		return 1;
	}
	if (family == AF_INET6 && addrlen >= SIN6_LEN_RFC2133) {
		*port = bpf_ntohs(sa->sin6_port);
		__builtin_memcpy(addr, &sa->sin6_addr, 16);
		return 1;
	}
	return 0;
}

/* The first addrlen bytes of `address`, at most a sockaddr_in6, in one probe
 * read (every send with an address on the host comes here: one helper call,
 * not one per field). 0 when shorter than a sockaddr_in or unreadable. */
static __always_inline int ac_read_sockaddr(struct sockaddr_in6 *sa, struct sockaddr *address,
					    int addrlen)
{
	if (addrlen >= (int)sizeof(*sa))
		return !bpf_probe_read_kernel(sa, sizeof(*sa), address);
	if (addrlen >= SIN6_LEN_RFC2133)
		return !bpf_probe_read_kernel(sa, SIN6_LEN_RFC2133, address);
	if (addrlen >= (int)sizeof(struct sockaddr_in))
		return !bpf_probe_read_kernel(sa, sizeof(struct sockaddr_in), address);
	return 0;
}

/* Read an inet address into addr[16] (the scratch's net.addr when it
 * becomes a rule key, the stack otherwise) and its port. 0 when the address
 * is too short to hold one: the caller then fails closed. `family` is the
 * socket's or the address's, as the caller decides what the kernel will
 * use. */
static __always_inline int ac_load_inet(__u8 *addr, __u16 family, struct sockaddr *address,
					int addrlen, __u16 *port)
{
	struct sockaddr_in6 sa = {};
	return ac_read_sockaddr(&sa, address, addrlen) &&
	       ac_inet_from(addr, family, &sa, addrlen, port);
}

static __always_inline __u8 ac_proto_bit(__u16 protocol)
{
	return protocol == IPPROTO_TCP ? AC_PROTO_TCP :
	       protocol == IPPROTO_UDP ? AC_PROTO_UDP : AC_PROTO_OTHER;
}

/*
 * connect/sendmsg to a netlink address. Talking to the kernel (nl_pid 0, no
 * groups) is what socket_create allowed the socket for; a unicast to another
 * process's netlink socket or a multicast to a group is a channel to the
 * host (the kernel lets only privileged senders do it on route sockets, and
 * a privileged process may be attached to a scope).
 */
static __always_inline int ac_decide_netlink_peer(struct ac_ctx *c, enum ac_scope_state scoped,
						  struct sockaddr *address, int addrlen)
{
	struct sockaddr_nl *nl = (struct sockaddr_nl *)address;
	if (addrlen < (int)sizeof(struct sockaddr_nl) ||
	    (BPF_CORE_READ(nl, nl_pid) == 0 && BPF_CORE_READ(nl, nl_groups) == 0))
		return 0; /* the kernel refuses a short address itself */
	int ret;
	struct ac_event_decision *e =
		ac_finish(c, 0, scoped == AC_SCOPE_POLICY ? AC_REASON_PROTECTED : AC_REASON_NO_POLICY,
			  &ret);
	if (e) {
		e->family = AF_NETLINK;
		ac_event_submit(e);
	}
	return ret;
}

/*
 * connect/sendmsg to `address`. is_connect: AF_UNSPEC (disconnect) is fine;
 * AF_UNIX is decided by the unix hooks, which see the socket reached.
 */
static __always_inline int ac_decide_inet(struct ac_ctx *c, enum ac_scope_state scoped,
					  struct socket *sock, struct sockaddr *address, int addrlen,
					  int is_connect)
{
	__u8 reason = AC_REASON_DEFAULT_DENY;
	int allowed = 0;
	__u16 family = BPF_CORE_READ(address, sa_family);
	__u16 protocol = BPF_CORE_READ(sock, sk, sk_protocol);
	__u16 port = 0;

	if (family == AF_UNIX || (is_connect && family == AF_UNSPEC))
		return 0;
	if (family == AF_NETLINK)
		return ac_decide_netlink_peer(c, scoped, address, addrlen);

	/* The destination goes into scratch.net.addr whatever the scope's
	 * state: the record reports it, and must never show an address an
	 * earlier decision of this task left there. */
	struct ac_scratch *held = ac_scratch_get(), *s = held;
	if (!s)
		reason = AC_REASON_SCRATCH;
	else if (!ac_load_inet(s->net.addr, family, address, addrlen, &port))
		s = NULL; /* other families, or an address too short to read */

	if (scoped != AC_SCOPE_POLICY) {
		reason = AC_REASON_NO_POLICY;
	} else if (s) {
		s->net.prefixlen = 32 + 128;
		__u32 access;
		struct ac_lookup q = { .kind = AC_RULES_NET,
				       .proto_bit = ac_proto_bit(protocol),
				       .port = port };
		enum ac_policy_state state = ac_rules_lookup(c, s, q, &access);
		if (state != AC_POLICY_HELD) {
			reason = ac_policy_reason(state);
		} else if ((access & AC_ACCESS_CONNECT) ||
			   ac_dns_allowed(c, s->net.addr, port, protocol)) {
			allowed = 1;
			reason = AC_REASON_RULE_ALLOW;
		}
	}

	int ret;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e) {
		e->family = family;
		e->protocol = protocol;
		if (s)
			ac_event_inet(e, family, port, protocol, s->net.addr);
		ac_event_submit(e);
	}
	ac_scratch_put(held);
	return ret;
}

/*
 * What a scope may create. Every other family and protocol reaches peers or
 * the host in ways connect/sendmsg never see (raw and packet sockets, SCTP's
 * connectx socket options, MPTCP subflows, ICMP "ping" sockets, vsock,
 * bluetooth, ...), and refusing it here also keeps its module from being
 * autoloaded: __sock_create() asks this hook before it loads a missing
 * family's module, and inet_create() loads a missing protocol's only after.
 *   AF_UNIX     any type: peers are decided by the unix hooks
 *   AF_INET(6)  SOCK_STREAM with protocol 0 or TCP, SOCK_DGRAM with 0 or UDP
 *   AF_NETLINK  NETLINK_ROUTE only (glibc's getaddrinfo reads addresses over
 *               it); netlink_send keeps it read-only. Socket diagnostics
 *               (the host's connections and listeners), uevents, audit,
 *               user sockets, generic netlink and the rest are refused.
 */
static __always_inline int ac_socket_allowed(int family, int type, int protocol)
{
	int t = type & SOCK_TYPE_MASK;
	if (family == AF_UNIX)
		return 1;
	if (family == AF_INET || family == AF_INET6)
		return (t == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP)) ||
		       (t == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP));
	if (family == AF_NETLINK)
		return protocol == NETLINK_ROUTE;
	return 0;
}

static __always_inline int ac_decide_socket_create(struct ac_ctx *c, enum ac_scope_state scoped,
						   int family, int type, int protocol)
{
	__u8 reason = AC_REASON_RULE_ALLOW;
	int allowed = 1;
	if (scoped != AC_SCOPE_POLICY) {
		allowed = 0;
		reason = AC_REASON_NO_POLICY;
	} else if (!ac_socket_allowed(family, type, protocol)) {
		allowed = 0;
		reason = AC_REASON_PROTECTED;
	}
	int ret;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e) {
		e->family = family;
		e->protocol = protocol;
		ac_event_submit(e);
	}
	return ret;
}

/*
 * A unix socket reached by connect() or sendmsg(): allowed when the policy
 * lists the path it is bound at (AC_ACCESS_CONNECT on that exact path) or
 * its abstract name. Unbound peers (socketpair) are not addressable and are
 * allowed.
 */
static __always_inline int ac_decide_unix(struct ac_ctx *c, enum ac_scope_state scoped,
					  struct sock *other)
{
	__u32 text_len = 0, access;
	__u8 reason = AC_REASON_DEFAULT_DENY, kind = AC_TARGET_UNIX;
	int allowed = 0, status = AC_WALK_INTERNAL;
	enum ac_policy_state state;
	struct unix_sock *u = (struct unix_sock *)other;
	struct dentry *dentry = BPF_CORE_READ(u, path.dentry);
	struct unix_address *ua = BPF_CORE_READ(u, addr);

	if (!dentry && !ua)
		return 0;
	struct ac_scratch *s = ac_scratch_get();
	if (scoped != AC_SCOPE_POLICY) {
		reason = AC_REASON_NO_POLICY;
	} else if (!s) {
		reason = AC_REASON_SCRATCH;
	} else if (dentry) {
		/* not strict: the path is in the binder's mount namespace */
		status = ac_resolve(dentry, BPF_CORE_READ(u, path.mnt), s, &text_len, 0);
		if (status != AC_WALK_DONE) {
			reason = ac_walk_reason(status);
		} else {
			struct ac_lookup q = { .kind = AC_RULES_PATH, .text_len = text_len };
			state = ac_rules_lookup(c, s, q, &access);
			if (state != AC_POLICY_HELD)
				reason = ac_policy_reason(state);
			else if (access & AC_ACCESS_DENY)
				reason = AC_REASON_RULE_DENY;
			else if (access & AC_ACCESS_CONNECT)
				allowed = 1;
		}
	} else {
		/* Abstract: sun_path[0] == 0, the name is the rest of len bytes. */
		kind = AC_TARGET_UNIX_ABSTRACT;
		int len = BPF_CORE_READ(ua, len);
		int name_len = len - 3; /* sizeof(sa_family_t) + the leading NUL */
		if (name_len <= 0 || name_len > 107) {
			reason = AC_REASON_DEFAULT_DENY;
		} else {
			bpf_probe_read_kernel(s->key.path, 108, &ua->name[0].sun_path[1]);
			text_len = name_len;
			s->key.prefixlen = 32 + 8 * name_len;
			struct ac_lookup q = { .kind = AC_RULES_ABSTRACT, .text_len = text_len };
			state = ac_rules_lookup(c, s, q, &access);
			if (state != AC_POLICY_HELD)
				reason = ac_policy_reason(state);
			else if (access & AC_ACCESS_CONNECT)
				allowed = 1;
			status = AC_WALK_DONE;
		}
	}
	if (allowed)
		reason = AC_REASON_RULE_ALLOW;

	int ret;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e) {
		e->family = AF_UNIX;
		if (status == AC_WALK_DONE)
			ac_event_text(e, kind, s, text_len);
		ac_event_submit(e);
	}
	ac_scratch_put(s);
	return ret;
}

#endif /* AGENTCAGE_NET_BPF_H */
