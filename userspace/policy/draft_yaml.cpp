// SPDX-License-Identifier: Apache-2.0
// A draft's rules as a policy document (draft_rules.h): block YAML the
// policy parser reads back, each rule under comments naming the operations
// that made it, what stays denied at the end.
#include <cstdint>
#include <cstdio>

#include "policy/draft_rules.h"
#include "util/text.h"

namespace agentcage::policy::draft {
namespace {

// The code point of the well-formed `n`-byte UTF-8 sequence at s[i].
uint32_t code_point(std::string_view s, size_t i, size_t n) {
  auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  if (n == 1) return b(0);
  uint32_t cp = b(0) & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(k) & 0x3F);
  return cp;
}

// A YAML scalar: plain when it is a path of unremarkable characters, else
// double-quoted with everything but printable ASCII escaped (\uXXXX, and
// \UXXXXXXXX above U+FFFF: yaml-cpp refuses surrogate pairs), so a rule's
// line is printable ASCII whatever bytes a run chose for its names: nothing
// in it can look like another line, or render as something else.
std::string scalar(std::string_view s) {
  constexpr std::string_view kWs = "${workspace}";
  bool plain = !s.empty() && (s.front() == '/' || s.starts_with(kWs));
  for (char c : s.substr(s.starts_with(kWs) ? kWs.size() : 0))
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
          c == '_' || c == '.' || c == '+' || c == '-'))
      plain = false;
  if (plain) return std::string(s);
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '"' || c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    const uint32_t cp = n == 0 ? 0xFFFD : code_point(s, i, n);  // draft.cpp drafts no such name
    char buf[16];
    std::snprintf(buf, sizeof buf, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", static_cast<unsigned>(cp));
    out += buf;
    i += n == 0 ? 1 : n;
  }
  return out + "\"";
}

std::string note(const std::pair<std::string, std::string>& key, const Tally& tally) {
  return describe(key.first, tally) + " — " + escape(key.second, 1000);
}

}  // namespace

std::string describe(const std::string& label, const Tally& t) {
  constexpr size_t kShown = 3;
  std::string s = escape(label, 64);
  auto list = [&](const std::set<std::string>& items, size_t max_bytes) {
    size_t n = 0;
    for (const auto& item : items) {
      if (n == kShown) break;
      s += (n++ ? ", " : "") + escape(item, max_bytes);
    }
  };
  if (!t.comms.empty()) {
    s += " by ";
    list(t.comms, 32);
    if (t.comms.size() > kShown) s += ", ...";
  }
  s += " (" + std::to_string(t.count) + "×)";
  if (!t.targets.empty()) {
    s += ": ";
    list(t.targets, 120);
    if (t.targets.size() > kShown) s += " (+" + std::to_string(t.targets.size() - kShown) + " more)";
  }
  return s;
}

std::string label(const Observation& o) {
  if (o.target_kind == "path" && (o.hook == "file_open" || o.hook == "file_receive"))
    return o.hook + ((o.access & kAccessWrite) ? " write" : " read");
  if (o.target_kind == "inet" && !o.protocol.empty()) return o.hook + " " + o.protocol;
  return o.hook;
}

std::vector<std::pair<uint16_t, uint16_t>> port_ranges(const std::set<uint16_t>& ports) {
  std::vector<std::pair<uint16_t, uint16_t>> out;
  for (uint16_t p : ports) {
    if (!out.empty() && out.back().second + 1 == p)
      out.back().second = p;
    else
      out.emplace_back(p, p);
  }
  return out;
}

std::string render_yaml(const Rules& r, const DraftOptions& options) {
  std::string y;
  y += "# A draft policy from `agentcage policy suggest`";
  if (!options.source.empty()) y += ", made from " + escape(options.source, 200);
  if (options.run_id) y += " (run " + escape(*options.run_id, 64) + ")";
  if (options.from_policy) y += " under policy " + escape(*options.from_policy, 64);
  y += ".\n# It allows what the run was seen to do, each by the narrowest rule named above it;\n"
       "# read every rule before enforcing it (`agentcage policy explain` shows what one\n"
       "# decides). What it does not allow is listed at the end. Not drafted: limits,\n"
       "# exec.native_code/debugging and syscalls.allow (a call the recorded policy's\n"
       "# filter let through leaves no record): copy those from the policy the run was\n"
       "# recorded under if it set them.\n";
  if (!options.incomplete.empty())
    y += "# WARNING: incomplete input (" + escape(options.incomplete, 200) +
         "): operations may be missing; rerun with `agentcage run --mode audit --record`.\n";
  y += "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: " + r.name + "\nspec:\n  mode: enforce\n";

  const std::string item = "      ";
  auto rule = [&](const std::string& id, const std::string& text) {
    if (auto it = r.why.find(id); it != r.why.end())
      for (const auto& [lab, tally] : it->second) y += item + "# " + describe(lab, tally) + "\n";
    if (auto it = r.caution.find(id); it != r.caution.end())
      for (const auto& line : it->second) y += item + "# " + escape(line, 1000) + "\n";
    y += item + "- " + text + "\n";
  };
  if (!r.exec.empty()) {
    y += "  exec:\n    allow:\n";
    for (const auto& e : r.exec) rule("exec " + e, scalar(e));
  }
  if (!r.read.empty() || !r.write.empty()) {
    y += "  files:\n";
    for (const auto* list : {&r.read, &r.write}) {
      if (list->empty()) continue;
      const std::string kind = list == &r.read ? "read" : "write";
      y += "    " + kind + ":\n";
      for (const auto& path : *list) rule(kind + " " + path, scalar(path));
    }
  }
  if (!r.net.empty() || !r.unix_sockets.empty()) {
    y += "  network:\n    allow:\n";
    for (const auto& [key, ports] : r.net) {
      std::string list;
      for (const auto& [first, last] : port_ranges(ports))
        list += (list.empty() ? "" : ", ") + std::to_string(first) +
                (first == last ? "" : "-" + std::to_string(last));
      // An IPv6 network holds ':', which YAML may take for a mapping.
      const std::string cidr = key.first.find(':') == std::string::npos ? key.first : "\"" + key.first + "\"";
      std::string entry = "cidr: " + cidr + "\n" + item + "  ports: [" + list + "]";
      if (!key.second.empty()) entry += "\n" + item + "  protocol: " + key.second;
      rule("net " + key.first + " " + key.second, entry);
    }
    for (const auto& u : r.unix_sockets) rule("unix " + u, "unix: " + scalar(u));
  }
  if (!r.left.empty()) {
    y += "\n# Not allowed by this draft (no rule kind, or deliberately left denied):\n";
    for (const auto& [key, tally] : r.left) y += "#   " + note(key, tally) + "\n";
  }
  if (!r.review.empty()) {
    y += "\n# Allowed, but check before enforcing:\n";
    for (const auto& [key, tally] : r.review) y += "#   " + note(key, tally) + "\n";
  }
  if (!r.assumed.empty()) {
    y += "\n# Assumed:\n";
    for (const auto& a : r.assumed) y += "#   " + escape(a, 1000) + "\n";
  }
  return y;
}

std::vector<std::string> render_notes(const Rules& r) {
  std::vector<std::string> out;
  for (const auto& [key, tally] : r.left) out.push_back(note(key, tally));
  for (const auto& [key, tally] : r.review) out.push_back(note(key, tally));
  for (const auto& a : r.assumed) out.push_back(escape(a, 1000));
  return out;
}

}  // namespace agentcage::policy::draft
