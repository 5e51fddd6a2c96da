// SPDX-License-Identifier: GPL-2.0
/*
 * agentcage LSM programs.
 *
 * Every hook starts the same way: if an earlier LSM already denied, pass
 * that on; if the current task is in no scope, allow (the fast path every
 * other process on the host takes). For a scoped task, decide from the
 * maps, count the decision, and report denials and audit-mode would-be
 * denials through the ring buffer. Internal failures inside a scope deny.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "maps.bpf.h"
#include "scope.bpf.h"
#include "path.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* fmode_t bits (include/linux/fs.h); macros are not in BTF. */
#define FMODE_READ 0x1
#define FMODE_WRITE 0x2

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10

/* Copy the resolved path text into an event. */
static __always_inline void ac_event_path(struct ac_event_decision *e, struct ac_scratch *s,
					  __u32 text_len)
{
	if (!s)
		return;
	e->target_kind = AC_TARGET_PATH;
	e->target_len = text_len > AC_PATH_KEY_MAX ? AC_PATH_KEY_MAX : text_len;
	bpf_probe_read_kernel(e->target, AC_PATH_KEY_MAX, s->key.path);
	e->target[e->target_len & (AC_EVENT_TARGET_MAX - 1)] = 0;
}

/*
 * Decide a path-based request (file open, exec target).
 * need: AC_ACCESS_* bits the request needs.
 */
static __always_inline int ac_decide_path(struct ac_ctx *c, int scoped, const struct path *path,
					  __u32 need)
{
	__u32 zero = 0, text_len = 0;
	__u8 decision, reason;
	int allowed = 0, status = AC_WALK_INTERNAL;
	struct ac_scratch *s = bpf_map_lookup_elem(&ac_scratch_buf, &zero);

	if (scoped != 1) {
		reason = AC_REASON_NO_POLICY;
	} else if (!s) {
		reason = AC_REASON_INTERNAL;
	} else if ((status = ac_resolve_path(path, s, &text_len)) != AC_WALK_DONE) {
		reason = ac_walk_reason(status);
	} else {
		__u32 access = ac_path_access(s, c->rules_id);
		if (access & AC_ACCESS_DENY) {
			reason = AC_REASON_RULE_DENY;
		} else if (access && (access & need) == need) {
			allowed = 1;
			reason = AC_REASON_RULE_ALLOW;
		} else {
			reason = AC_REASON_DEFAULT_DENY;
		}
	}

	int ret = ac_verdict(c, allowed, reason, &decision);
	if (decision != AC_DECISION_ALLOW) {
		struct ac_event_decision *e = ac_event_begin(c, decision, reason, ret);
		if (e) {
			if (status == AC_WALK_DONE)
				ac_event_path(e, s, text_len);
			ac_event_submit(e);
		}
	}
	return ret;
}

SEC("lsm/file_open")
int BPF_PROG(ac_file_open, struct file *file, int ret)
{
	struct ac_ctx c = {};
	int scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_FILE_OPEN);
	if (!scoped)
		return 0;

	__u32 fmode = BPF_CORE_READ(file, f_mode);
	__u32 need = 0;
	if (fmode & FMODE_READ)
		need |= AC_ACCESS_READ;
	if (fmode & FMODE_WRITE)
		need |= AC_ACCESS_WRITE;
	if (!need) /* e.g. open(O_WRONLY|O_RDWR) for ioctl: still a read of the name */
		need = AC_ACCESS_READ;
	return ac_decide_path(&c, scoped, &file->f_path, need);
}

/*
 * Program execution. Called for the file being executed and again for each
 * interpreter a binfmt handler substitutes (#! scripts, binfmt_misc), so an
 * allowed script cannot smuggle in a denied interpreter. The foundation
 * posture allows no program at all in a scope.
 */
SEC("lsm/bprm_check_security")
int BPF_PROG(ac_bprm_check, struct linux_binprm *bprm, int ret)
{
	struct ac_ctx c = {};
	__u32 zero = 0, text_len = 0;
	__u8 decision, reason;
	int scoped, status = AC_WALK_INTERNAL;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_EXEC);
	if (!scoped)
		return 0;

	reason = scoped == 1 ? AC_REASON_DEFAULT_DENY : AC_REASON_NO_POLICY;
	struct ac_scratch *s = bpf_map_lookup_elem(&ac_scratch_buf, &zero);
	if (s) {
		struct file *f = BPF_CORE_READ(bprm, file);
		status = ac_resolve_path(&f->f_path, s, &text_len);
	}
	ret = ac_verdict(&c, 0, reason, &decision);
	struct ac_event_decision *e = ac_event_begin(&c, decision, reason, ret);
	if (e) {
		if (status == AC_WALK_DONE)
			ac_event_path(e, s, text_len);
		ac_event_submit(e);
	}
	return ret;
}

/* Connecting a socket to any address. The foundation posture allows none. */
SEC("lsm/socket_connect")
int BPF_PROG(ac_socket_connect, struct socket *sock, struct sockaddr *address, int addrlen,
	     int ret)
{
	struct ac_ctx c = {};
	__u8 decision, reason;
	int scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SOCKET_CONNECT);
	if (!scoped)
		return 0;

	reason = scoped == 1 ? AC_REASON_DEFAULT_DENY : AC_REASON_NO_POLICY;
	ret = ac_verdict(&c, 0, reason, &decision);
	struct ac_event_decision *e = ac_event_begin(&c, decision, reason, ret);
	if (!e)
		return ret;

	__u16 family = BPF_CORE_READ(address, sa_family);
	e->family = family;
	e->protocol = BPF_CORE_READ(sock, sk, sk_protocol);
	if (family == AF_INET && addrlen >= (int)sizeof(struct sockaddr_in)) {
		struct sockaddr_in *in = (struct sockaddr_in *)address;
		e->target_kind = AC_TARGET_INET;
		e->port = bpf_ntohs(BPF_CORE_READ(in, sin_port));
		bpf_probe_read_kernel(e->addr, 4, &in->sin_addr);
	} else if (family == AF_INET6 && addrlen >= (int)sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)address;
		e->target_kind = AC_TARGET_INET;
		e->port = bpf_ntohs(BPF_CORE_READ(in6, sin6_port));
		bpf_probe_read_kernel(e->addr, 16, &in6->sin6_addr);
	} else if (family == AF_UNIX) {
		struct sockaddr_un *un = (struct sockaddr_un *)address;
		e->target_kind = AC_TARGET_UNIX;
		/* sun_path may be abstract (leading NUL): keep the raw bytes. */
		__u32 n = addrlen > 2 ? addrlen - 2 : 0;
		if (n > sizeof(un->sun_path))
			n = sizeof(un->sun_path);
		e->target_len = n;
		bpf_probe_read_kernel(e->target, sizeof(un->sun_path), un->sun_path);
	}
	ac_event_submit(e);
	return ret;
}
