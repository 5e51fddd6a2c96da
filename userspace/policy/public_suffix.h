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

// For a name `name` that a wildcard over `base` matches (strictly under it):
// the public suffix, strictly under `base`, that `name` is or is under
// ("" when there is none). A wildcard over a registrant's domain that has
// public suffixes of its operator's below it (`*.amazonaws.com` has
// `s3.amazonaws.com` and every `*.compute-1.amazonaws.com`) would hand every
// registrant under those to a run: such a name is not allowed by the
// wildcard (an exact rule may still name it). Case is ignored. Fails only
// when libpsl has no list at all.
Result<std::string> public_suffix_below(std::string_view name, std::string_view base);

}  // namespace agentcage::policy
