/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Path resolution and path-rule matching.
 *
 * A file is matched by the path the kernel itself reaches it by: we walk its
 * dentries up to the root of the mount namespace, crossing mount points,
 * and never look at the string the process used. Symlinks, "..",
 * /proc/self/root, /proc/self/fd re-opens and chroot therefore cannot change
 * the result: they all end at the same dentry.
 *
 * The walk is done with bpf_loop so the verifier checks one iteration, not
 * AC_PATH_MAX_DEPTH unrolled copies (6.1's verifier is the stricter one).
 */
#ifndef AGENTCAGE_PATH_BPF_H
#define AGENTCAGE_PATH_BPF_H

#include "maps.bpf.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((void *)(ptr) - __builtin_offsetof(type, member)))
#endif

enum ac_walk_status {
	AC_WALK_RUNNING = 0,
	AC_WALK_DONE = 1,
	AC_WALK_TOO_DEEP = 2,
	AC_WALK_UNREADABLE = 3,
	AC_WALK_INTERNAL = 4,
};

struct ac_walk {
	struct dentry *dentry;
	struct mount *mnt;
	__u32 depth; /* components recorded in scratch.dentries */
	__u32 status;
};

/* One step up: either leave a mount for the mount point it sits on, or
 * record a component and go to its parent. */
static long ac_walk_step(__u32 i, void *data)
{
	struct ac_walk *w = data;
	__u32 zero = 0;
	struct ac_scratch *s = bpf_map_lookup_elem(&ac_scratch_buf, &zero);
	if (!s) {
		w->status = AC_WALK_INTERNAL;
		return 1;
	}
	struct dentry *d = w->dentry;
	struct mount *m = w->mnt;

	if (d == BPF_CORE_READ(m, mnt.mnt_root)) {
		struct mount *parent = BPF_CORE_READ(m, mnt_parent);
		if (parent == m) { /* root of the namespace (or a detached tree) */
			w->status = AC_WALK_DONE;
			return 1;
		}
		w->dentry = BPF_CORE_READ(m, mnt_mountpoint);
		w->mnt = parent;
		return 0;
	}
	struct dentry *parent = BPF_CORE_READ(d, d_parent);
	if (parent == d) { /* root of a filesystem that is not mounted here */
		w->status = AC_WALK_DONE;
		return 1;
	}
	if (w->depth >= AC_PATH_MAX_DEPTH) {
		w->status = AC_WALK_TOO_DEEP;
		return 1;
	}
	s->dentries[w->depth & (AC_PATH_MAX_DEPTH - 1)] = (__u64)d;
	w->depth++;
	w->dentry = parent;
	return 0;
}

struct ac_copy {
	__u32 depth;
	__u32 len; /* bytes of path text written to scratch.key.path */
	__u32 status;
	__u32 pad;
};

/* Append "/<name>" for component depth-1-i (root first). Stops once
 * AC_PATH_KEY_MAX bytes are written: see ac_resolve_path for why the rest
 * cannot change a match. */
static long ac_copy_step(__u32 i, void *data)
{
	struct ac_copy *c = data;
	__u32 zero = 0;
	struct ac_scratch *s = bpf_map_lookup_elem(&ac_scratch_buf, &zero);
	if (!s) {
		c->status = AC_WALK_INTERNAL;
		return 1;
	}
	if (i >= c->depth || c->len >= AC_PATH_KEY_MAX)
		return 1;
	struct dentry *d = (struct dentry *)s->dentries[(c->depth - 1 - i) & (AC_PATH_MAX_DEPTH - 1)];
	const unsigned char *name = BPF_CORE_READ(d, d_name.name);

	__u32 off = c->len & 0xff; /* < AC_PATH_KEY_MAX, masked for the verifier */
	s->key.path[off] = '/';
	off = (off + 1) & 0xff;
	/* At most 255 bytes from an offset < 256: stays inside key.path+spill. */
	long n = bpf_probe_read_kernel_str(&s->key.path[off], 255, name);
	if (n <= 0) {
		c->status = AC_WALK_UNREADABLE;
		return 1;
	}
	c->len = off + (__u32)n - 1;
	return 0;
}

/*
 * Resolve @path into scratch.key (path text with a trailing '/', truncated
 * to AC_PATH_KEY_MAX bytes) and return an AC_WALK_* status; *text_len gets
 * the length of the path text (without the trailing '/', capped at
 * AC_PATH_KEY_MAX).
 *
 * Truncation is exact, not a guess: the compiler rejects rules longer than
 * AC_PATH_KEY_MAX bytes (trailing '/' included), and a rule R of at most
 * AC_PATH_KEY_MAX bytes is a prefix of a path P exactly when it is a prefix
 * of P's first AC_PATH_KEY_MAX bytes. So every rule that matches the full
 * path matches the key and vice versa, longest match included. What cannot
 * be resolved at all (too deep, unreadable names) is reported so the caller
 * denies it.
 */
static __always_inline int ac_resolve(struct dentry *dentry, struct vfsmount *vfsmnt,
				      struct ac_scratch *s, __u32 *text_len)
{
	struct ac_walk w = {
		.dentry = dentry,
		.mnt = container_of(vfsmnt, struct mount, mnt),
		.depth = 0,
		.status = AC_WALK_RUNNING,
	};
	/* Each iteration either records a component or crosses a mount. */
	bpf_loop(AC_PATH_MAX_DEPTH + 32, ac_walk_step, &w, 0);
	if (w.status == AC_WALK_RUNNING)
		return AC_WALK_TOO_DEEP;
	if (w.status != AC_WALK_DONE)
		return w.status;

	struct ac_copy c = { .depth = w.depth, .len = 0, .status = AC_WALK_DONE };
	bpf_loop(AC_PATH_MAX_DEPTH, ac_copy_step, &c, 0);
	if (c.status != AC_WALK_DONE)
		return c.status;

	__u32 len = c.len;
	if (len == 0) { /* the root itself: text "/", key "/" */
		s->key.path[0] = '/';
		*text_len = 1;
		len = 1;
	} else {
		if (len > AC_PATH_KEY_MAX)
			len = AC_PATH_KEY_MAX;
		*text_len = len;
		if (len < AC_PATH_KEY_MAX)
			s->key.path[len++ & 0xff] = '/';
	}
	s->key.prefixlen = 32 + 8 * len;
	return AC_WALK_DONE;
}

static __always_inline int ac_resolve_path(const struct path *path, struct ac_scratch *s,
					   __u32 *text_len)
{
	return ac_resolve(BPF_CORE_READ(path, dentry), BPF_CORE_READ(path, mnt), s, text_len);
}

/*
 * Access bits the policy grants for the resolved key (0: no rule): the
 * longest absolute rule, combined with the longest workspace-relative rule
 * when the path lies inside the scope's workspace. A DENY on either side
 * stays in the result and wins.
 */
static __always_inline __u32 ac_path_access(struct ac_scratch *s, __u32 rules_id,
					    __u32 workspace_tag)
{
	__u32 access = 0;

	s->key.rules_id_be = bpf_htonl(rules_id & AC_RULES_ID_MASK);
	struct ac_path_rule *r = bpf_map_lookup_elem(&ac_path_rules, &s->key);
	if (r)
		access = r->access;
	if (!workspace_tag)
		return access;

	s->key.rules_id_be = bpf_htonl(workspace_tag);
	struct ac_workspace *ws = bpf_map_lookup_elem(&ac_workspaces, &s->key);
	if (!ws)
		return access;
	/* key = W + rest + '/', rest empty or "/..."; the relative key is
	 * rest + '/', i.e. the key bytes from offset len(W). */
	__u32 key_bytes = (s->key.prefixlen - 32) / 8;
	__u32 off = ws->len;
	if (off >= key_bytes || off >= AC_PATH_KEY_MAX)
		return access | AC_ACCESS_DENY; /* cannot happen for a real match: fail closed */
	bpf_probe_read_kernel(s->rel.path, AC_PATH_KEY_MAX, &s->key.path[off & 0xff]);
	s->rel.prefixlen = 32 + 8 * (key_bytes - off);
	s->rel.rules_id_be = bpf_htonl((rules_id & AC_RULES_ID_MASK) | AC_RULES_NS_WORKSPACE);
	r = bpf_map_lookup_elem(&ac_path_rules, &s->rel);
	if (r)
		access |= r->access;
	return access;
}

static __always_inline __u8 ac_walk_reason(int status)
{
	switch (status) {
	case AC_WALK_TOO_DEEP:
		return AC_REASON_PATH_TOO_DEEP;
	case AC_WALK_UNREADABLE:
		return AC_REASON_PATH_UNREADABLE;
	default:
		return AC_REASON_INTERNAL;
	}
}

#endif /* AGENTCAGE_PATH_BPF_H */
