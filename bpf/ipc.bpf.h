/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Host IPC and kernel keyrings: the LSM programs and their decisions.
 * Included once, by agentcage.bpf.c (after scope.bpf.h).
 *
 * System V IPC and POSIX message queues. `agentcage run` starts its command
 * in an IPC namespace of its own (CLONE_NEWIPC) and marks the scope
 * AC_SCOPE_F_OWN_IPC: the only IPC objects its processes can name are the
 * ones they made, and they all go with the namespace when the last process
 * ends. Those are allowed. A scope without the flag (an attached cgroup,
 * which shares the IPC namespace of its host or container) is denied every
 * System V IPC operation and every message queue, since the objects it could
 * reach are someone else's. The flag alone is not trusted: a task in the
 * initial IPC namespace is denied too, so a launcher that failed to make
 * the namespace cannot hand the run the host's objects.
 *
 * Keys. `agentcage run` gives the command a session keyring of its own,
 * so the keys a run possesses are the ones it made. The per-uid keyrings
 * (user "_uid.N", user session "_uid_ses.N", persistent "_persistent.N")
 * outlive every process of the uid and are shared by every process, run
 * or not, that gets the same uid: a scope may neither use nor create them,
 * and may use no key it does not possess (a key of the same uid that some
 * other process made is readable by uid alone).
 */
#ifndef AGENTCAGE_IPC_BPF_H
#define AGENTCAGE_IPC_BPF_H

#include "scope.bpf.h"

#define MQUEUE_MAGIC 0x19800202

/* The inode number of the initial IPC namespace (include/linux/proc_ns.h:
 * PROC_IPC_INIT_INO), fixed by the kernel. */
#define AC_IPC_INIT_INO 0xEFFFFFFFU

/* Whether the current task's IPC objects are its scope's own. */
static __always_inline int ac_own_ipc(const struct ac_ctx *c)
{
	if (!(c->scope_flags & AC_SCOPE_F_OWN_IPC))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct ipc_namespace *ns = BPF_CORE_READ(task, nsproxy, ipc_ns);
	return ns && BPF_CORE_READ(ns, ns.inum) != AC_IPC_INIT_INO;
}

/* Every System V IPC operation of a scoped task. */
static __always_inline int ac_sysv_ipc(void)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, AC_HOOK_IPC);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_plain(&c, scoped, ac_own_ipc(&c));
}

/*
 * A file of an mqueue file system (mq_open, or an open of a path under a
 * mount of one such as /dev/mqueue) or a new or removed entry in one
 * (mq_open(O_CREAT) and mq_unlink create and remove without the path
 * hooks). Allowed only for the mqueue file system of the task's own IPC
 * namespace in a scope that has one: /dev/mqueue, seen from a run, is the
 * host's.
 */
static __always_inline int ac_decide_mqueue(struct ac_ctx *c, enum ac_scope_state scoped,
					    struct super_block *sb)
{
	int allowed = 0;
	c->hook = AC_HOOK_IPC;
	if (ac_own_ipc(c)) {
		struct task_struct *task = bpf_get_current_task_btf();
		struct super_block *own = BPF_CORE_READ(task, nsproxy, ipc_ns, mq_mnt, mnt_sb);
		allowed = own && own == sb;
	}
	return ac_decide_plain(c, scoped, allowed);
}

static __always_inline int ac_mqueue(struct super_block *sb)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, AC_HOOK_IPC);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_mqueue(&c, scoped, sb);
}

static __always_inline int ac_is_mqueue(struct super_block *sb)
{
	return sb && BPF_CORE_READ(sb, s_magic) == MQUEUE_MAGIC;
}

/* The per-uid keyrings, by the names the kernel gives them. A keyring a
 * run names so itself is refused too, which costs nothing. */
static __always_inline int ac_per_uid_keyring(struct key *key)
{
	char t[9] = {}, d[13] = {};
	if (bpf_probe_read_kernel_str(t, sizeof(t), BPF_CORE_READ(key, type, name)) < 0 ||
	    bpf_probe_read_kernel_str(d, sizeof(d), BPF_CORE_READ(key, description)) < 0)
		return 1; /* unreadable: fail closed */
	if (t[0] != 'k' || t[1] != 'e' || t[2] != 'y' || t[3] != 'r' || t[4] != 'i' ||
	    t[5] != 'n' || t[6] != 'g' || t[7] != 0)
		return 0; /* not a keyring */
	if (d[0] != '_')
		return 0;
	if (d[1] == 'u' && d[2] == 'i' && d[3] == 'd' && (d[4] == '.' || d[4] == '_'))
		return 1; /* _uid.N, _uid_ses.N */
	return d[1] == 'p' && d[2] == 'e' && d[3] == 'r' && d[4] == 's' && d[5] == 'i' &&
	       d[6] == 's' && d[7] == 't' && d[8] == 'e' && d[9] == 'n' && d[10] == 't' &&
	       d[11] == '.'; /* _persistent.N */
}

/* A key_ref_t carries "possessed" in its lowest bit (security/keys). */
#define AC_KEY_POSSESSED 1UL

static __always_inline int ac_key(struct key *key, int possessed)
{
	struct ac_ctx c = {};
	enum ac_scope_state scoped = ac_current_scope(&c, AC_HOOK_KEY);
	if (scoped == AC_SCOPE_NONE)
		return 0;
	return ac_decide_plain(&c, scoped, possessed && !ac_per_uid_keyring(key));
}

/* ---- the programs --------------------------------------------------------- */

/*
 * System V IPC. ipcperms() ends in ipc_permission for every access by id or
 * key that passes the mode bits: msgget/shmget/semget of an existing key,
 * msgsnd, msgrcv, shmat, semop and the *ctl reads. Creation has its own
 * hooks (*_alloc_security), and so have the *ctl commands that check the
 * owner instead (IPC_RMID, IPC_SET, and IPC_INFO with no object at all).
 * The signatures are the same on 6.1 and 6.12.
 */
SEC("lsm/ipc_permission")
int BPF_PROG(ac_ipc_permission, struct kern_ipc_perm *ipcp, short flag, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

SEC("lsm/msg_queue_alloc_security")
int BPF_PROG(ac_msg_queue_alloc, struct kern_ipc_perm *perm, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

SEC("lsm/shm_alloc_security")
int BPF_PROG(ac_shm_alloc, struct kern_ipc_perm *perm, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

SEC("lsm/sem_alloc_security")
int BPF_PROG(ac_sem_alloc, struct kern_ipc_perm *perm, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

SEC("lsm/msg_queue_msgctl")
int BPF_PROG(ac_msg_queue_msgctl, struct kern_ipc_perm *perm, int cmd, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

SEC("lsm/shm_shmctl")
int BPF_PROG(ac_shm_shmctl, struct kern_ipc_perm *perm, int cmd, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

SEC("lsm/sem_semctl")
int BPF_PROG(ac_sem_semctl, struct kern_ipc_perm *perm, int cmd, int ret)
{
	return ret ? ret : ac_sysv_ipc();
}

/* mq_open(O_CREAT) creates through vfs_mkobj, mq_unlink removes through
 * vfs_unlink: neither passes the path_* hooks. Every other file system
 * leaves on the first comparison, before any map lookup. */
SEC("lsm/inode_create")
int BPF_PROG(ac_inode_create, struct inode *dir, struct dentry *dentry, umode_t mode, int ret)
{
	if (ret)
		return ret;
	struct super_block *sb = BPF_CORE_READ(dir, i_sb);
	return ac_is_mqueue(sb) ? ac_mqueue(sb) : 0;
}

SEC("lsm/inode_unlink")
int BPF_PROG(ac_inode_unlink, struct inode *dir, struct dentry *dentry, int ret)
{
	if (ret)
		return ret;
	struct super_block *sb = BPF_CORE_READ(dir, i_sb);
	return ac_is_mqueue(sb) ? ac_mqueue(sb) : 0;
}

/*
 * Keys: every use of a key by a task (read, search, link, write, view in
 * /proc/keys, ...) asks key_permission; key_alloc is asked before a key
 * exists, with its type and description already set.
 */
/* key_permission(key_ref_t key_ref, const struct cred *cred,
 *                enum key_need_perm need_perm): key_ref_t points to a type
 * that is never defined, and the verifier refuses to read such an argument
 * from the context (6.1: "arg0 type FWD is not a struct"), so the raw
 * value is copied out of the argument array instead of through BPF_PROG. */
SEC("lsm/key_permission")
int ac_key_permission(unsigned long long *ctx)
{
	int ret = (int)ctx[3];
	if (ret)
		return ret;
	unsigned long ref = 0;
	if (bpf_probe_read_kernel(&ref, sizeof(ref), ctx))
		ref = 0; /* unreadable: no key, not possessed (denied in a scope) */
	return ac_key((struct key *)(ref & ~AC_KEY_POSSESSED), (ref & AC_KEY_POSSESSED) != 0);
}

SEC("lsm/key_alloc")
int BPF_PROG(ac_key_alloc, struct key *key, const struct cred *cred, unsigned long flags, int ret)
{
	return ret ? ret : ac_key(key, 1);
}

#endif /* AGENTCAGE_IPC_BPF_H */
