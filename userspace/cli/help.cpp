// SPDX-License-Identifier: Apache-2.0
// agentcage's help conventions, the `help` and `version` commands, and the
// answer to a command line that names no command or an unknown one.
#include "cli/help.h"

#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "core/limits.h"
#include "core/paths.h"
#include "util/suggest.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace agentcage::cli {
namespace {

const CLI::App* find_command(const CLI::App& parent, std::string_view word) {
  for (const CLI::App* command : parent.get_subcommands({}))
    if (command->get_name() == word) return command;
  return nullptr;
}

bool has_commands(const CLI::App& app) { return !app.get_subcommands({}).empty(); }

// The option of `app` that `arg` names ("-v", "--verbose", "--x=1"), or nullptr.
const CLI::Option* find_option(const CLI::App& app, const std::string& arg) {
  return app.get_option_no_throw(arg.substr(0, arg.find('=')));
}

bool is_flag(const CLI::Option* option) { return option != nullptr && option->get_expected_max() == 0; }

// "-vv": short flags of `app` given together.
bool is_flag_bundle(const CLI::App& app, const std::string& arg) {
  if (arg.size() < 3 || arg[0] != '-' || arg[1] == '-') return false;
  for (size_t i = 1; i < arg.size(); ++i)
    if (!is_flag(app.get_option_no_throw(std::string{'-', arg[i]}))) return false;
  return true;
}

bool asks_help_or_version(const CLI::App& app, const CLI::Option* option) {
  return option != nullptr && (option == app.get_help_ptr() || option == app.get_version_ptr());
}

std::string help_command(const CLI::App& app) {
  return "agentcage help" + command_path(app).substr(std::string_view("agentcage").size());
}

// "Usage: agentcage [OPTIONS] COMMAND ...; `agentcage help` lists the commands".
void print_usage_line(const CLI::App& app, std::ostream& err) {
  err << "Usage: " << command_path(app) << " [OPTIONS] COMMAND ...; `" << help_command(app)
      << "` lists the commands\n";
}

int unknown_option(const CLI::App& app, const std::string& arg, std::ostream& err) {
  // Only long names are suggested: every one-letter typo is one edit from every short flag.
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  const std::vector<std::string_view> candidates(names.begin(), names.end());
  const std::string name = arg.substr(0, arg.find('='));
  err << command_path(app) << ": unknown option '" << name << "'" << did_you_mean(name, candidates) << "\n";
  print_usage_line(app, err);
  return 2;
}

}  // namespace

Formatter::Formatter() {
  label("SUBCOMMAND", "COMMAND");
  label("SUBCOMMANDS", "COMMANDS");
  // Room for "--policy NAME|FILE REQUIRED" and a gap before its description.
  column_width(32);
}

void Formatter::operands(std::string usage, std::string name, std::string description) {
  operands_usage_ = std::move(usage);
  operands_name_ = std::move(name);
  operands_description_ = std::move(description);
}

std::string Formatter::make_usage(const CLI::App* app, std::string name) const {
  std::string usage = CLI::Formatter::make_usage(app, std::move(name));
  if (!operands_usage_.empty() && !usage.empty() && usage.back() == '\n')
    usage.insert(usage.size() - 1, " " + operands_usage_);
  return usage;
}

std::string Formatter::make_positionals(const CLI::App* app) const {
  std::string positionals = CLI::Formatter::make_positionals(app);
  if (operands_usage_.empty()) return positionals;
  std::ostringstream out;
  out << (positionals.empty() ? "\n" + get_label("Positionals") + ":\n" : positionals);
  CLI::detail::format_help(out, operands_name_, operands_description_, column_width_);
  return out.str();
}

// A positional reads as in the usage line ("FILE...") rather than CLI11's
// "FILE TEXT ... REQUIRED": the usage line already says whether it is optional.
std::string Formatter::make_option_opts(const CLI::Option* opt) const {
  if (opt->nonpositional()) return CLI::Formatter::make_option_opts(opt);
  return opt->get_expected_max() >= CLI::detail::expected_max_vector_size ? "..." : "";
}

std::string command_path(const CLI::App& command) {
  std::string path = command.get_name();
  for (const CLI::App* parent = command.get_parent(); parent != nullptr; parent = parent->get_parent())
    path = parent->get_name() + " " + path;
  return path;
}

std::string help_text(const CLI::App& command) {
  // What CLI11 prints for `COMMAND --help`; App::help() itself would follow
  // the command the parser selected (`help`) instead.
  return command.get_formatter()->make_help(&command, command_path(command), CLI::AppFormatMode::Normal);
}

std::string with_defaults(std::string_view text) {
  static constexpr std::pair<std::string_view, const char*> kDefaults[] = {
      {"POLICY_DIR", core::kDefaultPolicyDir},
      {"STATE_DIR", core::kDefaultStateDir},
      {"RESOLV_CONF", core::kDefaultResolvConf},
      {"CONTROL_SOCKET", core::kDefaultControlSocket},
      {"WORKSPACE_ROOT", core::kDefaultWorkspaceRoot},
      {"PIN_ROOT", core::kDefaultPinRoot},
      {"CGROUP_PARENT", core::kDefaultCgroupParent},
      {"MEMORY", core::kDefaultMemory},
      {"PIDS", core::kDefaultPids},
      {"TIMEOUT", core::kDefaultTimeout},
      {"DISK", core::kDefaultDisk},
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t at = text.find('@', i);
    if (at == std::string_view::npos) {
      out.append(text.substr(i));
      break;
    }
    out.append(text.substr(i, at - i));
    size_t end = text.find('@', at + 1);
    std::string_view name = end == std::string_view::npos ? "" : text.substr(at + 1, end - at - 1);
    const char* value = nullptr;
    for (const auto& [key, path] : kDefaults)
      if (key == name) value = path;
    if (value == nullptr)
      throw std::logic_error("help text names no known default at: " + std::string(text.substr(at, 40)));
    out.append(value);
    i = end + 1;
  }
  return out;
}

std::string version_text() { return std::string("agentcage ") + AGENTCAGE_VERSION; }

int unknown_command(const CLI::App& parent, const std::string& word, std::ostream& err) {
  std::vector<std::string> names;
  for (const CLI::App* command : parent.get_subcommands({})) names.push_back(command->get_name());
  const std::vector<std::string_view> candidates(names.begin(), names.end());
  err << command_path(parent) << ": unknown command '" << word << "'" << did_you_mean(word, candidates)
      << "\n";
  print_usage_line(parent, err);
  return 2;
}

std::optional<int> check_command_words(const CLI::App& app, int argc, char** argv, std::ostream& err) {
  const CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-') {
      const CLI::Option* option = find_option(*level, arg);
      if (asks_help_or_version(*level, option)) return std::nullopt;
      if (is_flag(option) || is_flag_bundle(*level, arg)) continue;
      // No option before the command takes a value; should one ever, CLI11
      // parses and reports the command line as it is.
      if (option != nullptr) return std::nullopt;
      return unknown_option(*level, arg, err);
    }
    const CLI::App* command = find_command(*level, arg);
    if (command == nullptr) return unknown_command(*level, arg, err);
    if (!has_commands(*command)) return std::nullopt;  // a verb: CLI11 parses its arguments
    level = command;
  }
  err << help_text(*level);
  return 2;
}

void add_help(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* help = app.add_subcommand("help", "Show the command list, or a command's help");
  help->footer(
      "Without COMMAND, the list of commands; `agentcage help COMMAND` prints what\n"
      "`agentcage COMMAND --help` prints, e.g. `agentcage help policy check`.\n\n"
      "Exit status: 0, or 2 for an unknown command.");
  auto words = std::make_shared<std::vector<std::string>>();
  help->add_option("COMMAND", *words, "The command to explain")->type_name("");
  commands.add(help, [&app, words] {
    const CLI::App* target = &app;
    for (const std::string& word : *words) {
      if (!has_commands(*target)) {
        std::cerr << "agentcage help: `" << command_path(*target) << "` has no command '" << word << "'\n";
        return 2;
      }
      const CLI::App* command = find_command(*target, word);
      if (command == nullptr) return unknown_command(*target, word, std::cerr);
      target = command;
    }
    std::cout << help_text(*target);
    return 0;
  });
}

void add_version(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* version = app.add_subcommand("version", "Print agentcage's version");
  version->footer("Prints what `agentcage --version` prints.");
  commands.add(version, [] {
    std::cout << version_text() << "\n";
    return 0;
  });
}

}  // namespace agentcage::cli
