// SPDX-License-Identifier: Apache-2.0
#include "policy/locate.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

#include "core/paths.h"
#include "policy/name.h"
#include "util/text.h"

namespace agentcage::policy {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_file_ref(const std::string& ref) {
  return ref.find('/') != std::string::npos || ends_with(ref, ".yaml") || ends_with(ref, ".yml");
}

std::string default_policy_dir() {
  const char* env = std::getenv("AGENTCAGE_POLICY_DIR");
  return env && *env ? std::string(env) : std::string(core::kDefaultPolicyDir);
}

Result<std::string> resolve_policy(const std::string& ref, const std::string& policy_dir) {
  if (ref.empty()) return Error{"--policy: empty policy name", EINVAL};
  if (is_file_ref(ref)) return ref;
  // The policy directory is the daemon's, which names a policy by its file
  // (NAME.yaml holds the policy NAME, a valid metadata.name): an invalid NAME
  // cannot name a policy there.
  if (!valid_policy_name(ref)) {
    return Error{"--policy: " + quote(ref) + " is neither a policy name (" + std::string(kPolicyNameRule) +
                     ") nor a file path (one with a '/' or ending in .yaml or .yml)" +
                     did_you_mean_policy_name(ref),
                 EINVAL};
  }
  std::string dir = policy_dir.empty() ? std::string(".") : policy_dir;
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + ref + ".yaml";
}

Result<std::string> locate_policy(const std::string& ref, const std::string& policy_dir) {
  auto path = resolve_policy(ref, policy_dir);
  if (!path) return path.error();
  struct stat st {};
  if (::stat(path->c_str(), &st) == 0 && S_ISREG(st.st_mode)) return *path;
  if (is_file_ref(ref)) return Error{"--policy: no policy file " + ref, ENOENT};
  return Error{
      "--policy: no policy named " + quote(ref) + " (" + *path +
          " does not exist; install it there, point AGENTCAGE_POLICY_DIR elsewhere, or pass a file path)",
      ENOENT};
}

}  // namespace agentcage::policy
