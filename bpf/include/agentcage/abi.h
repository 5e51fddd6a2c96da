/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * agentcage kernel <-> userspace ABI.
 *
 * This is the ONE header shared by the BPF programs (bpf/ *.bpf.c) and the C++
 * agent (userspace/). Every struct crosses the boundary byte for byte, so:
 *   - only fixed-width types, no pointers, no bool, no enums as field types;
 *   - explicit padding, every struct a multiple of 8 bytes;
 *   - the C++ side static_asserts sizes and offsets (userspace/bpf/abi_check.cpp).
 * Changing a layout, or what a field or value means, is an ABI break between
 * the programs and an agent built from another header: bump AC_ABI_VERSION.
 */
#ifndef AGENTCAGE_ABI_H
#define AGENTCAGE_ABI_H

#ifdef __BPF__
/* vmlinux.h provides __u8..__u64 for the BPF build. */
#else
#include <linux/types.h>
#endif

#define AC_ABI_VERSION 16

/* ---- capacities ------------------------------------------------------- */

/* Live scopes (cgroups registered for enforcement) at once. */
#define AC_MAX_SCOPES 16384
/* Policy slots. A slot is what a scope points at; a swap replaces the
 * slot's contents atomically (see struct ac_policy). */
#define AC_MAX_POLICIES 256
/* Path rules across all loaded policies (LPM trie entries). */
#define AC_MAX_PATH_RULES 65536
/* CIDR rules across all loaded policies. */
#define AC_MAX_NET_RULES 16384
/* Deepest cgroup level a scope may be registered at (root is level 0). The
 * scope level mask is a u64, one bit per level. Descendants of a scope may
 * be arbitrarily deep: only the scope itself must sit at level < 64. */
#define AC_MAX_SCOPE_LEVEL 63

/* Path resolution in the kernel: components walked from a file up to the
 * root of the task's mount namespace. A path deeper than this is DENIED
 * (reason AC_REASON_PATH_TOO_DEEP), never matched on a partial walk; one
 * that does not reach that root is denied too (AC_REASON_PATH_DETACHED). */
#define AC_PATH_MAX_DEPTH 64
/* Bytes of a path that take part in rule matching (the LPM key's data). The
 * kernel caps LPM trie data at 256 bytes; 8 go to the key header below. */
#define AC_PATH_KEY_MAX 248
/* Bytes of the path text carried in an audit event. */
#define AC_EVENT_TARGET_MAX 256

/* ---- enumerations (values are ABI) ------------------------------------ */

/* The LSM hooks agentcage decides on. Also the metric label "hook". */
enum ac_hook {
	AC_HOOK_EXEC = 0,           /* bprm_check_security */
	AC_HOOK_FILE_OPEN = 1,      /* file_open */
	AC_HOOK_SOCKET_CONNECT = 2, /* socket_connect */
	AC_HOOK_FILE_CHANGE = 3,    /* path_{mknod,mkdir,rmdir,unlink,symlink,link,rename,truncate,chmod,chown},
				       inode_setattr (timestamps), inode_{set,remove}xattr, inode_{set,remove}_acl */
	AC_HOOK_MMAP_EXEC = 4,      /* mmap_file, file_mprotect with PROT_EXEC */
	AC_HOOK_SOCKET_SEND = 5,    /* socket_sendmsg to an explicit address */
	AC_HOOK_SOCKET_CREATE = 6,  /* socket_create (families and protocols other than unix, TCP, UDP, route netlink) */
	AC_HOOK_UNIX_CONNECT = 7,   /* unix_stream_connect, unix_may_send */
	AC_HOOK_SCOPE_ESCAPE = 8,   /* ptrace attach, user namespaces, cgroupfs, mounts, chroot,
				       io_uring personalities */
	AC_HOOK_SOCKET_BIND = 9,    /* socket_bind: inet off loopback, abstract unix names */
	AC_HOOK_SOCKET_LISTEN = 10, /* socket_listen on inet sockets */
	AC_HOOK_NETLINK_SEND = 11,  /* netlink_send (route changes), netlink connect/sendmsg to a peer */
	AC_HOOK_IPC = 12,           /* System V IPC (ipc_permission, *_alloc_security, *ctl), POSIX mqueues */
	AC_HOOK_KEY = 13,           /* key_permission, key_alloc: kernel keyrings */
	AC_HOOK_FILE_STAT = 14,     /* inode_getattr, inode_readlink, inode_{get,list}xattr, inode_get_acl */
	AC_HOOK_FILE_WATCH = 15,    /* path_notify: inotify, fanotify and dnotify watches */
	AC_HOOK_PROC = 16,          /* /proc/<pid> of a process outside the scope */
	/* mmap_file, file_mprotect: executable anonymous memory, W+X, exec
	 * after write (exec.native_code: deny) */
	AC_HOOK_NATIVE_CODE = 17,
	/* ptrace_traceme, ptrace attach to the scope's own processes, writes to
	 * /proc/PID/mem (exec.debugging: deny) */
	AC_HOOK_DEBUG = 18,
	/* A connection or datagram into a scope's private socket (a loopback
	 * listener or UDP socket no network.listen rule opens) from outside
	 * the scope: a host process (counted in the owner's policy) or
	 * another scope (counted in the sender's); SO_REUSEPORT (and for UDP
	 * SO_REUSEADDR) on such a socket, which would let another socket
	 * share its address. */
	AC_HOOK_INGRESS = 19,
	/* file_ioctl TIOCSTI, TIOCLINUX: pushing input into a terminal */
	AC_HOOK_TTY = 20,
	/* file_receive: a file descriptor passed in (SCM_RIGHTS, pidfd_getfd):
	 * a socket another scope or the host created, a file the policy would
	 * not let the run open */
	AC_HOOK_FILE_RECEIVE = 21,
	AC_HOOK_COUNT = 22,
};

enum ac_decision {
	AC_DECISION_ALLOW = 0,
	AC_DECISION_DENY = 1,
	/* audit mode: would have been denied, was allowed and reported */
	AC_DECISION_AUDIT = 2,
	AC_DECISION_COUNT = 3,
};

/* Why a decision was made. Internal failures are their own reasons so a
 * fail-closed denial is never confused with a policy denial. */
enum ac_reason {
	AC_REASON_RULE_ALLOW = 0,    /* a rule allowed it */
	AC_REASON_DEFAULT_DENY = 1,  /* no rule allowed it */
	AC_REASON_RULE_DENY = 2,     /* an explicit deny rule matched */
	AC_REASON_NO_POLICY = 3,     /* scope points at an empty policy slot */
	AC_REASON_PATH_TOO_DEEP = 4, /* > AC_PATH_MAX_DEPTH components */
	AC_REASON_PATH_UNREADABLE = 5, /* a dentry name could not be read */
	AC_REASON_INTERNAL = 6,      /* scratch map lookup failed etc. */
	AC_REASON_PROTECTED = 7,     /* never allowed in a scope (cgroupfs, ptrace, userns, mounts) */
	AC_REASON_PATH_TOO_LONG = 8, /* too long to match exactly (inside the workspace) */
	/* The walk from the file did not end at the root of the task's mount
	 * namespace: a detached mount (open_tree clone, fsmount, lazily
	 * unmounted), another namespace's mount, or a disconnected dentry.
	 * Its path text would be relative to some other root. */
	AC_REASON_PATH_DETACHED = 9,
	/* The deciding task's scratch could not be had (no memory for it, or
	 * in use by an interrupt on the same task): denied without looking. */
	AC_REASON_SCRATCH = 10,
	/* The scope was registered by the kernel when its cgroup was made (a
	 * binding, AC_SCOPE_F_INCOMPLETE) and the daemon has not yet attached
	 * its UDP receive filter: a UDP socket is not created until it has. */
	AC_REASON_INCOMPLETE = 11,
	AC_REASON_COUNT = 12,
};

/* Access bits in a path rule and in a request. */
#define AC_ACCESS_READ (1u << 0)
#define AC_ACCESS_WRITE (1u << 1)
/* The file may be executed (exact program paths from exec.allow). */
#define AC_ACCESS_EXEC (1u << 2)
/* A unix socket bound at this path (or with this abstract name) may be
 * connected to / sent to. */
#define AC_ACCESS_CONNECT (1u << 3)
/* An abstract unix name (network.listen) this scope may bind. */
#define AC_ACCESS_BIND (1u << 4)
/* Rule only: matching paths are denied whatever else allows them. */
#define AC_ACCESS_DENY (1u << 7)
/* Ancestor entries only (AC_RULES_NS_ANCESTOR): the directory lies on the way
 * to an allowed path, so it may be stat'ed and its attributes read (not
 * listed, opened or watched). Matches only exactly: aux holds the entry's key
 * length in bytes (trailing '/' included), compared with the request's. */
#define AC_ACCESS_TRAVERSE (1u << 4)

/* High bits of a rules id in a key select a rule namespace of the policy:
 * absolute paths (none), workspace-relative paths, abstract unix names, and
 * the ancestors of absolute allowed paths (exact entries, AC_ACCESS_TRAVERSE;
 * kept apart so they never shadow a rule in the longest-prefix match). */
#define AC_RULES_NS_WORKSPACE 0x80000000u
#define AC_RULES_NS_ABSTRACT 0x40000000u
#define AC_RULES_NS_ANCESTOR 0x20000000u
#define AC_RULES_ID_MASK 0x1fffffffu
/* Name rules (the files.deny patterns NAME and *.EXT at any depth, written
 * with a leading "**" and "/"): a path is denied when
 * any of its components is NAME, or ends in ".EXT" (the suffix). Entries of
 * ac_path_rules under rules_id | AC_RULES_NS_NAME (the one combination of
 * two namespace bits in use); the key's path is
 *   [AC_NAME_EXACT or AC_NAME_SUFFIX][length L][L bytes]
 * with prefixlen 32 + 8 * (2 + L), value access AC_ACCESS_DENY: every entry
 * is as long as its length byte says, so a match is always exact. One more
 * entry, [AC_NAME_LENGTHS] (prefixlen 32 + 8), holds struct ac_name_lengths:
 * the suffix lengths to try on each component. A policy with name rules
 * has AC_POLICY_F_NAMES; without the flag no name lookup is made. */
#define AC_RULES_NS_NAME (AC_RULES_NS_WORKSPACE | AC_RULES_NS_ABSTRACT)
#define AC_NAME_EXACT 1u
#define AC_NAME_SUFFIX 2u
#define AC_NAME_LENGTHS 3u
/* Longest NAME or ".EXT" of a name rule, in bytes. */
#define AC_NAME_RULE_MAX 64
/* Distinct suffix lengths one policy may use (each one lookup per path
 * component). */
#define AC_NAME_SUFFIX_LENGTHS 8
/* The value of the AC_NAME_LENGTHS entry (the size of struct ac_path_rule):
 * the distinct suffix lengths in use, ascending, 0 after the last one. */
struct ac_name_lengths {
	__u8 len[AC_NAME_SUFFIX_LENGTHS];
};
/* In ac_net_rules keys: the network.listen entries (local address and port
 * a socket may be bound to or listen on) rather than network.allow's
 * destinations. */
#define AC_RULES_NS_LISTEN 0x80000000u

/* ---- maps ------------------------------------------------------------- */

/* ac_scopes: HASH (no prealloc), key __u64 cgroup id (the cgroup v2 inode
 * number, as bpf_get_current_ancestor_cgroup_id returns and
 * name_to_handle_at gives). A task is in scope S when the cgroup registered
 * for S is its own cgroup or any ancestor of it. An update links a new
 * element and frees the old one after an RCU grace period, so a reader sees
 * the old value or the new one, never a mix. (A preallocated hash recycles
 * a replaced or deleted element at once: a hook still reading it could see
 * fields of two different entries.) */
/* The scope's processes run in an IPC namespace of their own, made for them
 * (agentcage run starts its command with CLONE_NEWIPC): System V IPC and
 * POSIX message queues of that namespace are theirs and allowed. Without the
 * flag (an attached cgroup shares its IPC namespace with others) every System
 * V IPC operation and every message queue is denied in the scope. */
#define AC_SCOPE_F_OWN_IPC (1u << 0)
/* The scope's DNS is answered by a resolver of its own (a policy with domain
 * rules): every connect and send to port 53, TCP or UDP, any address, is
 * sent by the cgroup's socket-address programs (dns.bpf.h) to
 * 127.0.0.1:dns_port instead, and the addresses that resolver pinned
 * (ac_pins) are reachable. AC_SCOPE_F_DNS6: it listens on [::1]:dns_port too
 * (without it a query to an IPv6 server is refused). */
#define AC_SCOPE_F_DNS (1u << 1)
#define AC_SCOPE_F_DNS6 (1u << 2)
/* The scope belongs to a binding (ac_bindings): registered by the kernel when
 * the bound cgroup was made, or by the daemon for a bound cgroup that already
 * existed. The daemon removes it once that cgroup is gone. */
#define AC_SCOPE_F_BOUND (1u << 3)
/* Registered by the kernel at the cgroup's mkdir (ac_cgroup_mkdir): what only
 * userspace can attach, the UDP receive filter, is not on the cgroup yet, so
 * the scope's processes may not create a UDP socket (AC_REASON_INCOMPLETE)
 * until the daemon has attached it and cleared the flag. */
#define AC_SCOPE_F_INCOMPLETE (1u << 4)
struct ac_scope {
	__u64 scope_id;    /* userspace's id for the run/attachment; in events */
	__u32 policy_slot; /* key into the policies map */
	__u16 level;       /* cgroup level of the registered cgroup (root: 0) */
	__u16 flags;       /* AC_SCOPE_F_* */
	__u32 workspace_tag; /* key of this scope's entry in ac_workspaces; 0: none */
	__u16 dns_port;    /* AC_SCOPE_F_DNS: the resolver's port (host order) */
	__u16 pad;
	/* 0: armed, the scope confines. Otherwise the scope is *pending*: no
	 * program treats it as a scope (its processes are decided as if it
	 * were not registered, and nothing is counted for it) until the task
	 * group whose global tgid this is (bpf_get_current_pid_tgid() >> 32,
	 * the host's pid of a process) execs from inside the scope's cgroup:
	 * bprm_check_security then arms it (writes 0 here, in place) and
	 * decides that same exec under the policy. A container runtime's init
	 * is registered this way: its setup (pivot_root, mounts, /proc writes)
	 * is runtime code, its entrypoint's exec the first confined act.
	 * An exec of any other task group, or of this one from outside the
	 * cgroup, leaves it pending. Armed is for good: only add_scope writes
	 * a non-zero value, into a new element (BPF_NOEXIST), and userspace
	 * never rewrites a pending element (an arming in the old element
	 * would be lost). */
	__u32 arm_tgid;
	__u32 pad2;
};

/* A slot no policy ever holds (one past the last): a scope on it is denied
 * everything (AC_REASON_NO_POLICY), uncounted. A binding whose policy is not
 * loaded points here, so its cgroup is confined, never left open. */
#define AC_SLOT_NONE AC_MAX_POLICIES

/* ac_bindings: HASH, key struct ac_binding_key: a cgroup's path below the
 * cgroup v2 root as the kernel writes it ("/system.slice/agent.service"),
 * NUL-padded. Written by the daemon from its configuration (`attach:`).
 * When a cgroup is made at that path (systemd starting the unit), the
 * cgroup_mkdir tracepoint program registers it as a scope right there, in
 * the mkdir, before anything can run in it: scope id = cgroup id,
 * AC_SCOPE_F_BOUND | AC_SCOPE_F_INCOMPLETE, the binding's slot, level and
 * workspace tag (whose ac_workspaces entries the daemon keeps while the
 * binding exists). */
#define AC_MAX_BINDINGS 256
#define AC_BINDING_PATH_MAX 256
struct ac_binding_key {
	char path[AC_BINDING_PATH_MAX];
};
struct ac_binding {
	__u32 policy_slot;   /* the scope's slot (AC_SLOT_NONE: deny all) */
	__u32 workspace_tag; /* 0: none */
	__u16 level;         /* cgroup level of the path (the root is 0) */
	__u16 pad[3];
	__u64 confined; /* cgroups the kernel registered at their mkdir */
	__u64 failed;   /* ... and could not (ac_scopes full): the daemon confines them late */
};

/* ac_pins: HASH, one entry per address a scope's resolver answered for an
 * allowed name, for each port and protocol the name's rules allow. A connect
 * or send the scope's rules deny is allowed when (scope, address, port,
 * protocol) or (scope, address, 0, protocol) is pinned and not expired.
 * Keyed by scope id (a cgroup id, never reused while the host runs), so no
 * other scope and no host process gains from a pin. Userspace deletes a
 * scope's pins with the scope, and each one when it expires. */
#define AC_MAX_PINS 65536
struct ac_pin_key {
	__u64 scope_id;
	__u8 addr[16];  /* IPv4 as ::ffff:a.b.c.d */
	__u16 port;     /* host order; 0: every port */
	__u8 proto_bit; /* AC_PROTO_TCP or AC_PROTO_UDP */
	__u8 pad[5];
};
struct ac_pin {
	__u64 expires_ns; /* bpf_ktime_get_boot_ns() after which it no longer allows */
};

/* ac_dns_origin: socket storage (SK_STORAGE): where a scoped socket's last
 * DNS query was sent before dns.bpf.h redirected it, so that its answers and
 * getpeername show that address again (glibc drops an answer whose source is
 * not the server it asked). It lives and goes with its socket: no table
 * shared by all runs that one run's sockets could crowd. */
struct ac_dns_origin {
	__u8 addr[16]; /* IPv4 as ::ffff:a.b.c.d */
	__u16 port;    /* host order */
	__u16 pad[3];
};

/* ac_workspaces: LPM_TRIE with the ac_path_key layout; rules_id_be holds the
 * scope's workspace_tag and path the workspace directory + '/'. One entry per
 * scope, so per-run paths never multiply a policy's rules: a path inside the
 * workspace is looked up again, with the workspace prefix cut off, among the
 * policy's workspace-relative rules (AC_RULES_NS_WORKSPACE). */
struct ac_workspace {
	__u32 len; /* bytes of the workspace path, without the trailing '/' */
	__u32 pad;
};
/* A scope's workspace ancestors ("/", "/tmp/", ... and the workspace itself)
 * are entries of ac_workspaces too, under rules_id_be = workspace_tag |
 * AC_WORKSPACE_ANCESTOR, so a run may stat the directories on the way to its
 * workspace. They match exactly: len holds the entry's key length in bytes
 * (trailing '/' included). Workspace tags stay below this bit. */
#define AC_WORKSPACE_ANCESTOR 0x80000000u

/* ac_policies: HASH (no prealloc, see ac_scopes), key __u32 slot.
 * Indirection so that swapping a live policy is ONE element update: new
 * rules are written under a fresh rules_id, then the slot is pointed at it,
 * then the old rules are deleted. A hook reads the slot once and uses that
 * rules_id for every lookup of the decision. */
#define AC_POLICY_F_AUDIT (1u << 0) /* report would-be denials, deny nothing */
/* exec.native_code: allow. Anonymous memory (and memfd, shared anonymous
 * memory: files on kernel-internal mounts) may become executable, and
 * mappings may be writable and executable: what a JIT needs. */
#define AC_POLICY_F_NATIVE_CODE (1u << 1)
/* exec.debugging: allow. ptrace (attach, PTRACE_TRACEME), process_vm_writev
 * and /proc/PID/mem writes between processes of the same scope. */
#define AC_POLICY_F_DEBUG (1u << 2)
/* files.deny has name rules (AC_RULES_NS_NAME): look each path's
 * components up among them. */
#define AC_POLICY_F_NAMES (1u << 3)
/* Who keeps a slot alive (userspace bookkeeping; the hooks ignore it). */
#define AC_POLICY_OWNER_NAMED 0u     /* installed by name (daemon, tests): kept until removed */
#define AC_POLICY_OWNER_TRANSIENT 1u /* installed for runs/attachments: freed when no scope uses it */
#define AC_POLICY_NAME_MAX 64
struct ac_policy {
	__u32 rules_id; /* tag of this policy's entries in the rule maps */
	__u32 flags;    /* AC_POLICY_F_* */
	/* ---- userspace bookkeeping below; the hooks read only the above ---- */
	__u32 owner;    /* AC_POLICY_OWNER_* */
	__u32 pad;
	__u64 digest;   /* hash of the compiled rules: same name + digest = same policy */
	char name[AC_POLICY_NAME_MAX]; /* metadata.name, NUL-padded */
};

/* ac_settings: ARRAY of one. Written by userspace only. */
struct ac_config {
	/* Bit L set: at least one scope is registered at cgroup level L,
	 * or a binding (ac_bindings) is at that level: the kernel registers
	 * its scopes at mkdir without writing this.
	 * The hooks only look up ancestors at these levels, so a process
	 * outside every scope costs one lookup per distinct scope level
	 * (normally one: all runs live at the same depth). */
	__u64 scope_levels;
	/* Lowest and highest set bit of scope_levels (undefined when it is 0);
	 * bound the hooks' loop without a count-trailing-zeros instruction. */
	__u32 min_level;
	__u32 max_level;
	/* Userspace allocators, persisted in the (pinned) map so that several
	 * agentcage processes sharing the maps never reuse an id. */
	__u32 next_rules_id;
	__u32 next_workspace_tag;
};

/* ac_path_rules: LPM_TRIE. The key's data is rules_id (big endian, so the trie
 * compares it first as a whole) followed by an absolute path with a trailing
 * '/', e.g. "/usr/lib/". Requests look up "<rules_id><path>/", so a rule for
 * /usr/lib covers /usr/lib itself and everything below it but not
 * /usr/lib64. Longest prefix wins; the compiler drops allow rules that lie
 * inside a deny rule, so "deny wins" holds with longest-prefix matching.
 * prefixlen is in bits and counts the rules_id too. */
struct ac_path_key {
	__u32 prefixlen;
	__u32 rules_id_be;
	__u8 path[AC_PATH_KEY_MAX];
};

struct ac_path_rule {
	__u32 access; /* AC_ACCESS_* */
	__u32 aux;    /* abstract unix names: the name's length (exact match) */
};

/* ac_net_rules: LPM_TRIE. Data: rules_id (big endian) + a 16-byte address;
 * IPv4 is stored and looked up as IPv4-mapped IPv6 (::ffff:a.b.c.d), so a
 * v4 rule also covers a v4-mapped destination on an AF_INET6 socket. The
 * compiler merges into each CIDR entry the ranges of every shorter CIDR that
 * covers it, so the longest match carries the union. */
#define AC_NET_MAX_RANGES 16
#define AC_PROTO_TCP (1u << 0)
#define AC_PROTO_UDP (1u << 1)
#define AC_PROTO_OTHER (1u << 2) /* e.g. ICMP ping sockets: only "protocol: any" */
#define AC_PROTO_ANY (AC_PROTO_TCP | AC_PROTO_UDP | AC_PROTO_OTHER)

struct ac_net_key {
	__u32 prefixlen;
	__u32 rules_id_be;
	__u8 addr[16];
};

struct ac_port_range {
	__u16 first; /* host order, inclusive */
	__u16 last;
	__u8 protocols; /* AC_PROTO_* */
	__u8 pad[3];
};

struct ac_net_rule {
	__u32 count; /* used entries of ranges[] */
	__u32 pad;
	struct ac_port_range ranges[AC_NET_MAX_RANGES];
};

/* ac_sock_owners: SK_STORAGE. The scope a socket belongs to (its id, and
 * its cgroup to decide a stranger's attempt in its policy), set when a
 * scoped task binds a unix socket or listens on / binds an inet address
 * (see bpf/selftalk.bpf.h); freed with the socket. */
#define AC_SOCK_F_PRIVATE (1u << 0) /* reachable from its own scope only */
/* A private UDP socket bound to port 0: the kernel picks the port after the
 * bind hook, so it is registered in ac_listeners at the scope's next
 * getsockname, connect or sendto on it. */
#define AC_SOCK_F_PENDING (1u << 1)
#define AC_UNIX_PEERS 4
struct ac_sock_owner {
	__u64 scope_id;
	__u64 scope_cgroup;
	__u32 flags;	 /* AC_SOCK_F_* */
	__u32 next_peer; /* the ring's next place in peers */
	/* A unix datagram socket's: the cookies of the last sockets outside
	 * the scope it sent to, which may answer it. */
	__u64 peers[AC_UNIX_PEERS];
};

/* ac_listeners: HASH (no prealloc). Where a scope's inet sockets can be
 * reached: what a connecting task knows (the destination) leads to the
 * socket's owner. An entry speaks only while the socket it names (pointer
 * and socket cookie) is still bound there; userspace deletes a scope's
 * entries with the scope. */
struct ac_listener_key {
	__u32 netns;   /* inode number of the socket's net namespace */
	__u16 port;    /* host order */
	__u16 proto;   /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 addr[16]; /* IPv4 as ::ffff:a.b.c.d */
};

struct ac_listener {
	__u64 scope_id;
	__u64 scope_cgroup; /* the owner's registered cgroup (its policy slot) */
	__u64 sk;           /* the socket's address: compared, read through, never trusted */
	__u64 cookie;       /* its socket cookie */
	__u32 flags;        /* AC_SOCK_F_* */
	__u32 pad;
};

/* ac_decision_counts: PERCPU_ARRAY, index policy_slot * AC_HOOK_COUNT + hook. Summed
 * over CPUs by userspace. Every decision on a scoped task is counted here,
 * so counters are exact even when events are dropped. */
struct ac_counters {
	__u64 decisions[AC_DECISION_COUNT];
	__u64 reasons[AC_REASON_COUNT];
};

/* ac_stats: PERCPU_ARRAY, index enum ac_stat. */
enum ac_stat {
	AC_STAT_EVENTS_SENT = 0,
	/* ring buffer full (or no memory to build the record): counted, never waited on */
	AC_STAT_EVENTS_LOST = 1,
	/* kept out of the ring buffer: the scope had used its budget
	 * (AC_SCOPE_EVENT_BUDGET); each scope's own count is in its report */
	AC_STAT_EVENTS_SUPPRESSED = 2,
	AC_STAT_COUNT = 3,
};

/* ---- ring buffer records ---------------------------------------------- */

enum ac_event_type {
	AC_EVENT_DECISION = 1,
};

/* Every record starts with this header. size covers the whole record; the
 * consumer checks it before reading the body. */
struct ac_event_header {
	__u16 type; /* enum ac_event_type */
	__u16 size;
	__u32 abi;  /* AC_ABI_VERSION */
	__u64 time_ns;  /* bpf_ktime_get_boot_ns() */
	__u64 cgroup_id; /* the task's own cgroup */
};

/* What target[] / addr of a decision record describe. */
enum ac_target_kind {
	AC_TARGET_NONE = 0,
	AC_TARGET_PATH = 1,          /* target: a file's path */
	AC_TARGET_INET = 2,          /* family, port, addr (see below) */
	AC_TARGET_UNIX = 3,          /* target: the path a unix socket is bound at */
	/* target: an abstract unix socket's name, without the leading NUL of
	 * sun_path; any bytes, NULs included (target_len counts them). */
	AC_TARGET_UNIX_ABSTRACT = 4,
};

struct ac_event_decision {
	struct ac_event_header hdr;
	__u64 scope_id;
	__u32 policy_slot;
	__u32 pid;  /* thread group id (userspace "pid") */
	__u32 tid;
	__u32 uid;
	__u8 hook;     /* enum ac_hook */
	__u8 decision; /* enum ac_decision */
	__u8 reason;   /* enum ac_reason */
	__u8 target_kind; /* enum ac_target_kind */
	__s32 error;   /* the errno returned to the task (negative), or 0 */
	char comm[16];
	/* AC_TARGET_INET: family (AF_INET/AF_INET6), port (host order),
	 * addr (4 or 16 bytes, network order); protocol is the socket's.
	 * socket_create records carry the requested family and protocol, unix
	 * records family AF_UNIX. port and addr are 0 for every other kind. */
	__u16 family;
	__u16 port;
	__u16 protocol;
	__u16 target_len; /* bytes used in target[] (text, terminating NUL excluded) */
	__u8 addr[16];
	char target[AC_EVENT_TARGET_MAX];
	/* AC_TARGET_PATH records of a path decision: the access the operation
	 * needed (AC_ACCESS_READ / WRITE / EXEC: an open's mode, a change's
	 * write, an exec), with AC_RECORD_DIRECTORY when the target is a
	 * directory (a rule on it would allow everything below it); 0 for
	 * every other record. */
	__u32 access;
	__u32 pad;
};

/* ---- per-scope report -------------------------------------------------- */

/* ac_scope_reports: HASH (no prealloc), key __u64 scope_id. Userspace inserts
 * a zeroed entry when it registers a scope and reads it back when the scope
 * ends, so a run learns what was denied without consuming the shared ring
 * buffer. The hooks only look the entry up on a deny/audit decision (never on
 * the allow path) and never create one. */
#define AC_REPORT_RECORDS 8
/* Records one scope may put into the shared ring buffer per window of
 * AC_SCOPE_EVENT_WINDOW_NS, so that one run flooding denials cannot starve
 * every other run's audit events (the buffer is shared and drained by one
 * daemon). Only the copies for the audit log are limited: decisions, the
 * counters and the scope's own report are not. */
#define AC_SCOPE_EVENT_BUDGET 256
#define AC_SCOPE_EVENT_WINDOW_NS 1000000000ULL
struct ac_scope_report {
	__u64 denied[AC_HOOK_COUNT];  /* deny decisions by hook */
	__u64 audited[AC_HOOK_COUNT]; /* audit-mode would-be denials by hook */
	__u32 records_taken; /* records offered; > AC_REPORT_RECORDS: later ones not kept */
	/* The ring buffer budget: records offered in the window that began
	 * at window_start_ns (boot clock). Lock-free, so CPUs deciding in the
	 * scope at the same instant may each take the last place: the budget
	 * holds within the number of CPUs. */
	__u32 window_events;
	__u64 window_start_ns;
	/* Records kept out of the ring buffer because the budget was used:
	 * exact (each record is either offered to the ring buffer or counted
	 * here). */
	__u64 events_suppressed;
	/* The first AC_REPORT_RECORDS records of the scope, kept whether or not
	 * the shared ring buffer had room for them (records are built in the
	 * deciding task's storage, then copied here and to the ring buffer).
	 * Best effort under concurrency: two CPUs denying in one scope at the
	 * same instant may claim the same place (records_taken stays exact). */
	struct ac_event_decision records[AC_REPORT_RECORDS];
	/* Records that a recording scope's own ring buffer (ac_scope_rings)
	 * had no room for: exact, so a recording says whether it is complete. */
	__u64 records_unrecorded;
};

/* ac_scope_rings: HASH_OF_MAPS, key __u64 scope_id, value a RINGBUF of
 * AC_SCOPE_RING_BYTES that userspace creates for a scope it records
 * (`agentcage run --record`) before the scope's first process starts, and
 * drains itself: every record of that scope goes there too, outside the
 * audit log's budget, so a recording misses nothing unless its reader falls
 * this far behind (records_unrecorded). No entry: not recorded. */
#define AC_SCOPE_RING_BYTES (4u << 20)
/* In a record's access: the target is a directory. */
#define AC_RECORD_DIRECTORY (1u << 31)
#define AC_MAX_RECORDED_SCOPES 256

#endif /* AGENTCAGE_ABI_H */
