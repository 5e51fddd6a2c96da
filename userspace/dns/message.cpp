// SPDX-License-Identifier: Apache-2.0
#include "dns/message.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace agentcage::dns::detail {
namespace {

struct WireFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

constexpr size_t kHeader = 12;

std::vector<uint8_t> to_wire(const ldns_pkt* pkt, uint8_t op = 0) {
  uint8_t* raw = nullptr;
  size_t size = 0;
  if (ldns().pkt2wire(&raw, pkt, &size) != LDNS_STATUS_OK) {
    std::free(raw);
    return {};
  }
  std::unique_ptr<uint8_t, WireFree> owned(raw);
  std::vector<uint8_t> wire(raw, raw + size);
  // The opcode goes in by hand: ldns's enum has no value for most opcodes.
  if (wire.size() >= kHeader) wire[2] = static_cast<uint8_t>((wire[2] & 0x87) | ((op & 0x0f) << 3));
  return wire;
}

char lower(uint8_t c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c); }

Pkt header(const ClientQuery& query, uint8_t rcode) {
  Pkt pkt(ldns().pkt_new());
  if (!pkt) return nullptr;
  ldns().pkt_set_id(pkt.get(), query.id);
  ldns().pkt_set_qr(pkt.get(), true);
  ldns().pkt_set_rd(pkt.get(), query.rd);
  ldns().pkt_set_ra(pkt.get(), true);
  ldns().pkt_set_rcode(pkt.get(), rcode);
  if (query.question) {
    Rr q(ldns().rr_clone(query.question.get()));
    if (!q || !ldns().pkt_push_rr(pkt.get(), LDNS_SECTION_QUESTION, q.get())) return nullptr;
    q.release();  // the packet owns it now
  }
  return pkt;
}

}  // namespace

uint8_t opcode(std::span<const uint8_t> wire) {
  return wire.size() >= kHeader ? static_cast<uint8_t>((wire[2] >> 3) & 0x0f) : 0xff;
}

Pkt parse(std::span<const uint8_t> wire) {
  ldns_pkt* raw = nullptr;
  if (wire.empty() || ldns().wire2pkt(&raw, wire.data(), wire.size()) != LDNS_STATUS_OK) {
    ldns().pkt_free(raw);
    return nullptr;
  }
  return Pkt(raw);
}

NameText name_text(const ldns_rdf* dname) {
  NameText out;
  if (!dname || ldns().rdf_get_type(dname) != LDNS_RDF_TYPE_DNAME) return out;
  const uint8_t* data = ldns().rdf_data(dname);
  const size_t size = ldns().rdf_size(dname);
  bool clean = true;
  size_t i = 0;
  while (i < size && data[i] != 0) {
    const size_t len = data[i];
    if ((len & 0xC0) != 0 || i + 1 + len > size) return NameText{};  // not an uncompressed name
    if (!out.text.empty()) {
      out.text += '.';
      out.shown += '.';
    }
    for (size_t j = i + 1; j <= i + len; ++j) {
      const uint8_t c = data[j];
      const bool printable = c >= 0x21 && c <= 0x7e && c != '.';
      clean = clean && printable;
      out.text += lower(c);
      out.shown += printable || c == ' ' ? lower(c) : '?';
    }
    i += 1 + len;
  }
  out.clean = clean && !out.text.empty();
  if (out.shown.empty()) out.shown = ".";  // the root: shown, never an empty name
  if (out.shown.size() > 253) out.shown.resize(253);
  return out;
}

bool same_name(const ldns_rdf* a, const ldns_rdf* b) {
  if (!a || !b || ldns().rdf_size(a) != ldns().rdf_size(b)) return false;
  const uint8_t* x = ldns().rdf_data(a);
  const uint8_t* y = ldns().rdf_data(b);
  // Label length bytes are below 64, so lowering them changes nothing.
  for (size_t i = 0; i < ldns().rdf_size(a); ++i)
    if (lower(x[i]) != lower(y[i])) return false;
  return true;
}

std::vector<uint8_t> answer(const ClientQuery& query, uint8_t rcode, const ldns_rr_list* answers,
                            size_t limit, std::optional<uint32_t> ttl_cap) {
  Pkt pkt = header(query, rcode);
  if (!pkt) return {};
  for (size_t i = 0; answers && i < ldns().rr_list_rr_count(answers); ++i) {
    Rr rr(ldns().rr_clone(ldns().rr_list_rr(answers, i)));
    if (!rr) return {};
    if (ttl_cap && ldns().rr_ttl(rr.get()) > *ttl_cap) ldns().rr_set_ttl(rr.get(), *ttl_cap);
    if (!ldns().pkt_push_rr(pkt.get(), LDNS_SECTION_ANSWER, rr.get())) return {};
    rr.release();
  }
  std::vector<uint8_t> wire = to_wire(pkt.get(), query.opcode);
  if (wire.size() <= limit) return wire;
  Pkt truncated = header(query, rcode);
  if (!truncated) return {};
  ldns().pkt_set_tc(truncated.get(), true);
  wire = to_wire(truncated.get(), query.opcode);
  return wire.size() <= limit ? wire : std::vector<uint8_t>{};
}

std::vector<uint8_t> upstream_query(const ldns_rdf* qname, uint16_t qtype, uint16_t id) {
  Rdf name(ldns().rdf_clone(qname));
  if (!name) return {};
  ldns().dname2canonical(name.get());
  Pkt pkt(ldns().pkt_query_new(name.get(), static_cast<ldns_rr_type>(qtype), LDNS_RR_CLASS_IN, LDNS_RD));
  if (!pkt) return {};  // ldns owns the name only once the packet exists
  name.release();
  ldns().pkt_set_id(pkt.get(), id);
  return to_wire(pkt.get());
}

bool answers_query(const ldns_pkt* reply, const ldns_rdf* qname, uint16_t qtype, uint16_t id) {
  if (!reply || ldns().pkt_id(reply) != id || !ldns().pkt_qr(reply) || ldns().pkt_qdcount(reply) != 1) return false;
  const ldns_rr_list* questions = ldns().pkt_question(reply);
  if (!questions || ldns().rr_list_rr_count(questions) != 1) return false;
  const ldns_rr* q = ldns().rr_list_rr(questions, 0);
  return ldns().rr_get_type(q) == qtype && ldns().rr_get_class(q) == LDNS_RR_CLASS_IN &&
         same_name(ldns().rr_owner(q), qname);
}

Addresses addresses(const ldns_rr_list* answers) {
  Addresses out;
  for (size_t i = 0; answers && i < ldns().rr_list_rr_count(answers); ++i) {
    const ldns_rr* rr = ldns().rr_list_rr(answers, i);
    if (ldns().rr_get_class(rr) != LDNS_RR_CLASS_IN || ldns().rr_rd_count(rr) != 1) continue;
    const ldns_rdf* rdata = ldns().rr_rdf(rr, 0);
    Address a;
    if (ldns().rr_get_type(rr) == LDNS_RR_TYPE_A && ldns().rdf_size(rdata) == 4) {
      a.family = AF_INET;
      a.addr[10] = 0xff;
      a.addr[11] = 0xff;
      std::memcpy(a.addr.data() + 12, ldns().rdf_data(rdata), 4);
    } else if (ldns().rr_get_type(rr) == LDNS_RR_TYPE_AAAA && ldns().rdf_size(rdata) == 16) {
      a.family = AF_INET6;
      std::memcpy(a.addr.data(), ldns().rdf_data(rdata), 16);
    } else {
      continue;
    }
    const uint32_t ttl = ldns().rr_ttl(rr);
    out.min_ttl = out.min_ttl ? std::min(*out.min_ttl, ttl) : ttl;
    const bool seen = std::any_of(out.list.begin(), out.list.end(),
                                  [&](const Address& b) { return b.family == a.family && b.addr == a.addr; });
    if (!seen) out.list.push_back(a);
  }
  return out;
}

}  // namespace agentcage::dns::detail
