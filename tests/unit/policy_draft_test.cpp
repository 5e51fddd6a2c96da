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
  o.origin = "result.json";
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

// Every check of the draft is allowed by the compiled draft.
void expect_checks_pass(const std::vector<Observation>& o, const DraftOptions& options) {
  const Draft d = draft_policy(o, options);
  const Decider decider = compile_draft(d, options.workspace.value_or(""));
  for (const DraftCheck& c : draft_checks(o, options))
    EXPECT_TRUE(decider.allows(c.op, c.target, c.access))
        << c.op << " " << c.target << " " << c.access << "\n"
        << d.yaml;
}

DraftOptions in_workspace() {
  DraftOptions o;
  o.workspace = kWorkspace;
  return o;
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
  EXPECT_FALSE(a->workspace);
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
  // ... but not a directory on the way to nothing: it needs a read rule
  o.push_back(obs("file_stat", "/usr/local/lib/python3.11/dist-packages"));
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
                                      "/usr/lib/x86_64-linux-gnu",
                                      "/usr/local/lib/python3.11/dist-packages",  // a stat that needs a rule
                                      "/usr/share/zoneinfo/Etc/UTC"}));
  // two things written directly in the workspace: exact; .cache covers what is below it
  EXPECT_EQ(paths(p.write), (std::vector<std::string>{"${workspace}/.cache", "${workspace}/out.png"}));
  EXPECT_TRUE(p.network_allow.empty());
  EXPECT_TRUE(d.notes.empty()) << d.notes[0];
  // the rule says where it came from
  EXPECT_NE(d.yaml.find("      # file_open read by python3 (20×): /usr/lib/python3.11/abc.py, "
                        "/usr/lib/python3.11/codecs.py, /usr/lib/python3.11/encodings/__init__.py (+6 more)\n"
                        "      # file_stat by python3 (1×): /usr/lib/python3.11\n"
                        "      # mmap_exec by python3 (1×): "
                        "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so\n"
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
      return x.op == c.op && x.target == c.target && x.access == c.access;
    });
  };
  EXPECT_TRUE(has({"exec", "/usr/bin/python3.11", "", ""}));
  EXPECT_TRUE(has({"open", "/usr/lib/python3.11/os.py", "read", ""}));
  EXPECT_TRUE(has({"open", "/usr/lib/x86_64-linux-gnu/libm.so.6", "read", ""}));  // and its mapping
  EXPECT_TRUE(has({"stat", "/usr/lib", "", ""}));                                 // on the way
  EXPECT_TRUE(has({"stat", kWorkspace, "", ""}));
  EXPECT_TRUE(has({"open", kWorkspace + "/out.png", "write", ""}));
  EXPECT_TRUE(has({"change", kWorkspace + "/.cache", "", ""}));
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

TEST(DraftPolicy, WritesCollapseOneLevelAndTheWorkspaceIsRewritten) {
  std::vector<Observation> o = {
      write(kWorkspace + "/out/a.png"), write(kWorkspace + "/out/b.png"), write(kWorkspace + "/out/c.png"),
      write(kWorkspace + "/log.txt"),   write("/srv/app/cache/v1/x"),     write("/srv/app/cache/v1/y"),
      write("/srv/app/cache/v1/z"),     write("/srv/app/cache/w"),        read(kWorkspace + "/in/one.csv")};
  const Draft d = draft_policy(o, in_workspace());
  const Policy p = parsed(d);
  // out/ collapsed; the workspace itself would need 3 direct children: log.txt and out are 2
  EXPECT_EQ(paths(p.write), (std::vector<std::string>{"${workspace}/log.txt", "${workspace}/out",
                                                      "/srv/app/cache/v1", "/srv/app/cache/w"}));
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
            (std::vector<std::string>{"${workspace}", "/srv/app/cache/v1", "/srv/app/cache/w"}));

  // Without a workspace the paths stay absolute.
  EXPECT_EQ(paths(parsed(draft_policy({write(kWorkspace + "/log.txt")}, DraftOptions{})).write),
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
    r["run_id"] = "0123456789abcdef";
    r["policy"] = "python-sandbox";
    log += r.dump() + "\n";
    ++n;
  }
  auto read_back = read_observations(log, "audit.log", std::string("0123456789abcdef"));
  ASSERT_TRUE(read_back.ok()) << read_back.error().message;
  EXPECT_EQ(read_back->records, static_cast<uint64_t>(n));
  const Draft from_log = draft_policy(read_back->items, in_workspace());
  const Policy p = parsed(from_log);
  const Policy direct = parsed(draft_policy(python_run(), in_workspace()));
  EXPECT_EQ(paths(p.read), paths(direct.read));
  EXPECT_EQ(paths(p.write), (std::vector<std::string>{"${workspace}/.cache", "${workspace}/out.png"}));
  EXPECT_EQ(programs(p), programs(direct));
  expect_checks_pass(read_back->items, in_workspace());
}

}  // namespace
}  // namespace agentcage::policy
