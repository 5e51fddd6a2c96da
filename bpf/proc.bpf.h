/* SPDX-License-Identifier: GPL-2.0 */
/*
 * /proc/<pid> of processes outside the scope.
 *
 * A run may not inspect host processes: everything under a procfs pid
 * directory (/proc/<pid>, its task/<tid>, fd/, ns/, maps, environ, the
 * exe/cwd/root links) belongs to the process it describes, and is denied
 * (hook proc, reason protected) unless that process is in the caller's
 * scope -- whatever the path rules say about /proc. The run's own processes
 * it may always read (/proc/self is the caller's own pid directory once
 * resolved): multiprocessing, psutil and the like look at themselves and
 * their children. Writes there still need a rule.
 *
 * The owner is found from the dentry, never from the name: the procfs inode
 * of the pid directory just below the procfs root carries the struct pid
 * (struct proc_inode), its task the cgroup. /proc/self, /proc/thread-self,
 * /proc/sys and the other top-level entries carry no pid and are left to
 * the path rules. The numbers in a /proc listing stay visible to a run that
 * may read /proc: hiding them needs a PID namespace and a /proc of its own.
 */
#ifndef AGENTCAGE_PROC_BPF_H
#define AGENTCAGE_PROC_BPF_H

#include "scope.bpf.h"
#include <bpf/bpf_core_read.h>

#define PROC_SUPER_MAGIC 0x9fa0
/* Components between a procfs file and the procfs root looked at, at most
 * (/proc/<pid>/task/<tid>/net/netfilter/nf_log is 6). */
#define AC_PROC_MAX_DEPTH 16

enum ac_proc_owner {
	AC_PROC_NONE = 0,  /* not under a procfs pid directory */
	AC_PROC_OWN = 1,   /* a process in the caller's scope */
	AC_PROC_OTHER = 2, /* any other process, an exited one, or undecidable */
};

static __always_inline enum ac_proc_owner ac_proc_owner(const struct ac_ctx *c,
							struct dentry *dentry)
{
	struct super_block *sb = BPF_CORE_READ(dentry, d_sb);
	if (BPF_CORE_READ(sb, s_magic) != PROC_SUPER_MAGIC)
		return AC_PROC_NONE;
	struct dentry *root = BPF_CORE_READ(sb, s_root);
	struct dentry *d = dentry, *top = NULL;
	for (int i = 0; i < AC_PROC_MAX_DEPTH; i++) {
		if (d == root)
			return AC_PROC_NONE; /* /proc itself */
		struct dentry *parent = BPF_CORE_READ(d, d_parent);
		if (parent == root) {
			top = d;
			break;
		}
		if (parent == d)
			return AC_PROC_OTHER; /* disconnected from the procfs root */
		d = parent;
	}
	if (!top)
		return AC_PROC_OTHER; /* deeper than any pid directory's files */
	struct inode *inode = BPF_CORE_READ(top, d_inode);
	if (!inode)
		return AC_PROC_OTHER;
	struct proc_inode *ei =
		(struct proc_inode *)((__u64)inode -
				      bpf_core_field_offset(struct proc_inode, vfs_inode));
	struct pid *pid = BPF_CORE_READ(ei, pid);
	if (!pid)
		return AC_PROC_NONE; /* self, thread-self, sys, meminfo, ... */
	/* pid_task(pid, PIDTYPE_PID): the first task linked on tasks[0]. */
	struct hlist_node *first = BPF_CORE_READ(pid, tasks[0].first);
	if (!first)
		return AC_PROC_OTHER; /* exited */
	struct task_struct *task =
		(struct task_struct *)((__u64)first -
				       bpf_core_field_offset(struct task_struct, pid_links));
	return ac_task_in_scope(c, task) ? AC_PROC_OWN : AC_PROC_OTHER;
}

/* /proc/PID/mem and /proc/PID/task/TID/mem: the only files named "mem" on
 * procfs. */
static __always_inline int ac_proc_mem(struct file *f)
{
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	if (BPF_CORE_READ(d, d_sb, s_magic) != PROC_SUPER_MAGIC ||
	    BPF_CORE_READ(d, d_name.len) != 3)
		return 0;
	char name[4] = {};
	bpf_probe_read_kernel(name, 3, BPF_CORE_READ(d, d_name.name));
	return name[0] == 'm' && name[1] == 'e' && name[2] == 'm';
}

#endif /* AGENTCAGE_PROC_BPF_H */
