/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the host has, not just what it says: metadata reads (stat, readlink,
 * xattrs, ACLs), watches, and attribute changes on host files.
 *
 * Included once, at the end of agentcage.bpf.c (one BPF object), after the
 * decision helpers it uses.
 *
 * Reads need what reading the file needs (AC_ACCESS_READ, or the exec or
 * connect bit of the rule naming it), except that a directory on the way to
 * an allowed path may be stat'ed and its attributes read (ancestor entries:
 * AC_RULES_NS_ANCESTOR, AC_WORKSPACE_ANCESTOR), so that realpath() and
 * imports can walk down to what they may read. Watches need read access to
 * the watched path itself (a watch on an ancestor would report the names
 * of everything created next to the allowed path). Attribute changes need
 * write access, like chmod and chown.
 *
 * Several hooks get a dentry and no mount (inode_readlink, the xattr and ACL
 * hooks, inode_setattr). The path a rule matches needs the mount, so those
 * decide over the mounts of the dentry's superblock in the task's mount
 * namespace (ac_decide_dentry_mounts).
 *
 * Kernel-internal mounts (pipes, sockets, memfds, nsfs, overlayfs' private
 * layer mounts) are the kernel's own: a pseudo file of one of the run's own
 * descriptors, or a stacked filesystem (overlayfs) working on its layers for
 * an operation that was decided on the overlay's own path first.
 */
#ifndef AGENTCAGE_METADATA_BPF_H
#define AGENTCAGE_METADATA_BPF_H

/* include/linux/fs.h: struct iattr.ia_valid bits */
#define ATTR_SIZE (1u << 3)
#define ATTR_ATIME (1u << 4)
#define ATTR_MTIME (1u << 5)

/* Mounts of one superblock looked at, at most (candidates kept: struct
 * ac_mounts, in the task's scratch, maps.bpf.h). */
#define AC_SB_MOUNTS_MAX 16

/* Until 6.13 (6.1, 6.12) a superblock lists its mounts on s_mounts, linked
 * through mount.mnt_instance; later kernels chain them through
 * mount.mnt_next_for_sb (what vmlinux.h may describe). CO-RE picks. */
struct list_head___ac {
	struct list_head___ac *next;
};
struct super_block___lst {
	struct list_head___ac s_mounts;
} __attribute__((preserve_access_index));
struct mount___lst {
	struct list_head___ac mnt_instance;
} __attribute__((preserve_access_index));
struct mount___chain {
	struct mount___chain *mnt_next_for_sb;
} __attribute__((preserve_access_index));
struct super_block___chain {
	struct mount___chain *s_mounts;
} __attribute__((preserve_access_index));

static __always_inline int ac_internal_mount(struct mount *m)
{
	return (__u64)BPF_CORE_READ(m, mnt_ns) == AC_MNT_NS_INTERNAL;
}

static __always_inline int ac_internal_vfsmount(struct vfsmount *mnt)
{
	return ac_internal_mount(container_of(mnt, struct mount, mnt));
}

/* Sort one mount of the superblock into the candidates. */
static __always_inline void ac_mounts_add(struct ac_mounts *ms, struct mount *m, __u64 ns)
{
	__u64 mns = (__u64)BPF_CORE_READ(m, mnt_ns);
	if (mns == ns && ms->n_ns < AC_MOUNT_CANDIDATES) {
		ms->ns[ms->n_ns & (AC_MOUNT_CANDIDATES - 1)] = (__u64)m;
		ms->n_ns++;
	} else if (mns == AC_MNT_NS_INTERNAL && ms->n_internal < AC_MOUNT_CANDIDATES) {
		ms->internal[ms->n_internal & (AC_MOUNT_CANDIDATES - 1)] = (__u64)m;
		ms->n_internal++;
	}
}

/* The mounts of sb in the task's namespace and the internal ones, up to
 * AC_MOUNT_CANDIDATES each among the first AC_SB_MOUNTS_MAX. The list is
 * read without mount_lock: a mount changing under the walk at worst makes a
 * candidate that resolves nowhere, which denies. */
static __always_inline struct ac_mounts *ac_sb_mounts(struct ac_scratch *s, struct super_block *sb)
{
	struct ac_mounts *ms = &s->mounts;
	ms->n_ns = 0;
	ms->n_internal = 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 ns = (__u64)BPF_CORE_READ(task, nsproxy, mnt_ns);

	if (bpf_core_field_exists(struct mount___chain, mnt_next_for_sb)) {
		struct mount___chain *m = BPF_CORE_READ((struct super_block___chain *)sb, s_mounts);
		for (int i = 0; i < AC_SB_MOUNTS_MAX && m; i++) {
			ac_mounts_add(ms, (struct mount *)m, ns);
			m = BPF_CORE_READ(m, mnt_next_for_sb);
		}
		return ms;
	}
	struct super_block___lst *lsb = (struct super_block___lst *)sb;
	__u64 head = (__u64)&lsb->s_mounts;
	__u64 off = bpf_core_field_offset(struct mount___lst, mnt_instance);
	struct list_head___ac *pos = BPF_CORE_READ(lsb, s_mounts.next);
	for (int i = 0; i < AC_SB_MOUNTS_MAX && pos && (__u64)pos != head; i++) {
		struct mount___lst *m = (struct mount___lst *)((__u64)pos - off);
		ac_mounts_add(ms, (struct mount *)m, ns);
		pos = BPF_CORE_READ(m, mnt_instance.next);
	}
	return ms;
}

/* Is the current task working with credentials other than its own? Stacked
 * filesystems (overlayfs) do for their work on the layers. */
static __always_inline int ac_creds_overridden(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(task, cred) != BPF_CORE_READ(task, real_cred);
}

/* Does internal mount m show dentry: below its root, or a pseudo file of
 * its own (a dentry that is its own parent, not the superblock's root)? */
static __always_inline int ac_internal_shows(struct ac_scratch *s, struct dentry *dentry,
					     struct mount *m)
{
	__u32 len = 0;
	if (ac_resolve(dentry, &m->mnt, s, &len, 1) != AC_WALK_DONE)
		return 0;
	struct dentry *end = (struct dentry *)s->walk.dentry;
	return end == BPF_CORE_READ(m, mnt.mnt_root) || end != BPF_CORE_READ(dentry, d_sb, s_root);
}

/* The state of one decision over a superblock's candidate mounts, shared
 * with the bpf_loop callbacks below. Each candidate is judged in a callback
 * the verifier checks once, not once per candidate and per outcome of the
 * ones before it (which made these programs too large for 6.1's verifier). */
struct ac_mounts_walk {
	struct ac_ctx *c;
	struct ac_scratch *s;
	struct ac_mounts *ms;
	__u64 dentry;
	struct ac_need need;
	struct ac_judgement j;
	int internal; /* a kernel-internal mount shows the dentry */
	int shown;    /* a mount in the task's namespace shows it */
};

static long ac_internal_step(__u32 k, void *data)
{
	struct ac_mounts_walk *w = data;
	if (k >= w->ms->n_internal)
		return 1;
	barrier_var(k); /* keep the mask: the verifier needs the bound */
	struct mount *m = (struct mount *)w->ms->internal[k & (AC_MOUNT_CANDIDATES - 1)];
	if (!ac_internal_shows(w->s, (struct dentry *)w->dentry, m))
		return 0;
	w->internal = 1;
	return 1;
}

static long ac_ns_step(__u32 k, void *data)
{
	struct ac_mounts_walk *w = data;
	if (k >= w->ms->n_ns)
		return 1;
	barrier_var(k); /* keep the mask: the verifier needs the bound */
	struct ac_judgement jk;
	struct mount *m = (struct mount *)w->ms->ns[k & (AC_MOUNT_CANDIDATES - 1)];
	ac_judge_dentry(w->c, w->s, (struct dentry *)w->dentry, &m->mnt, w->need, &jk);
	if (jk.status != AC_WALK_DONE)
		return 0;
	w->shown = 1;
	/* Field by field: a struct copy also reads jk's padding, which the
	 * compiler may leave to whatever shares the stack slot (a spilled
	 * pointer: "invalid size of register fill" on 6.1). */
	w->j.text_len = jk.text_len;
	w->j.status = jk.status;
	w->j.allowed = jk.allowed;
	w->j.reason = jk.reason;
	return jk.allowed ? 1 : 0;
}

/*
 * Decide a request on a dentry reached through an unknown mount: allowed
 * when one mount of its superblock in the task's namespace shows it at a
 * path the rules allow (the same inode, so the same answer the run gets
 * through that path). When only kernel-internal mounts show it, or a stacked
 * filesystem works on its layers with its own credentials, it is the
 * kernel's own access: allowed and not counted. Nothing shows it: denied
 * as detached.
 */
static __noinline int ac_decide_dentry_mounts(struct ac_ctx *c, __u64 dentry_ptr, __u32 need_all,
					      __u32 ancestor_ok)
{
	struct dentry *dentry = (struct dentry *)dentry_ptr;
	struct ac_mounts_walk w = {
		.c = c,
		.dentry = dentry_ptr,
		.need = {.all = need_all,
			 .any_ok = AC_ACCESS_EXEC | AC_ACCESS_CONNECT,
			 .ancestor_ok = ancestor_ok},
		.j = {.status = AC_WALK_DETACHED, .reason = AC_REASON_PATH_DETACHED},
	};
	if (need_all & AC_ACCESS_WRITE)
		w.need.any_ok = 0;
	int ret = 0;
	w.s = ac_scratch_get();
	if (!w.s) {
		w.j.status = AC_WALK_INTERNAL;
		w.j.reason = AC_REASON_SCRATCH;
		return ac_judgement_finish(c, w.s, &w.j);
	}
	w.ms = ac_sb_mounts(w.s, BPF_CORE_READ(dentry, d_sb));

	bpf_loop(AC_MOUNT_CANDIDATES, ac_internal_step, &w, 0);
	if (w.internal && ac_creds_overridden())
		goto out;
	bpf_loop(AC_MOUNT_CANDIDATES, ac_ns_step, &w, 0);
	if (!w.shown && w.internal)
		goto out;
	ret = ac_judgement_finish(c, w.s, &w.j);
out:
	ac_scratch_put(w.s);
	return ret;
}

/* A dentry-only hook: hook group, then the decision over its mounts. */
static __always_inline int ac_dentry_request(__u8 hook, struct dentry *dentry, __u32 need_all,
					     __u32 ancestor_ok)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, hook);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	if (scoped != AC_SCOPE_POLICY)
		return ac_decide_plain(&c, scoped, 0); /* reason no_policy */
	return ac_decide_dentry_mounts(&c, (__u64)dentry, need_all, ancestor_ok);
}

/* What a metadata read needs: read access, or the exec/connect bit of the
 * rule naming the file, or a directory on the way to an allowed path. */
#define AC_NEED_STAT                                                                               \
	((struct ac_need){.all = AC_ACCESS_READ,                                                   \
			  .any_ok = AC_ACCESS_EXEC | AC_ACCESS_CONNECT,                            \
			  .ancestor_ok = 1})

/* Is path one of the task's standard descriptors (0-2)? Those were handed
 * in by whoever started the run (a terminal, a log file it redirected to):
 * fstat on them is how every runtime starts (Python's io checks them). The
 * run's own descriptors were decided when it opened them. */
static __always_inline int ac_stdio_path(const struct path *path)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct file **fd = BPF_CORE_READ(task, files, fdt, fd);
	unsigned int max = BPF_CORE_READ(task, files, fdt, max_fds);
	struct dentry *dentry = BPF_CORE_READ(path, dentry);
	struct vfsmount *mnt = BPF_CORE_READ(path, mnt);
#pragma unroll
	for (unsigned int i = 0; i < 3; i++) {
		struct file *f = NULL;
		if (i >= max)
			break;
		bpf_probe_read_kernel(&f, sizeof(f), &fd[i]);
		if (f && BPF_CORE_READ(f, f_path.dentry) == dentry &&
		    BPF_CORE_READ(f, f_path.mnt) == mnt)
			return 1;
	}
	return 0;
}

/* ---- reads ------------------------------------------------------------------ */

/* stat, lstat, fstatat, statx, fstat (and getattr from within the kernel,
 * e.g. overlayfs on its layers: internal mounts). */
SEC("lsm/inode_getattr")
int BPF_PROG(ac_inode_getattr, const struct path *path, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_FILE_STAT);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	struct vfsmount *mnt = BPF_CORE_READ(path, mnt);
	if (ac_internal_vfsmount(mnt))
		return 0;
	struct ac_judgement j = {.status = AC_WALK_INTERNAL, .reason = AC_REASON_SCRATCH};
	struct ac_scratch *s = ac_scratch_get();
	if (scoped != AC_SCOPE_POLICY)
		j.reason = AC_REASON_NO_POLICY;
	else if (s)
		ac_judge_dentry(&c, s, BPF_CORE_READ(path, dentry), mnt, AC_NEED_STAT, &j);
	if (!j.allowed && scoped == AC_SCOPE_POLICY && ac_stdio_path(path)) {
		j.allowed = 1;
		j.reason = AC_REASON_RULE_ALLOW;
	}
	int err = ac_judgement_finish(&c, s, &j);
	ac_scratch_put(s);
	return err;
}

/* readlink(2) and readlinkat(2): the link's target text. */
SEC("lsm/inode_readlink")
int BPF_PROG(ac_inode_readlink, struct dentry *dentry, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_STAT, dentry, AC_ACCESS_READ, 1);
}

/* getxattr(2) and its l/f variants; on 6.1 also POSIX ACLs (getfacl). */
SEC("lsm/inode_getxattr")
int BPF_PROG(ac_inode_getxattr, struct dentry *dentry, const char *name, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_STAT, dentry, AC_ACCESS_READ, 1);
}

SEC("lsm/inode_listxattr")
int BPF_PROG(ac_inode_listxattr, struct dentry *dentry, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_STAT, dentry, AC_ACCESS_READ, 1);
}

/* 6.2+: POSIX ACLs are read through their own hook, not getxattr. Loaded
 * only where the kernel has it (userspace/bpf/programs.cpp). */
SEC("lsm/inode_get_acl")
int BPF_PROG(ac_inode_get_acl, void *idmap, struct dentry *dentry, const char *acl_name, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_STAT, dentry, AC_ACCESS_READ, 1);
}

/* inotify_add_watch, fanotify_mark (inode, mount and filesystem marks) and
 * dnotify: what happens at a path is as much its content as the file is. */
SEC("lsm/path_notify")
int BPF_PROG(ac_path_notify, const struct path *path, __u64 mask, unsigned int obj_type, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_FILE_WATCH);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_path(&c, scoped, path, NEED(AC_ACCESS_READ));
}

/* ---- attribute changes -------------------------------------------------------- */

/* Timestamps (utimes, utimensat, futimens): notify_change without a path
 * hook. Mode, owner and size changes are decided by path_chmod, path_chown
 * and path_truncate before they get here. */
static __always_inline int ac_setattr(struct dentry *dentry, struct iattr *attr)
{
	__u32 valid = BPF_CORE_READ(attr, ia_valid);
	if (!(valid & (ATTR_ATIME | ATTR_MTIME)) || (valid & ATTR_SIZE))
		return 0;
	return ac_dentry_request(AC_HOOK_FILE_CHANGE, dentry, AC_ACCESS_WRITE, 0);
}

/* 6.9+ passes the mount's idmap first; 6.1 does not. Userspace loads the
 * one that matches the kernel (userspace/bpf/programs.cpp). */
SEC("lsm/inode_setattr")
int BPF_PROG(ac_inode_setattr, void *idmap, struct dentry *dentry, struct iattr *attr, int ret)
{
	return ret ? ret : ac_setattr(dentry, attr);
}

SEC("lsm/inode_setattr")
int BPF_PROG(ac_inode_setattr_noidmap, struct dentry *dentry, struct iattr *attr, int ret)
{
	return ret ? ret : ac_setattr(dentry, attr);
}

/* setxattr(2), removexattr(2) and their l/f variants; on 6.1 also POSIX
 * ACLs (setfacl writes system.posix_acl_*). The first argument is the
 * mount's idmap (6.3+) or user namespace (6.1): the dentry is second on both. */
SEC("lsm/inode_setxattr")
int BPF_PROG(ac_inode_setxattr, void *idmap, struct dentry *dentry, const char *name,
	     const void *value, __u64 size, int flags, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_CHANGE, dentry, AC_ACCESS_WRITE, 0);
}

SEC("lsm/inode_removexattr")
int BPF_PROG(ac_inode_removexattr, void *idmap, struct dentry *dentry, const char *name, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_CHANGE, dentry, AC_ACCESS_WRITE, 0);
}

/* 6.2+: POSIX ACLs are set and removed through their own hooks. */
SEC("lsm/inode_set_acl")
int BPF_PROG(ac_inode_set_acl, void *idmap, struct dentry *dentry, const char *acl_name, void *kacl,
	     int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_CHANGE, dentry, AC_ACCESS_WRITE, 0);
}

SEC("lsm/inode_remove_acl")
int BPF_PROG(ac_inode_remove_acl, void *idmap, struct dentry *dentry, const char *acl_name, int ret)
{
	return ret ? ret : ac_dentry_request(AC_HOOK_FILE_CHANGE, dentry, AC_ACCESS_WRITE, 0);
}

/*
 * io_uring requests run with a registered personality's credentials. The
 * dentry hooks above take overridden credentials on a layer of a stacked
 * filesystem for the filesystem's own work; a run must not be able to look
 * like that, and needs no other credentials than its own.
 */
SEC("lsm/uring_override_creds")
int BPF_PROG(ac_uring_override_creds, const struct cred *new, int ret)
{
	return ret ? ret : ac_scope_escape();
}

#endif /* AGENTCAGE_METADATA_BPF_H */
