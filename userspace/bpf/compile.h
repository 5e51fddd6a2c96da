// SPDX-License-Identifier: Apache-2.0
// Policy model -> what the kernel maps hold for one policy slot.
//
// Longest-prefix matching returns one rule, so the compiler folds into every
// rule what the rules enclosing it grant: a path's entry carries the union of
// the access of every rule on its way to "/", and any enclosing deny turns it
// into a deny. The same for CIDRs: an entry carries the port ranges of every
// shorter CIDR that covers it. One lookup in the kernel then gives the
// answer all rules together would give.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/compiled.h"
#include "policy/model.h"
#include "util/result.h"
#include "yaml/diagnostic.h"

namespace agentcage::bpf {

// An error names the entry that cannot be compiled: "FILE:LINE:COL: ..."
// (the policy's source and the entry's position), like the parser's.
Result<CompiledPolicy> compile(const policy::Policy& policy);

// The first name rule that matches a component of `path` (absolute, or
// workspace-relative "/sub/dir"): what the kernel denies by name there
// (ac_path_name_denied). nullptr when none does.
const NameRule* name_rule_matching(const std::vector<NameRule>& names, std::string_view path);
// Is `inner` the path `outer` or below it (whole components; "/" covers all)?
bool path_within(std::string_view inner, std::string_view outer);

// Why `workspace` (absolute, real) cannot be the workspace of a scope under
// `policy` (named `name`), or nullopt: a name rule denies it whole (every
// file of the run's own would be denied), or it overlaps an allowed
// program or directory of programs (the run could write a program and run
// it). Every confine asks (scope/scope.h), the daemon's attach too.
std::optional<std::string> workspace_problem(const CompiledPolicy& policy, const std::string& name,
                                             const std::string& workspace);

// As written in a policy: "**/NAME" or "**/*.EXT".
std::string pattern_text(const NameRule& rule);

// The AC_POLICY_F_* flags of a policy (mode, native code, debugging): what
// compile() puts in CompiledPolicy::flags.
uint32_t policy_flags(const policy::Policy& policy);

// The same verdict as a diagnostic (`agentcage policy check`): nullopt when
// the policy compiles.
std::optional<yaml::Diagnostic> compile_problem(const policy::Policy& policy);

}  // namespace agentcage::bpf
