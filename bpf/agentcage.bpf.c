// SPDX-License-Identifier: GPL-2.0
/*
 * agentcage LSM programs.
 *
 * Every hook starts the same way: if an earlier LSM already denied, pass
 * that on; if the current task is in no scope, allow (the fast path every
 * other process on the host takes). For a scoped task, decide from the
 * maps, count the decision, and report denials and audit-mode would-be
 * denials through the ring buffer. Internal failures inside a scope deny.
 *
 * What each group of hooks closes:
 *   exec      bprm_check_security: every program image (execve, execveat,
 *             memfd, #! interpreters, binfmt_misc); mmap_file/file_mprotect:
 *             no PROT_EXEC mapping of files from writable or unlisted places,
 *             so an allowed interpreter cannot load code the run wrote.
 *   files     file_open (read/write) and the path_* hooks for every change
 *             to the namespace (create, mkdir, unlink, rmdir, rename, link,
 *             symlink, truncate, chmod, chown).
 *   network   socket_connect, socket_sendmsg with an address (UDP sendto,
 *             TCP fast open, io_uring), unix_stream_connect/unix_may_send
 *             (unix sockets by identity), socket_create (unix, TCP, UDP and
 *             route netlink only).
 *   ingress   socket_bind (off loopback, abstract names), socket_listen,
 *             netlink_send (route sockets read only): see ingress.bpf.h;
 *             a run's own sockets reach each other, nobody else reaches a
 *             private one (connect/sendmsg from outside; socket_setsockopt
 *             keeps SO_REUSEPORT off it, socket_getsockname registers a
 *             port the kernel picked, and a cgroup_skb/ingress program
 *             on each scope's cgroup lets a UDP client hear only from the
 *             peers it sent to): selftalk.bpf.h.
 *   receive   file_receive: a descriptor passed in must be the run's own
 *             socket, a file the policy lets it open, or a pipe-like file.
 *   native    mmap_file/file_mprotect also keep anonymous or written memory
 *             from becoming executable (native.bpf.h, exec.native_code).
 *   debug     ptrace_access_check, ptrace_traceme, /proc/PID/mem writes in
 *             file_open: only inside the scope, only with exec.debugging.
 *   scope     task_alloc (clone3 into another cgroup), ptrace across the
 *             scope's border, userns_create, and cgroupfs (cgroup.procs).
 *   mounts    sb_mount, sb_umount, move_mount, sb_pivotroot, sb_kern_mount,
 *             path_chroot, capable(CAP_SYS_CHROOT): a privileged process
 *             in a scope cannot change what a path leads to, nor enter
 *             another mount namespace.
 *   ipc, keys (ipc.bpf.h) System V IPC and POSIX message queues only in
 *             the run's own IPC namespace; no per-uid keyring and no key
 *             the scope does not possess.
 *   metadata  (metadata.bpf.h) inode_getattr, inode_readlink, the xattr
 *             and ACL hooks, path_notify, inode_setattr: stat, readlink,
 *             attribute reads and watches need the read access a rule
 *             gives (or a directory on the way to one), attribute changes
 *             the write access.
 *   proc      (proc.bpf.h) /proc/PID of a process outside the scope, in
 *             every path-based hook: not opened, listed, stat'ed or read,
 *             and its links not followed (inode_follow_link).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "maps.bpf.h"
#include "scope.bpf.h"
#include "path.bpf.h"
#include "rules.bpf.h"
#include "net.bpf.h"
#include "selftalk.bpf.h"
#include "ingress.bpf.h"
#include "ipc.bpf.h"
#include "native.bpf.h"
#include "proc.bpf.h"
#include "binding.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Constants that live in macros, not BTF. */
#define FMODE_READ 0x1
#define FMODE_WRITE 0x2
#define PROT_EXEC 0x4
#define MAP_ANONYMOUS 0x20
#define CLONE_INTO_CGROUP 0x200000000ULL
#define PTRACE_MODE_ATTACH 0x02
#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270
#define CAP_SYS_CHROOT 18

/* cgroupfs is never reachable from a scope: writing cgroup.procs or opening
 * a cgroup directory for clone3(CLONE_INTO_CGROUP) would leave the scope. */
static __always_inline int ac_protected_fs(struct dentry *dentry)
{
	unsigned long magic = BPF_CORE_READ(dentry, d_sb, s_magic);
	return magic == CGROUP2_SUPER_MAGIC || magic == CGROUP_SUPER_MAGIC;
}

/* Which path-rule bits a request needs, and which it must not find. */
struct ac_need {
	__u32 all;    /* every one of these bits */
	__u32 forbid; /* none of these bits (mmap exec: not from writable places) */
	__u32 any_ok; /* or: one of these bits alone suffices (AC_ACCESS_EXEC for mmap) */
	/* or: the path is a directory on the way to an allowed path (stat and
	 * attribute reads; see ac_path_ancestor) */
	__u32 ancestor_ok;
};

/* What one path's rules say about a request. */
struct ac_judgement {
	__u32 text_len; /* of the path text in scratch.key (status AC_WALK_DONE) */
	int status;     /* enum ac_walk_status */
	int allowed;
	__u8 reason;
};

/*
 * Judge a path-based request for (dentry, mnt) against the scope's rules:
 * resolve, look up, no accounting. scoped must be AC_SCOPE_POLICY.
 */
static __always_inline void ac_judge_dentry(struct ac_ctx *c, struct ac_scratch *s,
					    struct dentry *dentry, struct vfsmount *mnt,
					    struct ac_need need, struct ac_judgement *j)
{
	enum ac_proc_owner proc;

	j->allowed = 0;
	j->text_len = 0;
	/* For the record: what was needed, and whether the target is a
	 * directory (policy suggest never turns a directory into a rule
	 * unasked). */
	__u16 mode = BPF_CORE_READ(dentry, d_inode, i_mode);
	s->need = need.all | ((mode & 0170000) == 0040000 ? AC_RECORD_DIRECTORY : 0);
	j->status = ac_resolve(dentry, mnt, s, &j->text_len, 1);
	if (j->status != AC_WALK_DONE) {
		j->reason = ac_walk_reason(j->status);
	} else if (ac_protected_fs(dentry)) {
		j->reason = AC_REASON_PROTECTED;
	} else if ((proc = ac_proc_owner(c, dentry)) == AC_PROC_OTHER) {
		c->hook = AC_HOOK_PROC; /* counted and reported as what it is */
		j->reason = AC_REASON_PROTECTED;
	} else if (proc == AC_PROC_OWN && !(need.all & ~AC_ACCESS_READ) && !need.forbid) {
		j->allowed = 1; /* a run may read its own processes */
		j->reason = AC_REASON_RULE_ALLOW;
	} else {
		__u32 access;
		struct ac_lookup q = { .kind = AC_RULES_PATH,
				       .workspace_tag = c->workspace_tag,
				       .text_len = j->text_len };
		enum ac_policy_state state = ac_rules_lookup(c, s, q, &access);
		if (state != AC_POLICY_HELD) {
			j->reason = ac_policy_reason(state);
		} else if (access & AC_ACCESS_UNRESOLVED) {
			j->reason = AC_REASON_PATH_TOO_LONG; /* too long to match exactly */
		} else if (access & AC_ACCESS_NAMES_UNCHECKED) {
			j->reason = AC_REASON_SCRATCH; /* the name rules could not be looked up */
		} else if (access & AC_ACCESS_DENY) {
			j->reason = AC_REASON_RULE_DENY;
		} else if ((need.any_ok && (access & need.any_ok)) ||
			   (access && (access & need.all) == need.all && !(access & need.forbid)) ||
			   (need.ancestor_ok &&
			    ac_path_ancestor(s, c->rules_id, c->workspace_tag, j->text_len))) {
			j->allowed = 1;
			j->reason = AC_REASON_RULE_ALLOW;
		} else {
			j->reason = AC_REASON_DEFAULT_DENY;
		}
	}
}

/* Count a judgement and report it (with the path in scratch.key, if any). */
static __always_inline int ac_judgement_finish(struct ac_ctx *c, struct ac_scratch *s,
					       const struct ac_judgement *j)
{
	int ret;
	struct ac_event_decision *e = ac_finish(c, j->allowed, j->reason, &ret);
	if (e) {
		if (j->status == AC_WALK_DONE) {
			ac_event_text(e, AC_TARGET_PATH, s, j->text_len);
			e->access = s ? s->need : 0;
		}
		ac_event_submit(e);
	}
	return ret;
}

/*
 * Decide a path-based request for (dentry, mnt): resolve, look up, count,
 * report. Returns 0 or -EACCES.
 */
static __always_inline int ac_decide_dentry(struct ac_ctx *c, enum ac_scope_state scoped,
					    struct dentry *dentry, struct vfsmount *mnt,
					    struct ac_need need)
{
	struct ac_judgement j = { .status = AC_WALK_INTERNAL };
	struct ac_scratch *s = ac_scratch_get();

	if (scoped != AC_SCOPE_POLICY)
		j.reason = AC_REASON_NO_POLICY;
	else if (!s)
		j.reason = AC_REASON_SCRATCH;
	else
		ac_judge_dentry(c, s, dentry, mnt, need, &j);
	int ret = ac_judgement_finish(c, s, &j);
	ac_scratch_put(s);
	return ret;
}

static __always_inline int ac_decide_path(struct ac_ctx *c, enum ac_scope_state scoped,
					  const struct path *path, struct ac_need need)
{
	return ac_decide_dentry(c, scoped, BPF_CORE_READ(path, dentry), BPF_CORE_READ(path, mnt),
				need);
}

#define NEED(a) ((struct ac_need){ .all = (a) })

/* ---- exec ------------------------------------------------------------------ */

/*
 * Program execution. Called for the file being executed and again for each
 * interpreter a binfmt handler substitutes (#! scripts, binfmt_misc), so an
 * allowed script cannot smuggle in a denied interpreter, and a denied script
 * cannot run through an allowed one. bprm->file is the opened file, so the
 * name used (symlink, copy, /proc/self/fd, memfd) does not matter.
 */
SEC("lsm/bprm_check_security")
int BPF_PROG(ac_bprm_check, struct linux_binprm *bprm, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	/* The exec a pending scope waits for arms it, and is decided in it. */
	scoped = ac_current_scope_arming(&c, AC_HOOK_EXEC);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	struct file *f = BPF_CORE_READ(bprm, file);
	return ac_decide_path(&c, scoped, &f->f_path, NEED(AC_ACCESS_EXEC));
}

/*
 * Executable mappings: the dynamic loader and dlopen() map code with
 * PROT_EXEC. First the native-code rule (native.bpf.h): anonymous memory,
 * W+X and written pages never become executable unless the policy allows
 * native code. Then files by path: allowed for exec-allowed programs and
 * for files under read-only rules; never for files the scope may write
 * (its workspace), so code the run wrote cannot be loaded by an allowed
 * interpreter, nor a denied binary run through ld.so. vma is NULL for mmap.
 */
static __always_inline int ac_mmap_exec(struct file *file, struct vm_area_struct *vma,
					unsigned long prot)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (!(prot & PROT_EXEC))
		return 0;
	scoped = ac_current_scope(&c, AC_HOOK_MMAP_EXEC);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	if (ac_exec_makes_code(file, vma, prot)) {
		int allowed =
			scoped == AC_SCOPE_POLICY && (c.policy_flags & AC_POLICY_F_NATIVE_CODE);
		if (!allowed || !file || ac_pseudo_file(file))
			return ac_decide_on_hook(&c, AC_HOOK_NATIVE_CODE, allowed,
					       allowed			   ? AC_REASON_RULE_ALLOW
					       : scoped == AC_SCOPE_POLICY ? AC_REASON_DEFAULT_DENY
									   : AC_REASON_NO_POLICY);
		/* native code allowed: a named file is still decided by its path */
	}
	struct ac_need need = { .all = AC_ACCESS_READ,
				.forbid = AC_ACCESS_WRITE,
				.any_ok = AC_ACCESS_EXEC };
	return ac_decide_path(&c, scoped, &file->f_path, need);
}

SEC("lsm/mmap_file")
int BPF_PROG(ac_mmap_file, struct file *file, unsigned long reqprot, unsigned long prot,
	     unsigned long flags, int ret)
{
	if (ret)
		return ret;
	/* 6.12's verifier takes this argument for a trusted non-NULL pointer
	 * and drops `file == NULL` tests (6.14 marks it __nullable), so an
	 * anonymous mapping is told by its flag: MAP_ANONYMOUS, also with
	 * MAP_HUGETLB, whose pseudo file is anonymous memory too. */
	return ac_mmap_exec((flags & MAP_ANONYMOUS) ? NULL : file, NULL, prot);
}

SEC("lsm/file_mprotect")
int BPF_PROG(ac_file_mprotect, struct vm_area_struct *vma, unsigned long reqprot,
	     unsigned long prot, int ret)
{
	if (ret)
		return ret;
	return ac_mmap_exec(BPF_CORE_READ(vma, vm_file), vma, prot);
}

/* ---- files ------------------------------------------------------------------ */

#define NSFS_MAGIC 0x6e736673

static __always_inline int ac_io_uring_file(struct file *file)
{
	/* Its anonymous inode's name: "[io_uring]" (11 bytes with the NUL). */
	char name[12] = {};
	const unsigned char *n = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (bpf_probe_read_kernel_str(name, sizeof(name), n) != 11)
		return 0;
	__u64 head, want_head;
	__u32 tail, want_tail;
	__builtin_memcpy(&head, name, 8);
	__builtin_memcpy(&want_head, "[io_urin", 8);
	__builtin_memcpy(&tail, name + 8, 4);
	__builtin_memcpy(&want_tail, "g]\0\0", 4);
	return head == want_head && tail == want_tail;
}

/*
 * A file on a kernel-internal mount (no path names it) that a run may open
 * or be handed: a pipe, a memfd, a pidfd, an anonymous inode. Not a
 * namespace file (nsfs): a pidfd's PIDFD_GET_*_NAMESPACE (6.11+) opens
 * another process's namespaces without a /proc path, and setns needs
 * nothing else. Not an io_uring instance: requests on a ring with a
 * submission thread run in the cgroup of whoever set it up, and any ring's
 * registered files are its creator's.
 */
static __always_inline int ac_internal_file_ok(struct file *file, struct super_block *sb)
{
	return BPF_CORE_READ(sb, s_magic) != NSFS_MAGIC && !ac_io_uring_file(file);
}

SEC("lsm/file_open")
int BPF_PROG(ac_file_open, struct file *file, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_FILE_OPEN);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	/* Message queues (mq_open opens the queue's file on an internal mount,
	 * which no path rule can name) are decided as IPC. */
	struct vfsmount *mnt = BPF_CORE_READ(file, f_path.mnt);
	struct super_block *sb = BPF_CORE_READ(mnt, mnt_sb);
	if (ac_is_mqueue(sb))
		return ac_decide_mqueue(&c, scoped, sb);
	/* Other files on kernel-internal mounts have no path a rule could name:
	 * a pipe or memfd reopened through /proc/self/fd (/dev/stdin on a pipe,
	 * a shell's <(...)), a pidfd (6.12 opens pidfs files), overlayfs's
	 * backing file of a file decided by its own path; not every kind
	 * (ac_internal_file_ok). Those of a process outside the scope are out
	 * of reach: its /proc/PID/fd links are never followed
	 * (inode_follow_link). */
	if (ac_mount_internal(mnt))
		return ac_decide_plain(&c, scoped, ac_internal_file_ok(file, sb));

	__u32 fmode = BPF_CORE_READ(file, f_mode);
	__u32 need = 0;
	if (fmode & FMODE_READ)
		need |= AC_ACCESS_READ;
	if (fmode & FMODE_WRITE) {
		/* /proc/PID/mem for writing is a debugger's door, not a file
		 * write: exec.debugging decides, then reading the name. */
		if (ac_proc_mem(file)) {
			int allowed =
				scoped == AC_SCOPE_POLICY && (c.policy_flags & AC_POLICY_F_DEBUG);
			if (!allowed)
				return ac_decide_on_hook(&c, AC_HOOK_DEBUG, 0,
						       scoped == AC_SCOPE_POLICY
							       ? AC_REASON_DEFAULT_DENY
							       : AC_REASON_NO_POLICY);
		} else {
			need |= AC_ACCESS_WRITE;
		}
	}
	if (!need) /* e.g. open(O_WRONLY|O_RDWR) for ioctl: still a read of the name */
		need = AC_ACCESS_READ;
	return ac_decide_path(&c, scoped, &file->f_path, NEED(need));
}

/*
 * A file descriptor passed in: SCM_RIGHTS over a unix socket, or
 * pidfd_getfd. What it refers to must be what the run could have had
 * itself: a socket created inside the scope (selftalk.bpf.h), a message
 * queue of its own (ipc.bpf.h), a file the policy lets it open with the
 * descriptor's access mode. Pipes, anonymous inodes and memfds (files on
 * kernel-internal mounts, reached by no path) are allowed: the run's own
 * processes pass them to each other (Python's multiprocessing does). Not a
 * namespace file or an io_uring instance (ac_internal_file_ok).
 */
SEC("lsm/file_receive")
int BPF_PROG(ac_file_receive, struct file *file, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_FILE_RECEIVE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	struct socket *sock = bpf_sock_from_file(file);
	if (sock)
		return ac_decide_received_socket(&c, scoped, sock);
	struct vfsmount *mnt = BPF_CORE_READ(file, f_path.mnt);
	struct super_block *sb = BPF_CORE_READ(mnt, mnt_sb);
	if (ac_is_mqueue(sb))
		return ac_decide_mqueue(&c, scoped, sb);
	if (ac_mount_internal(mnt))
		return ac_decide_plain(&c, scoped, ac_internal_file_ok(file, sb));
	__u32 fmode = BPF_CORE_READ(file, f_mode), need = 0;
	if (fmode & FMODE_READ)
		need |= AC_ACCESS_READ;
	if (fmode & FMODE_WRITE)
		need |= AC_ACCESS_WRITE;
	if (!need) /* O_PATH: still the name */
		need = AC_ACCESS_READ;
	return ac_decide_path(&c, scoped, &file->f_path, NEED(need));
}

/*
 * Following a symbolic link: one under /proc/PID of a process outside the
 * scope (fd/N, cwd, root, exe, ns/..., map_files/) leads into that process's
 * files, some of which no path names (its pipes, memfds, sockets): denied
 * (hook proc), as everything else under its /proc/PID is (proc.bpf.h).
 * Any other link: its target is decided where it is used.
 */
SEC("lsm/inode_follow_link")
int BPF_PROG(ac_inode_follow_link, struct dentry *dentry, struct inode *inode, bool rcu, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_PROC);
	if (scoped == AC_SCOPE_NONE || ac_proc_owner(&c, dentry) != AC_PROC_OTHER)
		return 0;
	return ac_decide_on_hook(&c, AC_HOOK_PROC, 0, AC_REASON_PROTECTED);
}

/* A change to the entry `dentry` in directory `dir` needs write access to it. */
static __always_inline int ac_change(const struct path *dir, struct dentry *dentry)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, AC_HOOK_FILE_CHANGE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_dentry(&c, scoped, dentry, BPF_CORE_READ(dir, mnt), NEED(AC_ACCESS_WRITE));
}

static __always_inline int ac_change_path(const struct path *path)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, AC_HOOK_FILE_CHANGE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_path(&c, scoped, path, NEED(AC_ACCESS_WRITE));
}

/* open(O_CREAT) of a new file and mknod both come here. */
SEC("lsm/path_mknod")
int BPF_PROG(ac_path_mknod, const struct path *dir, struct dentry *dentry, umode_t mode,
	     unsigned int dev, int ret)
{
	return ret ? ret : ac_change(dir, dentry);
}

SEC("lsm/path_mkdir")
int BPF_PROG(ac_path_mkdir, const struct path *dir, struct dentry *dentry, umode_t mode, int ret)
{
	return ret ? ret : ac_change(dir, dentry);
}

SEC("lsm/path_rmdir")
int BPF_PROG(ac_path_rmdir, const struct path *dir, struct dentry *dentry, int ret)
{
	return ret ? ret : ac_change(dir, dentry);
}

SEC("lsm/path_unlink")
int BPF_PROG(ac_path_unlink, const struct path *dir, struct dentry *dentry, int ret)
{
	return ret ? ret : ac_change(dir, dentry);
}

SEC("lsm/path_symlink")
int BPF_PROG(ac_path_symlink, const struct path *dir, struct dentry *dentry, const char *old_name,
	     int ret)
{
	return ret ? ret : ac_change(dir, dentry);
}

/* A hard link needs write access to both names: otherwise a read-only file
 * could be linked into the workspace and written through the new name. */
SEC("lsm/path_link")
int BPF_PROG(ac_path_link, struct dentry *old_dentry, const struct path *new_dir,
	     struct dentry *new_dentry, int ret)
{
	if (ret)
		return ret;
	ret = ac_change(new_dir, old_dentry); /* links never cross mounts */
	return ret ? ret : ac_change(new_dir, new_dentry);
}

SEC("lsm/path_rename")
int BPF_PROG(ac_path_rename, const struct path *old_dir, struct dentry *old_dentry,
	     const struct path *new_dir, struct dentry *new_dentry, unsigned int flags, int ret)
{
	if (ret)
		return ret;
	ret = ac_change(old_dir, old_dentry);
	return ret ? ret : ac_change(new_dir, new_dentry);
}

SEC("lsm/path_truncate")
int BPF_PROG(ac_path_truncate, const struct path *path, int ret)
{
	return ret ? ret : ac_change_path(path);
}

SEC("lsm/path_chmod")
int BPF_PROG(ac_path_chmod, const struct path *path, umode_t mode, int ret)
{
	return ret ? ret : ac_change_path(path);
}

SEC("lsm/path_chown")
int BPF_PROG(ac_path_chown, const struct path *path, __u64 uid, __u64 gid, int ret) /* kuid_t, kgid_t by value */
{
	return ret ? ret : ac_change_path(path);
}

/* ---- terminals ------------------------------------------------------------------ */

/* asm-generic/ioctls.h (x86 uses the generic numbers); macros are not in BTF. */
#define AC_TIOCSTI 0x5412
#define AC_TIOCLINUX 0x541C

/*
 * Pushing characters into a terminal's input queue: TIOCSTI, and TIOCLINUX's
 * selection paste on a virtual console. A run handed the caller's terminal
 * (stdin/stdout) would type commands into the caller's shell. The kernel
 * allows TIOCSTI on a process's own controlling terminal, and a run is a new
 * session that can take a terminal without one as its controlling terminal
 * (TIOCSCTTY); 6.1 has no dev.tty.legacy_tiocsti to turn it off. So in a
 * scope both are always denied, on every terminal (hook tty). The command is
 * tested before the scope lookup: every other ioctl costs one comparison.
 */
static __always_inline int ac_tty_ioctl(unsigned int cmd)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (cmd != AC_TIOCSTI && cmd != AC_TIOCLINUX)
		return 0;
	scoped = ac_current_scope(&c, AC_HOOK_TTY);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_plain(&c, scoped, 0);
}

SEC("lsm/file_ioctl")
int BPF_PROG(ac_file_ioctl, struct file *file, unsigned int cmd, unsigned long arg, int ret)
{
	return ret ? ret : ac_tty_ioctl(cmd);
}

/* The same from a 32-bit process (int 0x80, an ia32 binary): since 6.8, and
 * in the stable kernels it was backported to, compat ioctls have a hook of
 * their own and never reach file_ioctl. A run's seccomp filter refuses
 * other architectures' system calls anyway; an attached workload has none.
 * Not loaded where the kernel lacks the hook (bpf/programs.cpp). */
SEC("lsm/file_ioctl_compat")
int BPF_PROG(ac_file_ioctl_compat, struct file *file, unsigned int cmd, unsigned long arg, int ret)
{
	return ret ? ret : ac_tty_ioctl(cmd);
}

/* ---- network ------------------------------------------------------------------ */

SEC("lsm/socket_connect")
int BPF_PROG(ac_socket_connect, struct socket *sock, struct sockaddr *address, int addrlen,
	     int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SOCKET_CONNECT);
	if (scoped == AC_SCOPE_NONE)
		return ac_ingress_from_host(sock, address, addrlen);
	return ac_decide_connect(&c, scoped, sock, address, addrlen, 1);
}

/* Bytes to an address given with the message: UDP sendto/sendmsg/sendmmsg,
 * TCP fast open (sendto with MSG_FASTOPEN), and the same through io_uring.
 * Messages on connected sockets carry no address: connect decided those. */
SEC("lsm/socket_sendmsg")
int BPF_PROG(ac_socket_sendmsg, struct socket *sock, struct msghdr *msg, int size, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	/* Direct loads: every send on the host passes here. */
	struct sockaddr *addr = msg->msg_name;
	if (!addr)
		return 0;
	int addrlen = msg->msg_namelen;
	scoped = ac_current_scope(&c, AC_HOOK_SOCKET_SEND);
	if (scoped == AC_SCOPE_NONE)
		return ac_ingress_from_host(sock, addr, addrlen);
	return ac_decide_connect(&c, scoped, sock, addr, addrlen, 0);
}

SEC("lsm/socket_create")
int BPF_PROG(ac_socket_create, int family, int type, int protocol, int kern, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret || kern)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SOCKET_CREATE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_socket_create(&c, scoped, family, type, protocol);
}

/* A unix socket created in a scope is the scope's private one from the
 * start: the kernel can give it a name without a bind (autobind on
 * SO_PASSCRED at connect or sendmsg), after which it could listen. A UDP
 * socket is a client with no peer from the start (ac_udp_client_start): the
 * kernel can bind it without a send the hooks see. A socket whose state
 * cannot be recorded is not created. */
SEC("lsm/socket_post_create")
int BPF_PROG(ac_socket_post_create, struct socket *sock, int family, int type, int protocol, int kern,
	     int ret)
{
	struct ac_ctx c = {};

	if (ret || kern)
		return ret;
	int udp = (family == AF_INET || family == AF_INET6) && type == SOCK_DGRAM &&
		  (protocol == 0 || protocol == IPPROTO_UDP);
	if (family != AF_UNIX && !udp)
		return 0;
	if (ac_current_scope(&c, AC_HOOK_SOCKET_CREATE) != AC_SCOPE_POLICY)
		return 0;
	/* A scope the kernel registered at its cgroup's mkdir has no receive
	 * filter until the daemon attaches it: a UDP client would hear from
	 * anyone. */
	if (udp && (c.scope_flags & AC_SCOPE_F_INCOMPLETE))
		return ac_decide_on_hook(&c, AC_HOOK_SOCKET_CREATE, 0, AC_REASON_INCOMPLETE);
	if (udp ? !ac_udp_client_start(&c, sock->sk) : !ac_sock_own(&c, sock->sk, AC_SOCK_F_PRIVATE))
		return ac_decide_on_hook(&c, AC_HOOK_SOCKET_CREATE, 0, AC_REASON_INTERNAL);
	return 0;
}

SEC("lsm/socket_bind")
int BPF_PROG(ac_socket_bind, struct socket *sock, struct sockaddr *address, int addrlen, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SOCKET_BIND);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_bind(&c, scoped, sock, address, addrlen);
}

SEC("lsm/socket_listen")
int BPF_PROG(ac_socket_listen, struct socket *sock, int backlog, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SOCKET_LISTEN);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_listen(&c, scoped, sock);
}

/* A private socket keeps its address to itself (selftalk.bpf.h). Only the
 * two options are looked at; everything else returns before the scope is. */
SEC("lsm/socket_setsockopt")
int BPF_PROG(ac_socket_setsockopt, struct socket *sock, int level, int optname, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret || level != SOL_SOCKET || (optname != SO_REUSEADDR && optname != SO_REUSEPORT))
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_INGRESS);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_reuse(&c, scoped, sock, optname);
}

/* How a run learns the port the kernel picked for a UDP socket it bound to
 * port 0: the socket becomes reachable as the run's private one here
 * (ac_udp_settle), before anyone can be told the port. Never refused
 * otherwise. */
SEC("lsm/socket_getsockname")
int BPF_PROG(ac_socket_getsockname, struct socket *sock, int ret)
{
	struct ac_ctx c = {};

	if (ret)
		return ret;
	if (ac_current_scope(&c, AC_HOOK_INGRESS) != AC_SCOPE_POLICY || ac_udp_settle(&c, sock->sk))
		return 0;
	return ac_decide_on_hook(&c, AC_HOOK_INGRESS, 0, AC_REASON_INTERNAL);
}

/* A datagram reaching a UDP socket made in a scope's cgroup
 * (ac_udp_receive): a client of the scope hears only from the peers it sent
 * to. Not an LSM program: attached to each scope's cgroup (BPF_CGROUP_INET_
 * INGRESS, by Enforcer::add_scope), so the rest of the host runs no program
 * for the packets it receives. 1 lets the packet in, 0 drops it. */
SEC("cgroup_skb/ingress")
int ac_udp_client_filter(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;
	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->protocol != IPPROTO_UDP)
		return 1;
	return ac_udp_receive(sk, skb) ? 0 : 1;
}

/* Called in sendmsg on every netlink socket, before the kernel acts on the
 * messages; the socket's protocol is read from it, so a socket created
 * before `attach` or passed in is decided too. */
SEC("lsm/netlink_send")
int BPF_PROG(ac_netlink_send, struct sock *sk, struct sk_buff *skb, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_NETLINK_SEND);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_netlink_send(&c, scoped, sk, skb);
}

/* Unix sockets are matched by the socket they reach (its bound inode's path,
 * or its abstract name), not by the address string the caller passed. */
SEC("lsm/unix_stream_connect")
int BPF_PROG(ac_unix_stream_connect, struct sock *sock, struct sock *other, struct sock *newsk,
	     int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_UNIX_CONNECT);
	if (scoped == AC_SCOPE_NONE)
		return ac_unix_ingress_from_host(other, NULL);
	return ac_decide_unix_peer(&c, scoped, other, NULL);
}

SEC("lsm/unix_may_send")
int BPF_PROG(ac_unix_may_send, struct socket *sock, struct socket *other, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	/* Typed pointers for the storage lookups, maybe NULL on 6.12 (then
	 * there is nothing to reach, as ac_decide_unix says too). */
	struct sock *peer = other->sk, *sender = sock->sk;
	if (!peer || !sender)
		return 0;
	scoped = ac_current_scope(&c, AC_HOOK_UNIX_CONNECT);
	if (scoped == AC_SCOPE_NONE)
		return ac_unix_ingress_from_host(peer, sender);
	return ac_decide_unix_peer(&c, scoped, peer, sender);
}

/* ---- the scope itself ---------------------------------------------------------- */

/* Operations no scoped task may perform at all: deny for a scoped task
 * (hook scope_escape, reason protected), allow for everyone else. */
static __always_inline int ac_scope_escape(void)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, AC_HOOK_SCOPE_ESCAPE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_plain(&c, scoped, 0);
}

/* clone3(CLONE_INTO_CGROUP) places the child in any cgroup the caller has a
 * directory fd for, O_PATH included (which file_open never sees). */
SEC("lsm/task_alloc")
int BPF_PROG(ac_task_alloc, struct task_struct *task, unsigned long clone_flags, int ret)
{
	if (ret || !(clone_flags & CLONE_INTO_CGROUP))
		return ret;
	return ac_scope_escape();
}

/* Attaching to another process would let scoped code run inside it:
 * PTRACE_ATTACH/SEIZE, process_vm_readv/writev, /proc/PID/mem of another
 * process. Inside the scope a debug decision, across it a scope escape. */
SEC("lsm/ptrace_access_check")
int BPF_PROG(ac_ptrace_access_check, struct task_struct *child, unsigned int mode, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SCOPE_ESCAPE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_ptrace(&c, scoped, child, mode & PTRACE_MODE_ATTACH);
}

/* PTRACE_TRACEME hands the current task to its parent, which may then poke
 * its text without any further check: the same decision as the parent
 * attaching. A parent outside the scope (the runner) never gets it. */
SEC("lsm/ptrace_traceme")
int BPF_PROG(ac_ptrace_traceme, struct task_struct *parent, int ret)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped;

	if (ret)
		return ret;
	scoped = ac_current_scope(&c, AC_HOOK_SCOPE_ESCAPE);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_ptrace(&c, scoped, parent, 1);
}

/* A new user namespace hands out capabilities (mount, chroot, ...) that the
 * sandbox identity deliberately lacks. */
SEC("lsm/userns_create")
int BPF_PROG(ac_userns_create, const struct cred *cred, int ret)
{
	return ret ? ret : ac_scope_escape();
}

/* ---- the mount table ------------------------------------------------------------ */

/*
 * Path rules hold only while the mount table is what the policy was written
 * for. A privileged process in a scope (a root service confined with
 * `agentcage attach`) could otherwise re-root paths: bind /home/x/lib over
 * an allowed directory, move or unmount a mount to uncover what lies
 * beneath, pivot_root or chroot into a tree of its own. All of it is denied
 * in a scope, in a new mount namespace too (unshare itself has no hook and
 * changes nothing):
 *   sb_mount      every mount(2): new filesystems, bind, move, remount,
 *                 propagation changes
 *   sb_umount     umount2(2), lazy (MNT_DETACH) included
 *   move_mount    move_mount(2): attaching a detached tree (open_tree clone,
 *                 fsmount) or moving a mount
 *   sb_kern_mount creating a superblock (fsconfig(FSCONFIG_CMD_CREATE) of
 *                 the new mount API, and mount(2) after sb_mount)
 *   sb_pivotroot  pivot_root(2)
 *   path_chroot   chroot(2)
 *   capable       CAP_SYS_CHROOT, which setns(CLONE_NEWNS) needs besides
 *                 CAP_SYS_ADMIN (and chroot before path_chroot)
 * open_tree(OPEN_TREE_CLONE) has no hook of its own: it makes a detached
 * copy, which move_mount cannot attach, and files reached through it are
 * denied by the path walk (AC_REASON_PATH_DETACHED, see path.bpf.h).
 * Same signatures on 6.1 and 6.12.
 */
SEC("lsm/sb_mount")
int BPF_PROG(ac_sb_mount, const char *dev_name, const struct path *path, const char *type,
	     unsigned long flags, void *data, int ret)
{
	return ret ? ret : ac_scope_escape();
}

SEC("lsm/sb_umount")
int BPF_PROG(ac_sb_umount, struct vfsmount *mnt, int flags, int ret)
{
	return ret ? ret : ac_scope_escape();
}

SEC("lsm/move_mount")
int BPF_PROG(ac_move_mount, const struct path *from_path, const struct path *to_path, int ret)
{
	return ret ? ret : ac_scope_escape();
}

SEC("lsm/sb_kern_mount")
int BPF_PROG(ac_sb_kern_mount, const struct super_block *sb, int ret)
{
	return ret ? ret : ac_scope_escape();
}

SEC("lsm/sb_pivotroot")
int BPF_PROG(ac_sb_pivotroot, const struct path *old_path, const struct path *new_path, int ret)
{
	return ret ? ret : ac_scope_escape();
}

SEC("lsm/path_chroot")
int BPF_PROG(ac_path_chroot, const struct path *path, int ret)
{
	return ret ? ret : ac_scope_escape();
}

/*
 * Joining another mount namespace (setns with a pidfd or a /proc/PID/ns/mnt
 * fd) would make the walk resolve paths in that namespace, where another
 * tree may sit under an allowed path; there is no LSM hook for setns, but
 * mntns_install asks for CAP_SYS_CHROOT, and so does chroot: neither is
 * needed in a scope. Every other capability is decided without a map
 * lookup, so the hook costs the rest of the host one comparison.
 */
SEC("lsm/capable")
int BPF_PROG(ac_capable, const struct cred *cred, struct user_namespace *ns, int cap,
	     unsigned int opts, int ret)
{
	if (ret || cap != CAP_SYS_CHROOT)
		return ret;
	return ac_scope_escape();
}

/* ---- what the host has: metadata, watches, attributes, processes ------------ */

#include "metadata.bpf.h"
