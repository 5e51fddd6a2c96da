// SPDX-License-Identifier: Apache-2.0
#include "policy/public_suffix.h"

#include <libpsl.h>

#include <string>

namespace agentcage::policy {

Result<SuffixSection> public_suffix_section(std::string_view name) {
  // Read-only once loaded, so shared by every thread; never freed.
  static const psl_ctx_t* const list = psl_latest(nullptr);
  if (list == nullptr)
    return Error{"cannot check domain rules: libpsl has no Public Suffix List (neither built in nor " +
                     std::string(psl_dist_filename()) + ")",
                 0};
  const std::string copy(name);
  if (psl_is_public_suffix2(list, copy.c_str(), PSL_TYPE_ICANN | PSL_TYPE_NO_STAR_RULE))
    return SuffixSection::icann;
  if (psl_is_public_suffix2(list, copy.c_str(), PSL_TYPE_PRIVATE | PSL_TYPE_NO_STAR_RULE))
    return SuffixSection::private_;
  return SuffixSection::none;
}

}  // namespace agentcage::policy
