// SPDX-License-Identifier: Apache-2.0
// "Did you mean ...?": the one suggestion rule for every closed set of words
// a user types (policy keys, daemon settings, CLI commands, enum values), so
// one typo gets the same suggestion everywhere.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace agentcage {

// Words longer than this are never typos of a known word (and the distance
// stays cheap for hostile input: three rolling rows on the stack).
inline constexpr size_t kMaxSuggestLength = 32;
// A suggestion is at most this many edits away.
inline constexpr size_t kMaxSuggestEdits = 2;

// Optimal string alignment distance: Levenshtein plus adjacent
// transpositions ("raed" is one edit from "read"). SIZE_MAX when either word
// is longer than kMaxSuggestLength.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `typo` within kMaxSuggestEdits edits (the first
// one on a tie), compared case-insensitively as well: "Audit" suggests
// "audit". Nothing when `typo` is itself a candidate.
std::optional<std::string_view> closest_word(std::string_view typo,
                                             std::span<const std::string_view> candidates);

// " (did you mean 'WORD'?)" for closest_word, or "".
std::string did_you_mean(std::string_view typo, std::span<const std::string_view> candidates);

}  // namespace agentcage
