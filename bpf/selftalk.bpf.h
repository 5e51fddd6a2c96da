/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A run talks to itself; nobody else talks in. Decided by which scope owns
 * the socket reached, never by the port.
 *
 * Ownership is recorded on the socket itself (sk local storage, freed with
 * it) when a scoped task binds a unix path or listens on / binds an inet
 * address, and for inet sockets also in ac_listeners, keyed by what a
 * connecting socket knows (net namespace, protocol, port, address), because
 * an LSM program at connect time sees the destination address only, never
 * the socket that will receive the connection. An ac_listeners entry names
 * its socket by pointer and cookie (unique for the host's lifetime), and is
 * believed only while that socket still is what it was registered as (the
 * same cookie, bound to the same port, and listening for TCP), so a stale
 * entry never speaks for a socket that replaced it. An entry is never
 * overwritten while its socket is alive: the kernel would refuse the second
 * listener anyway, but only after this hook, and the first listener must
 * stay registered.
 *
 *   inet, scope S connecting/sending to (addr, port): a socket of S there
 *           (or on the wildcard address of that port): allowed, whatever
 *           network.allow says; a private socket of another scope: denied
 *           (hook ingress); otherwise network.allow decides.
 *   inet, a task outside every scope connecting/sending to a loopback
 *           address where a scope's private socket is: denied (hook
 *           ingress, counted in the owner's policy).
 *   udp     a scope's UDP client (a socket it sends from without having
 *           bound it) receives only from the peers it sent to.
 *   unix    a peer socket bound by the same scope is allowed (a test server
 *           on a socket in the workspace), whatever network.allow says.
 *
 * Private: a TCP listener on a loopback address that no network.listen rule
 * opens, a UDP socket explicitly bound to one. Public (network.listen
 * allows it): the host and other scopes reach it as their own rules allow.
 */
#ifndef AGENTCAGE_SELFTALK_BPF_H
#define AGENTCAGE_SELFTALK_BPF_H

#include "net.bpf.h"

#define TCP_LISTEN_STATE 10
#define SOL_SOCKET 1
#define SO_REUSEADDR 2
#define SO_REUSEPORT 15

/* Is a[16] (IPv4 as ::ffff:a.b.c.d) a loopback address? */
static __always_inline int ac_is_loopback(const __u8 *a)
{
	__u8 zeros = 0;
	for (int i = 0; i < 10; i++)
		zeros |= a[i];
	if (zeros)
		return 0;
	if (a[10] == 0xff && a[11] == 0xff)
		return a[12] == 127;				       /* 127.0.0.0/8 */
	return !(a[10] | a[11] | a[12] | a[13] | a[14]) && a[15] == 1; /* ::1 */
}

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ac_sock_owner);
} ac_sock_owners SEC(".maps");

/* Make sk scope c's socket. 0 when its storage cannot be had: the caller
 * denies (a socket nobody knows is the run's is reachable by anyone). */
static __always_inline int ac_sock_own(const struct ac_ctx *c, struct sock *sk, __u32 flags)
{
	if (!sk) /* 6.12 types socket->sk as maybe NULL */
		return 0;
	struct ac_sock_owner *o =
		bpf_sk_storage_get(&ac_sock_owners, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o)
		return 0;
	o->scope_id = c->scope_id;
	o->scope_cgroup = c->scope_cgroup;
	o->flags = flags;
	return 1;
}

/* Entries of scopes that ended are deleted by userspace with the scope; a
 * full map refuses the registration, and with it the listen (fail closed). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AC_MAX_SCOPES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ac_listener_key);
	__type(value, struct ac_listener);
} ac_listeners SEC(".maps");

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

/*
 * Ports a private socket was ever registered on, one byte each, never
 * cleared: a host task's send to another loopback port skips the
 * ac_listeners lookup (what every process on the host pays in
 * ac_ingress_from_host). Marked before the registration, so a lookup is
 * never skipped for a private socket.
 */
struct ac_port_marks {
	__u8 used[65536];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ac_port_marks);
} ac_private_ports SEC(".maps");

/* The mark of `port` (NULL only if the map cannot be read). */
static __always_inline __u8 *ac_port_mark(__u16 port)
{
	__u32 zero = 0;
	struct ac_port_marks *m = bpf_map_lookup_elem(&ac_private_ports, &zero);
	if (!m)
		return NULL;
	__u64 idx = port;
	/* The verifier loses a u16's bound on the way here: restate it. */
	asm volatile("%0 &= 0xffff" : "+r"(idx));
	return &m->used[idx];
}

/* Is the socket an entry names still the one registered? Read through the
 * pointer without trusting it: TCP and UDP sockets are freed type-safe
 * (SLAB_TYPESAFE_BY_RCU), and a reused one has another cookie. */
static __noinline int ac_listener_live(const struct ac_listener *l, __u16 port, __u16 proto)
{
	struct sock *sk = (struct sock *)l->sk;
	if (BPF_CORE_READ(sk, __sk_common.skc_cookie.counter) != (__s64)l->cookie)
		return 0;
	if (BPF_CORE_READ(sk, __sk_common.skc_num) != port)
		return 0;
	return proto != IPPROTO_TCP || BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_LISTEN_STATE;
}

static __always_inline __u32 ac_sock_netns(struct sock *sk)
{
	return BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
}

/* The owner of the live socket registered at (netns, proto, port, addr), or
 * NULL. */
static __noinline struct ac_listener *ac_listener_at(struct ac_listener_key *k)
{
	struct ac_listener *l = bpf_map_lookup_elem(&ac_listeners, k);
	if (l && ac_listener_live(l, k->port, k->proto))
		return l;
	return NULL;
}

/* ac_listener_register's port and protocol in one argument (BPF calls take
 * five). */
#define AC_PORT_PROTO(port, proto) ((__u32)(port) | ((__u32)(proto) << 16))

/*
 * Register `sk`, bound at addr[16] and port_proto's port, as scope
 * c's. 0 when it cannot be (another live socket holds the key, or the map
 * is full): the caller denies.
 */
static __noinline int ac_listener_register(const struct ac_ctx *c, struct sock *sk,
					   const __u8 *addr, __u32 port_proto, __u32 flags)
{
	if (!sk) /* 6.12 types socket->sk as maybe NULL */
		return 0;
	__u16 port = port_proto & 0xffff, proto = port_proto >> 16;
	struct ac_listener_key k = {.netns = ac_sock_netns(sk), .port = port, .proto = proto};
	__builtin_memcpy(k.addr, addr, 16);
	struct ac_listener *old = bpf_map_lookup_elem(&ac_listeners, &k);
	if (old && old->sk != (__u64)sk && ac_listener_live(old, port, proto))
		return 0;
	if (flags & AC_SOCK_F_PRIVATE) {
		__u8 *mark = ac_port_mark(port);
		if (!mark)
			return 0;
		*mark = 1;
	}
	struct ac_listener l = {.scope_id = c->scope_id,
				.scope_cgroup = c->scope_cgroup,
				.sk = (__u64)sk,
				.cookie = bpf_get_socket_cookie(sk),
				.flags = flags};
	if (bpf_map_update_elem(&ac_listeners, &k, &l, BPF_ANY))
		return 0;
	ac_sock_own(c, sk, flags);
	return 1;
}

/* The local address sk is bound to, into addr[16] (IPv4 as ::ffff:a.b.c.d). */
static __always_inline void ac_sock_local_addr(struct sock *sk, __u16 family, __u8 *addr)
{
	if (family == AF_INET) {
		__builtin_memset(addr, 0, 10);
		addr[10] = 0xff;
		addr[11] = 0xff;
		__be32 a4 = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__builtin_memcpy(&addr[12], &a4, 4);
	} else {
		/* Into a typed copy: BPF_CORE_READ_INTO reads sizeof(*dst),
		 * which through a __u8 pointer is one byte. */
		struct in6_addr a6 = {};
		BPF_CORE_READ_INTO(&a6, sk, __sk_common.skc_v6_rcv_saddr);
		__builtin_memcpy(addr, &a6, 16);
	}
}

/*
 * A private UDP socket of scope c bound to port 0 (AC_SOCK_F_PENDING): once
 * the kernel has picked its port, register it. Called where the scope can
 * first make use of the port (getsockname to learn it, connect or sendto
 * to show it to a peer). 1 when there was nothing to do or it is done; 0
 * when it cannot be registered (the caller denies).
 */
static __noinline int ac_udp_settle(const struct ac_ctx *c, struct sock *sk)
{
	if (!sk) /* 6.12 types socket->sk as maybe NULL */
		return 1;
	struct ac_sock_owner *o = bpf_sk_storage_get(&ac_sock_owners, sk, 0, 0);
	if (!o || !(o->flags & AC_SOCK_F_PENDING) || o->scope_id != c->scope_id)
		return 1;
	__u16 port = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (!port)
		return 1; /* the bind failed: nothing to reach */
	__u8 addr[16] = {};
	ac_sock_local_addr(sk, BPF_CORE_READ(sk, __sk_common.skc_family), addr);
	return ac_listener_register(c, sk, addr, AC_PORT_PROTO(port, IPPROTO_UDP),
				    AC_SOCK_F_PRIVATE);
}

/*
 * Who a scope's UDP client hears from: a socket the scope sends from without
 * having bound it (the kernel binds it to the wildcard address and a port of
 * its choosing, reachable from anywhere) receives datagrams only from the
 * last AC_UDP_PEERS addresses and ports it sent to or connected to (as a
 * stateful firewall keeps UDP replies), so a "no network" run cannot be
 * sent commands by whoever sprays the host's ports. Kept on the socket
 * itself; a socket whose note cannot be stored may not send (fail closed).
 * A socket registered where it is bound (ac_udp_registered) is not a
 * client: a private one is guarded at every sender, a public one is open by
 * network.listen.
 */
#define AC_UDP_PEERS 8

struct ac_udp_peer {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

struct ac_udp_client {
	__u64 scope_cgroup; /* the scope's cgroup: where the denial is counted */
	__u64 sk;	    /* the socket itself and its net namespace: what */
	__u32 netns;	    /* ac_udp_registered needs where no struct sock is */
	__u32 next;	    /* the ring's next place */
	struct ac_udp_peer peers[AC_UDP_PEERS];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ac_udp_client);
} ac_udp_clients SEC(".maps");

static __always_inline int ac_udp_same_peer(const struct ac_udp_peer *p, const __u8 *addr,
					    __u16 port)
{
	__u64 a[2], b[2];
	__builtin_memcpy(a, p->addr, 16);
	__builtin_memcpy(b, addr, 16);
	return p->port == port && a[0] == b[0] && a[1] == b[1];
}

/* Is UDP socket sk (at key k: where it is bound) the live socket
 * registered there (a private or public one)? Its ownership storage alone
 * does not say: a bind the kernel refused after the hook (the socket already
 * bound, the port taken or privileged) leaves it behind. */
static __noinline int ac_udp_registered_at(struct ac_listener_key *k, __u64 sk)
{
	if (!k->port)
		return 0;
	struct ac_listener *l = ac_listener_at(k);
	return l && l->sk == sk;
}

static __always_inline int ac_udp_registered(struct sock *sk)
{
	struct ac_listener_key k = {.netns = ac_sock_netns(sk),
				    .port = BPF_CORE_READ(sk, __sk_common.skc_num),
				    .proto = IPPROTO_UDP};
	ac_sock_local_addr(sk, BPF_CORE_READ(sk, __sk_common.skc_family), k.addr);
	return ac_udp_registered_at(&k, (__u64)sk);
}

/*
 * Was socket sk (its address, as a number) created in the scope whose
 * cgroup is scope_cgroup, at level? A global function: verified once on its
 * own (for any sk), not again on each of the send hooks' paths to it.
 */
__noinline int ac_sock_in_scope_cgroup(__u64 sk, __u64 scope_cgroup, __u32 level)
{
	struct cgroup *cg = NULL;
	if (bpf_probe_read_kernel(&cg, sizeof(cg),
				  (void *)(sk + bpf_core_field_offset(struct sock, sk_cgrp_data.cgroup))))
		return 0;
	return ac_cgroup_at_level_is(cg, level, scope_cgroup);
}

/* Scope c sent from (or connected) UDP socket sk to addr[16]:port, and was
 * allowed: remember the peer. 0 when done (or not a client); otherwise the
 * reason the caller denies with: AC_REASON_INTERNAL when the peer cannot
 * be remembered, AC_REASON_PROTECTED for a socket whose arrivals the
 * scope's filter does not see. */
static __noinline int ac_udp_client_note(const struct ac_ctx *c, struct sock *sk, const __u8 *addr,
					 __u16 port)
{
	if (!sk)
		return 0;
	if (ac_udp_registered(sk))
		return 0; /* not a client */
	struct ac_udp_client *u =
		bpf_sk_storage_get(&ac_udp_clients, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!u)
		return AC_REASON_INTERNAL;
	__u64 scope_cgroup = c->scope_cgroup;
	if (u->scope_cgroup != scope_cgroup) {
		/* Peers heard in another scope are not this one's. */
		u->next = 0;
		__builtin_memset(u->peers, 0, sizeof(u->peers));
		/* The first note in this scope. The filter of what arrives is
		 * attached to the scope's cgroup and sees the sockets created
		 * in it (sk_cgrp_data): a socket from elsewhere (made before
		 * `attach`, or before its process was moved in) would hear
		 * from anyone, so it may not send. The level from the map,
		 * not from c: ac_current_scope's loop leaves a constant there
		 * per level, and reading it here kept the verifier from
		 * merging those paths. */
		struct ac_scope *s = bpf_map_lookup_elem(&ac_scopes, &scope_cgroup);
		if (!s)
			return AC_REASON_INTERNAL;
		/* Read back (volatile: from memory) as a number, for the call:
		 * a global function takes no socket pointer. */
		u->sk = (__u64)sk;
		if (!ac_sock_in_scope_cgroup(*(volatile __u64 *)&u->sk, scope_cgroup, s->level))
			return AC_REASON_PROTECTED;
		u->netns = ac_sock_netns(sk);
		u->scope_cgroup = scope_cgroup;
	}
	for (int i = 0; i < AC_UDP_PEERS; i++) {
		if (ac_udp_same_peer(&u->peers[i], addr, port))
			return 0;
	}
	struct ac_udp_peer *p = &u->peers[u->next & (AC_UDP_PEERS - 1)];
	__builtin_memcpy(p->addr, addr, 16);
	p->port = port;
	u->next++;
	return 0;
}

/*
 * A UDP socket a scoped task creates is a client from the start, with no
 * peer: nothing gets in before its first send or connect names one
 * (ac_udp_client_note). The kernel can bind it without either (a send with
 * no address, or with one of another family, binds it and then fails),
 * and it would hear from anyone. 0 when this cannot be stored: the caller
 * denies.
 */
static __noinline int ac_udp_client_start(const struct ac_ctx *c, struct sock *sk)
{
	if (!sk) /* 6.12 types socket->sk as maybe NULL */
		return 1;
	struct ac_udp_client *u =
		bpf_sk_storage_get(&ac_udp_clients, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!u)
		return 0;
	u->scope_cgroup = c->scope_cgroup;
	u->sk = (__u64)sk;
	u->netns = ac_sock_netns(sk);
	u->next = 0;
	return 1;
}

/* The source of a datagram, into addr[16] (IPv4 as ::ffff:a.b.c.d) and
 * *port, read from the packet (which starts at its IP header here). An
 * IPv6 datagram's UDP header follows at most AC_IPV6_EXT_MAX extension
 * headers. 0 when it cannot be read. */
#define AC_IPV6_EXT_MAX 4
#define AC_NEXTHDR_HOP 0
#define AC_NEXTHDR_ROUTING 43
#define AC_NEXTHDR_FRAGMENT 44
#define AC_NEXTHDR_AUTH 51
#define AC_NEXTHDR_DEST 60

static __always_inline int ac_skb_source(struct __sk_buff *skb, __u8 *addr, __u16 *port)
{
	__u32 off;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 vihl = 0;
		__builtin_memset(addr, 0, 10);
		addr[10] = 0xff;
		addr[11] = 0xff;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1) ||
		    bpf_skb_load_bytes(skb, 12, &addr[12], 4)) /* iphdr.saddr */
			return 0;
		off = (vihl & 0xf) * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 next = 0;
		if (bpf_skb_load_bytes(skb, 6, &next, 1) ||
		    bpf_skb_load_bytes(skb, 8, addr, 16)) /* ipv6hdr.nexthdr, saddr */
			return 0;
		/* No IPv6 packet comes from :: or from a v4-mapped address
		 * (::ffff:a.b.c.d names an IPv4 peer, whose packets arrive as
		 * IPv4): such a source is forged to pass for a peer. */
		__u8 prefix = 0;
		for (int i = 0; i < 10; i++)
			prefix |= addr[i];
		if (!prefix && ((addr[10] == 0xff && addr[11] == 0xff) ||
				!(addr[10] | addr[11] | addr[12] | addr[13] | addr[14] | addr[15])))
			return 0;
		off = 40;
		for (int i = 0; i < AC_IPV6_EXT_MAX && next != IPPROTO_UDP; i++) {
			__u8 ext[2] = {};
			if (bpf_skb_load_bytes(skb, off, ext, 2))
				return 0;
			if (next == AC_NEXTHDR_HOP || next == AC_NEXTHDR_ROUTING ||
			    next == AC_NEXTHDR_DEST)
				off += (ext[1] + 1) * 8;
			else if (next == AC_NEXTHDR_FRAGMENT)
				off += 8;
			else if (next == AC_NEXTHDR_AUTH)
				off += (ext[1] + 2) * 4;
			else
				return 0;
			next = ext[0];
		}
		if (next != IPPROTO_UDP)
			return 0;
	} else {
		return 0;
	}
	__be16 sport = 0;
	if (bpf_skb_load_bytes(skb, off, &sport, 2)) /* udphdr.source */
		return 0;
	*port = bpf_ntohs(sport);
	return 1;
}

/*
 * A datagram reaches a scope's UDP client from somewhere it never sent to:
 * dropped, counted and reported in the scope's policy (hook ingress). In
 * softirq, so the record names no process. The scope gone (detached): no
 * rules, let it in.
 */
static __noinline int ac_udp_client_refuse(const struct ac_udp_client *u, __u16 family,
					   const __u8 *addr, __u16 port)
{
	struct ac_ctx c = {};
	if (ac_scope_at(&c, u->scope_cgroup, AC_HOOK_INGRESS) == AC_SCOPE_NONE)
		return 0;
	int ret;
	struct ac_event_decision *e = ac_finish_no_task(&c, 0, AC_REASON_PROTECTED, &ret);
	if (e) {
		ac_event_inet(e, family, port, IPPROTO_UDP, addr);
		ac_event_submit(e);
	}
	return ret;
}

/*
 * A datagram arrives on a UDP socket sk of a scope's cgroup (softirq; no
 * task to speak of): a client of the scope takes it only from a peer it
 * sent to (ac_udp_client_refuse). Anything else: no decision here (a
 * registered socket is guarded at every sender). 0 or -EACCES.
 */
static __always_inline int ac_udp_receive(struct bpf_sock *sk, struct __sk_buff *skb)
{
	struct ac_udp_client *u = bpf_sk_storage_get(&ac_udp_clients, sk, 0, 0);
	if (!u)
		return 0;
	struct ac_listener_key k = {.netns = u->netns, .port = sk->src_port, .proto = IPPROTO_UDP};
	if (sk->family == AF_INET) {
		k.addr[10] = 0xff;
		k.addr[11] = 0xff;
		__u32 a4 = sk->src_ip4;
		__builtin_memcpy(&k.addr[12], &a4, 4);
	} else {
		__u32 a6[4] = {sk->src_ip6[0], sk->src_ip6[1], sk->src_ip6[2], sk->src_ip6[3]};
		__builtin_memcpy(k.addr, a6, 16);
	}
	if (ac_udp_registered_at(&k, u->sk))
		return 0;
	__builtin_memset(k.addr, 0, 16);
	k.port = 0;
	if (!ac_skb_source(skb, k.addr, &k.port))
		return ac_udp_client_refuse(u, AF_INET6, k.addr, 0);
	/* Only places a peer was written to: an empty one is no peer. */
	for (__u32 i = 0; i < AC_UDP_PEERS && i < u->next; i++) {
		if (ac_udp_same_peer(&u->peers[i], k.addr, k.port))
			return 0;
	}
	/* The scope's own resolver answering a query the cgroup's programs
	 * sent it (dns.bpf.h), whatever server the query was written to. */
	__u64 hi, lo;
	ac_addr_words(k.addr, &hi, &lo);
	if (ac_dns_reply_from(u->scope_cgroup, hi, lo, k.port))
		return 0;
	__u16 family = k.addr[10] == 0xff && k.addr[11] == 0xff && !k.addr[0] ? AF_INET : AF_INET6;
	return ac_udp_client_refuse(u, family, k.addr, k.port);
}

/*
 * A destination of 0.0.0.0 or :: reaches this host, where the kernel routes
 * it: 0.0.0.0 to the source address (the one the sending socket is bound
 * to, else 127.0.0.1); :: to ::1, or to 127.0.0.1 from a socket bound to a
 * v4-mapped address (tcp_v6_connect, ip6_datagram_connect). Rewrite addr[16]
 * to that, so a private socket is found there whatever the sender wrote. (A
 * source chosen per message with IP_PKTINFO is not seen: README.)
 */
static __always_inline void ac_unspecified_to_local(__u8 *addr, struct sock *sk)
{
	__u8 any = 0;
	for (int i = 0; i < 16; i++)
		any |= (i == 10 || i == 11) ? 0 : addr[i];
	int mapped = addr[10] == 0xff && addr[11] == 0xff;
	if (any || (!mapped && (addr[10] | addr[11])))
		return;
	if (mapped) {
		if (sk)
			ac_sock_local_addr(sk, AF_INET, addr);
	} else {
		__u8 local[16] = {};
		if (sk)
			ac_sock_local_addr(sk, AF_INET6, local);
		__u8 prefix = 0;
		for (int i = 0; i < 10; i++)
			prefix |= local[i];
		mapped = !prefix && local[10] == 0xff && local[11] == 0xff;
		__builtin_memset(addr, 0, 16);
		if (!mapped)
			addr[15] = 1;
	}
	if (mapped) {
		addr[10] = 0xff;
		addr[11] = 0xff;
		if (!(addr[12] | addr[13] | addr[14] | addr[15])) {
			addr[12] = 127;
			addr[15] = 1;
		}
	}
}

/* Whose socket does an inet destination reach? */
enum ac_peer {
	AC_PEER_UNKNOWN = 0, /* no scope's: the rules decide */
	AC_PEER_SELF = 1,    /* the deciding scope's own */
	AC_PEER_PRIVATE = 2, /* another scope's private socket */
};

/* For scope c sending to addr[16]:port over `sock`: its own socket
 * at that address or on the port's wildcard, or another's private one. */
static __noinline int ac_peer_of(const struct ac_ctx *c, struct socket *sock, const __u8 *addr,
				 __u16 port, __u16 protocol)
{
	struct ac_listener_key k = {
		.netns = ac_sock_netns(BPF_CORE_READ(sock, sk)), .port = port, .proto = protocol};
	__builtin_memcpy(k.addr, addr, 16);
	struct ac_listener *l = ac_listener_at(&k);
	if (l)
		return l->scope_id == c->scope_id	? AC_PEER_SELF
		       : (l->flags & AC_SOCK_F_PRIVATE) ? AC_PEER_PRIVATE
							: AC_PEER_UNKNOWN;
	/* A listener of the scope's own on 0.0.0.0 or :: (network.listen)
	 * also answers on loopback; only the scope itself skips its rules. */
	__builtin_memset(k.addr, 0, 16);
	l = ac_listener_at(&k);
	if (l && l->scope_id == c->scope_id)
		return AC_PEER_SELF;
	k.addr[10] = 0xff;
	k.addr[11] = 0xff;
	l = ac_listener_at(&k);
	if (l && l->scope_id == c->scope_id)
		return AC_PEER_SELF;
	return AC_PEER_UNKNOWN;
}

/*
 * A task outside every scope connects or sends to `address`: denied when a
 * scope's private socket is there (private sockets are on loopback
 * addresses only). Counted and reported in the owning scope's policy, with
 * the sender's pid and comm in the record.
 */
static __noinline int ac_ingress_from_host(struct socket *sock, struct sockaddr *address,
					   int addrlen)
{
	/* Every connect and addressed send of every process on the host
	 * comes here: one probe read for the address, then the port's mark,
	 * which ends it for every port no private socket ever used, before
	 * anything else is looked at. On the stack: a host task never gets a
	 * scratch (task storage). */
	struct sockaddr_in6 sa = {};
	if (!ac_read_sockaddr(&sa, address, addrlen))
		return 0;
	__u16 port = bpf_ntohs(sa.sin6_port); /* where sin_port is too */
	__u8 *mark = ac_port_mark(port);
	if (mark && !*mark)
		return 0;
	struct sock *sk = sock->sk;
	if (!sk)
		return 0;
	__u16 family = sa.sin6_family, protocol = sk->sk_protocol;
	/* udp_sendmsg takes AF_UNSPEC for AF_INET; an MPTCP connection falls
	 * back to TCP at a TCP listener, its subflows past every hook. */
	if (family == AF_UNSPEC && protocol == IPPROTO_UDP && sk->__sk_common.skc_family == AF_INET)
		family = AF_INET;
	if (protocol == IPPROTO_MPTCP)
		protocol = IPPROTO_TCP;
	if ((family != AF_INET && family != AF_INET6) ||
	    (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP))
		return 0;
	__u8 addr[16] = {};
	if (!ac_inet_from(addr, family, &sa, addrlen, &port))
		return 0;
	ac_unspecified_to_local(addr, sk);
	if (!ac_is_loopback(addr))
		return 0;
	struct ac_listener_key k = {.netns = ac_sock_netns(sk), .port = port, .proto = protocol};
	__builtin_memcpy(k.addr, addr, 16);
	struct ac_listener *l = ac_listener_at(&k);
	if (!l || !(l->flags & AC_SOCK_F_PRIVATE))
		return 0;

	/* Decide in the owner's scope: its policy's counters, audit mode. */
	struct ac_ctx c = {};
	if (ac_scope_at(&c, l->scope_cgroup, AC_HOOK_INGRESS) == AC_SCOPE_NONE)
		return 0; /* the scope is gone, and its processes with it */
	c.cgroup_id = bpf_get_current_cgroup_id();
	int ret;
	struct ac_event_decision *e = ac_finish(&c, 0, AC_REASON_PROTECTED, &ret);
	if (e) {
		ac_event_inet(e, family, port, protocol, addr);
		ac_event_submit(e);
	}
	return ret;
}

/*
 * Scope c connects or sends to `address`: its own socket there is allowed
 * whatever network.allow says, another scope's private one is denied (hook
 * ingress); otherwise network.allow decides (ac_decide_inet).
 */
static __always_inline int ac_decide_connect(struct ac_ctx *c, enum ac_scope_state scoped,
					     struct socket *sock, struct sockaddr *address,
					     int addrlen, int is_connect)
{
	/* Before the scope shows a pending socket's port to anyone. */
	if (scoped == AC_SCOPE_POLICY && !ac_udp_settle(c, sock->sk))
		return ac_decide_on_hook(c, AC_HOOK_INGRESS, 0, AC_REASON_INTERNAL);
	/* On the stack: ac_decide_inet takes the scratch when the rules
	 * decide, and a task holds one scratch at a time. */
	__u8 addr[16] = {};
	__u16 port = 0, family = BPF_CORE_READ(address, sa_family);
	__u16 protocol = BPF_CORE_READ(sock, sk, sk_protocol);
	if (scoped != AC_SCOPE_POLICY || (family != AF_INET && family != AF_INET6) ||
	    (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) ||
	    !ac_load_inet(addr, family, address, addrlen, &port))
		return ac_decide_inet(c, scoped, sock, address, addrlen, is_connect);
	ac_unspecified_to_local(addr, sock->sk);
	int peer = ac_peer_of(c, sock, addr, port, protocol);
	int ret;
	if (peer == AC_PEER_UNKNOWN) {
		ret = ac_decide_inet(c, scoped, sock, address, addrlen, is_connect);
	} else {
		if (peer == AC_PEER_PRIVATE)
			c->hook = AC_HOOK_INGRESS;
		struct ac_event_decision *e = ac_finish(
			c, peer == AC_PEER_SELF,
			peer == AC_PEER_SELF ? AC_REASON_RULE_ALLOW : AC_REASON_PROTECTED, &ret);
		if (e) {
			ac_event_inet(e, family, port, protocol, addr);
			ac_event_submit(e);
		}
	}
	/* Where a client sends, it may hear from (ac_udp_receive). */
	if (!ret && protocol == IPPROTO_UDP) {
		int why = ac_udp_client_note(c, sock->sk, addr, port);
		if (why)
			return ac_decide_on_hook(c, AC_HOOK_INGRESS, 0, why);
	}
	return ret;
}

/* The live scope that bound unix socket `other` (a path, an abstract or an
 * autobound name: ac_decide_bind), or NULL: none did, or that scope ended
 * (the socket outlived it in another process's hands). */
static __always_inline struct ac_sock_owner *ac_unix_owner(struct sock *other)
{
	if (!other)
		return NULL;
	struct ac_sock_owner *o = bpf_sk_storage_get(&ac_sock_owners, other, 0, 0);
	if (!o)
		return NULL;
	struct ac_scope *s = bpf_map_lookup_elem(&ac_scopes, &o->scope_cgroup);
	return s && !s->arm_tgid && s->scope_id == o->scope_id ? o : NULL;
}

/* Whose is the unix socket scope c connects or sends to? */
static __always_inline int ac_unix_peer(const struct ac_ctx *c, struct sock *other)
{
	struct ac_sock_owner *o = ac_unix_owner(other);
	if (!o)
		return AC_PEER_UNKNOWN;
	if (o->scope_id == c->scope_id)
		return AC_PEER_SELF;
	return o->flags & AC_SOCK_F_PRIVATE ? AC_PEER_PRIVATE : AC_PEER_UNKNOWN;
}

/* Did the scope's unix socket (owner o) send to socket `cookie` (which may
 * then answer it)? */
static __always_inline int ac_unix_heard_from(const struct ac_sock_owner *o, __u64 cookie)
{
	for (int i = 0; i < AC_UNIX_PEERS; i++) {
		if (o->peers[i] == cookie)
			return 1;
	}
	return 0;
}

/*
 * A task outside every scope connects or sends to unix socket `other`:
 * denied when a scope's socket is private (every unix socket a scoped task
 * creates, but one bound to an abstract name network.listen opens), as for
 * its loopback sockets (ac_ingress_from_host), unless `sender` (a datagram's
 * socket; NULL for a connect) is one the run's socket sent to. Every unix
 * connect and datagram of the host pays one socket-storage lookup here.
 */
static __noinline int ac_unix_ingress_from_host(struct sock *other, struct sock *sender)
{
	struct ac_sock_owner *o = ac_unix_owner(other);
	if (!o || !(o->flags & AC_SOCK_F_PRIVATE))
		return 0;
	if (sender && ac_unix_heard_from(o, bpf_get_socket_cookie(sender)))
		return 0;
	struct ac_ctx c = {};
	if (ac_scope_at(&c, o->scope_cgroup, AC_HOOK_INGRESS) == AC_SCOPE_NONE)
		return 0;
	c.cgroup_id = bpf_get_current_cgroup_id();
	int ret;
	struct ac_event_decision *e = ac_finish(&c, 0, AC_REASON_PROTECTED, &ret);
	if (e) {
		e->family = AF_UNIX;
		ac_event_submit(e);
	}
	return ret;
}

/*
 * Scope c connects or sends to unix socket `other` from `sender` (a
 * datagram's socket; NULL for a connect): its own is allowed whatever
 * network.allow says, another scope's is denied (hook ingress); otherwise
 * the rules decide (ac_decide_unix), and a datagram socket that may send
 * there remembers `other` as one that may answer it (as a UDP client
 * does).
 */
static __always_inline int ac_decide_unix_peer(struct ac_ctx *c, enum ac_scope_state scoped,
					       struct sock *other, struct sock *sender)
{
	if (scoped == AC_SCOPE_POLICY) {
		int peer = ac_unix_peer(c, other);
		if (peer == AC_PEER_SELF)
			return ac_decide_on_hook(c, AC_HOOK_UNIX_CONNECT, 1, AC_REASON_RULE_ALLOW);
		if (peer == AC_PEER_PRIVATE)
			return ac_decide_on_hook(c, AC_HOOK_INGRESS, 0, AC_REASON_PROTECTED);
	}
	int ret = ac_decide_unix(c, scoped, other);
	if (ret || !sender || !other)
		return ret;
	struct ac_sock_owner *o = bpf_sk_storage_get(&ac_sock_owners, sender, 0, 0);
	if (!o || o->scope_id != c->scope_id)
		return 0; /* not the scope's own (created before attach): nothing to guard */
	__u64 cookie = bpf_get_socket_cookie(other);
	if (!ac_unix_heard_from(o, cookie)) {
		o->peers[o->next_peer & (AC_UNIX_PEERS - 1)] = cookie;
		o->next_peer++;
	}
	return 0;
}

/*
 * A socket passed into scope c (SCM_RIGHTS, pidfd_getfd): only one created
 * inside the scope. A socket the host or another run created (a connection
 * to anywhere, a listener) would carry its traffic past every rule of this
 * scope. The socket's cgroup is its creator's (an accepted connection
 * inherits its listener's).
 */
static __always_inline int ac_decide_received_socket(struct ac_ctx *c, enum ac_scope_state scoped,
						     struct socket *sock)
{
	struct sock *sk = BPF_CORE_READ(sock, sk);
	int own = scoped == AC_SCOPE_POLICY &&
		  ac_cgroup_in_scope(c, BPF_CORE_READ(sk, sk_cgrp_data.cgroup));
	__u8 reason = scoped != AC_SCOPE_POLICY ? AC_REASON_NO_POLICY
		      : own			? AC_REASON_RULE_ALLOW
						: AC_REASON_PROTECTED;
	int ret;
	struct ac_event_decision *e = ac_finish(c, own, reason, &ret);
	if (e) {
		e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
		e->protocol = BPF_CORE_READ(sk, sk_protocol);
		ac_event_submit(e);
	}
	return ret;
}

/*
 * setsockopt(SOL_SOCKET, SO_REUSEPORT) on a private socket, or SO_REUSEADDR
 * on a private UDP one: another socket (of the host, with the same uid)
 * could then bind the same address and answer the scope's own clients.
 * listen and bind refuse the flags on the way in; this keeps them from
 * being set afterwards. Other sockets: no decision.
 */
static __always_inline int ac_decide_reuse(struct ac_ctx *c, enum ac_scope_state scoped,
					   struct socket *sock, int optname)
{
	struct sock *sk = sock->sk;
	if (!sk)
		return 0;
	struct ac_sock_owner *o = bpf_sk_storage_get(&ac_sock_owners, sk, 0, 0);
	if (!o || !(o->flags & AC_SOCK_F_PRIVATE))
		return 0;
	if (optname == SO_REUSEADDR && BPF_CORE_READ(sock, sk, sk_protocol) != IPPROTO_UDP)
		return 0; /* TCP: SO_REUSEADDR never lets a second listener in */
	return ac_decide_plain(c, scoped, 0);
}

#endif /* AGENTCAGE_SELFTALK_BPF_H */
