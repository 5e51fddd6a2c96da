// SPDX-License-Identifier: Apache-2.0
// The ldns functions dns/ uses, taken from libldns when a run first needs its
// resolver (a policy with domain rules), not linked into agentcage: ldns
// brings OpenSSL, whose loading and relocation cost every run's start more
// than the rest of agentcage's libraries together (util/shared_library.h).
// Each entry has the type of the function ldns's header declares.
#pragma once

// Without <stdbool.h> first, ldns defines `bool`, `true` and `false` as macros.
#include <stdbool.h>  // NOLINT(modernize-deprecated-headers)

#include <ldns/ldns.h>

#include "util/result.h"

namespace agentcage::dns {

#define AGENTCAGE_LDNS_FUNCTIONS(X)                                                                      \
  X(dname2canonical) X(pkt2wire) X(pkt_answer) X(pkt_free) X(pkt_get_rcode) X(pkt_id) X(pkt_new)         \
  X(pkt_push_rr) X(pkt_qdcount) X(pkt_qr) X(pkt_query_new) X(pkt_question) X(pkt_rd) X(pkt_set_id)      \
  X(pkt_set_qr) X(pkt_set_ra) X(pkt_set_rcode) X(pkt_set_rd) X(pkt_set_tc) X(pkt_tc) X(rdf_clone)       \
  X(rdf_data) X(rdf_deep_free) X(rdf_get_type) X(rdf_size) X(rr_clone) X(rr_free) X(rr_get_class)      \
  X(rr_get_type) X(rr_list_rr) X(rr_list_rr_count) X(rr_owner) X(rr_rd_count) X(rr_rdf) X(rr_set_ttl) \
  X(rr_ttl) X(wire2pkt)

struct LdnsApi {
#define AGENTCAGE_LDNS_MEMBER(name) decltype(&::ldns_##name) name = nullptr;
  AGENTCAGE_LDNS_FUNCTIONS(AGENTCAGE_LDNS_MEMBER)
#undef AGENTCAGE_LDNS_MEMBER
};

// Opens libldns.so.3 and takes every function, once per process (later
// calls answer the first one's outcome). Resolver::open calls it, so a run
// whose resolver cannot have ldns refuses to start. Its error's code is
// ELIBACC (a needed shared library cannot be used).
Status load_ldns();

// The functions; load_ldns() must have succeeded (anything else is a bug:
// the process ends with a message rather than call through a null pointer).
const LdnsApi& ldns();

}  // namespace agentcage::dns
