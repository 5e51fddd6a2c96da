// SPDX-License-Identifier: Apache-2.0
#include "dns/resolv_conf.h"

#include <netdb.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace agentcage::dns::detail {
namespace {

constexpr std::streamsize kMaxFile = 64 * 1024;

bool numeric_address(const std::string& text, Upstream& out) {
  std::string host = text, port = "53";
  if (const size_t at = text.rfind('@'); at != std::string::npos) {
    host = text.substr(0, at);
    port = text.substr(at + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(port) == 0 || std::stoul(port) > 65535)
      return false;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) return false;
  const bool ok =
      found->ai_addrlen <= sizeof(out.addr) && (found->ai_family == AF_INET || found->ai_family == AF_INET6);
  if (ok) {
    std::memcpy(&out.addr, found->ai_addr, found->ai_addrlen);
    out.len = found->ai_addrlen;
    out.text = text;
  }
  ::freeaddrinfo(found);
  return ok;
}

}  // namespace

Result<std::vector<Upstream>> read_upstreams(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::from_errno("dns: cannot read " + path);
  std::string content(static_cast<size_t>(kMaxFile), '\0');
  in.read(content.data(), kMaxFile);
  content.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) return Error::from_errno("dns: cannot read " + path);

  std::vector<Upstream> out;
  size_t lines = 0;
  std::istringstream text(content);
  for (std::string line; std::getline(text, line);) {
    std::istringstream words(line);
    std::string keyword, address;
    if (!(words >> keyword) || keyword != "nameserver") continue;
    ++lines;
    Upstream up;
    if (words >> address && out.size() < kMaxUpstreams && numeric_address(address, up))
      out.push_back(std::move(up));
  }
  if (out.empty() && lines == 0)
    return Error{"dns: " + path + " names no upstream server (no `nameserver ADDRESS` line)", 0};
  if (out.empty())
    return Error{"dns: " + path + ": no `nameserver` line holds a numeric IPv4 or IPv6 address", 0};
  return out;
}

}  // namespace agentcage::dns::detail
