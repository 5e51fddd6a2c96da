// SPDX-License-Identifier: Apache-2.0
// How agentcage's help reads (metavariables, "COMMAND" rather than CLI11's
// "SUBCOMMAND") and what happens when the command line names no command, or
// one that does not exist.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace agentcage::cli {

// CLI11's formatter with agentcage's conventions: commands are "COMMAND",
// positionals read like their usage ("FILE..."), and a command whose
// operands CLI11 does not parse (run's COMMAND [ARGS...]) can still show them.
class Formatter : public CLI::Formatter {
 public:
  Formatter();

  // Operands shown in the usage line (`usage`) and under "Positionals:"
  // (`name`, `description`) although no CLI11 option holds them.
  void operands(std::string usage, std::string name, std::string description);

  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_positionals(const CLI::App* app) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;

 private:
  std::string operands_usage_;
  std::string operands_name_;
  std::string operands_description_;
};

// "agentcage" or "agentcage policy check".
std::string command_path(const CLI::App& command);

// COMMAND's help, exactly as `agentcage COMMAND --help` prints it.
std::string help_text(const CLI::App& command);

// `text` with each @NAME@ replaced by the default it names in core/paths.h
// (@POLICY_DIR@, @STATE_DIR@, @CONTROL_SOCKET@, @WORKSPACE_ROOT@, @PIN_ROOT@,
// @CGROUP_PARENT@, @RESOLV_CONF@), so help texts never spell a default that could drift
// from the one the code uses. An unknown @NAME@ is a programming error and
// throws std::logic_error (the unit tests render every help text).
std::string with_defaults(std::string_view text);

// "agentcage " + version.
std::string version_text();

// Checks the command words of argv against the commands `app` knows, before
// CLI11 parses (CLI11 would say "A subcommand is required" or "arguments
// were not expected"). No command: the command list to `err`, status 2. An
// unknown command or option: "unknown command 'x'" with a suggestion and a
// usage line to `err`, status 2. Nothing when the words name a command, or when help
// or the version was asked for (CLI11 answers those).
std::optional<int> check_command_words(const CLI::App& app, int argc, char** argv, std::ostream& err);

// The message and usage line for `word`, not a command of `parent`; status 2.
int unknown_command(const CLI::App& parent, const std::string& word, std::ostream& err);

}  // namespace agentcage::cli
