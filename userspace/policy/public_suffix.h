// SPDX-License-Identifier: Apache-2.0
// Public suffixes: the names under which anyone can register a name of their
// own ("co.uk", "github.io"), as the Public Suffix List says (libpsl). A
// domain rule must not hand every registrant under one of them to a run.
#pragma once

#include <string_view>

#include "util/result.h"

namespace agentcage::policy {

enum class SuffixSection {
  none,     // not a public suffix
  icann,    // a registry's suffix ("co.uk", "xn--55qx5d.cn")
  private_  // an operator's ("github.io", "s3.amazonaws.com")
};

// Whether `name` (lower-case ASCII, two or more labels: what parse_domain has
// checked) is itself a public suffix, and in which section of the list. Only
// the list's own rules count, not its "every unlisted top-level domain"
// default: parse_domain refuses a wildcard over any top-level domain by
// itself. The list is libpsl's newer of its built-in one and the
// distribution's file (Debian's publicsuffix package), loaded once. Fails
// only when libpsl has no list at all.
Result<SuffixSection> public_suffix_section(std::string_view name);

}  // namespace agentcage::policy
