/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Egress by domain name: a scope with AC_SCOPE_F_DNS has its DNS answered by
 * a resolver of its own (userspace/dns/), which pins the addresses of the
 * names its policy allows (ac_pins) before it releases an answer.
 *
 *   - The LSM's connect/sendmsg decision lets a scope's own TCP or UDP
 *     socket reach port 53 of any address (ac_dns_query), because the
 *     socket-address programs below, attached to the scope's cgroup by
 *     Enforcer::add_scope, then send it to 127.0.0.1:dns_port (or
 *     [::1]:dns_port) instead: the LSM hook runs first and sees the address
 *     the program asked for; the cgroup hook rewrites it. A socket made
 *     outside the scope runs no program of the scope's cgroup, so the LSM
 *     lets only the scope's own sockets through.
 *   - Answers to a redirected UDP socket show the server it asked again
 *     (recvmsg4/6, getpeername4/6; ac_dns_origin), as resolvers such as
 *     glibc's drop an answer from an address they did not ask.
 *   - A connect or send the scope's rules deny is allowed to an address its
 *     resolver pinned, with the pin's port and protocol, until it expires
 *     (ac_pinned).
 */
#ifndef AGENTCAGE_DNS_BPF_H
#define AGENTCAGE_DNS_BPF_H

#include "maps.bpf.h"
#include "scope.bpf.h"
#include <bpf/bpf_endian.h>

#define AC_DNS_PORT 53

/* Is addr[16] (IPv4 as ::ffff:a.b.c.d) pinned for scope c with this port
 * and protocol, and not expired? */
static __always_inline int ac_pinned(const struct ac_ctx *c, const __u8 *addr, __u16 port,
				     __u8 proto_bit)
{
	if (!(c->scope_flags & AC_SCOPE_F_DNS) ||
	    (proto_bit != AC_PROTO_TCP && proto_bit != AC_PROTO_UDP))
		return 0;
	struct ac_pin_key k = { .scope_id = c->scope_id, .port = port, .proto_bit = proto_bit };
	__builtin_memcpy(k.addr, addr, 16);
	struct ac_pin *p = bpf_map_lookup_elem(&ac_pins, &k);
	if (!p) {
		k.port = 0;
		p = bpf_map_lookup_elem(&ac_pins, &k);
	}
	return p && p->expires_ns > bpf_ktime_get_boot_ns();
}

/* Is addr[16] an IPv4 address (::ffff:a.b.c.d)? */
static __always_inline int ac_is_v4_mapped(const __u8 *a)
{
	for (int i = 0; i < 10; i++)
		if (a[i])
			return 0;
	return a[10] == 0xff && a[11] == 0xff;
}

/* selftalk.bpf.h: was socket sk created in that scope? */
__noinline int ac_sock_in_scope_cgroup(__u64 sk, __u64 scope_cgroup, __u32 level);

/*
 * A DNS query from scope c's own socket `sk` to addr[16]:port that the
 * cgroup's programs send to the scope's resolver. Returns 1 and turns
 * addr/port into the resolver's address (where the answers come from: what
 * a UDP client may hear from), 0 when this is not one.
 */
static __always_inline int ac_dns_query(const struct ac_ctx *c, struct sock *sk, __u16 protocol,
					__u8 *addr, __u16 *port)
{
	if (*port != AC_DNS_PORT || !(c->scope_flags & AC_SCOPE_F_DNS) ||
	    (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) ||
	    !ac_sock_in_scope_cgroup((__u64)sk, c->scope_cgroup, c->scope_level))
		return 0;
	int v4 = ac_is_v4_mapped(addr);
	if (!v4 && !(c->scope_flags & AC_SCOPE_F_DNS6))
		return 0; /* refused: no resolver on ::1 */
	__builtin_memset(addr, 0, 16);
	if (v4) {
		addr[10] = addr[11] = 0xff;
		addr[12] = 127;
		addr[15] = 1;
	} else {
		addr[15] = 1;
	}
	*port = c->dns_port;
	return 1;
}

/* ---- the socket-address programs, attached to a DNS scope's cgroup -------- */

/* Scope of the current task, when it has a resolver. */
static __always_inline int ac_dns_scope(struct ac_ctx *c)
{
	return ac_current_scope(c, AC_HOOK_SOCKET_CONNECT) == AC_SCOPE_POLICY &&
	       (c->scope_flags & AC_SCOPE_F_DNS);
}

static __always_inline void ac_dns_remember(struct bpf_sock_addr *ctx, const __u8 *addr)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct ac_dns_origin o = { .port = AC_DNS_PORT };
	__builtin_memcpy(o.addr, addr, 16);
	bpf_map_update_elem(&ac_dns_origin, &cookie, &o, BPF_ANY);
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
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct ac_dns_origin *o = bpf_map_lookup_elem(&ac_dns_origin, &cookie);
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
