// SPDX-License-Identifier: Apache-2.0
// Running the real `agentcage run` (build/agentcage) from kernel tests: start
// it with a policy, wait for it, and read its exit status, output and result
// document. Shared by the test files that exercise whole runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cgroup/cgroup.h"
#include "util/result.h"

#ifndef AGENTCAGE_SOURCE_DIR
#error "AGENTCAGE_SOURCE_DIR must point at the repository (set by tests/kernel/CMakeLists.txt)"
#endif

namespace agentcage::kt {

inline const std::string kPythonSandbox = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/python-sandbox.yaml";
inline const std::filesystem::path kRunsCgroup = "/sys/fs/cgroup/agentcage/runs";

std::string agentcage_bin();
std::string slurp(const std::filesystem::path& p);

// Scope ids of every run finished through finish(), for final checks.
std::set<uint64_t>& all_scopes();

struct Started {
  pid_t pid = -1;
  std::filesystem::path dir;  // holds stdout, stderr, result.json
  std::chrono::steady_clock::time_point t0;
};

struct SpawnOptions {
  std::vector<std::string> env;    // added to this process's environment
  int inherit_fd = -1;             // left open (not CLOEXEC) in agentcage
  std::string policy;              // --policy; empty: python-sandbox
  std::function<void()> in_child;  // runs in the forked child before exec of agentcage
};

// policies/python-sandbox.yaml with its seccomp filter relaxed for the
// keyring calls (syscalls.allow: [keys]), for tests of the LSM's own key
// rules, which must hold without the filter. Written once, under /tmp.
const std::string& python_sandbox_with_keyctl();

// Starts `agentcage run --policy POLICY --result DIR/result.json ARGS`.
Started start(const std::vector<std::string>& args, const SpawnOptions& o = {});

struct Ran {
  int code = -1;
  double seconds = 0;
  std::string out, err;
  nlohmann::json result;
  std::string describe() const;
};

Ran finish(const Started& s);
Ran run(const std::vector<std::string>& args, const SpawnOptions& o = {});

// ARGS for `python3 -c CODE`, after the options in `before`.
std::vector<std::string> py(const std::string& code, std::vector<std::string> before = {});

// Denials of `hook` in the run's result; whether a record names `target`.
uint64_t denied(const Ran& r, const std::string& hook);
bool has_record(const Ran& r, const std::string& hook, const std::string& target);

// A process is gone when /proc has no entry or only a zombie (the VM's
// init may reap late); either way it runs no code.
bool process_gone(pid_t pid);
// Live processes whose uid is one of agentcage's dynamic sandbox uids.
std::vector<pid_t> processes_of_dynamic_uids();
// The run cgroups that exist now.
std::vector<std::string> run_cgroups();
// The run cgroup `cg` (of run_cgroups) is a daemon's spare run: its record
// (in the default state directory) says so, its spare runner is alive, and
// the cgroup holds no process.
bool is_spare_run(const std::string& cg);

// A cgroup of the tests' own, agentcage-kt/NAME below the cgroup2 root (a
// run parent AGENTCAGE_CGROUP_PARENT can name).
Result<cgroup::Cgroup> test_cgroup(const std::string& name);

}  // namespace agentcage::kt
