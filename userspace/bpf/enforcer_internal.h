// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the Enforcer's source files (enforcer*.cpp,
// event_reader.cpp); not for use outside bpf/.
#pragma once

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage::bpf::detail {

inline Error bpf_error(const std::string& what, int err) {
  // libbpf returns negative errno values.
  return Error::from_errno("bpf: " + what, err < 0 ? -err : err);
}

// The programs attached to a scope's cgroup rather than linked to a hook:
// the UDP receive filter (every scope) and the DNS programs (a scope with
// AC_SCOPE_F_DNS; dns.bpf.h). A shared set pins these programs under
// programs/, not links.
inline constexpr const char* kReceiveFilter = "ac_udp_client_filter";
struct CgroupProgram {
  const char* name;
  bpf_attach_type type;
};
inline constexpr CgroupProgram kDnsPrograms[] = {
    {"ac_dns_connect4", BPF_CGROUP_INET4_CONNECT},
    {"ac_dns_connect6", BPF_CGROUP_INET6_CONNECT},
    {"ac_dns_sendmsg4", BPF_CGROUP_UDP4_SENDMSG},
    {"ac_dns_sendmsg6", BPF_CGROUP_UDP6_SENDMSG},
    {"ac_dns_recvmsg4", BPF_CGROUP_UDP4_RECVMSG},
    {"ac_dns_recvmsg6", BPF_CGROUP_UDP6_RECVMSG},
    {"ac_dns_getpeername4", BPF_CGROUP_INET4_GETPEERNAME},
    {"ac_dns_getpeername6", BPF_CGROUP_INET6_GETPEERNAME},
};
// Their attach types, in that order.
inline constexpr auto kDnsAttachTypes = [] {
  std::array<bpf_attach_type, std::size(kDnsPrograms)> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = kDnsPrograms[i].type;
  return out;
}();
inline constexpr size_t kPerScopePrograms = 1 + std::size(kDnsPrograms);
inline bool per_scope_program(std::string_view name) {
  if (name == kReceiveFilter) return true;
  for (const auto& p : kDnsPrograms)
    if (name == p.name) return true;
  return false;
}

// "BPF_CGROUP_INET_INGRESS" for BPF_CGROUP_INET_INGRESS.
std::string attach_type_name(bpf_attach_type type);

// A cgroup (its path) above a scope's with programs of `type` attached
// without BPF_F_ALLOW_MULTI: a program of agentcage's at or below the
// scope's cgroup would switch them off for the scope (enforcer_maps.cpp).
struct Overridden {
  std::string cgroup;
  bpf_attach_type type;
};
// Such a cgroup for one of `types`, if one is: for each type, the nearest
// cgroup above `cgroup_fd` that holds programs of it decides (further up
// they are out for the scope already, whatever agentcage attaches).
Result<std::optional<Overridden>> overridable_ancestor(int cgroup_fd, std::span<const bpf_attach_type> types);
// Why a scope is refused there; `ours` names agentcage's programs.
Error overrides(const Overridden& above, const std::string& ours);

inline int cpu_count() {
  int n = libbpf_num_possible_cpus();
  return n > 0 ? n : 1;
}

// Collect every key of a map (hash or LPM trie). Used under the lock on maps
// that are small (rules, scopes, policies).
template <class Key>
std::vector<Key> all_keys(int fd) {
  std::vector<Key> keys;
  Key cur{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    keys.push_back(next);
    cur = next;
    prev = &cur;
  }
  return keys;
}

// Every key of a map (`key_size` bytes each, one after another), read in
// batches where the map type allows them (hash maps: a few system calls for
// the whole map instead of one per key); other maps (LPM tries), a kernel
// that refuses batches and a batch that fails midway get the key walk.
// `value_size` is the map's. For big maps read outside the hot path (a
// run's pins at its end, map fill every few seconds).
std::vector<unsigned char> all_key_bytes(int fd, uint32_t key_size, uint32_t value_size);

inline uint32_t rules_id_of(uint32_t rules_id_be) { return ntohl(rules_id_be) & AC_RULES_ID_MASK; }

}  // namespace agentcage::bpf::detail
