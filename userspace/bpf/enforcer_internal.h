// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the Enforcer's source files (enforcer*.cpp,
// event_reader.cpp); not for use outside bpf/.
#pragma once

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.h"

namespace agentcage::bpf::detail {

inline Error bpf_error(const std::string& what, int err) {
  // libbpf returns negative errno values.
  return Error::from_errno("bpf: " + what, err < 0 ? -err : err);
}

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

inline uint32_t rules_id_of(uint32_t rules_id_be) { return ntohl(rules_id_be) & AC_RULES_ID_MASK; }

}  // namespace agentcage::bpf::detail
