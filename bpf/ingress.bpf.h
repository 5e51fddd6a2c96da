/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Ingress: what a scope may offer to others. A socket bound to an address
 * the host's network reaches, a listening socket, or an abstract unix name
 * (one namespace shared with the host, where a run could squat a name host
 * programs connect to) lets the outside reach the run; a "no network" run
 * that listens on 0.0.0.0 is a bind shell. Also netlink: route sockets stay
 * read-only.
 *
 *   socket_bind    inet: loopback addresses (only this host reaches them;
 *                  UDP on 127.0.0.1 for a test's own traffic) or what a
 *                  network.listen rule allows (address, port, protocol);
 *                  unix: abstract names only when network.listen names
 *                  them, path sockets are files (files.write decides),
 *                  autobind (a name the kernel picks) is fine
 *   socket_listen  inet: only on an address and port a network.listen rule
 *                  allows for TCP (the socket's bound address is read from
 *                  the socket: listen() on an unbound socket binds the
 *                  wildcard with a random port and is refused)
 *   netlink_send   route messages that only read (the kernel's own rule for
 *                  unprivileged senders: type & 3 == 2, RTM_GET*); any
 *                  message on another netlink protocol (a socket passed in
 *                  or created before `attach`)
 */
#ifndef AGENTCAGE_INGRESS_BPF_H
#define AGENTCAGE_INGRESS_BPF_H

#include "selftalk.bpf.h"

/* Messages of one netlink sendmsg checked before the send is refused as
 * too many to check (the kernel processes every message of the buffer). */
#define AC_NETLINK_MAX_MSGS 32
#define NLMSG_HDRLEN 16
#define NLMSG_MIN_TYPE 0x10

/* The decision tail of bind and listen on an inet socket: report the local
 * address in the record. */
static __always_inline int ac_ingress_finish(struct ac_ctx *c, int allowed, __u8 reason,
					     struct ac_scratch *s, __u16 family, __u16 port,
					     __u16 protocol)
{
	int ret;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e) {
		e->family = family;
		e->protocol = protocol;
		if (s)
			ac_event_inet(e, family, port, protocol, s->net.addr);
		ac_event_submit(e);
	}
	return ret;
}

/* Is (scratch.net.addr, port) of this protocol allowed by network.listen?
 * Sets *reason either way. */
static __always_inline int ac_listen_rule(struct ac_ctx *c, struct ac_scratch *s, __u16 port,
					  __u16 protocol, __u8 *reason)
{
	__u32 access;
	s->net.prefixlen = 32 + 128;
	struct ac_lookup q = {
		.kind = AC_RULES_LISTEN, .proto_bit = ac_proto_bit(protocol), .port = port};
	enum ac_policy_state state = ac_rules_lookup(c, s, q, &access);
	if (state != AC_POLICY_HELD) {
		*reason = ac_policy_reason(state);
		return 0;
	}
	*reason = access & AC_ACCESS_BIND ? AC_REASON_RULE_ALLOW : AC_REASON_DEFAULT_DENY;
	return !!(access & AC_ACCESS_BIND);
}

/*
 * listen() on (scratch.net.addr, port): what network.listen allows is
 * public (the host and other scopes reach it by their own rules); on a
 * loopback address without a rule the listener is the scope's private one,
 * reachable by its own processes only (selftalk.bpf.h). SO_REUSEPORT would
 * let a socket of someone else with the same uid answer on the same
 * address, so a private listener may not have it.
 */
static __always_inline int ac_listen_decide(struct ac_ctx *c, struct sock *sk, struct ac_scratch *s,
					    __u16 port, __u16 protocol, __u8 *reason)
{
	if (ac_listen_rule(c, s, port, protocol, reason)) {
		ac_listener_register(c, sk, s->net.addr, AC_PORT_PROTO(port, protocol), 0);
		return 1;
	}
	if (!sk || *reason != AC_REASON_DEFAULT_DENY || protocol != IPPROTO_TCP ||
	    !ac_is_loopback(s->net.addr) || BPF_CORE_READ_BITFIELD_PROBED(&sk->__sk_common, skc_reuseport))
		return 0;
	if (!ac_listener_register(c, sk, s->net.addr, AC_PORT_PROTO(port, protocol), AC_SOCK_F_PRIVATE)) {
		*reason = AC_REASON_INTERNAL;
		return 0;
	}
	*reason = AC_REASON_RULE_ALLOW;
	return 1;
}

/* bind() of a UDP socket to a loopback address: private to the scope.
 * SO_REUSEADDR/SO_REUSEPORT would let two sockets share the address, one of
 * them someone else's: refused. Port 0 (the kernel picks one after this
 * hook): marked pending, registered by ac_udp_settle. */
static __always_inline int ac_bind_udp_private(struct ac_ctx *c, struct sock *sk,
					       struct ac_scratch *s, __u16 port, __u8 *reason)
{
	if (!sk || BPF_CORE_READ_BITFIELD_PROBED(&sk->__sk_common, skc_reuse) ||
	    BPF_CORE_READ_BITFIELD_PROBED(&sk->__sk_common, skc_reuseport)) {
		*reason = AC_REASON_DEFAULT_DENY;
		return 0;
	}
	if (!port) {
		if (!ac_sock_own(c, sk, AC_SOCK_F_PRIVATE | AC_SOCK_F_PENDING)) {
			*reason = AC_REASON_INTERNAL;
			return 0;
		}
		return 1;
	}
	if (!ac_listener_register(c, sk, s->net.addr, AC_PORT_PROTO(port, IPPROTO_UDP), AC_SOCK_F_PRIVATE)) {
		*reason = AC_REASON_INTERNAL;
		return 0;
	}
	return 1;
}

/* Has the unix socket a name already (a bind would fail)? Read through a
 * plain value: socket->sk is a maybe-NULL pointer on 6.12. */
static __always_inline int ac_unix_named(struct socket *sock)
{
	struct unix_sock *u = (struct unix_sock *)BPF_CORE_READ(sock, sk);
	return BPF_CORE_READ(u, addr) != NULL;
}

/* bind() of an abstract unix name: only a name network.listen lists, and
 * the socket is then public (the host and other runs reach it as their
 * rules allow). */
static __always_inline int ac_decide_bind_abstract(struct ac_ctx *c, enum ac_scope_state scoped,
						   struct socket *sock, struct sockaddr *address,
						   int addrlen)
{
	__u32 access;
	__u8 reason = AC_REASON_DEFAULT_DENY;
	int allowed = 0, name_len = addrlen - 3; /* sa_family_t + the leading NUL */
	struct ac_scratch *s = ac_scratch_get();
	struct sockaddr_un *un = (struct sockaddr_un *)address;

	if (scoped != AC_SCOPE_POLICY) {
		reason = AC_REASON_NO_POLICY;
	} else if (!s) {
		reason = AC_REASON_SCRATCH;
	} else if (name_len > 0 && name_len <= 107) {
		/* `address` is the kernel's sockaddr_storage copy: 128 bytes
		 * are readable whatever addrlen says. */
		bpf_probe_read_kernel(s->key.path, 108, &un->sun_path[1]);
		s->key.prefixlen = 32 + 8 * name_len;
		struct ac_lookup q = {.kind = AC_RULES_ABSTRACT, .text_len = name_len};
		enum ac_policy_state state = ac_rules_lookup(c, s, q, &access);
		if (state != AC_POLICY_HELD) {
			reason = ac_policy_reason(state);
		} else if (access & AC_ACCESS_BIND) {
			/* Public from now on; a socket that already has a
			 * name keeps it (the kernel refuses this bind). */
			allowed = ac_unix_named(sock) || ac_sock_own(c, sock->sk, 0);
			reason = allowed ? AC_REASON_RULE_ALLOW : AC_REASON_INTERNAL;
		}
	}
	int ret;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e) {
		e->family = AF_UNIX;
		if (s && name_len > 0 && name_len <= 107)
			ac_event_text(e, AC_TARGET_UNIX_ABSTRACT, s, name_len);
		ac_event_submit(e);
	}
	ac_scratch_put(s);
	return ret;
}

/*
 * bind(). The socket's family decides, not the address's: an AF_INET socket
 * accepts an AF_UNSPEC address as INADDR_ANY.
 */
static __always_inline int ac_decide_bind(struct ac_ctx *c, enum ac_scope_state scoped,
					  struct socket *sock, struct sockaddr *address,
					  int addrlen)
{
	__u16 family = BPF_CORE_READ(sock, sk, __sk_common.skc_family);
	__u16 protocol = BPF_CORE_READ(sock, sk, sk_protocol);
	__u16 port = 0;
	__u8 reason = AC_REASON_DEFAULT_DENY;
	int allowed = 0;

	if (family == AF_UNIX) {
		/* The socket is the scope's: its own processes may connect to
		 * it whatever network.allow says, nobody else may
		 * (selftalk.bpf.h). Created in the scope it is already
		 * (socket_post_create); created before attach, it becomes so
		 * here, unless it has a name already. Unclaimed, anyone could
		 * reach it: refused. */
		if (scoped == AC_SCOPE_POLICY && !ac_unix_named(sock) &&
		    !ac_sock_own(c, sock->sk, AC_SOCK_F_PRIVATE))
			return ac_decide_on_hook(c, AC_HOOK_SOCKET_BIND, 0, AC_REASON_INTERNAL);
		/* addrlen == sizeof(sa_family_t): autobind, the kernel picks
		 * a free name; a path: a file, decided by path_mknod. */
		if (addrlen <= 2 || BPF_CORE_READ((struct sockaddr_un *)address, sun_path[0]))
			return 0;
		return ac_decide_bind_abstract(c, scoped, sock, address, addrlen);
	}
	if (family != AF_INET && family != AF_INET6)
		return 0; /* netlink: socket_create allowed route sockets only */

	struct ac_scratch *held = ac_scratch_get(), *s = held;
	if (!s)
		reason = AC_REASON_SCRATCH;
	else if (!ac_load_inet(s->net.addr, family, address, addrlen, &port))
		s = NULL; /* too short to read: fail closed */

	if (scoped != AC_SCOPE_POLICY) {
		reason = AC_REASON_NO_POLICY;
	} else if (s && ac_is_loopback(s->net.addr)) {
		allowed = 1;
		reason = AC_REASON_RULE_ALLOW;
		if (protocol == IPPROTO_UDP)
			allowed = ac_bind_udp_private(c, sock->sk, s, port, &reason);
	} else if (s) {
		allowed = ac_listen_rule(c, s, port, protocol, &reason);
		if (allowed && protocol == IPPROTO_UDP && port)
			ac_listener_register(c, sock->sk, s->net.addr, AC_PORT_PROTO(port, protocol), 0);
	}
	int ret = ac_ingress_finish(c, allowed, reason, s, family, port, protocol);
	ac_scratch_put(held);
	return ret;
}

/* listen(): the address and port the socket is bound to, read from it. */
static __always_inline int ac_decide_listen(struct ac_ctx *c, enum ac_scope_state scoped,
					    struct socket *sock)
{
	struct sock *sk = BPF_CORE_READ(sock, sk);
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__u16 protocol = BPF_CORE_READ(sk, sk_protocol);
	__u16 port = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u8 reason = AC_REASON_DEFAULT_DENY;
	int allowed = 0;

	if (family != AF_INET && family != AF_INET6)
		return 0; /* unix: bind decided the name */

	struct ac_scratch *s = ac_scratch_get();
	if (s)
		ac_sock_local_addr(sk, family, s->net.addr);
	if (scoped != AC_SCOPE_POLICY)
		reason = AC_REASON_NO_POLICY;
	else if (!s)
		reason = AC_REASON_SCRATCH;
	else if (port) /* unbound: listen() would bind the wildcard */
		allowed = ac_listen_decide(c, sock->sk, s, port, protocol, &reason);
	int ret = ac_ingress_finish(c, allowed, reason, s, family, port, protocol);
	ac_scratch_put(s);
	return ret;
}

/*
 * A netlink message sent from a scope. Only route sockets can be created in
 * one; their messages may only read (RTM_GET*: the type's low two bits are
 * 2, the same rule rtnetlink applies to unprivileged senders). The buffer
 * may carry several messages, and the kernel acts on each, so each is
 * checked; more than AC_NETLINK_MAX_MSGS fail closed.
 */
static __always_inline int ac_decide_netlink_send(struct ac_ctx *c, enum ac_scope_state scoped,
						  struct sock *sk, struct sk_buff *skb)
{
	__u8 reason = AC_REASON_PROTECTED;
	int allowed = 0;

	if (scoped != AC_SCOPE_POLICY) {
		reason = AC_REASON_NO_POLICY;
	} else if (BPF_CORE_READ(sk, sk_protocol) == NETLINK_ROUTE) {
		const unsigned char *data = BPF_CORE_READ(skb, data);
		__u32 len = BPF_CORE_READ(skb, len), off = 0;
		int done = 0, write = 0;
		for (int i = 0; i < AC_NETLINK_MAX_MSGS; i++) {
			struct nlmsghdr h = {};
			if (len < NLMSG_HDRLEN || off > len - NLMSG_HDRLEN ||
			    bpf_probe_read_kernel(&h, sizeof(h), data + off)) {
				done = 1;
				break;
			}
			/* where the kernel stops processing the buffer */
			if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > len - off) {
				done = 1;
				break;
			}
			if (h.nlmsg_type >= NLMSG_MIN_TYPE && (h.nlmsg_type & 3) != 2) {
				write = 1;
				break;
			}
			off += (h.nlmsg_len + 3) & ~3u;
		}
		if (done && !write) {
			allowed = 1;
			reason = AC_REASON_RULE_ALLOW;
		}
	}
	int ret;
	struct ac_event_decision *e = ac_finish(c, allowed, reason, &ret);
	if (e) {
		e->family = AF_NETLINK;
		e->protocol = BPF_CORE_READ(sk, sk_protocol);
		ac_event_submit(e);
	}
	return ret;
}

#endif /* AGENTCAGE_INGRESS_BPF_H */
