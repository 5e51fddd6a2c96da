// SPDX-License-Identifier: Apache-2.0
// `agentcage policy suggest`'s core (policy/draft.h): reading decision
// records from a run's result and from an audit log, turning them into a
// minimal draft policy, and the checks the command line runs on it. Every
// draft here is parsed with the repository's own policy parser and compiled,
// and each of its checks is put to bpf::decide: the draft must allow what
// was observed and, where a test says so, nothing more.
#include "policy/draft.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/compile.h"
#include "bpf/decide.h"
#include "policy/policy.h"

namespace agentcage::policy {
namespace {

using nlohmann::json;

const std::string kWorkspace = "/var/lib/agentcage/workspaces/0123456789abcdef";

// A record as bpf::record_json writes it (plus "access" on path records).
json rec(const std::string& hook, const std::string& target, const std::string& kind = "path",
         const std::vector<std::string>& access = {}, const std::string& comm = "python3") {
  json j = {{"scope_id", 1234},
            {"policy_slot", 3},
            {"hook", hook},
            {"decision", "audit"},
            {"reason", "default_deny"},
            {"pid", 42},
            {"tid", 42},
            {"uid", 1000},
            {"comm", comm},
            {"target", target},
            {"target_kind", kind},
            {"errno", 0},
            {"errno_name", nullptr},
            {"cgroup_id", 1234}};
  if (!access.empty()) j["access"] = access;
  return j;
}

json result_doc(const json& denial_records, const json& recording, uint64_t records_total) {
  json j = {{"version", 1},    {"run_id", "0123456789abcdef"}, {"policy", "python-sandbox"},
            {"mode", "audit"}, {"workspace", kWorkspace},      {"exit_code", 0}};
  j["denials"] = {{"reported", true},
                  {"total", records_total},
                  {"by_hook", json::object()},
                  {"audited_total", records_total},
                  {"audited_by_hook", json::object()},
                  {"records_total", records_total},
                  {"events_suppressed", 0},
                  {"records", denial_records},
                  {"syscalls", nullptr}};
  j["recording"] = recording;
  return j;
}

Observation obs(const std::string& hook, const std::string& target, uint8_t access = 0,
                const std::string& kind = "path", const std::string& protocol = "") {
  Observation o;
  o.hook = hook;
  o.target = target;
  o.target_kind = kind;
  o.access = access;
  o.protocol = protocol;
  o.reason = "default_deny";
  o.comm = "python3";
  o.workspace = kWorkspace;
  o.origin = "result.json";
  return o;
}

Observation directory(Observation o) {
  o.directory = true;
  return o;
}

Observation in_run(Observation o, const std::string& workspace) {
  o.workspace = workspace;
  return o;
}

Observation read(const std::string& path) { return obs("file_open", path, kAccessRead); }
Observation write(const std::string& path) { return obs("file_open", path, kAccessRead | kAccessWrite); }

Policy parsed(const Draft& d) {
  ParseOptions no_fs;
  no_fs.check_exec_exists = false;
  ParseResult r = parse_policy(d.yaml, "draft.yaml", no_fs);
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].format()) << "\n" << d.yaml;
  return r.policy.value_or(Policy{});
}

std::vector<std::string> paths(const std::vector<PathEntry>& list) {
  std::vector<std::string> out;
  for (const auto& e : list) out.push_back(e.in_workspace ? "${workspace}" + e.path : e.path);
  return out;
}

std::vector<std::string> programs(const Policy& p) {
  std::vector<std::string> out;
  for (const auto& e : p.exec_allow) out.push_back(e.path);
  return out;
}

bool has_note(const Draft& d, const std::string& text) {
  return std::any_of(d.notes.begin(), d.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

// What the compiled draft decides, as `agentcage policy explain` asks.
struct Decider {
  bpf::CompiledPolicy compiled;
  std::string workspace;

  bool allows(const std::string& op, const std::string& target, const std::string& access = "") const {
    bpf::Request q;
    if (op == "connect") {
      auto c = bpf::parse_connect_target(target);
      EXPECT_TRUE(c.ok()) << target;
      if (!c) return false;
      q = *c;
    } else {
      q.op = op == "exec"                          ? bpf::Operation::exec
             : op == "stat"                        ? bpf::Operation::stat
             : op == "change" || access == "write" ? bpf::Operation::write
                                                   : bpf::Operation::read;
      q.path = target;
    }
    return bpf::decide(compiled, workspace, q).allowed;
  }
};

Decider compile_draft(const Draft& d, const std::string& workspace = kWorkspace) {
  Policy p = parsed(d);
  auto c = bpf::compile(p);
  EXPECT_TRUE(c.ok()) << (c ? "" : c.error().message) << "\n" << d.yaml;
  return Decider{c ? *c : bpf::CompiledPolicy{}, workspace};
}

// Every check of the draft is allowed by the compiled draft, decided with
// the check's own workspace.
void expect_checks_pass(const std::vector<Observation>& o, const DraftOptions& options) {
  const Draft d = draft_policy(o, options);
  EXPECT_EQ(d.checks, draft_checks(o, options));
  Decider decider = compile_draft(d);
  for (const DraftCheck& c : d.checks) {
    decider.workspace = c.workspace;
    EXPECT_TRUE(decider.allows(c.op, c.target, c.access))
        << c.op << " " << c.target << " " << c.access << " in " << c.workspace << "\n"
        << d.yaml;
  }
}

// Observations carry their run's workspace (obs() gives them kWorkspace):
// the options are the defaults.
DraftOptions in_workspace() { return DraftOptions{}; }

// Every line that is not a comment: a rule's bytes are printable ASCII.
bool rule_lines_are_printable_ascii(const std::string& yaml) {
  size_t pos = 0;
  while (pos < yaml.size()) {
    size_t end = yaml.find('\n', pos);
    if (end == std::string::npos) end = yaml.size();
    const std::string line = yaml.substr(pos, end - pos);
    pos = end + 1;
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] == '#') continue;
    for (char c : line)
      if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

// ---- reading ------------------------------------------------------------------

TEST(ReadObservations, AResultWithARecordingUsesEveryRecordOfIt) {
  json recording = {
      {"complete", true}, {"total", 17}, {"distinct", 4}, {"lost", 0}, {"records", json::array()}};
  auto counted = [](json r, int n) {
    r["count"] = n;
    return r;
  };
  recording["records"].push_back(
      counted(rec("file_open", "/usr/lib/python3.11/os.py", "path", {"read"}), 12));
  recording["records"].push_back(counted(rec("exec", "/usr/bin/fc-list", "path", {"exec"}), 1));
  recording["records"].push_back(counted(rec("socket_connect", "192.0.2.7:443", "inet"), 3));
  recording["records"][2]["protocol"] = "tcp";
  json allowed = counted(rec("file_open", "/etc/passwd", "path", {"read"}), 1);
  allowed["decision"] = "allow";
  recording["records"].push_back(allowed);
  // denials.records holds only the first few: the recording wins.
  const json doc = result_doc(json::array({rec("file_open", "/usr/lib/python3.11/os.py", "path", {"read"})}),
                              recording, 17);

  auto r = read_observations(doc.dump(2), "result.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->workspace, kWorkspace);
  EXPECT_EQ(r->policy, "python-sandbox");
  EXPECT_EQ(r->run_id, "0123456789abcdef");
  EXPECT_EQ(r->records, 16u);  // the allowed record is no observation
  ASSERT_EQ(r->items.size(), 3u);
  // sorted by hook, then target
  EXPECT_EQ(r->items[0].hook, "exec");
  EXPECT_EQ(r->items[0].access, kAccessExec);
  EXPECT_EQ(r->items[1].hook, "file_open");
  EXPECT_EQ(r->items[1].count, 12u);
  EXPECT_EQ(r->items[1].access, kAccessRead);
  EXPECT_EQ(r->items[1].origin, "result.json");
  EXPECT_FALSE(r->items[1].directory);
  for (const Observation& o : r->items) EXPECT_EQ(o.workspace, kWorkspace);  // the result's
  EXPECT_EQ(r->items[2].target, "192.0.2.7:443");
  EXPECT_EQ(r->items[2].protocol, "tcp");
  EXPECT_EQ(r->items[2].count, 3u);
}

TEST(ReadObservations, AResultWithoutACompleteRecordingIsIncomplete) {
  json records = json::array();
  for (int i = 0; i < 8; ++i)
    records.push_back(rec("file_open", "/usr/lib/x" + std::to_string(i), "path", {"read"}));
  // Without --record: denials.records keeps the first 8 of 40.
  auto cut = read_observations(result_doc(records, nullptr, 40).dump(2), "result.json");
  ASSERT_TRUE(cut.ok()) << cut.error().message;
  EXPECT_FALSE(cut->complete);
  EXPECT_EQ(cut->incomplete, "the result keeps only the first 8 of 40 records");
  EXPECT_EQ(cut->items.size(), 8u);

  // All of them kept, but the ring buffer suppressed some.
  json all = result_doc(records, nullptr, 8);
  EXPECT_TRUE(read_observations(all.dump(), "result.json")->complete);
  all["denials"]["events_suppressed"] = 5;
  EXPECT_FALSE(read_observations(all.dump(), "result.json")->complete);

  // A recording that lost records.
  json lossy = {
      {"complete", false}, {"total", 900}, {"distinct", 1}, {"lost", 12}, {"records", json::array()}};
  auto lost = read_observations(result_doc(records, lossy, 40).dump(), "result.json");
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost->complete);
  EXPECT_EQ(lost->incomplete, "the recording lost 12 of 900 records");
}

TEST(ReadObservations, AnAuditLogFilteredByRunId) {
  auto line = [](json r, const std::string& run, const std::string& policy) {
    r["time"] = "2025-01-02T03:04:05.123456789Z";
    r["run_id"] = run;
    r["policy"] = policy;
    return r.dump() + "\n";
  };
  std::string log;
  log += line(rec("file_open", "/etc/ld.so.cache", "path", {"read"}), "aaaaaaaaaaaaaaaa", "python-sandbox");
  log += "\n   \n";  // blank lines are skipped
  log += line(rec("file_open", "/home/me/.netrc", "path", {"read"}, "curl"), "bbbbbbbbbbbbbbbb", "curl-tool");
  log += line(rec("file_open", "/etc/ld.so.cache", "path", {"read"}), "aaaaaaaaaaaaaaaa", "python-sandbox");
  json unlabelled = rec("key", "", "none");
  unlabelled["run_id"] = nullptr;  // a scope that is not a run (attach)
  log += unlabelled.dump() + "\n";
  log += line(rec("exec", "/usr/bin/fc-list", "path", {"exec"}), "aaaaaaaaaaaaaaaa", "python-sandbox");

  auto a = read_observations(log, "audit.log", std::string("aaaaaaaaaaaaaaaa"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->complete);
  EXPECT_EQ(a->run_id, "aaaaaaaaaaaaaaaa");
  EXPECT_EQ(a->policy, "python-sandbox");
  EXPECT_EQ(a->workspace, "/var/lib/agentcage/workspaces/aaaaaaaaaaaaaaaa");  // the default root's
  EXPECT_EQ(a->records, 3u);
  ASSERT_EQ(a->items.size(), 2u);
  EXPECT_EQ(a->items[0].hook, "exec");
  EXPECT_EQ(a->items[0].origin, "audit.log:7");
  EXPECT_EQ(a->items[1].target, "/etc/ld.so.cache");
  EXPECT_EQ(a->items[1].count, 2u);
  EXPECT_EQ(a->items[1].origin, "audit.log:1");  // where it was first seen

  auto all = read_observations(log, "audit.log");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 4u);
  EXPECT_FALSE(all->policy);  // several policies (and none)
  EXPECT_FALSE(all->run_id);
  EXPECT_FALSE(all->workspace);
}

// Each line of an audit log is of its own run, with its own workspace:
// WORKSPACE_ROOT/RUN_ID. (The command line rewrote later runs' paths as the
// first run's, as strings.)
TEST(ReadObservations, EachAuditLogLineHasItsRunsWorkspace) {
  auto line = [](json r, const json& run) {
    r["run_id"] = run;
    return r.dump() + "\n";
  };
  std::string log;
  log += line(rec("file_open", "/srv/ws/R1/a", "path", {"read"}), "R1");
  log += line(rec("file_open", "/srv/ws/R2/a", "path", {"read"}), "R2");
  log += line(rec("file_open", "/srv/ws/R2/a", "path", {"read"}), "R2");
  log += line(rec("file_open", "/srv/ws/x", "path", {"read"}), nullptr);  // not a run
  log += line(rec("file_open", "/srv/ws/y", "path", {"read"}), "../y");   // not one component
  auto r = read_observations(log, "audit.log", std::nullopt, "/srv/ws/");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->items.size(), 4u);
  EXPECT_EQ(r->items[0].target, "/srv/ws/R1/a");
  EXPECT_EQ(r->items[0].workspace, "/srv/ws/R1");
  EXPECT_EQ(r->items[1].target, "/srv/ws/R2/a");
  EXPECT_EQ(r->items[1].workspace, "/srv/ws/R2");
  EXPECT_EQ(r->items[1].count, 2u);
  EXPECT_EQ(r->items[2].workspace, "");
  EXPECT_EQ(r->items[3].workspace, "");

  // Both runs' files are one ${workspace} rule, each checked in its run's workspace.
  const Draft d = draft_policy(r->items, DraftOptions{});
  EXPECT_EQ(paths(parsed(d).read), (std::vector<std::string>{"${workspace}/a", "/srv/ws/x", "/srv/ws/y"}));
  ASSERT_EQ(d.checks.size(), 4u);
  EXPECT_EQ(d.checks[0].target, "/srv/ws/R1/a");
  EXPECT_EQ(d.checks[0].workspace, "/srv/ws/R1");
  EXPECT_EQ(d.checks[1].workspace, "/srv/ws/R2");
  expect_checks_pass(r->items, DraftOptions{});
}

TEST(ReadObservations, ARecordSaysWhenItsTargetIsADirectory) {
  json dir = rec("file_open", "/home/me", "path", {"read"});
  dir["directory"] = true;
  json no = rec("file_open", "/home/me", "path", {"read"});
  no["directory"] = false;
  auto r = read_observations(dir.dump() + "\n" + no.dump() + "\n", "audit.log");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->items.size(), 2u);  // two operations
  EXPECT_FALSE(r->items[0].directory);
  EXPECT_TRUE(r->items[1].directory);
  dir["directory"] = "yes";
  auto bad = read_observations(dir.dump() + "\n", "audit.log");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "audit.log:1: not a decision record: 'directory' is not true or false");
}

TEST(ReadObservations, AnythingButARecordIsALocatedError) {
  const std::string good = rec("file_open", "/etc/hosts", "path", {"read"}).dump() + "\n";
  auto broken = read_observations(good + "{\"hook\": \"file_open\", \n", "audit.log");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().message.rfind("audit.log:2: not JSON", 0), 0u) << broken.error().message;

  json no_hook = rec("file_open", "/etc/hosts");
  no_hook.erase("hook");
  auto missing = read_observations(good + "\n" + no_hook.dump() + "\n", "audit.log");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "audit.log:3: not a decision record: no 'hook'");

  auto array = read_observations(good + "[1, 2]\n", "audit.log");
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.error().message, "audit.log:2: not a decision record: not a JSON object");

  auto access = read_observations(rec("file_open", "/x/y", "path", {"append"}).dump() + "\n" + good, "a.log");
  ASSERT_FALSE(access.ok());
  EXPECT_EQ(access.error().message,
            "a.log:1: not a decision record: unknown access append (expected read, write or exec)");

  json recording = {{"complete", true},
                    {"records", json::array({rec("exec", "/bin/sh"), rec("exec", "/bin/sh")})}};
  recording["records"][1]["count"] = 0;
  auto bad = read_observations(result_doc(json::array(), recording, 0).dump(2), "result.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "result.json: recording.records[1]: not a decision record: 'count' is not a positive integer");

  auto neither = read_observations("{\"version\": 1}", "x.json");
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.error().message.find("neither a run's result"), std::string::npos);

  auto other_run = read_observations(result_doc(json::array(), nullptr, 0).dump(), "result.json",
                                     std::string("ffffffffffffffff"));
  EXPECT_FALSE(other_run.ok());
}

// ---- drafting -----------------------------------------------------------------

// What a python3 script with numpy did under a policy in audit mode.
std::vector<Observation> python_run() {
  std::vector<Observation> o;
  o.push_back(obs("exec", "/usr/bin/python3.11", kAccessExec));
  for (const char* f : {"os.py", "abc.py", "io.py", "stat.py", "codecs.py", "site.py",
                        "encodings/__init__.py", "encodings/aliases.py", "encodings/utf_8.py"})
    o.push_back(read(std::string("/usr/lib/python3.11/") + f));
  o.push_back(obs("mmap_exec", "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
                  kAccessRead | kAccessExec));
  for (const char* lib : {"libm.so.6", "libz.so.1", "libexpat.so.1"}) {
    o.push_back(read(std::string("/usr/lib/x86_64-linux-gnu/") + lib));
    o.push_back(obs("mmap_exec", std::string("/usr/lib/x86_64-linux-gnu/") + lib, kAccessRead | kAccessExec));
  }
  for (const char* f : {"__init__.py", "version.py", "_globals.py", "core/__init__.py", "core/multiarray.py",
                        "core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"})
    o.push_back(read(std::string("/usr/lib/python3/dist-packages/numpy/") + f));
  for (const char* f : {"/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/openssl.cnf", "/etc/matplotlibrc",
                        "/usr/share/zoneinfo/Etc/UTC", "/sys/devices/system/cpu/possible", "/proc/cpuinfo"})
    o.push_back(read(f));
  // imports walk down to what they open: stat'able without a rule
  for (const char* d : {"/", "/usr", "/usr/lib", "/usr/lib/python3.11", "/var", "/var/lib"})
    o.push_back(obs("file_stat", d));
  // ... but not a directory on the way to nothing: a rule on it would allow
  // everything below it, so not drafted (a note)
  o.push_back(directory(obs("file_stat", "/usr/local/lib/python3.11/dist-packages")));
  o.push_back(write(kWorkspace + "/out.png"));
  o.push_back(obs("file_change", kWorkspace + "/.cache", kAccessWrite));
  o.push_back(write(kWorkspace + "/.cache/matplotlib/fontlist-v330.json"));
  o.push_back(obs("file_stat", kWorkspace));
  o.back().count = 7;
  o[1].count = 12;
  return o;
}

TEST(DraftPolicy, APythonRunBecomesDirectoryLevelRules) {
  const Draft d = draft_policy(python_run(), in_workspace());
  const Policy p = parsed(d);
  EXPECT_EQ(p.name, "suggested");
  EXPECT_EQ(p.mode, Mode::enforce);
  EXPECT_EQ(programs(p), std::vector<std::string>{"/usr/bin/python3.11"});
  EXPECT_EQ(paths(p.read),
            (std::vector<std::string>{"/etc/ld.so.cache", "/etc/localtime", "/etc/matplotlibrc",
                                      "/etc/ssl/openssl.cnf",  // /etc's files stay exact
                                      "/proc/cpuinfo", "/sys/devices/system/cpu/possible",
                                      "/usr/lib/python3.11",                   // its files and encodings/
                                      "/usr/lib/python3/dist-packages/numpy",  // core/ first, then numpy
                                      "/usr/lib/x86_64-linux-gnu", "/usr/share/zoneinfo/Etc/UTC"}));
  // two things written directly in the workspace: exact; .cache covers what is below it
  EXPECT_EQ(paths(p.write), (std::vector<std::string>{"${workspace}/.cache", "${workspace}/out.png"}));
  EXPECT_TRUE(p.network_allow.empty());
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0],
            "file_stat by python3 (1×): /usr/local/lib/python3.11/dist-packages — a stat of a directory, or "
            "a listing of one no collapse may make a rule of (draft.h): not drafted (a files rule on a "
            "directory allows everything below it); add it by hand if the program needs it");
  // the rule says where it came from
  EXPECT_NE(d.yaml.find("      # file_open read by python3 (20×): /usr/lib/python3.11/abc.py, "
                        "/usr/lib/python3.11/codecs.py, /usr/lib/python3.11/encodings/__init__.py (+6 more)\n"
                        "      # file_stat by python3 (1×): /usr/lib/python3.11\n"
                        "      # mmap_exec by python3 (1×): "
                        "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so\n"
                        "      # a directory: allows everything below it, observed or not\n"
                        "      - /usr/lib/python3.11\n"),
            std::string::npos)
      << d.yaml;
  EXPECT_NE(d.yaml.find("      # exec by python3 (1×): /usr/bin/python3.11\n      - /usr/bin/python3.11\n"),
            std::string::npos);
  expect_checks_pass(python_run(), in_workspace());

  // Minimal: what was not observed stays denied.
  const Decider decider = compile_draft(d);
  EXPECT_TRUE(decider.allows("open", "/usr/lib/python3.11/json/__init__.py", "read"));
  EXPECT_FALSE(decider.allows("open", "/usr/lib/python3.11/os.py", "write"));
  EXPECT_FALSE(decider.allows("open", "/etc/passwd", "read"));
  EXPECT_FALSE(decider.allows("open", "/usr/lib/python3/dist-packages/scipy/__init__.py", "read"));
  EXPECT_FALSE(decider.allows("exec", "/usr/bin/sh"));
  EXPECT_FALSE(decider.allows("change", kWorkspace + "/other"));
  EXPECT_TRUE(decider.allows("change", kWorkspace + "/.cache/pip"));
}

TEST(DraftPolicy, ChecksNameEveryObservedOperationAsExplainDoes) {
  const auto checks = draft_checks(python_run(), in_workspace());
  auto has = [&](const DraftCheck& c) {
    return std::any_of(checks.begin(), checks.end(), [&](const DraftCheck& x) {
      return x.op == c.op && x.target == c.target && x.access == c.access && x.workspace == kWorkspace;
    });
  };
  EXPECT_TRUE(has({"exec", "/usr/bin/python3.11", "", "", ""}));
  EXPECT_TRUE(has({"open", "/usr/lib/python3.11/os.py", "read", "", ""}));
  EXPECT_TRUE(has({"open", "/usr/lib/x86_64-linux-gnu/libm.so.6", "read", "", ""}));  // and its mapping
  EXPECT_TRUE(has({"stat", "/usr/lib", "", "", ""}));                                 // on the way
  EXPECT_TRUE(has({"stat", kWorkspace, "", "", ""}));
  EXPECT_TRUE(has({"open", kWorkspace + "/out.png", "write", "", ""}));
  EXPECT_TRUE(has({"change", kWorkspace + "/.cache", "", "", ""}));
  EXPECT_TRUE(std::is_sorted(checks.begin(), checks.end(), [](const DraftCheck& a, const DraftCheck& b) {
    return std::tie(a.op, a.target, a.access) < std::tie(b.op, b.target, b.access);
  }));
}

TEST(DraftPolicy, EveryHookClassMapsToItsRuleOrANote) {
  std::vector<Observation> o = {
      obs("exec", "/usr/bin/git", kAccessExec),
      read("/srv/data/in.csv"),
      write("/srv/data/out.csv"),
      obs("file_receive", "/srv/data/passed.txt", kAccessRead),
      obs("file_receive", "/srv/log/passed.log", kAccessWrite),
      obs("mmap_exec", "/opt/tool/lib/libtool.so", kAccessRead | kAccessExec),
      obs("file_stat", "/srv/meta/info"),
      obs("file_watch", "/srv/watched"),
      obs("file_change", "/srv/scratch/new", kAccessWrite),
      obs("socket_connect", "192.0.2.7:443", 0, "inet", "tcp"),
      obs("socket_connect", "192.0.2.7:8443", 0, "inet", "tcp"),
      obs("socket_connect", "[2001:db8::1]:53", 0, "inet", "udp"),
      obs("socket_connect", "[::ffff:198.51.100.2]:80", 0, "inet", "tcp"),
      obs("socket_send", "192.0.2.53:53", 0, "inet", "udp"),
      obs("unix_connect", "/run/dbus/system_bus_socket", 0, "unix"),
      obs("unix_connect", "@/tmp/.X11-unix/X0", 0, "unix_abstract"),
      // no rule kind, or a switch left off
      obs("ipc", "", 0, "none"),
      obs("key", "", 0, "none"),
      obs("proc", "/proc/1/environ", 0, "path"),
      obs("native_code", "", 0, "none"),
      obs("debug", "", 0, "none"),
      obs("syscall", "io_uring_setup", 0, "syscall"),
      obs("socket_bind", "0.0.0.0:8080", 0, "inet", "tcp"),
      obs("socket_create", "", 0, "none"),
      obs("scope_escape", "", 0, "none"),
      obs("tty", "", 0, "none"),
      obs("ingress", "203.0.113.9:5353", 0, "inet", "udp"),
      obs("file_receive", "", 0, "none"),
  };
  const DraftOptions none;
  const Draft d = draft_policy(o, none);
  const Policy p = parsed(d);
  EXPECT_EQ(programs(p), std::vector<std::string>{"/usr/bin/git"});
  EXPECT_EQ(paths(p.read),
            (std::vector<std::string>{"/opt/tool/lib/libtool.so", "/srv/data/in.csv", "/srv/data/passed.txt",
                                      "/srv/meta/info", "/srv/watched"}));
  EXPECT_EQ(paths(p.write),
            (std::vector<std::string>{"/srv/data/out.csv", "/srv/log/passed.log", "/srv/scratch/new"}));
  ASSERT_EQ(p.network_allow.size(), 6u);
  // cidr entries sorted by network, then unix sockets
  const std::string yaml = d.yaml;
  EXPECT_NE(yaml.find("      - cidr: 192.0.2.7/32\n        ports: [443, 8443]\n        protocol: tcp\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("      - cidr: 192.0.2.53/32\n        ports: [53]\n        protocol: udp\n"),
            std::string::npos);
  EXPECT_NE(yaml.find("      - cidr: \"2001:db8::1/128\"\n        ports: [53]\n        protocol: udp\n"),
            std::string::npos);
  EXPECT_NE(yaml.find("      - cidr: 198.51.100.2/32\n        ports: [80]\n"), std::string::npos);
  EXPECT_NE(yaml.find("      - unix: /run/dbus/system_bus_socket\n"), std::string::npos);
  EXPECT_NE(yaml.find("      - unix: \"@/tmp/.X11-unix/X0\"\n"), std::string::npos);
  EXPECT_EQ(p.native_code, Permit::deny);
  EXPECT_EQ(p.debugging, Permit::deny);
  EXPECT_TRUE(p.syscalls_allow.empty());
  EXPECT_TRUE(p.network_listen.empty());

  EXPECT_TRUE(has_note(d, "ipc by python3 (1×) — no rule kind allows it"));
  EXPECT_TRUE(has_note(d, "native_code by python3 (1×) — exec.native_code: allow would permit it"));
  EXPECT_TRUE(has_note(d, "debug by python3 (1×) — exec.debugging: allow would permit it"));
  EXPECT_TRUE(has_note(d,
                       "syscall by python3 (1×): io_uring_setup — the seccomp filter denies it; "
                       "syscalls.allow: [io_uring] would let it through"));
  EXPECT_TRUE(has_note(d, "socket_bind tcp by python3 (1×): 0.0.0.0:8080 — network.listen would let"));
  EXPECT_TRUE(has_note(d, "file_receive by python3 (1×) — a received descriptor that no path names"));
  for (const char* hook :
       {"key by", "proc by", "socket_create by", "scope_escape by", "tty by", "ingress udp by"})
    EXPECT_TRUE(has_note(d, hook)) << hook;
  EXPECT_EQ(d.notes.size(), 12u);
  EXPECT_NE(yaml.find("\n# Not allowed by this draft (no rule kind, or deliberately left denied):\n#   "),
            std::string::npos);

  const Decider decider = compile_draft(d, "");
  for (const DraftCheck& c : draft_checks(o, none))
    EXPECT_TRUE(decider.allows(c.op, c.target, c.access)) << c.target;
  EXPECT_TRUE(decider.allows("connect", "[::ffff:198.51.100.2]:80/tcp"));
  EXPECT_TRUE(decider.allows("connect", "[2001:db8::1]:53/udp"));
  EXPECT_FALSE(decider.allows("connect", "192.0.2.7:443/udp"));
  EXPECT_FALSE(decider.allows("connect", "192.0.2.7:22/tcp"));
  EXPECT_FALSE(decider.allows("connect", "192.0.2.8:443/tcp"));
  EXPECT_FALSE(decider.allows("open", "/opt/tool/lib/libtool.so", "write"));
}

TEST(DraftPolicy, ReadsCollapseUpwardOnlyWhereEligible) {
  std::vector<Observation> o = python_run();
  // a third rule directly under /usr/lib makes /usr/lib one rule
  o.push_back(read("/usr/lib/os-release"));
  std::vector<std::string> reads = paths(parsed(draft_policy(o, in_workspace())).read);
  EXPECT_EQ(std::count(reads.begin(), reads.end(), "/usr/lib"), 1);
  for (const auto& r : reads) EXPECT_FALSE(r.starts_with("/usr/lib/")) << r;

  // Never to a top-level directory, never in /etc, never above depth 3 outside
  // installed trees, never to the workspace's directory (its siblings are other runs').
  std::vector<Observation> wide;
  for (const char* f : {"/usr/a",
                        "/usr/b",
                        "/usr/c",
                        "/etc/a/x",
                        "/etc/a/y",
                        "/etc/a/z",
                        "/etc/b",
                        "/etc/c",
                        "/home/me/a",
                        "/home/me/b",
                        "/home/me/c",
                        "/home/me/project/a",
                        "/home/me/project/b",
                        "/home/me/project/src/c",
                        "/home/me/project/d",
                        "/tmp/a",
                        "/tmp/b",
                        "/tmp/c",
                        "/dev/a",
                        "/dev/b",
                        "/dev/c",
                        "/var/lib/agentcage/workspaces/x",
                        "/var/lib/agentcage/workspaces/y",
                        "/var/lib/agentcage/workspaces/z"})
    wide.push_back(read(f));
  EXPECT_EQ(paths(parsed(draft_policy(wide, in_workspace())).read),
            (std::vector<std::string>{"/dev/a",
                                      "/dev/b",
                                      "/dev/c",
                                      "/etc/a/x",
                                      "/etc/a/y",
                                      "/etc/a/z",
                                      "/etc/b",
                                      "/etc/c",
                                      "/home/me/a",
                                      "/home/me/b",
                                      "/home/me/c",
                                      "/home/me/project",
                                      "/tmp/a",
                                      "/tmp/b",
                                      "/tmp/c",
                                      "/usr/a",
                                      "/usr/b",
                                      "/usr/c",
                                      "/var/lib/agentcage/workspaces/x",
                                      "/var/lib/agentcage/workspaces/y",
                                      "/var/lib/agentcage/workspaces/z"}));

  // The threshold is an option; 0 turns collapsing off.
  DraftOptions two = in_workspace();
  two.collapse = 2;
  EXPECT_EQ(paths(parsed(draft_policy({read("/opt/x/a"), read("/opt/x/b")}, two)).read),
            std::vector<std::string>{"/opt/x"});
  DraftOptions off = in_workspace();
  off.collapse = 0;
  reads = paths(parsed(draft_policy(python_run(), off)).read);
  EXPECT_EQ(std::count(reads.begin(), reads.end(), "/usr/lib/python3.11/os.py"), 1);
  expect_checks_pass(python_run(), off);
}

TEST(DraftPolicy, WritesCollapseOneLevelInTheWorkspaceOnly) {
  std::vector<Observation> o = {
      write(kWorkspace + "/out/a.png"), write(kWorkspace + "/out/b.png"), write(kWorkspace + "/out/c.png"),
      write(kWorkspace + "/log.txt"),   write("/srv/app/cache/v1/x"),     write("/srv/app/cache/v1/y"),
      write("/srv/app/cache/v1/z"),     write("/srv/app/cache/w"),        read(kWorkspace + "/in/one.csv")};
  const Draft d = draft_policy(o, in_workspace());
  const Policy p = parsed(d);
  // out/ collapsed; the workspace itself would need 3 direct children: log.txt and out are 2.
  // Outside the workspace writes stay exact.
  EXPECT_EQ(paths(p.write),
            (std::vector<std::string>{"${workspace}/log.txt", "${workspace}/out", "/srv/app/cache/v1/x",
                                      "/srv/app/cache/v1/y", "/srv/app/cache/v1/z", "/srv/app/cache/w"}));
  EXPECT_NE(d.yaml.find("      # a directory: allows everything below it, observed or not\n"
                        "      - ${workspace}/out\n"),
            std::string::npos)
      << d.yaml;
  EXPECT_EQ(paths(p.read), std::vector<std::string>{"${workspace}/in/one.csv"});
  for (const auto& e : p.write) EXPECT_EQ(e.in_workspace, e.path.find("/srv") != 0);
  // comments show the workspace's paths as the rules do
  EXPECT_NE(d.yaml.find("      # file_open write by python3 (1×): ${workspace}/log.txt\n"
                        "      - ${workspace}/log.txt\n"),
            std::string::npos)
      << d.yaml;
  expect_checks_pass(o, in_workspace());

  // Three things written directly in the workspace: the workspace.
  o.push_back(write(kWorkspace + "/notes.md"));
  o.push_back(write(kWorkspace + "/plot.svg"));
  EXPECT_EQ(paths(parsed(draft_policy(o, in_workspace())).write),
            (std::vector<std::string>{"${workspace}", "/srv/app/cache/v1/x", "/srv/app/cache/v1/y",
                                      "/srv/app/cache/v1/z", "/srv/app/cache/w"}));

  // Without a workspace the paths stay absolute.
  EXPECT_EQ(paths(parsed(draft_policy({in_run(write(kWorkspace + "/log.txt"), "")}, DraftOptions{})).write),
            std::vector<std::string>{kWorkspace + "/log.txt"});
}

TEST(DraftPolicy, NoRuleForTheRootATopLevelDirectoryAPatternOrAProcess) {
  std::vector<Observation> o = {read("/"),
                                read("/usr"),
                                read("/.dockerenv"),
                                write("/tmp"),
                                read("/srv/data/odd/a[1].txt"),
                                read("/srv/data/odd/what?.txt"),
                                read("/proc/4242/status"),
                                obs("file_stat", "/"),      // on the way to /srv/ok: fine
                                obs("file_stat", "/home"),  // on the way to nothing
                                read("/srv/ok/file")};
  const Draft d = draft_policy(o, in_workspace());
  const Policy p = parsed(d);
  EXPECT_EQ(paths(p.read), std::vector<std::string>{"/srv/ok/file"});
  EXPECT_TRUE(p.write.empty());
  EXPECT_TRUE(has_note(d,
                       "file_open read by python3 (3×): /, /.dockerenv, /usr — a rule for / or a whole "
                       "top-level directory is never drafted"));
  EXPECT_TRUE(has_note(d, "file_open write by python3 (1×): /tmp — a rule for /"));
  EXPECT_TRUE(has_note(d, "file_stat by python3 (1×): /home — a rule for /"));
  EXPECT_TRUE(has_note(d, "/srv/data/odd/a[1].txt"));
  EXPECT_TRUE(has_note(d, "/srv/data/odd/what?.txt"));
  EXPECT_TRUE(has_note(d, "/proc/4242/status — a /proc/PID path names one process"));
  expect_checks_pass(o, in_workspace());

  // A pattern character is fine where a rule covers the path anyway, and
  // such files count toward collapsing their directory.
  o.push_back(read("/srv/data/odd/b"));
  EXPECT_EQ(paths(parsed(draft_policy(o, in_workspace())).read),
            (std::vector<std::string>{"/srv/data/odd", "/srv/ok/file"}));
  expect_checks_pass(o, in_workspace());
  EXPECT_FALSE(has_note(draft_policy(o, in_workspace()), "a[1]"));
}

TEST(DraftPolicy, ADraftNeverLoosensWhatWasDeniedOnPurpose) {
  Observation secret = read("/srv/app/conf/.env");
  secret.reason = "rule_deny";
  Observation protected_op = read("/sys/fs/cgroup/x");
  protected_op.reason = "protected";
  std::vector<Observation> o = {read("/srv/app/conf/a"), read("/srv/app/conf/b"), read("/srv/app/conf/c"),
                                secret, protected_op};
  const Draft d = draft_policy(o, in_workspace());
  // /srv/app/conf would cover the denied .env: the files stay exact
  EXPECT_EQ(paths(parsed(d).read),
            (std::vector<std::string>{"/srv/app/conf/a", "/srv/app/conf/b", "/srv/app/conf/c"}));
  EXPECT_TRUE(has_note(d, "/srv/app/conf/.env — denied by a deny rule of the observed policy: left denied"));
  EXPECT_TRUE(has_note(d, "/sys/fs/cgroup/x — protected"));

  // A program the run also writes, a library it may write mapped as code,
  // the dynamic loader and a program in the workspace get no exec rule.
  std::vector<Observation> code = {obs("exec", "/srv/bin/tool", kAccessExec),
                                   write("/srv/bin/tool"),
                                   write("/srv/plugins/p.so"),
                                   obs("mmap_exec", "/srv/plugins/p.so", kAccessRead | kAccessExec),
                                   obs("exec", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", kAccessExec),
                                   obs("exec", kWorkspace + "/a.out", kAccessExec),
                                   obs("exec", "/srv/" + std::string(300, 'x'), kAccessExec)};
  const Draft c = draft_policy(code, in_workspace());
  const Policy pc = parsed(c);
  EXPECT_TRUE(pc.exec_allow.empty());
  EXPECT_EQ(paths(pc.write), (std::vector<std::string>{"/srv/bin/tool", "/srv/plugins/p.so"}));
  EXPECT_TRUE(has_note(c, "exec by python3 (1×): /srv/bin/tool — the run also writes this program"));
  EXPECT_TRUE(has_note(c,
                       "mmap_exec by python3 (1×): /srv/plugins/p.so — an executable mapping of a file the "
                       "run may write is always refused"));
  EXPECT_TRUE(has_note(c, "ld-linux-x86-64.so.2 — the dynamic loader"));
  EXPECT_TRUE(has_note(c, "a.out — a program in the workspace never runs"));
  EXPECT_TRUE(has_note(c, "a program path longer than a rule may be"));
  compile_draft(c);

  // A write rule never swallows an allowed program's directory.
  std::vector<Observation> beside = {obs("exec", "/srv/app/tools/run", kAccessExec),
                                     write("/srv/app/tools/a"), write("/srv/app/tools/b"),
                                     write("/srv/app/tools/c")};
  const Policy pb = parsed(draft_policy(beside, in_workspace()));
  EXPECT_EQ(paths(pb.write),
            (std::vector<std::string>{"/srv/app/tools/a", "/srv/app/tools/b", "/srv/app/tools/c"}));
  expect_checks_pass(beside, in_workspace());
}

TEST(DraftPolicy, PortsToOneNetworkStayWithinTheCompilersLimit) {
  std::vector<Observation> o;
  for (int port = 1000; port < 1040; port += 2)  // 20 ports, no two adjacent
    o.push_back(obs("socket_connect", "192.0.2.7:" + std::to_string(port), 0, "inet", "tcp"));
  o.push_back(obs("socket_connect", "192.0.2.7:2000", 0, "inet", "tcp"));
  o.push_back(obs("socket_connect", "192.0.2.7:2001", 0, "inet", "tcp"));  // one range with 2000
  const Draft d = draft_policy(o, DraftOptions{});
  const Policy p = parsed(d);
  ASSERT_EQ(p.network_allow.size(), 1u);
  EXPECT_EQ(p.network_allow[0].ports.size(), 16u);
  EXPECT_TRUE(has_note(d,
                       "socket_connect tcp by python3 (6×): 192.0.2.7:1032, 192.0.2.7:1034, 192.0.2.7:1036 "
                       "(+3 more) — more than 16 port ranges to one address"));
  expect_checks_pass(o, DraftOptions{});
}

TEST(DraftPolicy, OlderRecordsWithoutAccessOrProtocolAreReadsAndAnyProtocol) {
  std::vector<Observation> o = {obs("file_open", "/srv/data/x"),
                                obs("socket_connect", "192.0.2.7:443", 0, "inet", "")};
  const Draft d = draft_policy(o, DraftOptions{});
  const Policy p = parsed(d);
  EXPECT_EQ(paths(p.read), std::vector<std::string>{"/srv/data/x"});
  ASSERT_EQ(p.network_allow.size(), 1u);
  EXPECT_EQ(p.network_allow[0].protocol, Protocol::any);
  EXPECT_TRUE(has_note(d, "file_open records without \"access\""));
  EXPECT_TRUE(has_note(d, "socket_connect records without \"protocol\""));
  EXPECT_NE(d.yaml.find("\n# Assumed:\n#   file_open records"), std::string::npos);
  expect_checks_pass(o, DraftOptions{});
}

TEST(DraftPolicy, OutputIsDeterministic) {
  std::vector<Observation> o = python_run();
  o.push_back(obs("socket_connect", "192.0.2.7:443", 0, "inet", "tcp"));
  o.push_back(obs("ipc", "", 0, "none"));
  const Draft first = draft_policy(o, in_workspace());
  std::mt19937 rng(7);
  for (int i = 0; i < 5; ++i) {
    std::shuffle(o.begin(), o.end(), rng);
    const Draft again = draft_policy(o, in_workspace());
    EXPECT_EQ(again.yaml, first.yaml);
    EXPECT_EQ(again.notes, first.notes);
    EXPECT_EQ(draft_checks(o, in_workspace()).size(), draft_checks(python_run(), in_workspace()).size() + 1);
  }
}

TEST(DraftPolicy, HeaderNameAndWarnings) {
  DraftOptions o = in_workspace();
  o.name = "python-draft";
  o.source = "result.json";
  o.run_id = "0123456789abcdef";
  o.from_policy = "python-sandbox";
  o.incomplete = "the result keeps only the first 8 of 40 records";
  Draft d = draft_policy({read("/srv/a")}, o);
  EXPECT_EQ(parsed(d).name, "python-draft");
  EXPECT_EQ(d.yaml.rfind("# A draft policy from `agentcage policy suggest`, made from result.json (run "
                         "0123456789abcdef) under policy python-sandbox.\n",
                         0),
            0u)
      << d.yaml;
  EXPECT_NE(d.yaml.find("# WARNING: incomplete input (the result keeps only the first 8 of 40 records): "
                        "operations may be missing; rerun with `agentcage run --mode audit --record`.\n"),
            std::string::npos);
  o.name = "Not A Name";
  d = draft_policy({}, o);
  EXPECT_EQ(parsed(d).name, "suggested");
  EXPECT_TRUE(has_note(d, "is not a policy name"));
}

TEST(DraftPolicy, AnAuditLogOfARunDraftsWhatItsObservationsDo) {
  // Read through the audit-log path end to end: lines -> observations -> draft -> parse.
  std::string log;
  int n = 0;
  for (const Observation& o : python_run()) {
    json r = rec(o.hook, o.target, o.target_kind);
    if (o.access) {
      json a = json::array();
      if (o.access & kAccessRead) a.push_back("read");
      if (o.access & kAccessWrite) a.push_back("write");
      if (o.access & kAccessExec) a.push_back("exec");
      r["access"] = a;
    }
    if (o.directory) r["directory"] = true;
    r["run_id"] = "0123456789abcdef";
    r["policy"] = "python-sandbox";
    log += r.dump() + "\n";
    ++n;
  }
  auto read_back = read_observations(log, "audit.log", std::string("0123456789abcdef"));
  ASSERT_TRUE(read_back.ok()) << read_back.error().message;
  EXPECT_EQ(read_back->records, static_cast<uint64_t>(n));
  for (const Observation& o : read_back->items) EXPECT_EQ(o.workspace, kWorkspace);  // the default root's
  const Draft from_log = draft_policy(read_back->items, in_workspace());
  const Policy p = parsed(from_log);
  const Policy direct = parsed(draft_policy(python_run(), in_workspace()));
  EXPECT_EQ(paths(p.read), paths(direct.read));
  EXPECT_EQ(paths(p.write), (std::vector<std::string>{"${workspace}/.cache", "${workspace}/out.png"}));
  EXPECT_EQ(programs(p), programs(direct));
  expect_checks_pass(read_back->items, in_workspace());
}

// ---- what the security review found ----------------------------------------

const std::string kDirectoryNote =
    "a stat of a directory, or a listing of one no collapse may make a rule of (draft.h): not drafted (a "
    "files rule on a directory allows everything below it); add it by hand if the program needs it";
const std::string kDirectoryComment = "      # a directory: allows everything below it, observed or not\n";

// `ls ~/.aws` made a files.read rule for ~/.aws, everything in it included.
TEST(DraftPolicy, ADirectoryIsNeverARuleByItself) {
  std::vector<Observation> o = {
      directory(read("/home/me/.aws")),  // listed: the record says it is a directory
      directory(obs("file_stat", "/srv/data")),
      directory(obs("file_watch", "/srv/watched")),
      read("/home/me"),  // no "directory" (an older record), but a file below it was seen
      read("/home/me/notes.txt"),
      directory(obs("file_change", "/srv/out", kAccessWrite)),             // chmod outside the workspace
      directory(obs("file_change", kWorkspace + "/build", kAccessWrite)),  // a mkdir in it is fine
      // listed, but covered by a rule the draft makes anyway: nothing to say
      read("/usr/lib/python3.11/os.py"),
      read("/usr/lib/python3.11/abc.py"),
      read("/usr/lib/python3.11/io.py"),
      directory(read("/usr/lib/python3.11/encodings")),
  };
  const Draft d = draft_policy(o, in_workspace());
  const Policy p = parsed(d);
  EXPECT_EQ(paths(p.read), (std::vector<std::string>{"/home/me/notes.txt", "/usr/lib/python3.11"}));
  EXPECT_EQ(paths(p.write), std::vector<std::string>{"${workspace}/build"});
  EXPECT_TRUE(has_note(d, "file_open read by python3 (2×): /home/me, /home/me/.aws — " + kDirectoryNote));
  EXPECT_TRUE(has_note(d, "file_stat by python3 (1×): /srv/data — " + kDirectoryNote));
  EXPECT_TRUE(has_note(d, "file_watch by python3 (1×): /srv/watched — " + kDirectoryNote));
  EXPECT_TRUE(
      has_note(d,
               "file_change by python3 (1×): /srv/out — a change of a directory outside the workspace: "
               "not drafted (a files.write rule on a directory allows changing everything below it); "
               "add it by hand if the program needs it"));
  EXPECT_EQ(d.notes.size(), 4u);
  // Every directory rule says so; a file's does not.
  EXPECT_NE(d.yaml.find(kDirectoryComment + "      - /usr/lib/python3.11\n"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find(kDirectoryComment + "      - ${workspace}/build\n"), std::string::npos) << d.yaml;
  EXPECT_EQ(d.yaml.find(kDirectoryComment + "      - /home/me/notes.txt\n"), std::string::npos) << d.yaml;
  expect_checks_pass(o, in_workspace());
}

// Three stats in ~/.ssh made ~/.ssh one rule: never into a hidden
// directory. Stats count toward collapsing elsewhere (a run that can stat
// can read), and a listing makes a rule only where a collapse could.
TEST(DraftPolicy, NothingCollapsesIntoAHiddenDirectoryAndListingsOnlyWhereACollapseCould) {
  std::vector<Observation> o;
  for (const char* f : {"config", "known_hosts", "id_ed25519.pub"})
    o.push_back(obs("file_stat", std::string("/home/me/.ssh/") + f));
  for (const char* f : {"a", "b", "c"}) o.push_back(obs("file_stat", std::string("/srv/app/meta/") + f));
  for (const char* f : {"a", "b", "c"}) o.push_back(obs("file_watch", std::string("/srv/watch/") + f));
  for (const char* f : {"config", "credentials", "sso.json"})
    o.push_back(read(std::string("/home/me/.aws/") + f));
  for (const char* f : {"HEAD", "config", "index"}) o.push_back(read(std::string("/opt/x/.git/") + f));
  for (const char* f : {"a", "b", "c"}) o.push_back(read(kWorkspace + "/.cache/" + f));  // ${workspace} may
  o.push_back(directory(read("/srv/app/plugins")));   // listed, eligible: a rule, marked as a directory
  o.push_back(directory(read("/etc/fonts/conf.d")));  // listed, under /etc: a note
  const Draft d = draft_policy(o, in_workspace());
  EXPECT_EQ(paths(parsed(d).read),
            (std::vector<std::string>{
                "${workspace}/.cache", "/home/me/.aws/config", "/home/me/.aws/credentials",
                "/home/me/.aws/sso.json", "/home/me/.ssh/config", "/home/me/.ssh/id_ed25519.pub",
                "/home/me/.ssh/known_hosts", "/opt/x/.git/HEAD", "/opt/x/.git/config", "/opt/x/.git/index",
                "/srv/app/meta", "/srv/app/plugins",                // depth 3: eligible
                "/srv/watch/a", "/srv/watch/b", "/srv/watch/c"}));  // /srv/watch: too high
  EXPECT_NE(d.yaml.find(kDirectoryComment + "      - /srv/app/plugins\n"), std::string::npos) << d.yaml;
  EXPECT_TRUE(has_note(d, "file_open read by python3 (1×): /etc/fonts/conf.d — " + kDirectoryNote));
  expect_checks_pass(o, in_workspace());

  // Writes outside the workspace stay exact however many.
  std::vector<Observation> w;
  for (const char* f : {"a", "b", "c", "d"})
    w.push_back(obs("file_change", std::string("/usr/local/bin/") + f));
  EXPECT_EQ(paths(parsed(draft_policy(w, in_workspace())).write),
            (std::vector<std::string>{"/usr/local/bin/a", "/usr/local/bin/b", "/usr/local/bin/c",
                                      "/usr/local/bin/d"}));
}

// Runs in workspaces of different lengths merged into one draft (the
// command line rewrote the second run's paths into the first's workspace,
// past the length a rule may have), and nothing reaches a workspace from
// outside.
TEST(DraftPolicy, EachRunsWorkspaceIsItsOwnAndNoRuleReachesOne) {
  const std::string a = "/home/me/" + std::string(80, 'w');
  const std::string b = "/var/lib/agentcage/workspaces/r2";
  const std::string deep = std::string(150, 'd');
  const std::vector<Observation> o = {in_run(read(a + "/a"), a), in_run(read(b + "/" + deep + "/x"), b),
                                      in_run(write(a + "/out/1"), a), in_run(write(b + "/out/2"), b),
                                      in_run(write(b + "/out/3"), b)};
  const Draft d = draft_policy(o, DraftOptions{});
  const Policy p = parsed(d);
  EXPECT_EQ(paths(p.read), (std::vector<std::string>{"${workspace}/a", "${workspace}/" + deep + "/x"}));
  EXPECT_EQ(paths(p.write), std::vector<std::string>{"${workspace}/out"});
  EXPECT_TRUE(d.notes.empty()) << d.notes[0];
  for (const DraftCheck& c : d.checks) EXPECT_TRUE(c.target.starts_with(c.workspace + "/")) << c.target;
  expect_checks_pass(o, DraftOptions{});

  // The workspace root, the directories above a workspace and another run's
  // workspace get no rule, exact or collapsed.
  const std::string ws = "/srv/runs/r1/ws";
  const std::vector<Observation> near = {in_run(read("/srv/runs/r1"), ws),
                                         in_run(read("/srv/runs/r1/a.log"), ws),
                                         in_run(read("/srv/runs/r1/b.log"), ws),
                                         in_run(read("/srv/runs/r1/c.log"), ws),
                                         in_run(write("/srv/runs"), ws),
                                         in_run(read("/srv/runs/r2/ws"), ws),
                                         in_run(read("/srv/other/file"), "/srv/runs/r2/ws"),
                                         read("/var/lib/agentcage")};
  const Draft n = draft_policy(near, DraftOptions{});
  EXPECT_EQ(paths(parsed(n).read), (std::vector<std::string>{"/srv/other/file", "/srv/runs/r1/a.log",
                                                             "/srv/runs/r1/b.log", "/srv/runs/r1/c.log"}));
  EXPECT_TRUE(parsed(n).write.empty());
  const std::string why = "a workspace or a directory above one: a rule there reaches other runs' workspaces";
  EXPECT_TRUE(has_note(
      n, "file_open read by python3 (3×): /srv/runs/r1, /srv/runs/r2/ws, /var/lib/agentcage — " + why));
  EXPECT_TRUE(has_note(n, "file_open write by python3 (1×): /srv/runs — " + why));

  // Nor at or above the root runs get their workspaces in, whatever the
  // observations' workspaces.
  DraftOptions pool;
  pool.workspace_root = "/srv/pool/ws/";
  const std::vector<Observation> root = {in_run(read("/srv/pool/ws/a"), ""),
                                         in_run(read("/srv/pool/ws/b"), ""),
                                         in_run(read("/srv/pool/ws/c"), ""), in_run(read("/srv/pool"), "")};
  const Draft r = draft_policy(root, pool);
  EXPECT_EQ(paths(parsed(r).read),
            (std::vector<std::string>{"/srv/pool/ws/a", "/srv/pool/ws/b", "/srv/pool/ws/c"}));
  EXPECT_TRUE(has_note(r, "file_open read by python3 (1×): /srv/pool — " + why));
}

// A draft of many denied paths and many candidate directories took
// quadratic time (each candidate and each path compared with every denied
// path): minutes for an audit log of a few hundred thousand lines.
TEST(DraftPolicy, ManyDeniedPathsCostLinearTime) {
  std::vector<Observation> o;
  constexpr int kDirs = 20000;
  for (int i = 0; i < kDirs; ++i) {
    const std::string n = std::to_string(i);
    Observation secret = read("/srv/p/d" + n + "/.env");
    secret.reason = "rule_deny";
    o.push_back(secret);
    for (const char* f : {"/a", "/b", "/c"})
      o.push_back(read("/srv/p/d" + n + f));  // a directory to collapse
    o.push_back(obs("file_stat", "/srv/q/d" + n + "/x"));
  }
  for (const char* f : {"a", "b", "c"}) o.push_back(read(std::string("/srv/r/s/") + f));
  const auto start = std::chrono::steady_clock::now();
  const Draft d = draft_policy(o, in_workspace());
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(d.yaml.find("      - /srv/r/s\n"), std::string::npos);
  EXPECT_NE(d.yaml.find("      - /srv/p/d17/a\n"), std::string::npos);  // next to a denied path: exact
}

// A name a run chose went into a rule's line raw: a U+2028 or U+0085 that
// some readers take for a line break, a right-to-left override that shows
// "sl.png" for "gnp.ls".
TEST(DraftPolicy, RuleLinesArePrintableAsciiAndCommentsEscaped) {
  const std::string separator = "/opt/a/x\xe2\x80\xa8      - /etc/shadow";
  const std::string nel = "/opt/c/z\xc2\x85q";
  const std::string rlo = "/opt/tools/\xe2\x80\xaegnp.ls";
  const std::string emoji = "/srv/\xf0\x9f\x98\x80/smile";
  const std::string quoted = "/srv/q\"and\\back";
  std::vector<Observation> o = {read(separator),
                                read(nel),
                                obs("exec", rlo, kAccessExec),
                                read(emoji),
                                read(quoted),
                                obs("unix_connect",
                                    "@\xe2\x80\xae\xc2\x9b"
                                    "2J",
                                    0, "unix_abstract")};
  o[0].comm = "a\xe2\x80\xa8      - /root";
  const Draft d = draft_policy(o, in_workspace());
  EXPECT_TRUE(rule_lines_are_printable_ascii(d.yaml)) << d.yaml;
  EXPECT_NE(d.yaml.find("      - \"/opt/a/x\\u2028      - /etc/shadow\"\n"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("      - \"/srv/\\U0001F600/smile\"\n"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("      - \"/srv/q\\\"and\\\\back\"\n"), std::string::npos) << d.yaml;
  for (const char* raw : {"\xe2\x80\xa8", "\xc2\x85", "\xe2\x80\xae", "\xc2\x9b"})
    EXPECT_EQ(d.yaml.find(raw), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("# file_open read by a\\xe2\\x80\\xa8      - /root (1×): /opt/a/x\\xe2\\x80\\xa8"),
            std::string::npos)
      << d.yaml;
  // The parser reads back the names recorded, byte for byte.
  const Policy p = parsed(d);
  EXPECT_EQ(paths(p.read), (std::vector<std::string>{separator, nel, quoted, emoji}));
  EXPECT_EQ(programs(p), std::vector<std::string>{rlo});
  expect_checks_pass(o, in_workspace());
}

// A connection to 0.0.0.0 reaches the host's own services; an entry
// without a protocol allows tcp and udp too. Both were drafted silently.
TEST(DraftPolicy, RiskyNetworkEntriesSaySo) {
  const std::vector<Observation> o = {obs("socket_connect", "0.0.0.0:5432", 0, "inet", "tcp"),
                                      obs("socket_connect", "[::]:6379", 0, "inet", "tcp"),
                                      obs("socket_connect", "192.0.2.1:443", 0, "inet", "136"),
                                      obs("socket_connect", "192.0.2.9:443", 0, "inet", "tcp")};
  const Draft d = draft_policy(o, in_workspace());
  EXPECT_EQ(parsed(d).network_allow.size(), 4u);
  EXPECT_NE(
      d.yaml.find("      # 0.0.0.0 is the any-address: a connection to it reaches the services listening "
                  "on this host\n      - cidr: 0.0.0.0/32\n"),
      std::string::npos)
      << d.yaml;
  EXPECT_NE(d.yaml.find("      # :: is the any-address"), std::string::npos) << d.yaml;
  EXPECT_NE(d.yaml.find("      # no protocol: allows tcp and udp (and every other protocol) too\n"
                        "      - cidr: 192.0.2.1/32\n"),
            std::string::npos)
      << d.yaml;
  EXPECT_TRUE(has_note(d,
                       "socket_connect tcp by python3 (1×): 0.0.0.0:5432 — allowed, but 0.0.0.0 is the "
                       "any-address: it reaches the services listening on this host"));
  EXPECT_TRUE(
      has_note(d, "socket_connect tcp by python3 (1×): [::]:6379 — allowed, but :: is the any-address"));
  EXPECT_EQ(d.notes.size(), 2u);
  EXPECT_NE(d.yaml.find("\n# Allowed, but check before enforcing:\n#   socket_connect tcp"),
            std::string::npos);
  EXPECT_EQ(d.yaml.find("      # 192.0.2.9"), std::string::npos);  // an ordinary entry: nothing to say
  expect_checks_pass(o, in_workspace());
}

// exec.allow "/" (or a directory) names no program; a name the record
// could not write as UTF-8 names another file.
TEST(DraftPolicy, AnExecIsOfAProgramFileNamedFaithfully) {
  const std::vector<Observation> o = {obs("exec", "/", kAccessExec),
                                      directory(obs("exec", "/usr/bin", kAccessExec)),
                                      obs("exec", "/opt/tools/bin", kAccessExec),
                                      read("/opt/tools/bin/helper"),  // so bin is a directory
                                      obs("exec", "/opt/tools/caf\xef\xbf\xbd", kAccessExec),
                                      read("/srv/data/\xef\xbf\xbd.csv"),
                                      read("/srv/data/bad\xff.csv"),
                                      obs("unix_connect", "/srv/\xef\xbf\xbd.sock", 0, "unix"),
                                      obs("exec", "/usr/bin/git", kAccessExec)};
  const Draft d = draft_policy(o, in_workspace());
  const Policy p = parsed(d);
  EXPECT_EQ(programs(p), std::vector<std::string>{"/usr/bin/git"});
  EXPECT_EQ(paths(p.read), std::vector<std::string>{"/opt/tools/bin/helper"});
  EXPECT_TRUE(p.network_allow.empty());
  EXPECT_TRUE(has_note(d,
                       "exec by python3 (3×): /, /opt/tools/bin, /usr/bin — a directory, not a program file: "
                       "exec.allow names programs"));
  const std::string mangled =
      "the name was not valid UTF-8 (the record holds U+FFFD in its place): the rule would name another file";
  EXPECT_TRUE(has_note(d, "exec by python3 (1×): /opt/tools/caf\xef\xbf\xbd — " + mangled));
  EXPECT_TRUE(has_note(
      d, "file_open read by python3 (2×): /srv/data/bad\\xff.csv, /srv/data/\xef\xbf\xbd.csv — " + mangled));
  EXPECT_TRUE(has_note(d, "unix_connect by python3 (1×): /srv/\xef\xbf\xbd.sock — " + mangled));
  expect_checks_pass(o, in_workspace());
}

}  // namespace
}  // namespace agentcage::policy
