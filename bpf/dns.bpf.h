/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Egress by domain name: a scope with AC_SCOPE_F_DNS has its DNS answered by
 * a resolver of its own (userspace/dns/), which pins the addresses of the
 * names its policy allows (ac_pins) before it releases an answer.
 *
 *   - The LSM's connect/sendmsg decision lets a scope's TCP or UDP
 *     socket reach port 53 of any address (ac_dns_allows), because the
 *     socket-address programs below, attached to the scope's cgroup by
 *     Enforcer::add_scope, then send it to 127.0.0.1:dns_port (or
 *     [::1]:dns_port) instead: the LSM hook runs first and sees the address
 *     the program asked for; the cgroup hook rewrites it.
 *   - The scope's UDP clients hear from its resolver (the receive filter,
 *     ac_dns_reply_from), and its answers show the server that was asked
 *     (recvmsg4/6, getpeername4/6; ac_dns_origin), as resolvers such as
 *     glibc's drop an answer from an address they did not ask.
 *   - A connect or send the scope's rules deny is allowed to an address its
 *     resolver pinned, with the pin's port and protocol, until it expires
 *     (ac_dns_allows, one global function call on the hooks' deny path).
 */
#ifndef AGENTCAGE_DNS_BPF_H
#define AGENTCAGE_DNS_BPF_H

#include "maps.bpf.h"
#include "scope.bpf.h"
#include <bpf/bpf_endian.h>

#define AC_DNS_PORT 53

/* addr[16] as two words, for the global functions below (verified once,
 * on their own, instead of on every path of the hooks that call them). */
static __always_inline void ac_addr_words(const __u8 *addr, __u64 *hi, __u64 *lo)
{
	__builtin_memcpy(hi, addr, 8);
	__builtin_memcpy(lo, addr + 8, 8);
}

/* The low word of ::ffff:a.b.c.d, network order, is 0xffff in its first
 * four bytes. */
#define AC_V4_MAPPED_TAG bpf_htonl(0xffff)

/*
 * Does the scope's resolver let a connect or send the rules deny through?
 * Either it is a DNS query (TCP or UDP to port 53 of any IPv4 address, or
 * of an IPv6 one when the resolver listens on ::1: AC_SCOPE_F_DNS6), which
 * the cgroup's programs below send to the resolver; or the address hi:lo is
 * pinned for the scope with this port (or every port, pinned as 0) and
 * protocol, and not expired. flags_proto_port: the scope's flags, the
 * protocol << 32, the port << 48. A global function: verified once on its
 * own, so the hooks that ask pay one call, not its paths; it calls no other
 * (the kernel caps the stack of a chain of calls, and the hooks' is deep).
 *
 * A socket made outside the scope runs no program of the scope's cgroup, so
 * its query would not be redirected: a run refuses to start with one as a
 * standard stream (run/dns.h), and the scope cannot receive one
 * (file_receive, ac_decide_received_socket).
 */
__noinline int ac_dns_allows(__u64 flags_proto_port, __u64 scope_id, __u64 hi, __u64 lo)
{
	__u32 flags = flags_proto_port & 0xffff;
	__u32 protocol = (flags_proto_port >> 32) & 0xffff;
	__u32 port = flags_proto_port >> 48;
	if (!(flags & AC_SCOPE_F_DNS) || (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP))
		return 0;
	if (port == AC_DNS_PORT &&
	    ((hi == 0 && (__u32)lo == AC_V4_MAPPED_TAG) || (flags & AC_SCOPE_F_DNS6)))
		return 1;
	struct ac_pin_key k = { .scope_id = scope_id,
				.port = port,
				.proto_bit = protocol == IPPROTO_TCP ? AC_PROTO_TCP : AC_PROTO_UDP };
	__builtin_memcpy(k.addr, &hi, 8);
	__builtin_memcpy(k.addr + 8, &lo, 8);
	struct ac_pin *p = bpf_map_lookup_elem(&ac_pins, &k);
	if (!p) {
		k.port = 0;
		p = bpf_map_lookup_elem(&ac_pins, &k);
	}
	return p && p->expires_ns > bpf_ktime_get_boot_ns();
}

/* ac_dns_allows for scope c's decision to addr[16]:port. */
static __always_inline int ac_dns_allowed(const struct ac_ctx *c, const __u8 *addr, __u16 port,
					  __u16 protocol)
{
	__u64 hi, lo;
	ac_addr_words(addr, &hi, &lo);
	return ac_dns_allows(c->scope_flags | ((__u64)protocol << 32) | ((__u64)port << 48), c->scope_id,
			     hi, lo);
}

/*
 * Does a datagram from addr[16]:port come from the resolver of the scope
 * whose cgroup is `scope` (127.0.0.1, ::ffff:127.0.0.1 or ::1 at its
 * port)? Its UDP clients hear from it, though they sent to the server they
 * asked (ac_udp_receive). A global function, for the receive filter.
 */
__noinline int ac_dns_reply_from(__u64 scope, __u64 hi, __u64 lo, __u32 port)
{
	struct ac_scope *s = bpf_map_lookup_elem(&ac_scopes, &scope);
	if (!s || s->arm_tgid || !(s->flags & AC_SCOPE_F_DNS) || port != s->dns_port || hi != 0)
		return 0;
	return lo == (((__u64)bpf_htonl(0x7f000001) << 32) | AC_V4_MAPPED_TAG) ||
	       lo == ((__u64)bpf_htonl(1) << 32);
}

/* Is addr[16] an IPv4 address (::ffff:a.b.c.d)? */
static __always_inline int ac_is_v4_mapped(const __u8 *a)
{
	__u64 hi, lo;
	ac_addr_words(a, &hi, &lo);
	return hi == 0 && (__u32)lo == AC_V4_MAPPED_TAG;
}

/* ---- the socket-address programs, attached to a DNS scope's cgroup -------- */

/* Scope of the current task, when it has a resolver. */
static __always_inline int ac_dns_scope(struct ac_ctx *c)
{
	return ac_current_scope(c, AC_HOOK_SOCKET_CONNECT) == AC_SCOPE_POLICY &&
	       (c->scope_flags & AC_SCOPE_F_DNS);
}

/* Without room for the origin (the socket's option memory is used up), the
 * query is still redirected: its answer then shows the resolver's address,
 * which resolvers drop, so the lookup fails and nothing is let through. */
static __always_inline void ac_dns_remember(struct bpf_sock_addr *ctx, const __u8 *addr)
{
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return;
	struct ac_dns_origin *o =
		bpf_sk_storage_get(&ac_dns_origin, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o)
		return;
	__builtin_memcpy(o->addr, addr, 16);
	o->port = AC_DNS_PORT;
}

/* connect4 and sendmsg4: port 53 of any IPv4 address → 127.0.0.1:dns_port. */
static __always_inline int ac_dns_redirect4(struct bpf_sock_addr *ctx)
{
	struct ac_ctx c = {};
	if (ctx->user_port != bpf_htons(AC_DNS_PORT) ||
	    (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP) || !ac_dns_scope(&c))
		return 1;
	__u8 addr[16] = {};
	__u32 ip = ctx->user_ip4;
	addr[10] = addr[11] = 0xff;
	__builtin_memcpy(&addr[12], &ip, 4);
	ac_dns_remember(ctx, addr);
	ctx->user_ip4 = bpf_htonl(0x7f000001);
	ctx->user_port = bpf_htons(c.dns_port);
	return 1;
}

/* connect6 and sendmsg6: an IPv4-mapped server → ::ffff:127.0.0.1, an IPv6
 * one → [::1] (refused when the resolver has no ::1). */
static __always_inline int ac_dns_redirect6(struct bpf_sock_addr *ctx)
{
	struct ac_ctx c = {};
	if (ctx->user_port != bpf_htons(AC_DNS_PORT) ||
	    (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP) || !ac_dns_scope(&c))
		return 1;
	__u32 ip[4] = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] };
	__u8 addr[16];
	__builtin_memcpy(addr, ip, 16);
	int v4 = ac_is_v4_mapped(addr);
	if (!v4 && !(c.scope_flags & AC_SCOPE_F_DNS6))
		return 0;
	ac_dns_remember(ctx, addr);
	ctx->user_ip6[0] = 0;
	ctx->user_ip6[1] = 0;
	ctx->user_ip6[2] = v4 ? bpf_htonl(0xffff) : 0;
	ctx->user_ip6[3] = v4 ? bpf_htonl(0x7f000001) : bpf_htonl(1);
	ctx->user_port = bpf_htons(c.dns_port);
	return 1;
}

/* recvmsg and getpeername: the resolver's address back into the server's. */
static __always_inline int ac_dns_origin_of(struct bpf_sock_addr *ctx, struct ac_dns_origin *out)
{
	struct ac_ctx c = {};
	if (!ac_dns_scope(&c) || ctx->user_port != bpf_htons(c.dns_port))
		return 0;
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 0;
	struct ac_dns_origin *o = bpf_sk_storage_get(&ac_dns_origin, sk, 0, 0);
	if (!o)
		return 0;
	__builtin_memcpy(out, o, sizeof(*out));
	return 1;
}

static __always_inline int ac_dns_unredirect4(struct bpf_sock_addr *ctx)
{
	struct ac_dns_origin o;
	if (ctx->user_ip4 != bpf_htonl(0x7f000001) || !ac_dns_origin_of(ctx, &o) ||
	    !ac_is_v4_mapped(o.addr))
		return 1;
	__u32 ip;
	__builtin_memcpy(&ip, &o.addr[12], 4);
	ctx->user_ip4 = ip;
	ctx->user_port = bpf_htons(o.port);
	return 1;
}

static __always_inline int ac_dns_unredirect6(struct bpf_sock_addr *ctx)
{
	struct ac_dns_origin o;
	__u32 w2 = ctx->user_ip6[2], w3 = ctx->user_ip6[3];
	int from_v4 = w2 == bpf_htonl(0xffff) && w3 == bpf_htonl(0x7f000001);
	int from_v6 = w2 == 0 && w3 == bpf_htonl(1);
	if (ctx->user_ip6[0] || ctx->user_ip6[1] || !(from_v4 || from_v6) || !ac_dns_origin_of(ctx, &o))
		return 1;
	__u32 ip[4];
	__builtin_memcpy(ip, o.addr, 16);
	ctx->user_ip6[0] = ip[0];
	ctx->user_ip6[1] = ip[1];
	ctx->user_ip6[2] = ip[2];
	ctx->user_ip6[3] = ip[3];
	ctx->user_port = bpf_htons(o.port);
	return 1;
}

SEC("cgroup/connect4")
int ac_dns_connect4(struct bpf_sock_addr *ctx)
{
	return ac_dns_redirect4(ctx);
}

SEC("cgroup/sendmsg4")
int ac_dns_sendmsg4(struct bpf_sock_addr *ctx)
{
	return ac_dns_redirect4(ctx);
}

SEC("cgroup/recvmsg4")
int ac_dns_recvmsg4(struct bpf_sock_addr *ctx)
{
	return ac_dns_unredirect4(ctx);
}

SEC("cgroup/getpeername4")
int ac_dns_getpeername4(struct bpf_sock_addr *ctx)
{
	return ac_dns_unredirect4(ctx);
}

SEC("cgroup/connect6")
int ac_dns_connect6(struct bpf_sock_addr *ctx)
{
	return ac_dns_redirect6(ctx);
}

SEC("cgroup/sendmsg6")
int ac_dns_sendmsg6(struct bpf_sock_addr *ctx)
{
	return ac_dns_redirect6(ctx);
}

SEC("cgroup/recvmsg6")
int ac_dns_recvmsg6(struct bpf_sock_addr *ctx)
{
	return ac_dns_unredirect6(ctx);
}

SEC("cgroup/getpeername6")
int ac_dns_getpeername6(struct bpf_sock_addr *ctx)
{
	return ac_dns_unredirect6(ctx);
}

#endif /* AGENTCAGE_DNS_BPF_H */
