// SPDX-License-Identifier: Apache-2.0
// `agentcage daemon`: the host agent.
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/help.h"
#include "daemon/daemon.h"
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
Prometheus metrics (default http://127.0.0.1:9477/metrics) and the control
socket (default @CONTROL_SOCKET@) used by `agentcage status`,
`agentcage events` and `agentcage run`, and reaps runs whose agentcage died.
Enforcement does not depend on it: the programs stay pinned while it is down
or restarting.

FILE is YAML (see docs/daemon.md); without --config the defaults apply.
Signals: SIGTERM/SIGINT stop it (enforcement continues), SIGHUP rescans the
policy directory, SIGUSR1 reopens the audit log (log rotation).
Under systemd (Type=notify) it reports READY=1 once it enforces with the
policy directory loaded, STATUS= lines and watchdog keep-alives
(WatchdogSec=), and each log line carries its journald priority.

Exit status: 0 stopped by a signal, 1 could not start.)"));
  auto config = std::make_shared<std::string>();
  daemon->add_option("--config", *config, "Configuration file (YAML)")->type_name("FILE");
  commands.add(daemon, [config, &globals] {
    // The daemon logs what it does (reloads, clients) by default.
    if (globals.verbosity == 0) log::set_level(log::Level::info);
    // A run through the daemon is this command line, `agentcage run ...`,
    // in a runner the daemon forks (daemon/run_forker.h).
    return daemon::daemon_command(*config, [](std::vector<std::string> words) {
      std::vector<char*> argv;
      for (auto& w : words) argv.push_back(w.data());
      argv.push_back(nullptr);
      return main_entry(static_cast<int>(words.size()), argv.data());
    });
  });
}

}  // namespace agentcage::cli
