// SPDX-License-Identifier: Apache-2.0
// Map keys for compiled rules, and the digest that identifies a compiled
// policy. Pure functions: no kernel, no maps (unit-tested on the host).
#pragma once

#include <agentcage/abi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bpf/compiled.h"
#include "util/result.h"

namespace agentcage::bpf {

// The key text of an absolute path: path + '/', "/" for the root (what
// make_path_key stores and what the hooks look up; bpf::decide compares it).
std::string path_key_text(const std::string& path);
// The LPM key bytes for a path rule (trailing '/' appended, "/" stays "/";
// abstract names verbatim). Fails when the key would not fit AC_PATH_KEY_MAX.
Result<ac_path_key> make_path_key(uint32_t rules_id, const PathRule& rule);
Result<ac_path_key> make_path_key(uint32_t rules_id, const std::string& path);
// The bytes of a path rule's LPM key text (path + '/', "/" for the root;
// abstract names verbatim): what the kernel side compares exact entries by.
size_t path_key_bytes(const PathRule& rule);

// The directories above an absolute path, root first: "/a/b/c" gives "/",
// "/a", "/a/b". "/" has none.
std::vector<std::string> ancestors_of(const std::string& path);

// Exact RuleSpace::ancestor entries (AC_ACCESS_TRAVERSE) for every directory
// above an absolute rule that grants something, so that stat and attribute
// reads can walk down to it (imports realpath() and stat each component).
// Ancestors of deny rules get none: deny grants nothing to walk to.
std::vector<PathRule> ancestor_rules(const std::vector<PathRule>& rules);

// A name rule's key (AC_RULES_NS_NAME): [kind][length][text], exact by
// construction. Fails for an empty text or one over AC_NAME_RULE_MAX bytes.
Result<ac_path_key> make_name_key(uint32_t rules_id, const NameRule& rule);
// The key of a policy's AC_NAME_LENGTHS entry, and its value: the distinct
// lengths of the suffix rules, ascending. Fails over AC_NAME_SUFFIX_LENGTHS.
Result<ac_path_key> make_name_lengths_key(uint32_t rules_id);
Result<ac_name_lengths> name_lengths(const std::vector<NameRule>& rules);

Result<ac_net_key> make_net_key(uint32_t rules_id, const CompiledNetRule& rule);

// Stable digest of a compiled policy (rules, flags) and its name: equal
// digests mean the same policy, so a slot holding it can be shared.
uint64_t policy_digest(const std::string& name, const CompiledPolicy& policy);

}  // namespace agentcage::bpf
