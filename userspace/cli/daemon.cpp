// SPDX-License-Identifier: Apache-2.0
// `agentcage daemon`: the host agent's command line (what runs it:
// main_daemon.cpp in agentcage-daemon, main_agentcage.cpp in agentcage);
// `agentcage reload`: its configuration and policy directory read again.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/help.h"
#include "control/client.h"
#include "util/log.h"

namespace agentcage::cli {

void add_daemon(CLI::App& app, const Globals& globals, Commands& commands) {
  auto* daemon = app.add_subcommand(
      "daemon", "Run the host agent: policy directory, metrics, audit log, control socket");
  daemon->footer(with_defaults(
      R"(Run agentcage as a long-running host agent (normally under systemd:
packaging/systemd/agentcage.service).

It adopts (or loads and pins) the BPF LSM programs, installs every *.yaml of
the policy directory as a named policy and hot-reloads it on change (an
invalid file is rejected with FILE:LINE:COL and the previous version keeps
enforcing), writes every denial as a JSON line to the audit log, serves
Prometheus metrics (default http://127.0.0.1:9477/metrics; HTTPS and basic
auth with metrics_tls and metrics_basic_auth) and the control socket
(default @CONTROL_SOCKET@) used by `agentcage status`, `agentcage events`
and `agentcage run`, and reaps runs whose agentcage died.
Enforcement does not depend on it: the programs stay pinned while it is down
or restarting.

FILE is YAML (see docs/daemon.md); without --config the defaults apply.
Signals: SIGTERM/SIGINT stop it (enforcement continues), SIGHUP reads FILE
again (what can change while running applies at once, the rest is logged as
waiting for a restart) and rescans the policy directory, SIGUSR1 reopens the
audit log (log rotation).
Under systemd (Type=notify) it reports READY=1 once it enforces with the
policy directory loaded, STATUS= lines and watchdog keep-alives
(WatchdogSec=), and each log line carries its journald priority.
When systemd delegated its cgroup (the unit's Delegate=yes), it moves itself
into <its cgroup>/daemon and the runs it starts live in <its cgroup>/runs,
never writing above its cgroup; otherwise (no systemd) they live under
cgroup_parent (default @CGROUP_PARENT@). The setting cgroup_layout
(auto, delegated, fixed) chooses.

The daemon is a program of its own, agentcage-daemon, installed next to
agentcage: `agentcage daemon OPTIONS` execs `agentcage-daemon OPTIONS` in
place (the same process), so agentcage, which every run starts, does not
load the daemon's libraries.

Exit status: 0 stopped by a signal, 1 could not start.)"));
  auto config = std::make_shared<std::string>();
  daemon->add_option("--config", *config, "Configuration file (YAML)")->type_name("FILE");
  commands.add(daemon, [config, &globals] { return run_daemon(*config, globals.verbosity); });
}

namespace {

// The daemon's answer to the reload op: every file of the policy directory and its state.
int reload_command(bool json_out, const std::string& socket_path) {
  using nlohmann::json;
  auto answer = control::call(socket_path, json{{"op", "reload"}}, 30000);
  if (!answer) {
    std::cerr << "agentcage reload: " << answer.error().message
              << "\nagentcage reload: is the daemon running? (systemctl status agentcage)\n";
    return 1;
  }
  if (!answer->value("ok", false)) {
    std::cerr << "agentcage reload: " << answer->value("error", std::string("the daemon refused")) << "\n";
    return 1;
  }
  const json files = answer->value("status", json::array());
  const json config = answer->value("config", json::object());
  const json errors = config.value("errors", json::array());
  if (json_out) {
    std::cout << json{{"config", config}, {"policies", files}}.dump(2) << "\n";
  } else {
    // The configuration file: what changed and applies now, what waits for
    // a restart, or why the file was not taken.
    if (config.contains("file") && config["file"].is_string()) {
      auto words = [](const json& list) {
        std::string out;
        for (const auto& k : list) out += (out.empty() ? "" : ", ") + k.get<std::string>();
        return out;
      };
      std::cout << "configuration " << config["file"].get<std::string>() << ": ";
      const json applied = config.value("applied", json::array()), restart = config.value("restart", json::array());
      if (!errors.empty())
        std::cout << "not all applied";
      else if (applied.empty() && restart.empty())
        std::cout << "unchanged";
      else
        std::cout << (applied.empty() ? "" : "applied " + words(applied))
                  << (!applied.empty() && !restart.empty() ? "; " : "")
                  << (restart.empty() ? "" : "changed, applied when the daemon restarts: " + words(restart));
      std::cout << "\n";
      for (const auto& e : errors) std::cout << "  " << e.get<std::string>() << "\n";
    }
    for (const auto& f : files) {
      std::cout << f.value("policy", std::string()) << ": " << f.value("state", std::string());
      if (f.contains("error") && f["error"].is_string()) std::cout << "\n  " << f["error"].get<std::string>();
      std::cout << "\n";
    }
    if (files.empty()) std::cout << "no policy files\n";
  }
  if (!errors.empty()) return 1;
  for (const auto& f : files)
    if (f.value("state", std::string()) != "loaded") return 1;
  return 0;
}

}  // namespace

void add_reload(CLI::App& app, const Globals& globals, Commands& commands) {
  struct Args {
    bool json = false;
    std::string socket = control::default_control_socket();
  };
  auto args = std::make_shared<Args>();
  auto* reload = app.add_subcommand("reload", "Make the daemon read its configuration and policy directory again");
  reload->footer(with_defaults(
      R"(Asks the running daemon (root only) to do what SIGHUP and `systemctl
reload agentcage` do: read its configuration file (--config) again, and
every file of its policy directory, including files that look unchanged and
the files they include. It prints what the configuration changed (settings
applied at once; settings that wait for a restart, such as policy_dir,
control_socket, pin_root, state_dir, cgroup_parent, ring_buffer_size; an
invalid file is not taken at all and its errors are shown as FILE:LINE:COL),
then each policy's state: loaded, rejected (nothing of it enforces) or
rejected_previous_enforcing (its previous version still enforces), with the
error as FILE:LINE:COL.

Exit status: 0 the configuration and every policy file are in force, 1 the
configuration or a policy file was rejected, or the daemon could not be
asked.)"));
  reload->add_flag("--json", args->json,
                   "Print {\"config\": {file, applied, restart, errors}, \"policies\": [states]} as JSON");
  reload
      ->add_option("--socket", args->socket,
                   with_defaults(
                       "The daemon's control socket (default $AGENTCAGE_CONTROL_SOCKET or @CONTROL_SOCKET@)"))
      ->type_name("PATH");
  commands.add(reload, [args, &globals] {
    if (globals.verbosity == 0) log::set_level(log::Level::error);
    return reload_command(args->json, args->socket);
  });
}

}  // namespace agentcage::cli
