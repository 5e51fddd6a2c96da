// SPDX-License-Identifier: Apache-2.0
// agentcage-daemon, the host agent's program: `agentcage-daemon [-v...]
// [OPTIONS]` is `agentcage daemon [OPTIONS]` (what `agentcage daemon` execs,
// main_agentcage.cpp), with the daemon built in. It holds the whole command
// line: a run through the daemon is `agentcage run ...` in a runner its fork
// server starts (daemon/run_forker.h), or, without a fork server,
// `agentcage-daemon run ...` exec'd (daemon/run_service.cpp).
#include <cstring>
#include <string>
#include <vector>

#include "cli/command.h"
#include "daemon/daemon.h"
#include "util/log.h"

namespace agentcage::cli {

int run_daemon(const std::string& config, int verbosity) {
  // The daemon logs what it does (reloads, clients) by default.
  if (verbosity == 0) log::set_level(log::Level::info);
  // Built once here: each runner, a copy of the fork server, parses its
  // `agentcage run ...` with its own copy of it.
  prepare_command_line("run");
  return daemon::daemon_command(config, [](std::vector<std::string> words) {
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    return main_entry(static_cast<int>(words.size()), argv.data());
  });
}

}  // namespace agentcage::cli

namespace {

// agentcage's own flag: -v, -vv, ... or --verbose.
bool verbose_flag(const char* arg) {
  if (std::strcmp(arg, "--verbose") == 0) return true;
  if (arg[0] != '-' || arg[1] != 'v') return false;
  for (const char* c = arg + 1; *c; ++c)
    if (*c != 'v') return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // A runner exec'd by the daemon: agentcage's own `run` command line.
  if (argc > 1 && std::strcmp(argv[1], "run") == 0) return agentcage::cli::main_entry(argc, argv);
  // Otherwise the daemon's: agentcage's -v flags first, then `daemon`.
  std::vector<char*> words{argv[0]};
  int i = 1;
  for (; i < argc && verbose_flag(argv[i]); ++i) words.push_back(argv[i]);
  static char daemon_word[] = "daemon";
  words.push_back(daemon_word);
  for (; i < argc; ++i) words.push_back(argv[i]);
  words.push_back(nullptr);
  return agentcage::cli::main_entry(static_cast<int>(words.size() - 1), words.data());
}
