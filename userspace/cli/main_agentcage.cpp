// SPDX-License-Identifier: Apache-2.0
// The agentcage program: every command but the daemon's own work. The daemon
// is agentcage-daemon, a program of its own in the same directory
// (main_daemon.cpp), so that agentcage, which every direct run starts, loads
// nothing only the daemon uses (Prometheus, HTTPS, systemd; bench/README.md,
// section 3). `agentcage daemon` execs it in place: the same process, so
// systemd's Type=notify and a supervisor still see their daemon.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace agentcage::cli {

int run_daemon(const std::string& config, int verbosity) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::cerr << "agentcage daemon: cannot find agentcage-daemon: reading /proc/self/exe: " << ec.message()
              << "\n";
    return 1;
  }
  const std::string program = (self.parent_path() / "agentcage-daemon").string();
  // agentcage-daemon [-v...] [--config FILE] is `agentcage daemon` itself.
  std::vector<std::string> words{program};
  for (int i = 0; i < verbosity; ++i) words.emplace_back("-v");
  if (!config.empty()) {
    words.emplace_back("--config");
    words.push_back(config);
  }
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  const int err = errno;
  std::cerr << "agentcage daemon: cannot start " << program << ": " << std::strerror(err)
            << "\nagentcage daemon: fix: install agentcage-daemon next to agentcage (the Debian package "
               "installs both in /usr/bin; a build has both in its build directory)\n";
  return 1;
}

}  // namespace agentcage::cli

int main(int argc, char** argv) { return agentcage::cli::main_entry(argc, argv); }
