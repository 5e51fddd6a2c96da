// SPDX-License-Identifier: Apache-2.0
#include "bpf/keys.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <set>

namespace agentcage::bpf {

std::string path_key_text(const std::string& path) { return path == "/" ? "/" : path + "/"; }

Result<ac_path_key> make_path_key(uint32_t rules_id, const PathRule& rule) {
  const std::string& path = rule.path;
  if (rules_id & ~AC_RULES_ID_MASK) return Error{"bpf: rules id out of range", EINVAL};
  std::string text;
  if (rule.space == RuleSpace::abstract_unix) {
    if (path.empty()) return Error{"bpf: empty abstract unix socket name", EINVAL};
    text = path;  // exact bytes; the kernel side compares the length too
  } else {
    if (path.empty() || path.front() != '/')
      return Error{"bpf: path rule is not absolute: \"" + path + "\"", EINVAL};
    text = path_key_text(path);
  }
  if (text.size() > AC_PATH_KEY_MAX)
    return Error{
        "bpf: path rule longer than " + std::to_string(AC_PATH_KEY_MAX - 1) + " bytes: \"" + path + "\"",
        ENAMETOOLONG};
  ac_path_key key{};
  key.rules_id_be = htonl(rules_id | static_cast<uint32_t>(rule.space));
  std::memcpy(key.path, text.data(), text.size());
  key.prefixlen = static_cast<uint32_t>(32 + 8 * text.size());
  return key;
}

Result<ac_path_key> make_path_key(uint32_t rules_id, const std::string& path) {
  return make_path_key(rules_id, PathRule{path, 0, RuleSpace::absolute});
}

size_t path_key_bytes(const PathRule& rule) {
  if (rule.space == RuleSpace::abstract_unix || rule.path == "/") return rule.path.size();
  return rule.path.size() + 1;
}

std::vector<std::string> ancestors_of(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty() || path.front() != '/' || path == "/") return out;
  out.emplace_back("/");
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1))
    out.push_back(path.substr(0, pos));
  return out;
}

std::vector<PathRule> ancestor_rules(const std::vector<PathRule>& rules) {
  std::set<std::string> dirs;
  for (const auto& r : rules) {
    if (r.space != RuleSpace::absolute || !r.access || (r.access & AC_ACCESS_DENY)) continue;
    for (auto& a : ancestors_of(r.path)) dirs.insert(std::move(a));
  }
  std::vector<PathRule> out;
  for (const auto& d : dirs) out.push_back(PathRule{d, AC_ACCESS_TRAVERSE, RuleSpace::ancestor});
  return out;
}

Result<ac_path_key> make_name_key(uint32_t rules_id, const NameRule& rule) {
  if (rules_id & ~AC_RULES_ID_MASK) return Error{"bpf: rules id out of range", EINVAL};
  if (rule.text.empty() || rule.text.size() > AC_NAME_RULE_MAX)
    return Error{
        "bpf: a name rule must have 1.." + std::to_string(AC_NAME_RULE_MAX) + " bytes: \"" + rule.text + "\"",
        ENAMETOOLONG};
  ac_path_key key{};
  key.rules_id_be = htonl(rules_id | AC_RULES_NS_NAME);
  key.path[0] = static_cast<uint8_t>(rule.kind);
  key.path[1] = static_cast<uint8_t>(rule.text.size());
  std::memcpy(key.path + 2, rule.text.data(), rule.text.size());
  key.prefixlen = static_cast<uint32_t>(32 + 8 * (2 + rule.text.size()));
  return key;
}

Result<ac_path_key> make_name_lengths_key(uint32_t rules_id) {
  if (rules_id & ~AC_RULES_ID_MASK) return Error{"bpf: rules id out of range", EINVAL};
  ac_path_key key{};
  key.rules_id_be = htonl(rules_id | AC_RULES_NS_NAME);
  key.path[0] = AC_NAME_LENGTHS;
  key.prefixlen = 32 + 8;
  return key;
}

Result<ac_name_lengths> name_lengths(const std::vector<NameRule>& rules) {
  std::set<size_t> lengths;
  for (const auto& r : rules)
    if (r.kind == NameRule::Kind::suffix) lengths.insert(r.text.size());
  if (lengths.size() > AC_NAME_SUFFIX_LENGTHS)
    return Error{"suffix patterns of " + std::to_string(lengths.size()) + " different lengths; at most " +
                     std::to_string(AC_NAME_SUFFIX_LENGTHS) + " are supported",
                 E2BIG};
  ac_name_lengths out{};
  size_t i = 0;
  for (size_t len : lengths) out.len[i++] = static_cast<uint8_t>(len);
  return out;
}

Result<ac_net_key> make_net_key(uint32_t rules_id, const CompiledNetRule& rule) {
  if (rule.prefix_len > 128) return Error{"bpf: CIDR prefix longer than 128 bits", EINVAL};
  if (rule.ranges.empty() || rule.ranges.size() > AC_NET_MAX_RANGES)
    return Error{"bpf: a CIDR rule needs 1.." + std::to_string(AC_NET_MAX_RANGES) + " port ranges", EINVAL};
  ac_net_key key{};
  if (rules_id & ~AC_RULES_ID_MASK) return Error{"bpf: rules id out of range", EINVAL};
  key.rules_id_be = htonl(rules_id | static_cast<uint32_t>(rule.space));
  std::memcpy(key.addr, rule.addr.data(), 16);
  key.prefixlen = 32u + rule.prefix_len;
  return key;
}

uint64_t policy_digest(const std::string& name, const CompiledPolicy& policy) {
  // FNV-1a over a length-prefixed serialisation: equal digests for equal
  // (name, rules, flags), and no two field sequences serialise alike.
  uint64_t h = 0xcbf29ce484222325ULL;
  auto bytes = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 0x100000001b3ULL;
    }
  };
  auto u64 = [&](uint64_t v) { bytes(&v, sizeof v); };
  auto str = [&](const std::string& v) {
    u64(v.size());
    bytes(v.data(), v.size());
  };
  str(name);
  u64(policy.flags);
  u64(policy.paths.size());
  for (const auto& r : policy.paths) {
    str(r.path);
    u64(r.access);
    u64(static_cast<uint32_t>(r.space));
  }
  u64(policy.names.size());
  for (const auto& r : policy.names) {
    u64(static_cast<uint8_t>(r.kind));
    str(r.text);
  }
  u64(policy.net.size());
  for (const auto& r : policy.net) {
    bytes(r.addr.data(), r.addr.size());
    u64(r.prefix_len);
    u64(static_cast<uint32_t>(r.space));
    u64(r.ranges.size());
    for (const auto& pr : r.ranges) {
      u64(pr.first);
      u64(pr.last);
      u64(pr.protocols);
    }
  }
  return h;
}

}  // namespace agentcage::bpf
