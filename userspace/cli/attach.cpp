// SPDX-License-Identifier: Apache-2.0
// `agentcage attach` and `agentcage detach`: confine an existing cgroup
// under a policy, and lift it again.
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "scope/attach.h"

namespace agentcage::cli {

void add_attach(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* attach = app.add_subcommand("attach", "Confine an existing cgroup under a policy");
  attach->footer(
      "Put an existing cgroup v2 -- a systemd service's, an agent runner's -- and everything in and\n"
      "below it under POLICY, enforced in the kernel by the shared BPF LSM programs (loaded and\n"
      "pinned in /sys/fs/bpf/agentcage on first use; enforcement continues after this command\n"
      "exits). Processes already in the cgroup are confined from their next operation on; files\n"
      "and connections they opened before stay open. The cgroup cannot be left: its processes\n"
      "cannot move themselves or children out of it. The policy's limits are not applied: the\n"
      "cgroup's owner sets those (systemd: MemoryMax=, TasksMax=, CPUQuota=).\n\n"
      "POLICY is a file path, or a NAME looked up as NAME.yaml in the policy directory\n"
      "(--policy-dir, else $AGENTCAGE_POLICY_DIR, else /etc/agentcage/policies).\n\n"
      "Example: agentcage attach --cgroup system.slice/agent.service --policy python-sandbox \\\n"
      "           --workspace /var/lib/agent/work\n\n"
      "Exit status: 0 attached, 1 failed (nothing changed), 2 usage error.");
  auto request = std::make_shared<scope::AttachRequest>();
  attach
      ->add_option("--cgroup", request->cgroup,
                   "The cgroup: a path under the cgroup v2 mount, or relative to it")
      ->type_name("CGROUP")
      ->required();
  attach->add_option("--policy", request->policy, "Policy NAME or FILE")->type_name("NAME|FILE")->required();
  attach
      ->add_option(
          "--policy-dir", request->policy_dir,
          "Where --policy NAME is looked up (default: $AGENTCAGE_POLICY_DIR or /etc/agentcage/policies)")
      ->type_name("DIR");
  attach
      ->add_option("--workspace", request->workspace,
                   "Directory the policy's ${workspace} rules refer to (required if it has any)")
      ->type_name("DIR");
  commands.add(attach, [request] { return scope::attach_command(*request, std::cout, std::cerr); });

  auto* detach = app.add_subcommand("detach", "Lift the confinement of an attached cgroup");
  detach->footer(
      "Remove the scope `agentcage attach` registered for the cgroup and print what was denied\n"
      "while it was attached. The processes keep running, unconfined.\n\n"
      "Exit status: 0 detached, 1 failed (e.g. the cgroup was not attached), 2 usage error.");
  auto cgroup = std::make_shared<std::string>();
  detach->add_option("--cgroup", *cgroup, "The cgroup, as given to attach")->type_name("CGROUP")->required();
  commands.add(detach, [cgroup] { return scope::detach_command(*cgroup, std::cout, std::cerr); });
}

}  // namespace agentcage::cli
