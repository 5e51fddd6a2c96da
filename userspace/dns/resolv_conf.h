// SPDX-License-Identifier: Apache-2.0
// The upstream servers of the resolver (resolver.h): the `nameserver` lines
// of a resolv.conf file.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

#include "util/result.h"

namespace agentcage::dns::detail {

struct Upstream {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;  // the address as written, for messages
};

// At most this many are used, in the file's order (as the C library does).
inline constexpr size_t kMaxUpstreams = 3;

// The servers of `path`'s `nameserver ADDRESS` lines (IPv4 or IPv6, an IPv6
// one may name its interface: fe80::1%eth0), each at port 53. `ADDRESS@PORT`
// (127.0.0.1@5353, ::1@5353: the ldns and unbound notation) names another
// port; the C library skips such a line, so only a file written for this
// resolver holds one (the unit tests' upstream cannot have port 53). Lines that are
// not nameserver lines, comments and addresses that are not numeric are
// skipped. An error when the file cannot be read or names no usable server.
Result<std::vector<Upstream>> read_upstreams(const std::string& path);

}  // namespace agentcage::dns::detail
