// agentcage command-line entry point.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "doctor/doctor.h"
#include "policy/policy.h"
#include "scope/attach.h"
#include "util/log.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace {

constexpr const char* kDescription =
    "agentcage confines code that AI agents write and run. Each execution gets its own cgroup v2;\n"
    "BPF LSM programs deny, in the kernel, every exec, network and file operation its policy does\n"
    "not allow, for the process and all of its descendants.";

constexpr const char* kDoctorHelp =
    "Check whether this host can enforce agentcage policies: kernel version, BTF, the BPF LSM in\n"
    "the active LSM list, cgroup v2 and its memory/pids/cpu controllers, privileges, bpffs, and\n"
    "finally a trial load + attach of the LSM programs with a real process denied in a scoped\n"
    "cgroup. Every failed check prints the fix.\n\n"
    "Exit status: 0 when enforcement works, 1 when it does not.";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "agentcage"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("agentcage ") + AGENTCAGE_VERSION);
  app.footer(
      "Exit status of agentcage itself: 0 success, 1 failure, 2 usage error.\n"
      "Run `agentcage COMMAND --help` for a command's options.");

  int verbosity = 0;
  agentcage::scope::AttachRequest scope_attach_request;
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for libbpf debug output)");

  auto* doctor = app.add_subcommand("doctor", "Check whether this host can enforce policies");
  doctor->description(kDoctorHelp);
  bool json = false;
  doctor->add_flag("--json", json, "Print the report as JSON");

  auto* policy_cmd = app.add_subcommand("policy", "Work with policy files");
  policy_cmd->require_subcommand(1);
  auto* check = policy_cmd->add_subcommand("check", "Validate policy files without applying them");
  check->description(
      "Validate each policy FILE (YAML, apiVersion agentcage/v1) without applying it: syntax,\n"
      "unknown keys, types, paths, CIDRs, ports, sizes, durations, and that exec.allow programs\n"
      "exist. Errors are printed as FILE:LINE:COL: message.\n\n"
      "Exit status: 0 when every file is valid, 1 otherwise.");
  std::vector<std::string> policy_files;
  check->add_option("FILE", policy_files, "Policy files to check")->required();

  auto* attach = app.add_subcommand("attach", "Confine an existing cgroup under a policy");
  attach->description(
      "Put an existing cgroup v2 -- a systemd service's, an agent runner's -- and everything in and\n"
      "below it under POLICY, enforced in the kernel by the shared BPF LSM programs (loaded and\n"
      "pinned in /sys/fs/bpf/agentcage on first use; enforcement continues after this command\n"
      "exits). Processes already in the cgroup are confined from their next operation on; files\n"
      "and connections they opened before stay open. The cgroup cannot be left: its processes\n"
      "cannot move themselves or children out of it. The policy's limits are not applied: the\n"
      "cgroup's owner sets those (systemd: MemoryMax=, TasksMax=, CPUQuota=).\n\n"
      "POLICY is a file path, or a NAME looked up as NAME.yaml in $AGENTCAGE_POLICY_PATH\n"
      "(colon-separated; default /etc/agentcage/policies).\n\n"
      "Example: agentcage attach --cgroup system.slice/agent.service --policy python-sandbox \\\n"
      "           --workspace /var/lib/agent/work\n\n"
      "Exit status: 0 attached, 1 failed (nothing changed), 2 usage error.");
  attach->add_option("--cgroup", scope_attach_request.cgroup,
                     "The cgroup: a path under the cgroup v2 mount, or relative to it")
      ->required();
  attach->add_option("--policy", scope_attach_request.policy, "Policy NAME or FILE")->required();
  attach->add_option("--workspace", scope_attach_request.workspace,
                     "Directory the policy's ${workspace} rules refer to (required if it has any)");

  auto* detach = app.add_subcommand("detach", "Lift the confinement of an attached cgroup");
  detach->description(
      "Remove the scope `agentcage attach` registered for the cgroup and print what was denied\n"
      "while it was attached. The processes keep running, unconfined.\n\n"
      "Exit status: 0 detached, 1 failed (e.g. the cgroup was not attached), 2 usage error.");
  std::string detach_cgroup;
  detach->add_option("--cgroup", detach_cgroup, "The cgroup, as given to attach")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return e.get_exit_code() == 0 ? 0 : (rc == 0 ? 0 : 2);
  }

  agentcage::log::set_level(verbosity >= 2   ? agentcage::log::Level::debug
                            : verbosity == 1 ? agentcage::log::Level::info
                                             : agentcage::log::Level::warn);
  // The doctor reports libbpf's failures itself; only show libbpf chatter on -v.
  if (doctor->parsed() && verbosity == 0) agentcage::log::set_level(agentcage::log::Level::off);

  if (check->parsed()) return agentcage::policy::check_command(policy_files, std::cout, std::cerr);

  if (attach->parsed()) return agentcage::scope::attach_command(scope_attach_request, std::cout, std::cerr);
  if (detach->parsed()) return agentcage::scope::detach_command(detach_cgroup, std::cout, std::cerr);

  if (doctor->parsed()) {
    auto report = agentcage::doctor::run();
    std::cout << (json ? agentcage::doctor::format_json(report) : agentcage::doctor::format_text(report));
    return report.ready() ? 0 : 1;
  }
  return 2;
}
