// SPDX-License-Identifier: Apache-2.0
// `agentcage oci-hook`: the OCI runtime hook (container/hook.h). The runtime
// runs it with the container's state on stdin; its exit status and stderr
// are what the runtime shows.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cgroup/delegation.h"
#include "cli/command.h"
#include "cli/help.h"
#include "container/hook.h"
#include "control/client.h"
#include "oci/state.h"
#include "util/file.h"
#include "util/log.h"

namespace agentcage::cli {
namespace {

// The state is a few KiB (its annotations are the bulk).
constexpr size_t kMaxStateBytes = 1u << 20;
// Below the hooks.d file's timeout (packaging/oci/), so a hung daemon fails
// the hook with this message rather than the runtime killing it.
constexpr int kDaemonTimeoutMs = 8000;

struct HookArgs {
  std::string stage;
  std::string socket;
  std::string result_dir;
};

int oci_hook_command(const HookArgs& args) {
  container::Stage stage;
  if (args.stage == "createRuntime")
    stage = container::Stage::create_runtime;
  else if (args.stage == "poststop")
    stage = container::Stage::poststop;
  else {
    std::cerr << "agentcage oci-hook: --stage must be createRuntime or poststop, not " << args.stage << '\n';
    return 2;
  }
  auto text = read_up_to(STDIN_FILENO, kMaxStateBytes + 1);
  if (!text || text->size() > kMaxStateBytes) {
    std::cerr << "agentcage oci-hook: cannot read the container's state on stdin"
              << (text ? ": over 1 MiB" : ": " + text.error().message)
              << " (this command is run by an OCI runtime as a hook, docs/containers.md)\n";
    return 1;
  }
  auto state = oci::parse_state(*text);
  if (!state) {
    std::cerr << "agentcage oci-hook: the container's state on stdin: " << state.error().message << '\n';
    return 1;
  }
  container::HookEnv env;
  const std::string socket = args.socket.empty() ? control::default_control_socket() : args.socket;
  env.ask_daemon = [socket](const nlohmann::json& request) {
    return control::call(socket, request, kDaemonTimeoutMs);
  };
  if (auto own = cgroup::own_cgroup()) env.own_cgroup = *own;
  env.result_dir = args.result_dir;
  auto outcome = container::run_hook(stage, *state, env);
  if (!outcome) {
    std::cerr << "agentcage oci-hook: " << outcome.error().message << '\n';
    // crun shows only the hook's exit code: the journal keeps the reason.
    log::also_to_journal(log::Level::error, "oci-hook: " + outcome.error().message,
                         {{"CONTAINER", state->id}, {"STAGE", args.stage}});
    // A failed createRuntime keeps the container from starting; a poststop
    // that could not release says so, and the daemon's sweep finishes it.
    return 1;
  }
  if (outcome->acted) std::cerr << "agentcage oci-hook: " << outcome->message << '\n';
  return 0;
}

}  // namespace

void add_oci_hook(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* hook = app.add_subcommand("oci-hook", "OCI runtime hook: confine a container from its entrypoint on");
  hook->footer(with_defaults(
      "Run by an OCI runtime (runc, crun; podman and CRI-O through a hooks.d file, Docker and\n"
      "containerd through agentcage-runc), never by hand: it reads the container's state (JSON)\n"
      "on stdin. A container whose annotation io.agentcage.policy names a policy of the\n"
      "daemon's policy directory is confined by it:\n\n"
      "  --stage createRuntime  asks the daemon to confine the container's cgroup, pending until\n"
      "                         the container's init execs its entrypoint: the runtime finishes\n"
      "                         its setup unconfined, the entrypoint's exec is decided by the\n"
      "                         policy and everything from it on is confined. The workspace is\n"
      "                         the bind mount named by io.agentcage.workspace, else the one at\n"
      "                         /workspace if any. Any error fails the hook, and the runtime does\n"
      "                         not start the container.\n"
      "  --stage poststop       releases the container's scope; with --result-dir, writes what\n"
      "                         was denied to DIR/ID.json.\n\n"
      "Containers without the annotation (and Kubernetes' sandbox containers) are left alone.\n"
      "The daemon must run (agentcage daemon): it holds the policies by name and writes the\n"
      "container's decisions to the audit log with its container_id. See docs/containers.md.\n\n"
      "Exit status: 0 done (or nothing to do), 1 failed (createRuntime: the container must not\n"
      "start), 2 usage error. crun shows only a failed hook's exit code: the reason is also sent to\n"
      "the journal (journalctl SYSLOG_IDENTIFIER=agentcage AGENTCAGE_CONTAINER=ID)."));
  auto args = std::make_shared<HookArgs>();
  hook->add_option("--stage", args->stage, "createRuntime or poststop")->type_name("STAGE")->required();
  hook->add_option("--socket", args->socket,
                   with_defaults("The daemon's control socket (default: $AGENTCAGE_CONTROL_SOCKET or @CONTROL_SOCKET@)"))
      ->type_name("PATH");
  hook->add_option("--result-dir", args->result_dir,
                   "poststop: keep each container's result (the daemon's detach answer) as DIR/ID.json")
      ->type_name("DIR");
  commands.add(hook, [args] { return oci_hook_command(*args); });
}

}  // namespace agentcage::cli
