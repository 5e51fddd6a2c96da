// SPDX-License-Identifier: Apache-2.0
// The DNS messages of the resolver (resolver.h), read and written with ldns
// (its functions through ldns(), dns/ldns_api.h):
// owners for ldns objects, a question's name as text, the answers the
// resolver gives and the queries it sends upstream. No sockets here.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dns/ldns_api.h"
#include "dns/resolver.h"

namespace agentcage::dns::detail {

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns().pkt_free(p); }
};
struct RrFree {
  void operator()(ldns_rr* rr) const { ldns().rr_free(rr); }
};
struct RdfFree {
  void operator()(ldns_rdf* rdf) const { ldns().rdf_deep_free(rdf); }
};
using Pkt = std::unique_ptr<ldns_pkt, PktFree>;
using Rr = std::unique_ptr<ldns_rr, RrFree>;
using Rdf = std::unique_ptr<ldns_rdf, RdfFree>;

// A message from the wire; null when ldns cannot parse it.
Pkt parse(std::span<const uint8_t> wire);

// A question's name as text: lower-case ASCII, labels joined by '.', no
// trailing dot. `clean` is false for the root name, for a label holding a
// '.' or a byte outside '!'..'~' (such a name is never allowed: its text
// would not say which name it is). `shown` is the text for a log: printable
// ASCII only ('?' for any other byte and for a '.' inside a label), at most
// 253 characters.
struct NameText {
  std::string text;
  std::string shown;
  bool clean = false;
};
NameText name_text(const ldns_rdf* dname);

// Two names in wire form, equal but for ASCII case.
bool same_name(const ldns_rdf* a, const ldns_rdf* b);

// A message's opcode (0..15), from its header: ldns hands it out as an enum
// that has no value for most of them. 0xff when `wire` has no header.
uint8_t opcode(std::span<const uint8_t> wire);

// What an answer to a client repeats of its query.
struct ClientQuery {
  uint16_t id = 0;
  bool rd = false;
  uint8_t opcode = 0;  // 0..15 (QUERY is 0)
  Rr question;         // null: the answer has no question section (FORMERR, NOTIMP)
};

// The answer to `query`: QR, RA, `rcode`, the query's question, copies of
// `answers` (may be null) with each TTL lowered to `ttl_cap` when it is set.
// Longer than `limit` bytes: the same without answers, TC set. Empty when
// ldns cannot build it.
std::vector<uint8_t> answer(const ClientQuery& query, uint8_t rcode, const ldns_rr_list* answers,
                            size_t limit, std::optional<uint32_t> ttl_cap = std::nullopt);

// A fresh query for the upstream: `qname` (lower-case), `qtype`, class IN,
// RD, id `id`, nothing else (no EDNS). Empty when ldns cannot build it.
std::vector<uint8_t> upstream_query(const ldns_rdf* qname, uint16_t qtype, uint16_t id);

// Whether `reply` answers the query upstream_query(qname, qtype, id) made:
// same id, QR, one question of that name (any case), type and
// class IN.
// (The caller checks the opcode of its wire form.)
bool answers_query(const ldns_pkt* reply, const ldns_rdf* qname, uint16_t qtype, uint16_t id);

// Every A and AAAA record (class IN) of `answers`, each address once, and
// their smallest TTL (none: nullopt).
struct Addresses {
  std::vector<Address> list;
  std::optional<uint32_t> min_ttl;
};
Addresses addresses(const ldns_rr_list* answers);

}  // namespace agentcage::dns::detail
