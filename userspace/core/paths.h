// SPDX-License-Identifier: Apache-2.0
// The host's default locations: the one place they are written down. Every
// module takes its default from here; the environment variables and options
// that override them stay with their users (documented in `agentcage run
// --help`, docs/run.md and docs/daemon.md).
#pragma once

namespace agentcage::core {

// Policies looked up by name (run/attach --policy NAME) and watched by the
// daemon. Override: $AGENTCAGE_POLICY_DIR, --policy-dir, daemon policy_dir.
inline constexpr const char* kDefaultPolicyDir = "/etc/agentcage/policies";
// Run records, uid leases, the daemon's state. Override: $AGENTCAGE_STATE_DIR,
// daemon state_dir.
inline constexpr const char* kDefaultStateDir = "/run/agentcage";
// The daemon's control socket. Override: $AGENTCAGE_CONTROL_SOCKET, daemon
// control_socket.
inline constexpr const char* kDefaultControlSocket = "/run/agentcage/control.sock";
// Serialises BPF map updates between agentcage processes (flock).
inline constexpr const char* kDefaultBpfLockPath = "/run/agentcage/bpf.lock";
// Fresh per-run workspaces. Override: $AGENTCAGE_WORKSPACE_ROOT.
inline constexpr const char* kDefaultWorkspaceRoot = "/var/lib/agentcage/workspaces";
// The bpf filesystem agentcage pins under, and its directory there (the
// shared, pinned programs and maps). Override: daemon pin_root.
inline constexpr const char* kDefaultBpffs = "/sys/fs/bpf";
inline constexpr const char* kDefaultPinRoot = "/sys/fs/bpf/agentcage";
// Run cgroups, relative to the cgroup2 root. Override:
// $AGENTCAGE_CGROUP_PARENT, daemon cgroup_parent.
inline constexpr const char* kDefaultCgroupParent = "agentcage/runs";
// The upstream DNS servers a run's resolver forwards the names its policy
// allows to (`nameserver` lines). Override: $AGENTCAGE_RESOLV_CONF.
inline constexpr const char* kDefaultResolvConf = "/etc/resolv.conf";

}  // namespace agentcage::core
