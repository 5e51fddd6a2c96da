// SPDX-License-Identifier: Apache-2.0
#include "policy/syscalls.h"

#include <array>

namespace agentcage::policy {

namespace {

using sv = std::string_view;

constexpr sv kKeys[] = {"keyctl", "add_key", "request_key"};
constexpr sv kUserfaultfd[] = {"userfaultfd"};
constexpr sv kPerf[] = {"perf_event_open"};
constexpr sv kBpf[] = {"bpf"};
constexpr sv kFanotify[] = {"fanotify_init", "fanotify_mark"};
constexpr sv kKcmp[] = {"kcmp"};
constexpr sv kNuma[] = {"mbind",         "set_mempolicy", "set_mempolicy_home_node",
                        "migrate_pages", "move_pages",    "get_mempolicy"};
constexpr sv kNamespaces[] = {"unshare", "setns"};
constexpr sv kMount[] = {"mount",  "umount2", "pivot_root", "chroot",   "open_tree",    "move_mount",
                         "fsopen", "fsmount", "fspick",     "fsconfig", "mount_setattr"};
constexpr sv kKexec[] = {"kexec_load", "kexec_file_load"};
constexpr sv kModules[] = {"init_module",   "finit_module", "delete_module",
                           "create_module", "query_module", "get_kernel_syms"};
constexpr sv kSystem[] = {
    "acct",  "swapon",  "swapoff",          "reboot",      "sethostname", "setdomainname",
    "iopl",  "ioperm",  "quotactl",         "quotactl_fd", "nfsservctl",  "lookup_dcookie",
    "sysfs", "_sysctl", "uselib",           "ustat",       "vhangup",     "syslog",
    "vm86",  "vm86old", "open_by_handle_at"};
constexpr sv kClock[] = {"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime"};
constexpr sv kPersonality[] = {"personality"};
constexpr sv kIoUring[] = {"io_uring_setup", "io_uring_enter", "io_uring_register"};

constexpr std::array kGroups{
    SyscallGroup{"keys", "the kernel keyring is shared with the host", kKeys},
    SyscallGroup{"userfaultfd", "stalls kernel page faults at will: a kernel exploit's favourite tool",
                 kUserfaultfd},
    SyscallGroup{"perf", "performance counters observe other processes and the kernel", kPerf},
    SyscallGroup{"bpf", "loading BPF programs or reading maps", kBpf},
    SyscallGroup{"fanotify", "watching the host's file system", kFanotify},
    SyscallGroup{"kcmp", "compares kernel objects of other processes", kKcmp},
    SyscallGroup{"numa", "NUMA memory policy: needs CAP_SYS_NICE, reaches rarely used kernel code", kNuma},
    SyscallGroup{"namespaces", "entering or making namespaces", kNamespaces},
    SyscallGroup{"mount", "changing the mount table or the root", kMount},
    SyscallGroup{"kexec", "loading a new kernel", kKexec},
    SyscallGroup{"modules", "loading or removing kernel modules", kModules},
    SyscallGroup{"system", "host administration: accounting, swap, reboot, port I/O, quotas, file handles",
                 kSystem},
    SyscallGroup{"clock", "setting the host's clocks", kClock},
    SyscallGroup{"personality", "execution domains other than Linux (READ_IMPLIES_EXEC, no ASLR, ...)",
                 kPersonality, /*by_argument=*/true},
    SyscallGroup{"io_uring", "asynchronous I/O that bypasses the system-call layer", kIoUring},
};

}  // namespace

std::span<const SyscallGroup> syscall_groups() { return kGroups; }

const SyscallGroup* find_syscall_group(std::string_view name) {
  for (const auto& g : kGroups)
    if (g.name == name) return &g;
  return nullptr;
}

std::vector<std::string_view> syscall_group_names() {
  std::vector<std::string_view> out;
  for (const auto& g : kGroups) out.push_back(g.name);
  return out;
}

}  // namespace agentcage::policy
