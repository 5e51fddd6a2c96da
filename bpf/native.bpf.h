/* SPDX-License-Identifier: GPL-2.0 */
/*
 * No new native code in a scope: the decisions behind exec.native_code
 * (write-xor-execute memory) and exec.debugging (code injection through
 * ptrace and /proc/PID/mem).
 *
 * Path rules already keep an allowed interpreter from mapping a file the
 * run wrote. What they cannot see is memory that never was a file with a
 * name: anonymous mappings, shared anonymous memory and memfds (pseudo files
 * of kernel-internal mounts), and private file pages the run has written.
 * Unless the policy allows native code, none of it may become executable:
 *   mmap       PROT_EXEC of anonymous memory or a pseudo file; PROT_WRITE
 *              together with PROT_EXEC; PROT_EXEC of a file opened for
 *              writing (its pages can change behind the mapping)
 *   mprotect   PROT_EXEC for anonymous memory (heap, stacks with
 *              PROT_GROWSDOWN, MAP_SHARED anonymous, mremap'ed copies: all
 *              are anonymous vmas or pseudo files); PROT_WRITE with
 *              PROT_EXEC; a private file mapping with written pages (its
 *              anon_vma: "execmod"); a shared mapping that may be written
 * The kernel has already folded READ_IMPLIES_EXEC into prot when these
 * hooks run, so a personality change cannot hide PROT_EXEC.
 *
 * Debugging: PTRACE_TRACEME and ptrace attach (PTRACE_ATTACH/SEIZE,
 * process_vm_writev, /proc/PID/mem of another process all ask
 * ptrace_access_check with PTRACE_MODE_ATTACH) towards a process of the
 * same scope are "debug" decisions: allowed only by exec.debugging. Towards
 * anything outside the scope they stay scope escapes, whatever the policy.
 * /proc/self/mem never reaches the ptrace check (same thread group), but it
 * writes with FOLL_FORCE through read-only text, so opening any
 * /proc/PID/mem for writing is a debug decision too.
 */
#ifndef AGENTCAGE_NATIVE_BPF_H
#define AGENTCAGE_NATIVE_BPF_H

#include "scope.bpf.h"

#define AC_PROT_WRITE 0x2
#define AC_PROT_EXEC 0x4
#define AC_VM_SHARED 0x8
#define AC_VM_MAYWRITE 0x20
#define AC_FMODE_WRITE 0x2

/* memfd_create, MAP_SHARED|MAP_ANONYMOUS, SysV shm: files made by
 * alloc_file_pseudo, whose dentry is its own parent without being the root
 * of its mount. They are anonymous memory with a file's face. */
static __always_inline int ac_pseudo_file(struct file *f)
{
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct vfsmount *mnt = BPF_CORE_READ(f, f_path.mnt);
	return d == BPF_CORE_READ(d, d_parent) && d != BPF_CORE_READ(mnt, mnt_root);
}

/*
 * mmap_file / file_mprotect with PROT_EXEC (vma is NULL for mmap): 1 when
 * the request would make new native code executable, 0 when the file's path
 * rules decide. Cheap tests first; no map lookups.
 */
static __always_inline int ac_exec_makes_code(struct file *file, struct vm_area_struct *vma,
					      unsigned long prot)
{
	if (!file || ac_pseudo_file(file))
		return 1;
	if (prot & AC_PROT_WRITE)
		return 1;
	if (!vma)
		return (BPF_CORE_READ(file, f_mode) & AC_FMODE_WRITE) != 0;
	if (BPF_CORE_READ(vma, anon_vma))
		return 1;
	unsigned long vm_flags = BPF_CORE_READ(vma, vm_flags);
	return (vm_flags & AC_VM_SHARED) && (vm_flags & AC_VM_MAYWRITE);
}

/* A ptrace relation between the current (scoped) task and `other`: a debug
 * decision inside the scope, a scope escape across its border. Read access
 * (PTRACE_MODE_READ: kcmp, get_robust_list, and every /proc/PID file the
 * proc hook already keeps closed) is no debugging inside the scope, and
 * crosses the border no more than attaching does. */
static __always_inline int ac_decide_ptrace(struct ac_ctx *c, enum ac_scope_state scoped,
					    struct task_struct *other, int attach)
{
	int inside = scoped == AC_SCOPE_POLICY && ac_task_in_scope(c, other);
	if (inside && !attach)
		return 0;
	if (inside) {
		int allowed = (c->policy_flags & AC_POLICY_F_DEBUG) != 0;
		return ac_decide_on_hook(c, AC_HOOK_DEBUG, allowed,
				       allowed ? AC_REASON_RULE_ALLOW : AC_REASON_DEFAULT_DENY);
	}
	return ac_decide_on_hook(c, AC_HOOK_SCOPE_ESCAPE, 0,
			       scoped == AC_SCOPE_POLICY ? AC_REASON_PROTECTED
							 : AC_REASON_NO_POLICY);
}

#endif /* AGENTCAGE_NATIVE_BPF_H */
