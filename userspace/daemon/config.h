// SPDX-License-Identifier: Apache-2.0
// `agentcage daemon --config FILE`: the daemon's settings. Every key is
// optional; the defaults work without a file. Errors are located
// ("FILE:LINE:COL: message") and reject the whole file. The file goes
// through the same YAML front end as policies (yaml/document.h: input guard,
// duplicate and unknown settings). docs/daemon.md documents each key.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgroup/delegation.h"
#include "core/paths.h"
#include "policy/model.h"
#include "telemetry/metrics_server.h"
#include "util/result.h"
#include "yaml/diagnostic.h"

namespace agentcage::daemon {

// The longest cgroup path a binding takes (the kernel's key holds one byte
// more and a NUL: AC_BINDING_PATH_MAX).
inline constexpr size_t kMaxBindingPath = 254;

// One entry of `attach:`: a cgroup kept under a policy whenever it exists
// (scope/bind.h).
struct BindingConfig {
  // How the configuration names it (the unit name, or the cgroup path as
  // written): the binding's name in logs and its metric label.
  std::string name;
  // Below the cgroup2 root, with a leading '/': "/system.slice/agent.service".
  std::string cgroup;
  std::string policy;     // a policy of policy_dir, by name
  std::string workspace;  // absolute ("" : none)
  yaml::Position pos;     // where the entry is, for messages
};

struct Config {
  std::string policy_dir = core::kDefaultPolicyDir;
  // host:port for /metrics; "" disables it. Port 0 picks one.
  std::string metrics_address = "127.0.0.1:9477";
  // metrics_tls: {cert_file, key_file[, client_ca_file]}: /metrics over HTTPS
  // only (client certificates too with client_ca_file); unset: HTTP.
  std::optional<telemetry::TlsFiles> metrics_tls;
  // metrics_basic_auth: {users_file}: NAME:HASH lines (telemetry/basic_auth.h)
  // a scraper must match; unset: no authentication.
  std::optional<std::string> metrics_users_file;
  std::string control_socket = core::kDefaultControlSocket;
  // Group (name or number) allowed to use the control socket besides root;
  // unset: root only.
  std::optional<std::string> control_group;
  // JSON lines audit log: a file path (appended to) or "-" for stdout.
  std::string audit_log = "-";
  // Where runs through the daemon live (cgroup/delegation.h): in the
  // daemon's own delegated cgroup, or (the fixed layout) under
  // cgroup_parent, relative to the cgroup2 mount.
  cgroup::LayoutSetting cgroup_layout = cgroup::LayoutSetting::automatic;
  std::string cgroup_parent = core::kDefaultCgroupParent;
  // Not a setting of the file: the runs' parent the daemon settled at start
  // from the two above (run_daemon); a reload never changes it.
  std::string settled_run_parent;
  const std::string& run_parent() const {
    return settled_run_parent.empty() ? cgroup_parent : settled_run_parent;
  }
  std::string pin_root = core::kDefaultPinRoot;
  std::string state_dir = core::kDefaultStateDir;
  // Events kept for `agentcage events` (without --follow) and bytes queued
  // per streaming client before events are dropped (and counted).
  size_t recent_events = 256;
  // The ring buffer the kernel hands decision records to the daemon through
  // (bytes, a power of two from 64 KiB to 1 GiB), used when this daemon loads
  // the program set; an adopted set keeps the size it was loaded with.
  uint32_t ring_buffer_bytes = 1u << 20;
  size_t client_buffer_bytes = 1u << 20;
  size_t max_clients = 64;
  // Connections at once per uid other than root.
  size_t max_clients_per_uid = 16;
  // Runs through the daemon (the control protocol's "run"): at most this
  // many at once in all and per client uid; over either is a refusal.
  size_t max_runs = 32;
  size_t max_runs_per_client = 8;
  // The most a run through the daemon may get (run_max_memory, ...): a
  // client asking for more (or unlimited) is refused; a policy's larger (or
  // unlimited) limit is lowered to the cap. Unset: no cap ("unlimited").
  policy::Limits run_caps = default_run_caps();
  static policy::Limits default_run_caps();
  // `attach:` (docs/daemon.md, "Bindings").
  std::vector<BindingConfig> attach;
};

struct ConfigResult {
  std::optional<Config> config;
  std::vector<yaml::Diagnostic> errors;
  bool ok() const { return config.has_value() && errors.empty(); }
};

// A setting whose value differs between the configuration the daemon runs
// with and the file read again (SIGHUP, `agentcage reload`). `live`: the
// daemon applies it at once; otherwise it waits for the next start (the
// paths the daemon and other agentcage processes share, and what is fixed
// when the program set is loaded). docs/daemon.md lists which is which.
struct ConfigChange {
  std::string setting;  // its key in the file
  bool live = false;
};
std::vector<ConfigChange> config_changes(const Config& running, const Config& next);

// Parses a config document; `filename` is used in diagnostics only.
ConfigResult parse_config(std::string_view text, const std::string& filename);
// Reads and parses FILE (at most 64 KiB).
ConfigResult load_config(const std::string& path);

// The cgroup path (below the cgroup2 root) systemd gives unit `unit`: a
// service or scope under `slice` ("" : system.slice, where system units
// live), a slice at its place in the slice tree ("a-b.slice" is
// "/a.slice/a-b.slice"). An Error saying what is wrong with a name that is
// not a valid instance of a service, scope or slice (systemd's unit name
// rules; a template "x@.service" has no cgroup of its own).
Result<std::string> unit_cgroup_path(std::string_view unit, std::string_view slice);

// "127.0.0.1:9477", "[::1]:9477", ":9477"; the port must be 0..65535.
bool valid_listen_address(std::string_view address);

}  // namespace agentcage::daemon
