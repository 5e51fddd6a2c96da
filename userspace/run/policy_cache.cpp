// SPDX-License-Identifier: Apache-2.0
#include "run/policy_cache.h"

#include <map>
#include <utility>

#include "bpf/compile.h"
#include "run/seccomp.h"

namespace agentcage::run {
namespace {

struct Entry {
  std::string text;
  PreparedPolicy prepared;
};

std::map<std::string, Entry>& cache() {
  static std::map<std::string, Entry> entries;
  return entries;
}

}  // namespace

const PreparedPolicy* prepared_policy(const std::string& path, std::string_view text) {
  const auto it = cache().find(path);
  if (it == cache().end() || it->second.text != text) return nullptr;
  // And every file it includes still holds the bytes it was prepared from.
  for (const auto& inc : it->second.prepared.policy.includes) {
    auto now = policy::read_policy_text(inc.path);
    if (!now || *now != inc.text) return nullptr;
  }
  return &it->second.prepared;
}

Status prepare_policy(const std::string& path) {
  auto text = policy::read_policy_text(path);
  if (!text) return Error{path + ": " + text.error().message, text.error().code};
  if (prepared_policy(path, *text)) return {};
  cache().erase(path);
  auto parsed = policy::parse_policy(*text, path);
  if (!parsed.ok()) return Error{path + ": not a valid policy", EINVAL};
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled) return compiled.error();  // located: FILE:LINE:COL
  auto filter = build_seccomp_filter(parsed.policy->syscalls_allow);
  if (!filter) return Error{path + ": " + filter.error().message, filter.error().code};
  if (cache().size() >= kMaxPreparedPolicies) cache().clear();
  cache().insert_or_assign(
      path, Entry{std::move(*text),
                  PreparedPolicy{std::move(*parsed.policy), std::move(*compiled), std::move(*filter)}});
  return {};
}

}  // namespace agentcage::run
