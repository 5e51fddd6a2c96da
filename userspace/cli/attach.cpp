// SPDX-License-Identifier: Apache-2.0
// `agentcage attach` and `agentcage detach`: confine an existing cgroup
// under a policy, and lift it again.
#include <agentcage/abi.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bpf/names.h"
#include "cli/command.h"
#include "cli/help.h"
#include "policy/policy.h"
#include "policy/values.h"
#include "scope/attach.h"

namespace agentcage::cli {
namespace {

// Exit status 0 attached, 1 failed (the policy's located errors, then why).
int attach_command(const scope::AttachRequest& req) {
  std::vector<std::string> diagnostics;
  auto a = scope::attach(req, diagnostics);
  for (const auto& d : diagnostics) std::cerr << d << '\n';
  if (!a) {
    std::cerr << "agentcage attach: " << a.error().message << '\n';
    return 1;
  }
  std::cout << "attached: " << a->cgroup.string() << " (cgroup id " << a->cgroup_id
            << ") is confined by policy " << a->policy_name << " (" << policy::to_string(a->mode) << ", from "
            << a->policy_file << ")";
  if (!a->workspace.empty()) std::cout << ", workspace " << a->workspace;
  std::cout << "\n";
  return 0;
}

// Exit status 0 detached, 1 failed. Prints the policy and what was denied
// and audited while the cgroup was attached, with the hooks that decided.
int detach_command(const std::string& cgroup) {
  auto d = scope::detach(cgroup);
  if (!d) {
    std::cerr << "agentcage detach: " << d.error().message << '\n';
    return 1;
  }
  const scope::Released& r = d->released;
  const bpf::ScopeReport report = r.report.value_or(bpf::ScopeReport{});
  std::cout << "detached: " << d->cgroup.string() << " is no longer confined (was policy "
            << (r.policy_name.empty() ? "?" : r.policy_name) << ")";
  std::cout << "; while attached: " << report.denied_total() << " denied, " << report.audited_total()
            << " audited";
  std::string sep = " (";
  for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h) {
    if (report.denied[h] + report.audited[h] == 0) continue;
    std::cout << sep << bpf::hook_name(h) << ' ' << report.denied[h] + report.audited[h];
    sep = ", ";
  }
  if (sep != " (") std::cout << ')';
  std::cout << "\n";
  return 0;
}

}  // namespace

void add_attach(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* attach = app.add_subcommand("attach", "Confine an existing cgroup under a policy");
  attach->footer(with_defaults(
      "Put an existing cgroup v2 -- a systemd service's, an agent runner's -- and everything in and\n"
      "below it under POLICY, enforced in the kernel by the shared BPF LSM programs (loaded and\n"
      "pinned in @PIN_ROOT@ on first use; enforcement continues after this command\n"
      "exits). Processes already in the cgroup are confined from their next operation on; files\n"
      "and connections they opened before stay open. The cgroup cannot be left: its processes\n"
      "cannot move themselves or children out of it. The policy's limits are not applied: the\n"
      "cgroup's owner sets those (systemd: MemoryMax=, TasksMax=, CPUQuota=).\n\n"
      "POLICY is a file path, or a NAME looked up as NAME.yaml in the policy directory\n"
      "(--policy-dir, else $AGENTCAGE_POLICY_DIR, else @POLICY_DIR@).\n\n"
      "--mode audit confines the cgroup without denying anything: every operation the policy\n"
      "would deny is reported (audit log, `agentcage detach`'s counts) instead.\n\n"
      "Example: agentcage attach --cgroup system.slice/agent.service --policy python-sandbox \\\n"
      "           --workspace /var/lib/agent/work\n\n"
      "Exit status: 0 attached, 1 failed (nothing changed), 2 usage error."));
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
          with_defaults("Where --policy NAME is looked up (default: $AGENTCAGE_POLICY_DIR or @POLICY_DIR@)"))
      ->type_name("DIR");
  attach
      ->add_option("--workspace", request->workspace,
                   "Directory the policy's ${workspace} rules refer to (required if it has any)")
      ->type_name("DIR");
  auto mode = std::make_shared<std::string>();
  attach
      ->add_option("--mode", *mode,
                   "enforce or audit: instead of the policy's mode, for this attachment only (audit: "
                   "nothing is denied, every would-be denial is reported)")
      ->type_name("MODE");
  commands.add(attach, [request, mode] {
    if (!mode->empty()) {
      auto m = policy::parse_mode(*mode);
      if (!m) {
        std::cerr << "agentcage attach: --mode: " << m.error().message << '\n';
        return 2;
      }
      request->mode = *m;
    }
    return attach_command(*request);
  });

  auto* detach = app.add_subcommand("detach", "Lift the confinement of an attached cgroup");
  detach->footer(
      "Remove the scope `agentcage attach` registered for the cgroup and print what was denied\n"
      "while it was attached. The processes keep running, unconfined.\n\n"
      "Exit status: 0 detached, 1 failed (e.g. the cgroup was not attached), 2 usage error.");
  auto cgroup = std::make_shared<std::string>();
  detach->add_option("--cgroup", *cgroup, "The cgroup, as given to attach")->type_name("CGROUP")->required();
  commands.add(detach, [cgroup] { return detach_command(*cgroup); });
}

}  // namespace agentcage::cli
