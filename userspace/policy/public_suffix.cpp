// SPDX-License-Identifier: Apache-2.0
#include "policy/public_suffix.h"

#include <libpsl.h>

#include <string>

namespace agentcage::policy {

namespace {

// Read-only once loaded, so shared by every thread; never freed.
Result<const psl_ctx_t*> suffix_list() {
  static const psl_ctx_t* const list = psl_latest(nullptr);
  if (list == nullptr)
    return Error{"cannot check domain rules: libpsl has no Public Suffix List (neither built in nor " +
                     std::string(psl_dist_filename()) + ")",
                 0};
  return list;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace

Result<std::string> public_suffix_below(std::string_view name, std::string_view base) {
  auto list = suffix_list();
  if (!list) return list.error();
  const std::string n = lower(name), b = lower(base);
  // The longest public suffix of the name (the name itself, when a
  // wildcard entry of the list makes it one), the list's "*" rule included:
  // a top-level domain is never strictly under a base of two labels or more.
  const char* suffix = psl_unregistrable_domain(*list, n.c_str());
  if (suffix == nullptr) return std::string();
  const std::string_view s(suffix);
  if (s.size() > b.size() + 1 && s.substr(s.size() - b.size()) == b && s[s.size() - b.size() - 1] == '.')
    return std::string(s);
  return std::string();
}

Result<SuffixSection> public_suffix_section(std::string_view name) {
  auto list_or = suffix_list();
  if (!list_or) return list_or.error();
  const psl_ctx_t* const list = *list_or;
  const std::string copy(name);
  if (psl_is_public_suffix2(list, copy.c_str(), PSL_TYPE_ICANN | PSL_TYPE_NO_STAR_RULE))
    return SuffixSection::icann;
  if (psl_is_public_suffix2(list, copy.c_str(), PSL_TYPE_PRIVATE | PSL_TYPE_NO_STAR_RULE))
    return SuffixSection::private_;
  return SuffixSection::none;
}

}  // namespace agentcage::policy
