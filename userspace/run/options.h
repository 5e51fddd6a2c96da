// SPDX-License-Identifier: Apache-2.0
// `agentcage run`: what the caller asked for, and the pure decisions made
// from it (policy lookup, limits, environment, exec candidates, exit codes).
// Everything here is free of side effects so it is unit-tested on the host.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/labels.h"
#include "core/paths.h"
#include "policy/model.h"
#include "util/result.h"

namespace agentcage::run {

// Exit statuses of `agentcage run` other than the command's own.
inline constexpr int kExitTimeout = 124;     // wall-clock timeout
inline constexpr int kExitSetup = 125;       // agentcage could not set up or enforce
inline constexpr int kExitCannotExec = 126;  // COMMAND denied or not executable
inline constexpr int kExitNotFound = 127;    // COMMAND not found

// Host locations, each overridable by an environment variable (documented in
// `agentcage run --help`).
struct Paths {
  std::string policy_dir = core::kDefaultPolicyDir;        // AGENTCAGE_POLICY_DIR
  std::string cgroup_parent = core::kDefaultCgroupParent;  // AGENTCAGE_CGROUP_PARENT (below the cgroup2 root)
  std::string workspace_root = core::kDefaultWorkspaceRoot;  // AGENTCAGE_WORKSPACE_ROOT
  std::string state_dir = core::kDefaultStateDir;            // AGENTCAGE_STATE_DIR (run records, uid locks)
  // The upstream resolvers a run's resolver forwards allowed names to
  // (policies with domain rules).
  std::string resolv_conf = core::kDefaultResolvConf;  // AGENTCAGE_RESOLV_CONF
};
// Defaults overridden by the AGENTCAGE_* variables of `env` ("KEY=VALUE").
Paths paths_from_env(const char* const* env);

// The sandbox identity: a fixed user, or (default) a uid of its own per run
// from [kDynamicUidBase, kDynamicUidBase + kDynamicUidCount), gid = uid.
inline constexpr uid_t kDynamicUidBase = 0x70000000;  // 1879048192
inline constexpr uint32_t kDynamicUidCount = 65536;

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;  // "user NAME" / "uid N" / "dynamic uid N", for messages
};

struct RunOptions {
  std::string policy;  // NAME or FILE
  std::optional<std::string> workspace;
  bool keep = false;
  std::optional<std::string> timeout, memory, pids, cpu, disk;  // as written on the command line
  std::vector<std::string> env;                                 // KEY=VALUE
  std::optional<std::string> result_file;                       // --result FILE ("-": stdout)
  std::optional<int> result_fd;                                 // --result-fd N
  std::optional<std::string> user;
  // --mode enforce|audit: the policy's mode for this run only (root's).
  std::optional<policy::Mode> mode;
  // --record: every decision record of the run into the result's
  // "recording" (run/recording.h).
  bool record = false;
  // --io-dir DIR: copied into the (generated) workspace before COMMAND and
  // the workspace copied back into it after (run/artifacts.h), as
  // --io-owner UID:GID (default: DIR's owner).
  std::optional<std::string> io_dir, io_owner;
  core::Labels labels;  // --label KEY=VALUE
  std::vector<std::string> command;
  Paths paths;
};

// The run's limits: each from the command line (a value or `unlimited`),
// else the policy's, else the default of core/limits.h (memory, pids, timeout
// and disk; cpu has none). The result states no `unlimited`: a limit that is
// unset there is none.
Result<policy::Limits> effective_limits(const policy::Limits& from_policy, const RunOptions& opts);

// "KEY=VALUE" with KEY a portable variable name ([A-Za-z_][A-Za-z0-9_]*).
Result<std::pair<std::string, std::string>> parse_env_assignment(std::string_view text);

// The run's complete environment: PATH, HOME and TMPDIR (the workspace),
// LANG=C.UTF-8, then each --env in order (a later one replaces an earlier
// one, and may replace the defaults). Nothing of agentcage's own environment.
inline constexpr const char* kSandboxPath = "/usr/local/bin:/usr/bin:/bin";
Result<std::vector<std::string>> sandbox_environment(const std::string& workspace,
                                                     const std::vector<std::string>& extra);

// The files to try, in order, for COMMAND: itself when it contains '/',
// otherwise "<dir>/COMMAND" for each directory of `path_value` (empty
// entries mean the working directory, as in execvp).
std::vector<std::string> exec_candidates(const std::string& command, std::string_view path_value);

// How trying the candidates ended, execvp-style: ENOENT/ENOTDIR move on to
// the next candidate, EACCES is remembered and the search goes on, any other
// error stops. Returns the errno to report.
int combine_exec_errors(const std::vector<int>& errors_in_order);
// Whether the search goes on to the next candidate after this exec errno
// (EACCES goes on too but is remembered).
bool exec_search_continues(int err);
// 127 for "not found" errnos (ENOENT, ENOTDIR, ENAMETOOLONG, ELOOP), 126 otherwise.
int exit_code_for_exec_errno(int err);

// The exit status of `agentcage run` for a finished command.
struct Outcome {
  int wait_status = 0;     // raw waitpid status of the main process
  bool timed_out = false;  // agentcage killed the run at the timeout
  int interrupted_by = 0;  // signal agentcage received and ended the run for, or 0
};
int exit_code(const Outcome& outcome);

// The exit code (WIFEXITED) or the signal (WIFSIGNALED) of a wait status.
std::optional<int> exited_code(int wait_status);
std::optional<int> killed_by(int wait_status);

// --user: "NAME", "UID" or "UID:GID". Names are looked up in the passwd
// database (its primary group); a bare UID uses gid = UID.
struct UserSpec {
  std::optional<std::string> name;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
};
Result<UserSpec> parse_user_spec(std::string_view text);

// 16 lowercase hex digits from 8 random bytes.
std::string format_run_id(uint64_t random);

}  // namespace agentcage::run
