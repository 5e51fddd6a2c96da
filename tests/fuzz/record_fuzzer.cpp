// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary decision-record bytes go through the one record
// decoder (bpf::decode_record) and every writer that prints a record: the
// audit line (telemetry::event_line), the result document (run::result_text)
// and the denial line on stderr (run::denial_summary). A run controls a
// record's comm and target completely (invalid UTF-8, control characters,
// NULs, lengths that lie), so none of that may crash, throw, or produce
// output that is not valid JSON in valid UTF-8, or put a control character
// on the caller's terminal.
#include <agentcage/abi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bpf/record.h"
#include "checks.h"
#include "run/result.h"
#include "telemetry/audit.h"
#include "util/text.h"

namespace {

using namespace agentcage;
using fuzz::check;
using fuzz::check_utf8;

// Valid JSON in valid UTF-8 that parses back to an object.
nlohmann::json check_json(const std::string& text) {
  check_utf8(text);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(j.is_object());
  return j;
}

// Printable on a terminal: no C0 control, DEL, C1 control (U+0080..U+009F,
// which some terminals take as CSI) or bidirectional override, except the
// final newline.
void check_terminal_safe(std::string_view line) {
  check_utf8(line);
  check(!line.empty() && line.back() == '\n');
  line.remove_suffix(1);
  for (size_t i = 0; i < line.size(); ++i) {
    const auto b = static_cast<unsigned char>(line[i]);
    check(b >= 0x20 && b != 0x7f);
    if (b == 0xC2 && i + 1 < line.size()) check(static_cast<unsigned char>(line[i + 1]) >= 0xA0);
    if (b == 0xE2 && i + 2 < line.size() && static_cast<unsigned char>(line[i + 1]) == 0x80) {
      const auto c = static_cast<unsigned char>(line[i + 2]);
      check(c < 0xAA || c > 0xAE);  // U+202A..U+202E
    }
    if (b == 0xE2 && i + 2 < line.size() && static_cast<unsigned char>(line[i + 1]) == 0x81) {
      const auto c = static_cast<unsigned char>(line[i + 2]);
      check(c < 0xA6 || c > 0xA9);  // U+2066..U+2069
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The decoder on the raw bytes: it accepts a record only when the header
  // says so and the bytes cover it.
  std::optional<ac_event_decision> decoded = bpf::decode_record(data, size);
  if (decoded) {
    check(size >= sizeof(ac_event_decision));
    check(decoded->hdr.type == AC_EVENT_DECISION && decoded->hdr.size == sizeof(ac_event_decision));
  } else {
    check(size < sizeof(ac_event_decision) || std::memcmp(data, "\x01\x00", 2) != 0 ||
          data[2] != (sizeof(ac_event_decision) & 0xff) || data[3] != (sizeof(ac_event_decision) >> 8));
  }

  // Then the writers on a record with any body: the bytes laid over a record
  // whose header the decoder accepts, so every input exercises them.
  ac_event_decision rec{};
  std::memcpy(&rec, data, size < sizeof rec ? size : sizeof rec);
  rec.hdr.type = AC_EVENT_DECISION;
  rec.hdr.size = sizeof rec;
  decoded = bpf::decode_record(&rec, sizeof rec);
  check(decoded.has_value());
  const ac_event_decision& ev = *decoded;

  const std::string_view rest =
      size > sizeof rec
          ? std::string_view(reinterpret_cast<const char*>(data) + sizeof rec, size - sizeof rec)
          : std::string_view();

  // Audit line: one line, valid JSON, the record's fields present.
  telemetry::EventContext ctx;
  ctx.realtime_ns = static_cast<int64_t>(ev.hdr.time_ns);
  ctx.policy = std::string(rest.substr(0, 64));
  ctx.run_id = std::string(rest.substr(rest.size() / 2));
  const std::string line = telemetry::event_line(ev, ctx);
  check(!line.empty() && line.back() == '\n' && line.find('\n') == line.size() - 1);
  nlohmann::json audit = check_json(line);
  check(audit["target"].is_string() && audit["comm"].is_string() && audit["hook"].is_string());
  check(audit["scope_id"] == ev.scope_id && audit["pid"] == ev.pid);

  // Result document: the record among the report's records, and strings
  // the caller or the run chose (command, error text) from the same bytes.
  run::RunResult res;
  res.run_id = std::string(rest.substr(0, 16));
  res.policy_name = std::string(rest.substr(0, 80));
  res.command = {std::string(rest), std::string(ev.comm, sizeof ev.comm)};
  res.workspace = std::string(ev.target, sizeof ev.target);
  res.error = std::string(rest.substr(rest.size() / 3));
  bpf::ScopeReport report;
  report.denied[ev.hook % AC_HOOK_COUNT] = 1 + (ev.pid & 0xff);
  report.audited[ev.reason % AC_HOOK_COUNT] = ev.tid & 0xff;
  report.records_taken = ev.uid;
  for (size_t i = 0; i < 1 + static_cast<size_t>(ev.decision % AC_REPORT_RECORDS); ++i)
    report.records.push_back(ev);
  res.report = report;
  nlohmann::json doc = check_json(run::result_text(res));
  check(doc["denials"]["records"].is_array() && doc["denials"]["records"].size() == report.records.size());
  check(doc["denials"]["records"][0]["target"] == audit["target"]);

  // The stderr line: terminal-safe.
  check_terminal_safe(run::denial_summary(res));
  return 0;
}
