// SPDX-License-Identifier: Apache-2.0
// `agentcage policy check FILE...`.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "policy/policy.h"

namespace agentcage::cli {

void add_policy(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* policy = app.add_subcommand("policy", "Work with policy files");
  policy->require_subcommand(1);
  auto* check = policy->add_subcommand("check", "Validate policy files without applying them");
  check->footer(
      "Validate each policy FILE (YAML, apiVersion agentcage/v1) without applying it: syntax,\n"
      "unknown keys, types, paths, CIDRs, ports, sizes, durations, and that exec.allow programs\n"
      "exist. Errors are printed as FILE:LINE:COL: message.\n\n"
      "Exit status: 0 when every file is valid, 1 otherwise.");
  auto files = std::make_shared<std::vector<std::string>>();
  check->add_option("FILE", *files, "Policy files to check")->type_name("FILE")->required();
  commands.add(check, [files] { return policy::check_command(*files, std::cout, std::cerr); });
}

}  // namespace agentcage::cli
