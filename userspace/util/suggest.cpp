// SPDX-License-Identifier: Apache-2.0
#include "util/suggest.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace agentcage {
namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

size_t distance(std::string_view a, std::string_view b, bool fold_case) {
  if (a.size() > kMaxSuggestLength || b.size() > kMaxSuggestLength) return SIZE_MAX;
  auto same = [fold_case](char x, char y) { return fold_case ? lower(x) == lower(y) : x == y; };
  std::array<size_t, kMaxSuggestLength + 1> before{}, previous{}, current{};
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = same(a[i - 1], b[j - 1]) ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    before = previous;
    previous = current;
  }
  return previous[b.size()];
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) { return distance(a, b, false); }

std::optional<std::string_view> closest_word(std::string_view typo,
                                             std::span<const std::string_view> candidates) {
  if (typo.size() > kMaxSuggestLength) return std::nullopt;
  std::optional<std::string_view> best;
  size_t best_distance = kMaxSuggestEdits + 1;
  for (std::string_view candidate : candidates) {
    if (candidate == typo) return std::nullopt;
    // A difference only in case ranks before any real edit.
    const size_t d = distance(typo, candidate, true) == 0 ? 0 : distance(typo, candidate, false);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view typo, std::span<const std::string_view> candidates) {
  auto best = closest_word(typo, candidates);
  return best ? " (did you mean '" + std::string(*best) + "'?)" : std::string();
}

}  // namespace agentcage
