// SPDX-License-Identifier: Apache-2.0
#include "run/options.h"

#include <sys/wait.h>

#include <cerrno>
#include <charconv>
#include <cstdio>

#include <agentcage/abi.h>

#include "core/limits.h"
#include "policy/values.h"

namespace agentcage::run {
namespace {

bool is_env_name(std::string_view key) {
  if (key.empty()) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(key[0])) return false;
  for (char c : key)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

template <class T>
std::optional<T> parse_uint(std::string_view s) {
  T v{};
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

Paths paths_from_env(const char* const* env) {
  Paths p;
  if (env == nullptr) return p;
  for (; *env; ++env) {
    std::string_view kv = *env;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq + 1 == kv.size()) continue;
    std::string_view key = kv.substr(0, eq);
    std::string value(kv.substr(eq + 1));
    if (key == "AGENTCAGE_POLICY_DIR")
      p.policy_dir = value;
    else if (key == "AGENTCAGE_CGROUP_PARENT")
      p.cgroup_parent = value;
    else if (key == "AGENTCAGE_WORKSPACE_ROOT")
      p.workspace_root = value;
    else if (key == "AGENTCAGE_STATE_DIR")
      p.state_dir = value;
    else if (key == "AGENTCAGE_RESOLV_CONF")
      p.resolv_conf = value;
  }
  return p;
}

namespace {

// One limit: the option's value (or `unlimited`) over the policy's, else the
// default; `out` unset afterwards means no limit.
template <class T, class Parse>
Status resolve_limit(std::optional<T>& out, bool unlimited, const std::optional<std::string>& option,
                     const char* flag, const char* fallback, Parse parse) {
  if (option) {
    if (*option == policy::kUnlimited) {
      out.reset();
      return {};
    }
    auto v = parse(*option);
    if (!v) return v.error().wrap(std::string(flag) + " " + policy::quote(*option));
    out = *v;
    return {};
  }
  if (out || unlimited || fallback == nullptr) return {};
  auto v = parse(fallback);
  if (!v) return v.error().wrap(std::string("the default ") + flag + " " + fallback);
  out = *v;
  return {};
}

}  // namespace

Result<policy::Limits> effective_limits(const policy::Limits& from_policy, const RunOptions& opts) {
  policy::Limits out = from_policy;
  const auto& u = from_policy.unlimited;
  if (Status st = resolve_limit(out.memory_bytes, u.memory, opts.memory, "--memory", core::kDefaultMemory,
                                policy::parse_size);
      !st)
    return st.error();
  if (Status st =
          resolve_limit(out.pids, u.pids, opts.pids, "--pids", core::kDefaultPids, policy::parse_pids);
      !st)
    return st.error();
  if (Status st = resolve_limit(out.cpus, u.cpu, opts.cpu, "--cpu", nullptr, policy::parse_cpus); !st)
    return st.error();
  if (Status st = resolve_limit(out.timeout, u.timeout, opts.timeout, "--timeout", core::kDefaultTimeout,
                                policy::parse_duration);
      !st)
    return st.error();
  if (Status st =
          resolve_limit(out.disk_bytes, u.disk, opts.disk, "--disk", core::kDefaultDisk, policy::parse_size);
      !st)
    return st.error();
  out.unlimited = {};
  return out;
}

Result<std::pair<std::string, std::string>> parse_env_assignment(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return Error{"--env " + policy::quote(text) + ": expected KEY=VALUE", EINVAL};
  std::string_view key = text.substr(0, eq);
  if (!is_env_name(key))
    return Error{"--env " + policy::quote(text) + ": " + policy::quote(key) +
                     " is not a variable name (letters, digits and '_', not starting with a digit)",
                 EINVAL};
  return std::pair<std::string, std::string>{std::string(key), std::string(text.substr(eq + 1))};
}

Result<std::vector<std::string>> sandbox_environment(const std::string& workspace,
                                                     const std::vector<std::string>& extra) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"PATH", kSandboxPath}, {"HOME", workspace}, {"TMPDIR", workspace}, {"LANG", "C.UTF-8"}};
  for (const auto& e : extra) {
    auto kv = parse_env_assignment(e);
    if (!kv) return kv.error();
    bool replaced = false;
    for (auto& v : vars)
      if (v.first == kv->first) {
        v.second = kv->second;
        replaced = true;
      }
    if (!replaced) vars.push_back(*kv);
  }
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

std::vector<std::string> exec_candidates(const std::string& command, std::string_view path_value) {
  if (command.empty()) return {};
  if (command.find('/') != std::string::npos) return {command};
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t colon = path_value.find(':', start);
    std::string_view dir =
        path_value.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start);
    out.push_back(dir.empty() ? command : std::string(dir) + "/" + command);
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  return out;
}

bool exec_search_continues(int err) {
  return err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV || err == ETIMEDOUT ||
         err == EACCES;
}

int combine_exec_errors(const std::vector<int>& errors_in_order) {
  bool saw_eacces = false;
  for (int err : errors_in_order) {
    if (err == EACCES) {
      saw_eacces = true;
      continue;
    }
    if (exec_search_continues(err)) continue;
    return err;
  }
  return saw_eacces ? EACCES : ENOENT;
}

int exit_code_for_exec_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
    case ELOOP:
      return kExitNotFound;
    default:
      return kExitCannotExec;
  }
}

std::optional<int> exited_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return std::nullopt;
}

std::optional<int> killed_by(int wait_status) {
  if (WIFSIGNALED(wait_status)) return WTERMSIG(wait_status);
  return std::nullopt;
}

int exit_code(const Outcome& o) {
  if (o.timed_out) return kExitTimeout;
  if (o.interrupted_by > 0) return 128 + o.interrupted_by;
  if (auto code = exited_code(o.wait_status)) return *code;
  if (auto sig = killed_by(o.wait_status)) return 128 + *sig;
  return kExitSetup;  // stopped/continued statuses are never waited for
}

Result<UserSpec> parse_user_spec(std::string_view text) {
  UserSpec spec;
  if (text.empty()) return Error{"--user: empty user", EINVAL};
  auto colon = text.find(':');
  std::string_view first = text.substr(0, colon);
  if (auto uid = parse_uint<uid_t>(first)) {
    spec.uid = *uid;
    spec.gid = static_cast<gid_t>(*uid);
    if (colon != std::string_view::npos) {
      auto gid = parse_uint<gid_t>(text.substr(colon + 1));
      if (!gid) return Error{"--user " + policy::quote(text) + ": expected NAME, UID or UID:GID", EINVAL};
      spec.gid = *gid;
    }
  } else {
    if (colon != std::string_view::npos || first.find_first_of(" \t\n/") != std::string_view::npos)
      return Error{"--user " + policy::quote(text) + ": expected NAME, UID or UID:GID", EINVAL};
    spec.name = std::string(first);
  }
  if ((spec.uid && *spec.uid == static_cast<uid_t>(-1)) || (spec.gid && *spec.gid == static_cast<gid_t>(-1)))
    return Error{"--user " + policy::quote(text) + ": -1 is not a valid id", EINVAL};
  return spec;
}

std::string format_run_id(uint64_t random) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(random));
  return buf;
}

}  // namespace agentcage::run
