// SPDX-License-Identifier: Apache-2.0
// The fixture of runs through the daemon (daemon_run_test.cpp,
// daemon_delegation_test.cpp): the real daemon with a control group, a run
// policy, and an unprivileged client (uid 65534) that runs `agentcage run`.
// Needs root and a kernel that enforces (the VM).
#pragma once

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "daemon_env.h"

namespace agentcage::kt {

namespace fs = std::filesystem;
using nlohmann::json;

inline constexpr uid_t kClientUid = 65534;
inline constexpr gid_t kClientGid = 65534;
inline constexpr gid_t kControlGid = 4242;

// sh, cat, sleep and true may run; the workspace may be read and written; /etc/hostname
// read; nothing else (/etc/passwd is denied).
inline const char* kRunPolicy =
    "apiVersion: agentcage/v1\n"
    "kind: Policy\n"
    "metadata: {name: drun}\n"
    "spec:\n"
    "  exec: {allow: [/usr/bin/cat, /usr/bin/sleep, /usr/bin/sh, /usr/bin/true]}\n"
    "  files:\n"
    "    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache, /etc/locale.alias, /etc/hostname, \"${workspace}\"]\n"
    "    write: [\"${workspace}\"]\n"
    "  limits: {memory: 256Mi, timeout: 2m}\n";

// Becomes the client: uid/gid 65534, in the control group when `member`.
inline std::function<void()> become_client(bool member) {
  return [member] {
    gid_t groups[] = {kControlGid};
    if (::setgroups(member ? 1 : 0, groups) != 0 || ::setgid(kClientGid) != 0 || ::setuid(kClientUid) != 0)
      ::_exit(98);
  };
}

class DaemonRun : public DaemonEnv {
 protected:
  void SetUp() override {
    DaemonEnv::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    write_file(dir_ / "policies" / "drun.yaml", kRunPolicy);
    std::ofstream(dir_ / "daemon.yaml", std::ios::app)
        << "control_group: \"" << kControlGid << "\"\n"
        << "max_runs: 24\nmax_runs_per_client: 22\nmax_clients_per_uid: 32\n"
        << "run_max_memory: 512Mi\n";
    // The client's own directory (its results and workspaces).
    client_ = dir_ / "client";
    fs::create_directories(client_);
    ASSERT_EQ(::chown(client_.c_str(), kClientUid, kClientGid), 0);
    ::chmod(dir_.c_str(), 0755);
  }

  void TearDown() override {
    DaemonEnv::TearDown();
    if (auto e = bpf::Enforcer::open_shared())
      if (auto pols = (*e)->policies())
        for (const auto& p : *pols)
          if (p.owner == AC_POLICY_OWNER_NAMED &&
              (p.name == "drun" || p.name == "dnsrun" || p.name == "python-sandbox"))
            (void)(*e)->remove_policy(p.slot);
  }

  void start(const std::function<void()>& in_child = {}) {
    start_daemon(in_child);
    ASSERT_TRUE(wait_until([&] { return named_slot(status(), "drun").has_value(); }, 60s)) << log();
  }

  // `agentcage run --policy drun ARGS... -- CMD` as the client; output in
  // client/TAG.out, the result in client/TAG.json.
  Proc client_run(const std::string& tag, const std::vector<std::string>& args,
                  const std::vector<std::string>& cmd, bool member = true,
                  const std::string& policy = "drun") {
    std::vector<std::string> argv = {agentcage_bin(), "run",      "--policy",
                                     policy,          "--result", (client_ / (tag + ".json")).string()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--");
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return spawn(argv, client_ / (tag + ".out"), {}, become_client(member));
  }

  json result(const std::string& tag) {
    return json::parse(slurp(client_ / (tag + ".json")), nullptr, false);
  }
  std::string out(const std::string& tag) { return slurp(client_ / (tag + ".out")); }

  // How many descriptors the daemon holds.
  size_t daemon_fds() const {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(daemon_.pid) + "/fd", ec);
         !ec && it != fs::end(it); it.increment(ec))
      ++n;
    return n;
  }

  // How many of the daemon's descriptors open `path`.
  size_t daemon_fds_to(const fs::path& path) const {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(daemon_.pid) + "/fd", ec);
         !ec && it != fs::end(it); it.increment(ec)) {
      std::error_code link_ec;
      if (fs::read_symlink(it->path(), link_ec) == path && !link_ec) ++n;
    }
    return n;
  }

  // The run cgroups of runs (not the daemon's spare run).
  std::vector<std::string> runs_in_flight() {
    std::vector<std::string> out;
    for (auto& cg : run_cgroups())
      if (!is_spare_run(cg)) out.push_back(std::move(cg));
    return out;
  }

  // The pids of the daemon's spare runners (by their records).
  static std::vector<pid_t> spare_pids() {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/run/agentcage/runs", ec)) {
      if (e.path().extension() != ".json") continue;
      const json record = json::parse(slurp(e.path()), nullptr, false);
      if (record.is_object() && record.value("spare", false) && record.contains("owner_pid"))
        out.push_back(record["owner_pid"].get<pid_t>());
    }
    return out;
  }

  // Nothing of any run is left: no run cgroup, no process of a sandbox uid.
  // The daemon's one spare run (prepared ahead, no run's yet) is not a run.
  bool nothing_left() {
    size_t spares = 0;
    for (const auto& cg : run_cgroups())
      if (!is_spare_run(cg) || ++spares > 1) return false;
    return processes_of_dynamic_uids().empty();
  }

  fs::path client_;
};

// The processes whose parent is `parent`, with their command name.
inline std::vector<std::pair<pid_t, std::string>> children_of(pid_t parent) {
  std::vector<std::pair<pid_t, std::string>> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent) continue;
    out.emplace_back(std::stoi(name), stat.substr(open + 1, close - open - 1));
  }
  return out;
}

}  // namespace agentcage::kt
