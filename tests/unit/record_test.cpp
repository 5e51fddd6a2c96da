// SPDX-License-Identifier: Apache-2.0
// The decision-record decoder (bpf/record.h): names of the ABI values, the
// target as text, and the one JSON shape the audit log and the run result
// share.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bpf/names.h"
#include "bpf/record.h"
#include "run/result.h"
#include "telemetry/audit.h"
#include "util/sys_names.h"
#include "util/text.h"

namespace agentcage {
namespace {

using nlohmann::json;

ac_event_decision record(uint8_t kind, const std::string& target) {
  ac_event_decision r{};
  r.hdr.type = AC_EVENT_DECISION;
  r.hdr.size = sizeof r;
  r.hdr.cgroup_id = 4321;
  r.scope_id = 1234;
  r.policy_slot = 3;
  r.pid = 42;
  r.tid = 43;
  r.uid = 1000;
  r.hook = kind == AC_TARGET_PATH ? AC_HOOK_FILE_OPEN : AC_HOOK_UNIX_CONNECT;
  r.decision = AC_DECISION_DENY;
  r.reason = AC_REASON_DEFAULT_DENY;
  r.error = -EACCES;
  std::strcpy(r.comm, "python3");
  r.target_kind = kind;
  r.target_len = static_cast<uint16_t>(target.size());
  std::memcpy(r.target, target.data(), target.size());
  return r;
}

TEST(Names, AbiValuesErrnosAndSignals) {
  EXPECT_EQ(bpf::hook_name(AC_HOOK_EXEC), "exec");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_SOCKET_CONNECT), "socket_connect");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_SCOPE_ESCAPE), "scope_escape");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_IPC), "ipc");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_KEY), "key");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_SOCKET_BIND), "socket_bind");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_FILE_STAT), "file_stat");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_FILE_WATCH), "file_watch");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_PROC), "proc");
  EXPECT_EQ(bpf::hook_name(AC_HOOK_COUNT), "unknown");
  EXPECT_EQ(bpf::decision_name(AC_DECISION_AUDIT), "audit");
  EXPECT_EQ(bpf::decision_name(AC_DECISION_COUNT), "unknown");
  EXPECT_EQ(bpf::reason_name(AC_REASON_PATH_TOO_DEEP), "path_too_deep");
  EXPECT_EQ(bpf::reason_name(AC_REASON_PROTECTED), "protected");
  EXPECT_EQ(bpf::reason_name(AC_REASON_PATH_TOO_LONG), "path_too_long");
  EXPECT_EQ(bpf::reason_name(AC_REASON_PATH_DETACHED), "path_detached");
  EXPECT_EQ(bpf::reason_name(AC_REASON_SCRATCH), "scratch_unavailable");
  EXPECT_EQ(bpf::reason_name(AC_REASON_COUNT), "unknown");
  EXPECT_EQ(bpf::target_kind_name(AC_TARGET_NONE), "none");
  EXPECT_EQ(bpf::target_kind_name(AC_TARGET_PATH), "path");
  EXPECT_EQ(bpf::target_kind_name(AC_TARGET_INET), "inet");
  EXPECT_EQ(bpf::target_kind_name(AC_TARGET_UNIX), "unix");
  EXPECT_EQ(bpf::target_kind_name(AC_TARGET_UNIX_ABSTRACT), "unix_abstract");
  EXPECT_EQ(bpf::target_kind_name(5), "unknown");
  EXPECT_EQ(errno_name(EACCES), "EACCES");
  EXPECT_EQ(errno_name(100000), "E100000");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(1000), "SIG1000");
}

TEST(DecisionRecord, Targets) {
  EXPECT_EQ(bpf::record_target(record(AC_TARGET_PATH, "/etc/passwd")), "/etc/passwd");
  ac_event_decision v4{};
  v4.target_kind = AC_TARGET_INET;
  v4.family = AF_INET;
  v4.port = 443;
  uint8_t a4[] = {10, 0, 0, 1};
  std::memcpy(v4.addr, a4, 4);
  EXPECT_EQ(bpf::record_target(v4), "10.0.0.1:443");
  ac_event_decision v6{};
  v6.target_kind = AC_TARGET_INET;
  v6.family = AF_INET6;
  v6.port = 80;
  v6.addr[15] = 1;
  EXPECT_EQ(bpf::record_target(v6), "[::1]:80");
  ac_event_decision none{};
  EXPECT_EQ(bpf::record_target(none), "");
  EXPECT_EQ(bpf::record_json(none)["target_kind"], "none");
}

// A socket bound at a path and an abstract name that reads the same are two
// different targets: the kind and the '@' tell them apart.
TEST(DecisionRecord, UnixPathAndAbstractNameDiffer) {
  json path = bpf::record_json(record(AC_TARGET_UNIX, "/run/llm.sock"));
  EXPECT_EQ(path["target"], "/run/llm.sock");
  EXPECT_EQ(path["target_kind"], "unix");
  json abstract = bpf::record_json(record(AC_TARGET_UNIX_ABSTRACT, "/run/llm.sock"));
  EXPECT_EQ(abstract["target"], "@/run/llm.sock");
  EXPECT_EQ(abstract["target_kind"], "unix_abstract");
  EXPECT_EQ(abstract["hook"], "unix_connect");

  // An abstract name is target_len bytes, NULs included: nothing cuts it at
  // the first NUL, so "a\0b" is not reported as "a".
  ac_event_decision nul = record(AC_TARGET_UNIX_ABSTRACT, std::string("a\0b", 3));
  EXPECT_EQ(bpf::record_target(nul), std::string("@a\0b", 4));
  EXPECT_EQ(bpf::record_json(nul).dump(),
            bpf::record_json(nul).dump(-1, ' ', false, json::error_handler_t::strict));
  EXPECT_NE(bpf::record_json(nul).dump().find(R"("target":"@a\u0000b")"), std::string::npos);
  // An empty abstract name is still abstract.
  EXPECT_EQ(bpf::record_target(record(AC_TARGET_UNIX_ABSTRACT, "")), "@");
}

// The audit line and the result file carry a record in the same shape: the
// audit line only adds its context (time, run_id, policy).
TEST(DecisionRecord, OneShapeInTheAuditLogAndTheResult) {
  for (const auto& rec : {record(AC_TARGET_PATH, "/etc/passwd"), record(AC_TARGET_UNIX_ABSTRACT, "llm/proxy"),
                          record(AC_TARGET_UNIX, "/run/x.sock")}) {
    const json expected = bpf::record_json(rec);
    EXPECT_EQ(expected.size(), 14u) << expected.dump();
    for (const char* key : {"scope_id", "policy_slot", "hook", "decision", "reason", "pid", "tid", "uid",
                            "comm", "target", "target_kind", "errno", "errno_name", "cgroup_id"})
      EXPECT_TRUE(expected.contains(key)) << key;
    EXPECT_EQ(expected["errno"], 13);
    EXPECT_EQ(expected["errno_name"], "EACCES");

    json audit = telemetry::event_json(rec, {1735787045123456789LL, "python-sandbox", "0123456789abcdef", {}, ""});
    EXPECT_FALSE(audit.contains("labels"));        // only a run with labels has them
    EXPECT_FALSE(audit.contains("container_id"));  // only a container's scope has one
    EXPECT_EQ(telemetry::event_json(rec, {0, "p", "0123456789abcdef", {{"task", "t-1"}}, ""})["labels"]["task"],
              "t-1");
    json container = telemetry::event_json(rec, {0, "p", "", {{"k8s.pod", "agent-7"}}, "3f9a0c1d2e"});
    EXPECT_EQ(container["container_id"], "3f9a0c1d2e");
    EXPECT_TRUE(container["run_id"].is_null());
    EXPECT_EQ(container["labels"]["k8s.pod"], "agent-7");
    EXPECT_EQ(audit["time"], "2025-01-02T03:04:05.123456789Z");
    EXPECT_EQ(audit["policy"], "python-sandbox");
    EXPECT_EQ(audit["run_id"], "0123456789abcdef");
    for (const char* context : {"time", "policy", "run_id"}) audit.erase(context);
    EXPECT_EQ(audit, expected);

    run::RunResult result;
    result.report.emplace();
    result.report->records = {rec};
    EXPECT_EQ(run::to_json(result)["denials"]["records"], json::array({expected}));
  }
  // Audit mode: the task got no error.
  ac_event_decision audited = record(AC_TARGET_PATH, "/etc/passwd");
  audited.decision = AC_DECISION_AUDIT;
  audited.error = 0;
  json j = bpf::record_json(audited);
  EXPECT_EQ(j["decision"], "audit");
  EXPECT_EQ(j["errno"], 0);
  EXPECT_TRUE(j["errno_name"].is_null());
}

// dashboards/audit-sample.jsonl is what the daemon writes, one line of each
// shape (a path with its access, an address with its protocol, an abstract
// unix name in audit mode outside a run, a run's labels, a refused name):
// dashboards/check reads the fields the Loki dashboard's queries extract and
// the shipping configuration's labels from it, so they are the code's. A
// change here that adds a field: AGENTCAGE_UPDATE_AUDIT_SAMPLE=1 rewrites it.
TEST(AuditLine, TheDashboardsSampleIsWhatTheDaemonWrites) {
  const int64_t t = 1735787045123456789LL;
  ac_event_decision open = record(AC_TARGET_PATH, "/etc/passwd");
  open.access = AC_ACCESS_READ;
  ac_event_decision connect = record(AC_TARGET_PATH, "");
  connect.hook = AC_HOOK_SOCKET_CONNECT;
  connect.target_kind = AC_TARGET_INET;
  connect.target_len = 0;
  connect.family = AF_INET;
  connect.port = 443;
  connect.protocol = IPPROTO_TCP;
  const uint8_t addr[4] = {203, 0, 113, 7};
  std::memcpy(connect.addr, addr, sizeof addr);
  ac_event_decision audited = record(AC_TARGET_UNIX_ABSTRACT, "llm/proxy");
  audited.decision = AC_DECISION_AUDIT;
  audited.error = 0;
  ac_event_decision exec = record(AC_TARGET_PATH, "/workspace/a.out");
  exec.hook = AC_HOOK_EXEC;
  exec.access = AC_ACCESS_EXEC;
  const std::string run = "0123456789abcdef";
  const std::string lines =
      telemetry::event_line(open, {t, "python-sandbox", run, {{"task", "t-1"}}, ""}) +
      telemetry::event_line(connect, {t + 1000, "python-sandbox", run, {}, ""}) +
      telemetry::event_line(audited, {t + 2000, "llm-proxy-only", "", {}, ""}) +
      telemetry::event_line(exec, {t + 3000, "python-sandbox", run, {}, ""}) +
      telemetry::refused_name_line("exfil.example.net", 3, {t + 4000, "python-sandbox", run, {}, ""}) +
      telemetry::event_line(open, {t + 5000, "python-sandbox", "", {{"k8s.pod", "agent-7"}}, "3f9a0c1d2e"});
  const std::string path = std::string(AGENTCAGE_SOURCE_DIR) + "/dashboards/audit-sample.jsonl";
  if (const char* update = std::getenv("AGENTCAGE_UPDATE_AUDIT_SAMPLE"); update && std::string(update) == "1")
    std::ofstream(path, std::ios::trunc) << lines;
  std::ifstream in(path);
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_EQ(have.str(), lines) << path
                               << " is not what the daemon writes: rerun this test with "
                                  "AGENTCAGE_UPDATE_AUDIT_SAMPLE=1, then dashboards/check";
}

// The record's bytes come from the kernel but its strings from the confined
// code (comm, file and socket names): nothing in them may make the decoder
// read beyond the record, or make the JSON fail to dump.
TEST(DecisionRecord, HostileBytes) {
  ac_event_decision r = record(AC_TARGET_PATH, "");
  std::memset(r.target, 'x', sizeof r.target);  // no NUL anywhere
  r.target_len = 0xffff;
  EXPECT_EQ(bpf::record_target(r), std::string(sizeof r.target, 'x'));
  r.target_kind = AC_TARGET_UNIX_ABSTRACT;
  EXPECT_EQ(bpf::record_target(r), "@" + std::string(sizeof r.target, 'x'));

  // Invalid UTF-8 in comm (no NUL either) and target: replaced, so even a
  // strict dump (the result file's) cannot throw.
  ac_event_decision bad = record(AC_TARGET_PATH, "/tmp/\xff\xfe\xc0\xaf\xed\xa0\x80/\xe2\x82");
  std::memcpy(bad.comm,
              "\xff\"\n\\\x01"
              "abcdefghijk",
              16);
  json j = bpf::record_json(bad);
  std::string strict;
  ASSERT_NO_THROW(strict = j.dump());
  EXPECT_EQ(strict, j.dump(-1, ' ', false, json::error_handler_t::replace));
  EXPECT_EQ(j["target"], "/tmp/\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD/\uFFFD\uFFFD");
  EXPECT_EQ(j["comm"],
            "\uFFFD\"\n\\\x01"
            "abcdefghijk");
  run::RunResult result;
  result.report.emplace();
  result.report->records = {bad};
  EXPECT_NO_THROW(static_cast<void>(run::to_json(result).dump(2)));

  // Values the kernel never writes still decode to something defined.
  ac_event_decision odd = record(AC_TARGET_INET, "");
  odd.hook = 200;
  odd.decision = 200;
  odd.reason = 200;
  odd.family = 0xffff;
  odd.error = INT_MIN;
  json o = bpf::record_json(odd);
  EXPECT_EQ(o["hook"], "unknown");
  EXPECT_EQ(o["decision"], "unknown");
  EXPECT_EQ(o["reason"], "unknown");
  EXPECT_EQ(o["target"], "");
  EXPECT_EQ(o["errno"], 2147483648LL);
  EXPECT_EQ(o["errno_name"], "E2147483648");
  odd.target_kind = 77;
  EXPECT_EQ(bpf::record_json(odd)["target_kind"], "unknown");
}

// The one decoder of record bytes (the ring buffer's, the fuzzer's): the
// header is checked before the body, nothing short or of another kind passes.
TEST(DecisionRecord, DecodeChecksHeaderAndSize) {
  ac_event_decision r = record(AC_TARGET_PATH, "/etc/passwd");
  std::string bytes(reinterpret_cast<const char*>(&r), sizeof r);
  auto ok = bpf::decode_record(bytes.data(), bytes.size());
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(bpf::record_target(*ok), "/etc/passwd");
  EXPECT_TRUE(bpf::decode_record((bytes + "extra").data(), bytes.size() + 5).has_value());
  EXPECT_FALSE(bpf::decode_record(bytes.data(), sizeof r - 1).has_value());
  EXPECT_FALSE(bpf::decode_record(bytes.data(), 3).has_value());
  EXPECT_FALSE(bpf::decode_record(nullptr, 0).has_value());
  ac_event_decision other = r;
  other.hdr.type = 2;
  EXPECT_FALSE(bpf::decode_record(&other, sizeof other).has_value());
  other = r;
  other.hdr.size = sizeof r - 8;
  EXPECT_FALSE(bpf::decode_record(&other, sizeof other).has_value());
}

// What the run names (files, sockets, its comm) reaches the caller's
// terminal only escaped: no escape sequence, no C1 control, no bidi override,
// no NUL; and a long name is cut.
TEST(DecisionRecord, DenialLineOnStderrIsEscaped) {
  run::RunResult result;
  result.policy_name = "python-sandbox";
  EXPECT_EQ(run::denial_summary(result), "");  // no report, nothing to say
  result.report.emplace();
  EXPECT_EQ(run::denial_summary(result), "");  // nothing denied
  result.report->denied[AC_HOOK_FILE_OPEN] = 3;
  result.report->records_taken = 3;
  result.report->records = {record(AC_TARGET_PATH,
                                   "/tmp/\x1b]0;owned\x07\x1b[2J\xc2\x9b"
                                   "31m\xe2\x80\xae"
                                   "evil"),
                            record(AC_TARGET_UNIX_ABSTRACT, std::string("\0sock\x7f", 6))};
  const std::string line = run::denial_summary(result);
  EXPECT_EQ(line,
            "agentcage: policy python-sandbox denied 3 operation(s): file_open "
            "/tmp/\\x1b]0;owned\\x07\\x1b[2J\\xc2\\x9b31m\\xe2\\x80\\xaeevil, "
            "unix_connect @\\x00sock\\x7f, ...\n");
  result.report->records = {record(AC_TARGET_PATH, "/" + std::string(240, 'a'))};
  const std::string cut = run::denial_summary(result);
  EXPECT_NE(cut.find("/" + std::string(159, 'a') + "..."), std::string::npos) << cut;
  EXPECT_EQ(cut.find(std::string(160, 'a')), std::string::npos) << cut;
}

TEST(Text, NormalAbsolutePaths) {
  for (const char* ok : {"/workspace", "/a/b.c/d", "/srv/agent-1/ws", "/..a/b..", "/.x"})
    EXPECT_TRUE(normal_absolute_path(ok)) << ok;
  for (const std::string& bad : {std::string(), std::string("/"), std::string("rel"), std::string("/a/"),
                                std::string("//a"), std::string("/a//b"), std::string("/a/./b"), std::string("/a/.."),
                                std::string("/.."), std::string("/a/../etc"), "/" + std::string(4095, 'a'),
                                std::string("/a\0b", 4)})
    EXPECT_FALSE(normal_absolute_path(bad)) << bad;
}

TEST(Text, EscapeLeavesOrdinaryTextAlone) {
  EXPECT_EQ(escape("/home/\xc3\xa9t\xc3\xa9/\xe2\x82\xac \xf0\x9f\x98\x80", 100),
            "/home/\xc3\xa9t\xc3\xa9/\xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(escape("\xc2\xa0nbsp", 100), "\xc2\xa0nbsp");  // U+00A0 is printable
  EXPECT_EQ(escape("a\xe2\x81\xa6"
                   "b\xe2\x81\xa9",
                   100),
            "a\\xe2\\x81\\xa6b\\xe2\\x81\\xa9");
  EXPECT_EQ(escape("\xc2\x80\xc2\x9f", 100), "\\xc2\\x80\\xc2\\x9f");
}

// What reorders the text around it (the bidirectional marks U+061C, U+200E,
// U+200F besides the overrides and isolates), what some readers take for a
// line break (U+2028, U+2029, U+0085: a comment line that seems to end) and
// an invisible U+FEFF are escaped too; their neighbours are not.
TEST(Text, EscapeHidesWhatReordersOrBreaksALine) {
  EXPECT_EQ(escape("a\xe2\x80\xa8"
                   "b\xe2\x80\xa9"
                   "c\xc2\x85"
                   "d",
                   100),
            "a\\xe2\\x80\\xa8b\\xe2\\x80\\xa9c\\xc2\\x85d");
  EXPECT_EQ(escape("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c", 100), "\\xe2\\x80\\x8e\\xe2\\x80\\x8f\\xd8\\x9c");
  EXPECT_EQ(escape("\xe2\x80\xaa\xe2\x80\xae\xe2\x81\xa9", 100),
            "\\xe2\\x80\\xaa\\xe2\\x80\\xae\\xe2\\x81\\xa9");
  EXPECT_EQ(escape("\xef\xbb\xbfx", 100), "\\xef\\xbb\\xbfx");
  // U+2014, U+2026, U+2030, U+0629, U+FEFE, U+200D: printable, or harmless
  const std::string neighbours = "\xe2\x80\x94\xe2\x80\xa6\xe2\x80\xb0\xd8\xa9\xef\xbb\xbe\xe2\x80\x8d";
  EXPECT_EQ(escape(neighbours, 100), neighbours);
}

// Strings of the result that the caller or the run chose (COMMAND's
// arguments, an error naming a run's file) may be any bytes: the result file
// is still written, valid JSON in valid UTF-8. (to_json(...).dump(2) threw
// on them, so agentcage ended without writing the result.)
TEST(RunResult, ResultTextSurvivesInvalidUtf8) {
  run::RunResult result;
  result.command = {"python3", "-c", "print('\xff\xfe')"};
  result.error = "cannot execute /tmp/\xc0\xaf: Permission denied";
  result.workspace = "/w/\xed\xa0\x80";
  std::string text;
  ASSERT_NO_THROW(text = run::result_text(result));
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    ASSERT_GT(n, 0u) << "ill-formed UTF-8 at byte " << i;
    i += n;
  }
  json j = json::parse(text);
  EXPECT_EQ(j["command"][2], "print('\uFFFD\uFFFD')");
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace agentcage
