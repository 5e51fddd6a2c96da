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

// The verbs of ours, each with what adds it.
using AddFn = void (*)(CLI::App&, const agentcage::cli::Globals&, agentcage::cli::Commands&);
constexpr std::pair<const char*, AddFn> kVerbs[] = {
    {"doctor", agentcage::cli::add_doctor},     {"policy", agentcage::cli::add_policy},
    {"attach", agentcage::cli::add_attach},     {"detach", agentcage::cli::add_attach},
    {"run", agentcage::cli::add_run},           {"daemon", agentcage::cli::add_daemon},
    {"status", agentcage::cli::add_status},     {"events", agentcage::cli::add_events},
    {"oci-hook", agentcage::cli::add_oci_hook}, {"version", agentcage::cli::add_version}};

// agentcage's command line, built: for one verb of ours (a run's start
// pays for one command's options, not all of them) or, for help,
// suggestions and anything else, the whole set (`verb` nullptr).
struct CommandLine {
  explicit CommandLine(const char* verb);
  const char* verb;
  CLI::App app{kDescription, "agentcage"};
  agentcage::cli::Globals globals;
  agentcage::cli::Commands commands;
};

CommandLine::CommandLine(const char* v) : verb(v) {
  namespace cli = agentcage::cli;
  app.formatter(std::make_shared<cli::Formatter>());  // inherited by every command added below
  app.require_subcommand(1);
  app.set_version_flag("--version", cli::version_text());
  app.footer(
      "Exit status of agentcage itself: 0 success, 1 failure, 2 usage error.\n"
      "Run `agentcage help COMMAND` (or `agentcage COMMAND --help`) for a command's options.");
  app.add_flag("-v,--verbose", globals.verbosity, "More log output (repeat for libbpf debug output)");
  if (verb) {
    for (const auto& [name, add] : kVerbs)
      if (std::strcmp(verb, name) == 0) add(app, globals, commands);
  } else {
    cli::add_doctor(app, globals, commands);
    cli::add_policy(app, globals, commands);
    cli::add_attach(app, globals, commands);
    cli::add_run(app, globals, commands);
    cli::add_daemon(app, globals, commands);
    cli::add_reload(app, globals, commands);
    cli::add_status(app, globals, commands);
    cli::add_events(app, globals, commands);
    cli::add_oci_hook(app, globals, commands);
    cli::add_help(app, globals, commands);
    cli::add_version(app, globals, commands);
  }
  name_command_groups(app);
}

// The command line prepare_command_line built: used once, by the first
// main_entry of this process for that verb.
std::unique_ptr<CommandLine>& prepared() {
  static std::unique_ptr<CommandLine> line;
  return line;
}

}  // namespace

void agentcage::cli::prepare_command_line(const char* verb) {
  for (const auto& [name, add] : kVerbs)
    if (std::strcmp(verb, name) == 0) prepared() = std::make_unique<CommandLine>(name);
}

int agentcage::cli::main_entry(int argc, char** argv) {
  namespace cli = agentcage::cli;
  agentcage::log::detect_journal();
  const bool run_invocation = cli::is_run_invocation(argc, argv);
  std::vector<std::string> run_command = cli::take_run_command(argc, argv);

  const char* word = nullptr;
  for (int i = 1; i < argc && !word; ++i)
    if (argv[i][0] != '-') word = argv[i];
  const char* verb = nullptr;
  for (const auto& [name, add] : kVerbs)
    if (word && std::strcmp(word, name) == 0) verb = name;
  std::unique_ptr<CommandLine> line = std::move(prepared());
  if (!line || !verb || std::strcmp(line->verb, verb) != 0) line = std::make_unique<CommandLine>(verb);
  CLI::App& app = line->app;
  line->globals.run_command = std::move(run_command);

  // A usage error of run must not look like COMMAND's exit status.
  const int usage_error = run_invocation ? agentcage::run::kExitSetup : 2;
  if (auto status = cli::check_command_words(app, argc, argv, std::cerr)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : usage_error;
  }

  const int verbosity = line->globals.verbosity;
  agentcage::log::set_level(verbosity >= 2   ? agentcage::log::Level::debug
                            : verbosity == 1 ? agentcage::log::Level::info
                                             : agentcage::log::Level::warn);
  if (const auto* action = line->commands.parsed()) return (*action)();
  return usage_error;
}
