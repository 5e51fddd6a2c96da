// SPDX-License-Identifier: Apache-2.0
// `agentcage status`: what is enforcing, from the daemon or, without one,
// from the pinned BPF maps.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "cli/command.h"
#include "cli/help.h"
#include "control/client.h"
#include "core/paths.h"
#include "daemon/status.h"
#include "util/log.h"
#include "util/text.h"

namespace agentcage::cli {
namespace {

struct StatusArgs {
  bool json = false;
  std::string socket = control::default_control_socket();
};

int status_command(bool json_out, const std::string& socket_path) {
  using nlohmann::json;
  json status;
  auto answer = control::call(socket_path, json{{"op", "status"}}, 5000);
  if (answer && answer->value("ok", false) && answer->contains("status")) {
    status = (*answer)["status"];
  } else {
    std::string why =
        answer ? answer->value("error", std::string("unexpected answer")) : answer.error().message;
    status["daemon"] = {{"running", false}, {"detail", why}};
    // Without the daemon, read the pinned maps directly (root only), but
    // never load programs just to report on them.
    const std::string pin_dir = bpf::Enforcer::shared_pin_dir(core::kDefaultPinRoot);
    if (::geteuid() != 0) {
      status["enforcement"] = {{"ready", false},
                               {"detail", "not root: cannot read the BPF maps without the daemon"}};
    } else if (::access((pin_dir + "/ready").c_str(), F_OK) != 0) {
      status["enforcement"] = {{"ready", false},
                               {"detail", "no programs are pinned in " + pin_dir + " (nothing loaded)"}};
    } else if (auto e = bpf::Enforcer::open_shared()) {
      json k = daemon::kernel_status(**e, {});
      for (auto& [key, value] : k.items()) status[key] = value;
    } else {
      status["enforcement"] = {{"ready", false}, {"detail", e.error().message}};
    }
  }
  if (json_out)
    std::cout << json_display_safe(status.dump(2, ' ', false, json::error_handler_t::replace)) << "\n";
  else
    std::cout << daemon::format_status_text(status);
  return status.value("enforcement", json::object()).value("ready", false) ? 0 : 1;
}

}  // namespace

void add_status(CLI::App& app, const Globals& globals, Commands& commands) {
  auto* status =
      app.add_subcommand("status", "Show what is enforcing: daemon, programs, policies, scopes, counters");
  status->footer(
      "Asks the daemon (control socket) for its status; without a daemon, reads the pinned BPF maps "
      "directly\n"
      "(root) without loading anything.\n\nExit status: 0 when enforcement is ready, 1 otherwise.");
  auto args = std::make_shared<StatusArgs>();
  status->add_flag("--json", args->json, "Print JSON");
  status
      ->add_option("--socket", args->socket,
                   with_defaults(
                       "The daemon's control socket (default $AGENTCAGE_CONTROL_SOCKET or @CONTROL_SOCKET@)"))
      ->type_name("PATH");
  commands.add(status, [args, &globals] {
    if (globals.verbosity == 0) log::set_level(log::Level::error);
    return status_command(args->json, args->socket);
  });
}

}  // namespace agentcage::cli
