// SPDX-License-Identifier: Apache-2.0
// `agentcage policy check [FILE...] [--dir DIR] [--json]`.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bpf/compile.h"
#include "cli/command.h"
#include "policy/policy.h"

namespace agentcage::cli {

void add_policy(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* policy = app.add_subcommand("policy", "Work with policy files");
  policy->require_subcommand(1);
  auto* check = policy->add_subcommand("check", "Check that policy files load, without applying them");
  check->footer(
      "Check each policy FILE (YAML, apiVersion agentcage/v1) as `agentcage run` and the daemon\n"
      "load it, without applying it: syntax, unknown keys, types, paths (files rules are\n"
      "literal: '*', '?' and '[' are refused), CIDRs, ports, sizes, durations, that exec.allow\n"
      "programs exist, and\n"
      "the policy compiler (e.g. a program under a files.write rule, a destination covered by\n"
      "too many port ranges), so \"ok\" means the policy loads on this host. Every error is\n"
      "printed as FILE:LINE:COL: message.\n\n"
      "--dir DIR checks every policy file the daemon would load from DIR (a regular file\n"
      "NAME.yaml, not hidden) under the daemon's file-name rules too: NAME must be a valid\n"
      "policy name and match metadata.name. An empty DIR is valid (the daemon loads nothing).\n\n"
      "--json prints one JSON document (docs/schema/policy-check.schema.json) for CI:\n"
      "  {\"ok\": true|false, \"files\": [{\"file\", \"ok\", \"policy\", \"mode\", \"rules\",\n"
      "   \"errors\": [{\"file\", \"line\", \"column\", \"message\"}]}]}\n\n"
      "Exit status: 0 when every file is valid, 1 otherwise, 2 on a usage error (no FILE\n"
      "and no --dir) or when DIR cannot be listed (then no JSON document; the error is on\n"
      "stderr).");
  auto opts = std::make_shared<policy::CheckOptions>();
  check->add_option("FILE", opts->files, "Policy files to check")->type_name("FILE");
  check->add_option("--dir", opts->dir, "Also check every policy file of this policy directory")
      ->type_name("DIR");
  check->add_flag("--json", opts->json, "Print one JSON document instead of text");
  check->callback([opts] {
    if (opts->files.empty() && !opts->dir)
      throw CLI::ValidationError("policy check", "nothing to check: name policy FILEs, or --dir DIR");
  });
  commands.add(check,
               [opts] { return policy::check_command(*opts, bpf::compile_problem, std::cout, std::cerr); });
}

}  // namespace agentcage::cli
