// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: parse_policy must never crash, hang, leak or trip a
// sanitizer on any input, and what it returns must hold the model's
// invariants (see model.h): a policy XOR errors, normalised paths, ranges
// within bounds, printable located messages.
#include <libpsl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "checks.h"
#include "policy/name.h"
#include "policy/policy.h"
#include "util/text.h"

namespace {

using namespace agentcage::policy;
using agentcage::fuzz::check;
using agentcage::fuzz::check_printable;

// Lexically normal absolute path (or "" for the workspace itself).
void check_path(const std::string& path, bool may_be_empty, size_t max) {
  if (path.empty()) {
    check(may_be_empty);
    return;
  }
  check(path.front() == '/' && path.size() <= max);
  check(path == "/" || path.back() != '/');
  check(path.find("//") == std::string::npos);
  check(path.find("/./") == std::string::npos && path.find("/../") == std::string::npos);
  check(!path.ends_with("/.") && !path.ends_with("/.."));
  check(path.find("${") == std::string::npos);
  for (char c : path) check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
}

void check_policy(const Policy& p) {
  check(valid_policy_name(p.name));
  for (const auto& e : p.exec_allow) {
    check_path(e.path, false, 4095);
    check(e.resolved == e.path);  // no file system access without the check
  }
  for (const auto* list : {&p.read, &p.write, &p.deny}) {
    for (const auto& e : *list) {
      check_path(e.path, e.in_workspace, kMaxRulePathBytes);
      check(e.pos.line > 0 && e.pos.column > 0);
    }
  }
  for (const auto& r : p.network_allow) {
    switch (r.kind) {
      case NetRule::Kind::cidr: {
        check(r.family == AF_INET || r.family == AF_INET6);
        const unsigned bits = r.family == AF_INET ? 32 : 128;
        check(r.prefix_len <= bits);
        for (unsigned b = r.prefix_len; b < bits; ++b) check(((r.addr[b / 8] >> (7 - b % 8)) & 1) == 0);
        for (const auto& range : r.ports) check(range.first >= 1 && range.first <= range.last);
        check(r.unix_name.empty());
        break;
      }
      case NetRule::Kind::unix_path:
        check_path(r.unix_name, false, kMaxUnixNameBytes);
        check(r.ports.empty() && r.protocol == Protocol::any);
        break;
      case NetRule::Kind::unix_abstract:
        check(!r.unix_name.empty() && r.unix_name.size() <= kMaxUnixNameBytes);
        check(r.ports.empty() && r.protocol == Protocol::any);
        break;
      case NetRule::Kind::domain: {
        // What parse_domain promises: 2+ labels of [a-z0-9_-], 1..63 bytes
        // each, at most 253 in all; single ports, at most 16 ...
        check(!r.domain.empty() && r.domain.size() <= 253 && r.unix_name.empty());
        check(r.domain.find('.') != std::string::npos);
        size_t label = 0;
        for (char ch : r.domain) {
          if (ch == '.') {
            check(label >= 1);
            label = 0;
            continue;
          }
          check((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_');
          check(++label <= 63);
        }
        check(label >= 1);
        // ... and never every name under a public suffix: a wildcard's base
        // is no suffix of either section of the list (so it has a
        // registrable domain), an exact name no registry's (ICANN) suffix.
        static const psl_ctx_t* const psl = psl_latest(nullptr);
        if (r.wildcard) check(psl_registrable_domain(psl, r.domain.c_str()) != nullptr);
        check(!psl_is_public_suffix2(psl, r.domain.c_str(), PSL_TYPE_ICANN | PSL_TYPE_NO_STAR_RULE));
        check(r.ports.size() <= 16);
        for (const auto& range : r.ports) check(range.first >= 1 && range.first == range.last);
        break;
      }
    }
  }
  const Limits& l = p.limits;
  if (l.memory_bytes) check(*l.memory_bytes > 0);
  if (l.pids) check(*l.pids >= 1 && *l.pids <= kMaxPids);
  if (l.cpus) check(*l.cpus > 0 && *l.cpus <= kMaxCpus);
  if (l.timeout) check(l.timeout->count() > 0 && *l.timeout <= kMaxTimeout);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParseOptions options;
  options.check_exec_exists = false;  // never touch the file system
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ParseResult result = parse_policy(text, "fuzz.yaml", options);

  check(result.policy.has_value() == result.errors.empty());
  check(result.errors.size() <= 101);  // the cap plus the "N more" note
  agentcage::yaml::Position previous{};
  for (const agentcage::yaml::Diagnostic& d : result.errors) {
    check(!d.message.empty() && d.file == "fuzz.yaml");
    check(d.pos.line >= 0 && d.pos.column >= 0);
    check_printable(d.message);
    // Sorted by position, the "N more errors" note (line 0) last.
    if (d.pos.line > 0) {
      check(previous.line < d.pos.line || (previous.line == d.pos.line && previous.column <= d.pos.column));
      previous = d.pos;
    }
    (void)d.format();
  }
  if (result.policy) check_policy(*result.policy);
  return 0;
}
