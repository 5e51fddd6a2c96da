#include "policy/locate.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace agentcage::policy {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_regular(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::vector<std::string> policy_search_path() {
  std::vector<std::string> dirs;
  const char* env = std::getenv("AGENTCAGE_POLICY_PATH");
  std::string spec = env && *env ? env : kDefaultPolicyDir;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(':', start);
    if (end == std::string::npos) end = spec.size();
    if (end > start) dirs.push_back(spec.substr(start, end - start));
    start = end + 1;
  }
  return dirs;
}

Result<std::string> locate_policy(const std::string& arg) {
  if (arg.empty()) return Error{"--policy: empty policy name", EINVAL};
  if (arg.find('/') != std::string::npos || ends_with(arg, ".yaml") || ends_with(arg, ".yml")) {
    if (!is_regular(arg)) return Error{"--policy: no policy file " + arg, ENOENT};
    return arg;
  }
  std::string tried;
  for (const auto& dir : policy_search_path()) {
    std::string candidate = dir + "/" + arg + ".yaml";
    if (is_regular(candidate)) return candidate;
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  return Error{"--policy: no policy named \"" + arg + "\" (looked for " + tried +
                   "; set AGENTCAGE_POLICY_PATH or pass a file path)",
               ENOENT};
}

}  // namespace agentcage::policy
