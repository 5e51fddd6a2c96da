// SPDX-License-Identifier: Apache-2.0
// `include:` (policy.h, "Includes"): where an included file is, and how its
// rules merge into the including policy. Used by parse_policy, and by the
// daemon's policy directory to name a changed file as includes name it.
#pragma once

#include <cstddef>
#include <string>

#include "policy/model.h"

namespace agentcage::policy {

// How many files deep includes may go (a file, what it includes, ...).
inline constexpr size_t kMaxIncludeDepth = 4;

// An `include:` entry as written, and where.
struct IncludeRef {
  std::string path;
  Position pos;
};

// The path an entry of `including`'s include list names: relative to that
// file's directory unless absolute, lexically normalised, then the real path
// of what exists of it (so that a cycle through a symbolic link is one, and a
// removed file keeps the name it had).
std::string resolve_include(const std::string& including, const std::string& entry);

// The limits the included files state, merged as they come: the tightest of
// each (a value beats `unlimited`). The including file's own win
// (apply_included_limits).
struct IncludedLimits {
  Limits limits;
};

// Merge `included` (parsed from `path`, whose bytes are `text`; included by
// the entry at `pos`) into `into`, once: a file `into` has merged already
// (two includes sharing one) adds nothing again. Its lists are added to into's (exec,
// files, network, syscalls), a switch it allows is allowed, its own
// includes come along; its name and mode are not taken; its limits go into
// `limits`. Every merged entry's Position::source names the file it was
// written in among into.includes.
void merge_included(Policy& into, Policy&& included, const std::string& path, std::string text, Position pos,
                    IncludedLimits& limits);

// Each limit `into` does not state itself (neither a value nor `unlimited`)
// is taken from `limits`.
void apply_included_limits(Policy& into, const IncludedLimits& limits);

}  // namespace agentcage::policy
