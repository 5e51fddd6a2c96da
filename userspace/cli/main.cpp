// SPDX-License-Identifier: Apache-2.0
// agentcage's command-line entry point: agentcage's own flags, the verbs
// (one file each under cli/), and which exit status a usage error gets.
#include <CLI/CLI.hpp>

#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/help.h"
#include "run/options.h"
#include "util/log.h"

namespace {

constexpr const char* kDescription =
    "agentcage confines code that AI agents write and run. Each execution gets its own cgroup v2;\n"
    "BPF LSM programs deny, in the kernel, every exec, network and file operation its policy does\n"
    "not allow, for the process and all of its descendants.";

// Every command appears under "Commands:", in agentcage's words.
void name_command_groups(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands(nullptr)) {
    command->group("Commands");
    name_command_groups(*command);
  }
}

}  // namespace

int agentcage::cli::main_entry(int argc, char** argv) {
  namespace cli = agentcage::cli;
  agentcage::log::detect_journal();
  const bool run_invocation = cli::is_run_invocation(argc, argv);
  std::vector<std::string> run_command = cli::take_run_command(argc, argv);

  CLI::App app{kDescription, "agentcage"};
  app.formatter(std::make_shared<cli::Formatter>());  // inherited by every command added below
  app.require_subcommand(1);
  app.set_version_flag("--version", cli::version_text());
  app.footer(
      "Exit status of agentcage itself: 0 success, 1 failure, 2 usage error.\n"
      "Run `agentcage help COMMAND` (or `agentcage COMMAND --help`) for a command's options.");

  cli::Globals globals;
  app.add_flag("-v,--verbose", globals.verbosity, "More log output (repeat for libbpf debug output)");

  // Only the command named is built when it is one of ours (a run's start
  // pays for one command's options, not all of them); the whole set for
  // help, suggestions and anything else.
  using AddFn = void (*)(CLI::App&, const cli::Globals&, cli::Commands&);
  const std::pair<const char*, AddFn> verbs[] = {{"doctor", cli::add_doctor},
                                                 {"policy", cli::add_policy},
                                                 {"attach", cli::add_attach},
                                                 {"detach", cli::add_attach},
                                                 {"run", nullptr},
                                                 {"daemon", cli::add_daemon},
                                                 {"status", cli::add_status},
                                                 {"events", cli::add_events},
                                                 {"oci-hook", cli::add_oci_hook},
                                                 {"version", cli::add_version}};
  const char* word = nullptr;
  for (int i = 1; i < argc && !word; ++i)
    if (argv[i][0] != '-') word = argv[i];
  cli::Commands commands;
  bool one = false;
  for (const auto& [name, add] : verbs)
    if (word && std::strcmp(word, name) == 0) {
      if (add)
        add(app, globals, commands);
      else
        cli::add_run(app, globals, commands, std::move(run_command));
      one = true;
    }
  if (!one) {
    cli::add_doctor(app, globals, commands);
    cli::add_policy(app, globals, commands);
    cli::add_attach(app, globals, commands);
    cli::add_run(app, globals, commands, std::move(run_command));
    cli::add_daemon(app, globals, commands);
    cli::add_reload(app, globals, commands);
    cli::add_status(app, globals, commands);
    cli::add_events(app, globals, commands);
    cli::add_oci_hook(app, globals, commands);
    cli::add_help(app, globals, commands);
    cli::add_version(app, globals, commands);
  }
  name_command_groups(app);

  // A usage error of run must not look like COMMAND's exit status.
  const int usage_error = run_invocation ? agentcage::run::kExitSetup : 2;
  if (auto status = cli::check_command_words(app, argc, argv, std::cerr)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : usage_error;
  }

  agentcage::log::set_level(globals.verbosity >= 2   ? agentcage::log::Level::debug
                            : globals.verbosity == 1 ? agentcage::log::Level::info
                                                     : agentcage::log::Level::warn);
  if (const auto* action = commands.parsed()) return (*action)();
  return usage_error;
}
