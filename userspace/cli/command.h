// SPDX-License-Identifier: Apache-2.0
// What a verb file gives main.cpp: each add_* function adds its CLI11
// subcommand(s) to the application, with help text and metavariables, and
// registers the action that runs when the command line selected it.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace agentcage::cli {

// agentcage's own flags, given before the command.
struct Globals {
  int verbosity = 0;  // how often -v was given
  // `agentcage run ... -- COMMAND [ARGS...]`: COMMAND and its arguments
  // (take_run_command).
  std::vector<std::string> run_command;
};

// The verbs' actions, keyed by the (sub)command CLI11 parses into.
class Commands {
 public:
  using Action = std::function<int()>;

  void add(const CLI::App* command, Action action) { actions_.emplace_back(command, std::move(action)); }

  // The action of the command the command line selected; nullptr when none.
  const Action* parsed() const {
    for (const auto& [command, action] : actions_)
      if (command->parsed()) return &action;
    return nullptr;
  }

 private:
  std::vector<std::pair<const CLI::App*, Action>> actions_;
};

// run.cpp. COMMAND [ARGS...], when given after "--", is globals.run_command.
void add_run(CLI::App& app, const Globals& globals, Commands& commands);
// Whether the command line is `agentcage [FLAGS] run ...`: its usage errors
// exit 125, not 2, so they cannot pass for COMMAND's own exit status.
bool is_run_invocation(int argc, char** argv);
// For `agentcage run`, removes "--" and everything after it from argv and
// returns those arguments: they are COMMAND's own (CLI11 would otherwise
// parse COMMAND's options as agentcage's).
std::vector<std::string> take_run_command(int& argc, char** argv);

// agentcage's whole command line (main.cpp): the exit status. Also what a
// runner the daemon forks calls with `agentcage run ...` (cli/daemon.cpp).
int main_entry(int argc, char** argv);
// Builds the command line of `verb` (one of agentcage's) ahead, for this
// process's next main_entry with that verb (a process the daemon's fork
// server clones inherits it: main_daemon.cpp). Nothing for another word.
void prepare_command_line(const char* verb);

void add_policy(CLI::App& app, const Globals& globals, Commands& commands);  // policy.cpp
void add_attach(CLI::App& app, const Globals& globals, Commands& commands);  // attach.cpp: attach, detach
void add_daemon(CLI::App& app, const Globals& globals, Commands& commands);  // daemon.cpp
// What `agentcage daemon` does once its command line is parsed: the daemon
// itself in agentcage-daemon (main_daemon.cpp); in agentcage, which does not
// hold the daemon, an exec of agentcage-daemon in its own directory with the
// same options (main_agentcage.cpp). The exit status.
int run_daemon(const std::string& config, int verbosity);
void add_reload(CLI::App& app, const Globals& globals, Commands& commands);  // daemon.cpp
void add_status(CLI::App& app, const Globals& globals, Commands& commands);  // status.cpp
void add_events(CLI::App& app, const Globals& globals, Commands& commands);  // events.cpp
void add_doctor(CLI::App& app, const Globals& globals, Commands& commands);  // doctor.cpp
void add_oci_hook(CLI::App& app, const Globals& globals, Commands& commands);  // oci_hook.cpp
// help.cpp: `agentcage help [COMMAND...]` and `agentcage version`.
void add_help(CLI::App& app, const Globals& globals, Commands& commands);
void add_version(CLI::App& app, const Globals& globals, Commands& commands);

}  // namespace agentcage::cli
