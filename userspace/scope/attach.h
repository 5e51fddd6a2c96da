// SPDX-License-Identifier: Apache-2.0
// `agentcage attach` / `detach`: put an existing cgroup (a systemd service's,
// a container's, an agent runner's) under a policy, in the shared pinned
// program set, and take it out again. Processes already in the cgroup are
// confined from their next operation on; what they opened before stays open.
// These return what happened; the CLI (cli/attach.cpp) prints it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "policy/model.h"
#include "scope/scope.h"
#include "util/result.h"

namespace agentcage::scope {

// A cgroup given on the command line: an absolute path inside the cgroup v2
// hierarchy at `root`, or a path relative to `root`
// ("system.slice/agent.service"). Must be an existing cgroup other than the
// root. Returns the canonical absolute path.
Result<std::filesystem::path> resolve_cgroup(const std::filesystem::path& root, const std::string& arg);

// resolve_cgroup in this mount namespace's cgroup2 hierarchy, with the
// cgroup's id and level.
Result<CgroupRef> find_cgroup(const std::string& arg);

// Whether `pid` may arm a scope on `cgroup` at its exec (a container's init,
// parked by its runtime): this process sees the host's pids (it is in the
// initial pid namespace: the kernel compares global ids), and `pid` is the
// cgroup's one process, so nothing else in it runs unconfined while the
// scope is pending. Else an error that says which.
Status check_arm_pid(const CgroupRef& cgroup, pid_t pid);

struct AttachRequest {
  std::string cgroup;                // as given (see resolve_cgroup)
  std::string policy;                // NAME or FILE (policy/locate.h)
  std::string policy_dir;            // where a NAME is looked up ("" : policy::default_policy_dir())
  std::string workspace;             // what ${workspace} means for this cgroup ("" : none)
  std::optional<policy::Mode> mode;  // --mode: instead of the policy's, for this attachment only
};

struct Attached {
  std::filesystem::path cgroup;
  uint64_t cgroup_id = 0;
  std::string policy_name;
  policy::Mode mode = policy::Mode::enforce;
  std::string policy_file;
  std::string workspace;  // "" : none
  uint32_t slot = 0;
};

// Locate, parse and compile the policy, resolve the cgroup and confine it in
// the shared program set. When the policy file is invalid, its located errors
// are appended to `diagnostics` (one line each) before the Error.
Result<Attached> attach(const AttachRequest& req, std::vector<std::string>& diagnostics);

struct Detached {
  std::filesystem::path cgroup;
  Released released;  // policy, slot and the report of the time it was attached
};

// Lift the confinement of `cgroup` (as given to attach). ENOENT when it is not
// confined.
Result<Detached> detach(const std::string& cgroup);

}  // namespace agentcage::scope
