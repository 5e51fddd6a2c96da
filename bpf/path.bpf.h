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
 * The text is only meaningful if the walk ends at the root mount of the
 * task's own mount namespace. A walk that ends anywhere else is denied
 * (AC_WALK_DETACHED): a detached mount tree (open_tree(OPEN_TREE_CLONE) of
 * /home/x makes /home/x/usr/lib/f walk as "/usr/lib/f"; fsmount; a lazily
 * unmounted tree), a mount of another namespace (an fd passed in), or a
 * disconnected dentry (open_by_handle_at). Kernel-internal mounts are the
 * exception: pipes, sockets, memfds and other pseudo files have no path at
 * all and keep resolving to "/", and on 6.12 (not on 6.1, which shows the
 * overlay path) overlayfs opens the real file of every overlay file through
 * its private layer mount (a backing file), after file_open has decided the
 * overlay path itself: every exec on an overlayfs root depends on it. A scope cannot make
 * an internal mount whose tree it chooses: that takes a new superblock (an
 * overlayfs over a directory of its choice), and sb_kern_mount and sb_mount
 * deny those in a scope, like every other mount-table change (see
 * agentcage.bpf.c).
 *
 * The walk is done with bpf_loop so the verifier checks one iteration, not
 * AC_PATH_MAX_DEPTH unrolled copies (6.1's verifier is the stricter one).
 */
#ifndef AGENTCAGE_PATH_BPF_H
#define AGENTCAGE_PATH_BPF_H

#include "maps.bpf.h"
#include "scope.bpf.h"
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
	AC_WALK_DETACHED = 5,
};

/* fs/mount.h: the mnt_ns of kernel-internal mounts (kern_mount, overlayfs
 * layers), ERR_PTR(-EINVAL) on 6.1 and 6.12. Detached trees made by
 * open_tree/fsmount have an anonymous namespace; unmounted ones NULL. */
#define AC_MNT_NS_INTERNAL ((__u64)-22)

/* Is vfsmnt a kernel-internal mount? Pipes, sockets, anonymous inodes
 * (eventfd, epoll, pidfd, ...) and memfds live on one: files no path
 * reaches. */
static __always_inline int ac_mount_internal(struct vfsmount *vfsmnt)
{
	struct mount *m = container_of(vfsmnt, struct mount, mnt);
	return (__u64)BPF_CORE_READ(m, mnt_ns) == AC_MNT_NS_INTERNAL;
}

/* The walk's state lives in the task's scratch (struct ac_walk_state in
 * maps.bpf.h says why it is not on the stack); the bpf_loop callbacks get
 * the scratch through their context: a pointer on the caller's stack. */
struct ac_loop_ctx {
	struct ac_scratch *s;
};

/* How a walk that cannot go further up ends: at the root dentry of mount
 * m (at_mnt_root) or at a dentry that is its own parent elsewhere on m. */
static __always_inline __u32 ac_walk_end(struct ac_walk_state *w, struct mount *m, int at_mnt_root)
{
	if (!w->strict)
		return AC_WALK_DONE;
	if (at_mnt_root && (__u64)m == w->ns_root)
		return AC_WALK_DONE;
	if ((__u64)BPF_CORE_READ(m, mnt_ns) == AC_MNT_NS_INTERNAL)
		return AC_WALK_DONE;
	return AC_WALK_DETACHED;
}

/* One step up: either leave a mount for the mount point it sits on, or
 * record a component and go to its parent. */
static long ac_walk_step(__u32 i, void *data)
{
	struct ac_scratch *s = ((struct ac_loop_ctx *)data)->s;
	if (!s)
		return 1; /* cannot happen: the caller passes its scratch */
	struct ac_walk_state *w = &s->walk;
	struct dentry *d = (struct dentry *)w->dentry;
	struct mount *m = (struct mount *)w->mnt;

	if (d == BPF_CORE_READ(m, mnt.mnt_root)) {
		struct mount *parent = BPF_CORE_READ(m, mnt_parent);
		if (parent == m) { /* root of the namespace, or of a detached tree */
			w->status = ac_walk_end(w, m, 1);
			return 1;
		}
		w->dentry = (__u64)BPF_CORE_READ(m, mnt_mountpoint);
		w->mnt = (__u64)parent;
		return 0;
	}
	struct dentry *parent = BPF_CORE_READ(d, d_parent);
	if (parent == d) { /* pseudo file, or a dentry disconnected from m's root */
		w->status = ac_walk_end(w, m, 0);
		return 1;
	}
	__u32 depth = w->depth;
	if (depth >= AC_PATH_MAX_DEPTH) {
		w->status = AC_WALK_TOO_DEEP;
		return 1;
	}
	s->dentries[depth & (AC_PATH_MAX_DEPTH - 1)] = (__u64)d;
	w->depth = depth + 1;
	w->dentry = (__u64)parent;
	return 0;
}

/* Append "/<name>" for component depth-1-i (root first). Stops once
 * AC_PATH_KEY_MAX bytes are written: see ac_resolve for why the rest
 * cannot change a match. */
static long ac_copy_step(__u32 i, void *data)
{
	struct ac_scratch *s = ((struct ac_loop_ctx *)data)->s;
	if (!s)
		return 1;
	struct ac_walk_state *w = &s->walk;
	__u32 depth = w->depth, len = w->len;
	if (i >= depth || len >= AC_PATH_KEY_MAX)
		return 1;
	struct dentry *d = (struct dentry *)s->dentries[(depth - 1 - i) & (AC_PATH_MAX_DEPTH - 1)];
	const unsigned char *name = BPF_CORE_READ(d, d_name.name);

	/* < AC_PATH_KEY_MAX; masked for the verifier, and hidden from the
	 * compiler, which would drop the mask after the check above. */
	__u32 off = len;
	asm volatile("" : "+r"(off));
	off &= 0xff;
	s->key.path[off] = '/';
	off = (off + 1) & 0xff;
	/* At most 255 bytes from an offset < 256: stays inside key.path+spill. */
	long n = bpf_probe_read_kernel_str(&s->key.path[off], 255, name);
	if (n <= 0) {
		w->status = AC_WALK_UNREADABLE;
		return 1;
	}
	w->len = off + (__u32)n - 1;
	return 0;
}

/*
 * Resolve @path into scratch.key (path text with a trailing '/', truncated
 * to AC_PATH_KEY_MAX bytes) and return an AC_WALK_* status; *text_len gets
 * the length of the path text (without the trailing '/', capped at
 * AC_PATH_KEY_MAX).
 *
 * Truncation is exact, not a guess, for the absolute rules: the compiler
 * rejects rules longer than AC_PATH_KEY_MAX bytes (trailing '/' included),
 * and a rule R of at most AC_PATH_KEY_MAX bytes is a prefix of a path P
 * exactly when it is a prefix of P's first AC_PATH_KEY_MAX bytes. So every
 * rule that matches the full path matches the key and vice versa, longest
 * match included. (Workspace-relative rules are another matter, see
 * ac_path_access.) What cannot be resolved at all (too deep, unreadable
 * names) is reported so the caller denies it.
 *
 * strict: the walk must end at the root of the current task's mount
 * namespace (see the top of this file), else AC_WALK_DETACHED. Files the
 * task reaches are resolved strictly. A unix socket's bound path is not: it
 * lies in the namespace of whoever bound it (e.g. a service with its own
 * mount namespace), not in the connecting task's.
 */
static __always_inline int ac_resolve(struct dentry *dentry, struct vfsmount *vfsmnt,
				      struct ac_scratch *s, __u32 *text_len, int strict)
{
	struct ac_walk_state *w = &s->walk;
	struct ac_loop_ctx lc = { .s = s };
	w->dentry = (__u64)dentry;
	w->mnt = (__u64)container_of(vfsmnt, struct mount, mnt);
	w->depth = 0;
	w->status = AC_WALK_RUNNING;
	w->len = 0;
	w->strict = strict;
	w->ns_root = 0; /* no namespace (exiting task): nothing matches it */
	if (strict) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		w->ns_root = (__u64)BPF_CORE_READ(task, nsproxy, mnt_ns, root);
	}
	/* Each iteration either records a component or crosses a mount. */
	bpf_loop(AC_PATH_MAX_DEPTH + 32, ac_walk_step, &lc, 0);
	__u32 status = w->status;
	if (status == AC_WALK_RUNNING)
		return AC_WALK_TOO_DEEP;
	if (status != AC_WALK_DONE)
		return status;
	if (w->depth > AC_PATH_MAX_DEPTH) /* cannot happen; never copy a wrapped ring */
		return AC_WALK_TOO_DEEP;

	w->len = 0;
	bpf_loop(AC_PATH_MAX_DEPTH, ac_copy_step, &lc, 0);
	status = w->status;
	if (status != AC_WALK_DONE)
		return status;

	__u32 len = w->len;
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

/* Result bit of ac_path_access, never in a rule: the path could not be
 * matched exactly and must be denied (reason AC_REASON_PATH_TOO_LONG). */
#define AC_ACCESS_UNRESOLVED (1u << 31)
/* Result bit of a path lookup, never in a rule: the name rules could not be
 * looked up (the task's scratch could not be had): denied (reason
 * AC_REASON_SCRATCH), and AC_ACCESS_DENY is set with it. */
#define AC_ACCESS_NAMES_UNCHECKED (1u << 30)

/*
 * Access bits the policy grants for the resolved key (0: no rule): the
 * longest absolute rule, combined with the longest workspace-relative rule
 * when the path lies inside the scope's workspace. A DENY on either side
 * stays in the result and wins. text_len is what ac_resolve reported.
 *
 * A path inside the workspace whose text does not fit the key comes back
 * with AC_ACCESS_UNRESOLVED. The absolute lookup on the cut key is exact
 * (see ac_resolve), but the workspace-relative key is the key with the
 * workspace's len(W) bytes cut off the front: only AC_PATH_KEY_MAX - len(W)
 * bytes of the relative path, while a workspace rule may be up to
 * AC_PATH_KEY_MAX bytes long. A rule longer than what is left (e.g. a deny
 * deep inside the workspace) may match the full path and not the cut key,
 * so the longest match on the cut key could allow what that rule denies.
 */
static __always_inline __u32 ac_path_access(struct ac_scratch *s, __u32 rules_id,
					    __u32 workspace_tag, __u32 text_len)
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
	if (text_len >= AC_PATH_KEY_MAX)
		return access | AC_ACCESS_UNRESOLVED;
	bpf_probe_read_kernel(s->rel.path, AC_PATH_KEY_MAX, &s->key.path[off & 0xff]);
	s->rel.prefixlen = 32 + 8 * (key_bytes - off);
	s->rel.rules_id_be = bpf_htonl((rules_id & AC_RULES_ID_MASK) | AC_RULES_NS_WORKSPACE);
	r = bpf_map_lookup_elem(&ac_path_rules, &s->rel);
	if (r)
		access |= r->access;
	return access;
}

/*
 * Is the resolved key exactly a directory on the way to an allowed path: an
 * ancestor entry of the policy (AC_RULES_NS_ANCESTOR) or of the scope's
 * workspace (AC_WORKSPACE_ANCESTOR)? Both are exact entries that record
 * their key length; a key cut at AC_PATH_KEY_MAX is never exact (its last
 * byte may be a '/' in the middle of a longer path).
 */
static __always_inline int ac_path_ancestor(struct ac_scratch *s, __u32 rules_id,
					    __u32 workspace_tag, __u32 text_len)
{
	if (text_len >= AC_PATH_KEY_MAX)
		return 0;
	__u32 key_bytes = (s->key.prefixlen - 32) / 8;
	s->key.rules_id_be = bpf_htonl((rules_id & AC_RULES_ID_MASK) | AC_RULES_NS_ANCESTOR);
	struct ac_path_rule *r = bpf_map_lookup_elem(&ac_path_rules, &s->key);
	if (r && (r->access & AC_ACCESS_TRAVERSE) && r->aux == key_bytes)
		return 1;
	if (!workspace_tag)
		return 0;
	s->key.rules_id_be = bpf_htonl(workspace_tag | AC_WORKSPACE_ANCESTOR);
	struct ac_workspace *ws = bpf_map_lookup_elem(&ac_workspaces, &s->key);
	return ws && ws->len == key_bytes;
}

/*
 * Name rules (files.deny patterns NAME and *.EXT at any depth; the key
 * layout is at AC_RULES_NS_NAME in abi.h). After ac_resolve, the scratch
 * holds the dentry of every component of the path (dentries[0] is the file
 * itself): each component is looked up by its whole name, then by its last
 * L bytes for each suffix length L the policy uses. Callers check
 * AC_POLICY_F_NAMES first, so a policy without name rules costs nothing.
 */
struct ac_name_ctx {
	struct ac_scratch *s;
	__u32 rules_id_be; /* rules id | AC_RULES_NS_NAME, big endian */
	__u32 depth;       /* components to look at */
	__u32 tries;       /* per component: 1 (whole name) + AC_NAME_SUFFIX_LENGTHS */
	__u32 denied;      /* a component matched, or could not be read */
	__u32 pad;
	__u64 lengths;     /* struct ac_name_lengths, byte k = the k-th length */
};

/* Try i: component i / tries, by its whole name (i % tries == 0) or by
 * its suffix of the (i % tries)-th length. */
static long ac_name_step(__u32 i, void *data)
{
	struct ac_name_ctx *nc = data;
	struct ac_scratch *s = nc->s;
	if (!s)
		return 1; /* cannot happen: the caller passes its scratch */
	__u32 tries = nc->tries;
	if (tries == 0 || tries > 1 + AC_NAME_SUFFIX_LENGTHS)
		return 1;
	__u32 comp = i / tries, t = i % tries;
	if (comp >= nc->depth)
		return 1;
	struct dentry *d = (struct dentry *)s->dentries[comp & (AC_PATH_MAX_DEPTH - 1)];
	__u32 len = BPF_CORE_READ(d, d_name.len);
	const unsigned char *name = BPF_CORE_READ(d, d_name.name);
	__u32 want = len;
	__u8 kind = AC_NAME_EXACT;
	if (t > 0) {
		/* a shift, not an index: no variable offset into the stack */
		want = (nc->lengths >> (8 * ((t - 1) & (AC_NAME_SUFFIX_LENGTHS - 1)))) & 0xff;
		kind = AC_NAME_SUFFIX;
	}
	if (want == 0 || want > len || want > AC_NAME_RULE_MAX)
		return 0; /* no rule is that long (or the name that short) */
	struct ac_path_key *k = &s->name;
	k->rules_id_be = nc->rules_id_be;
	k->path[0] = kind;
	k->path[1] = (__u8)want;
	/* 1..AC_NAME_RULE_MAX; masked for the verifier. */
	__u32 n = want;
	asm volatile("" : "+r"(n));
	n &= 2 * AC_NAME_RULE_MAX - 1;
	if (bpf_probe_read_kernel(&k->path[2], n, name + (len - want)) < 0) {
		nc->denied = 1; /* the walk read it a moment ago: fail closed */
		return 1;
	}
	k->prefixlen = 32 + 8 * (2 + want);
	struct ac_path_rule *r = bpf_map_lookup_elem(&ac_path_rules, k);
	if (r && (r->access & AC_ACCESS_DENY)) {
		nc->denied = 1;
		return 1;
	}
	return 0;
}

/* Does a name rule of rules_id deny the path ac_resolve just walked into
 * the current task's scratch? 1 yes, 0 no, 3 (denied, and no answer) when
 * the scratch could not be had. A global function: the verifier
 * checks it once, on its own, instead of again in every state of every
 * hook that decides on a path (which put file_open on 6.1 over half the
 * verifier's limit). It takes the scratch itself (6.1 passes a global
 * function's pointer arguments as plain memory, which no map lookup takes
 * as a key): the caller holds it (busy), or this fails closed. */
__noinline int ac_path_name_denied(__u32 rules_id)
{
	struct ac_scratch *s =
		bpf_task_storage_get(&ac_task_scratch, bpf_get_current_task_btf(), 0, 0);
	if (!s || !s->busy)
		return 3; /* fail closed, counted as AC_REASON_SCRATCH */
	struct ac_path_key *k = &s->name;
	k->rules_id_be = bpf_htonl((rules_id & AC_RULES_ID_MASK) | AC_RULES_NS_NAME);
	k->path[0] = AC_NAME_LENGTHS;
	k->prefixlen = 32 + 8;
	/* Every component gets all 1 + AC_NAME_SUFFIX_LENGTHS tries (an unused
	 * length is a try that returns at once): counting the lengths here
	 * would branch once per length. */
	struct ac_name_ctx nc = { .s = s,
				  .rules_id_be = k->rules_id_be,
				  .depth = s->walk.depth,
				  .tries = 1 + AC_NAME_SUFFIX_LENGTHS,
				  .denied = 1 /* no lengths entry though the flag is set: fail closed */ };
	struct ac_name_lengths *l = bpf_map_lookup_elem(&ac_path_rules, k);
	if (l) {
#pragma unroll
		for (int j = 0; j < AC_NAME_SUFFIX_LENGTHS; j++)
			nc.lengths |= (__u64)l->len[j] << (8 * j);
		/* depth <= AC_PATH_MAX_DEPTH after a walk that ended in
		 * AC_WALK_DONE; the step checks each component anyway */
		nc.denied = nc.depth > AC_PATH_MAX_DEPTH;
		bpf_loop((nc.depth & (2 * AC_PATH_MAX_DEPTH - 1)) * nc.tries, ac_name_step, &nc, 0);
	}
	return nc.denied & 1;
}

/* Reason for a walk that did not end in AC_WALK_DONE. */
static __always_inline __u8 ac_walk_reason(int status)
{
	switch (status) {
	case AC_WALK_TOO_DEEP:
		return AC_REASON_PATH_TOO_DEEP;
	case AC_WALK_UNREADABLE:
		return AC_REASON_PATH_UNREADABLE;
	case AC_WALK_DETACHED:
		return AC_REASON_PATH_DETACHED;
	default:
		return AC_REASON_INTERNAL;
	}
}

#endif /* AGENTCAGE_PATH_BPF_H */
