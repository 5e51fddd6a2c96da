// `agentcage attach` / `detach`: put an existing cgroup (a systemd service's,
// a container's, an agent runner's) under a policy, in the shared pinned
// program set, and take it out again. Processes already in the cgroup are
// confined from their next operation on; what they opened before stays open.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

#include "util/result.h"

namespace agentcage::scope {

// A cgroup given on the command line: an absolute path inside the cgroup v2
// hierarchy at `root`, or a path relative to `root`
// ("system.slice/agent.service"). Must be an existing cgroup other than the
// root. Returns the canonical absolute path.
Result<std::filesystem::path> resolve_cgroup(const std::filesystem::path& root, const std::string& arg);

struct AttachRequest {
  std::string cgroup;     // as given (see resolve_cgroup)
  std::string policy;     // NAME or FILE (policy/locate.h)
  std::string policy_dir; // where a NAME is looked up ("" : policy::default_policy_dir())
  std::string workspace;  // what ${workspace} means for this cgroup ("" : none)
};

// Exit status 0 on success, 1 on failure (message on `err`).
int attach_command(const AttachRequest& req, std::ostream& out, std::ostream& err);
int detach_command(const std::string& cgroup, std::ostream& out, std::ostream& err);

}  // namespace agentcage::scope
