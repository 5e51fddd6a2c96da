// SPDX-License-Identifier: Apache-2.0
// Host unit tests for the daemon's pure parts: configuration parsing,
// control-request validation, run notices over a runner's channel, run
// outcomes, audit JSON lines, counter bookkeeping, and the metric names the
// dashboards rely on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/notify.h"
#include "control/protocol.h"
#include "core/labels.h"
#include "daemon/config.h"
#include "daemon/run_service.h"
#include "daemon/status.h"
#include "in_child.h"
#include "run/dns.h"
#include "telemetry/audit.h"
#include "telemetry/metrics.h"

namespace agentcage {
namespace {

using nlohmann::json;

// ---- config -------------------------------------------------------------------

// A scope registered pending (a container's init before its entrypoint's
// exec) says so, and which process arms it; an armed one says nothing more.
TEST(StatusText, APendingScopeSaysWhichExecArmsIt) {
  nlohmann::json s = {{"enforcement", {{"ready", true}}},
                      {"scopes",
                       {{{"cgroup_id", 7}, {"policy", "box"}, {"run_id", nullptr}, {"arm_pid", 4242}},
                        {{"cgroup_id", 8}, {"policy", "box"}, {"run_id", nullptr}, {"arm_pid", nullptr}}}}};
  const std::string text = daemon::format_status_text(s);
  EXPECT_NE(text.find("  cgroup 7  policy box  pending (arms at exec of pid 4242)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  cgroup 8  policy box\n"), std::string::npos) << text;
}

// The daemon's answer carries names others chose (a container's id and
// workspace, a policy file's name and error): none of its control
// characters reaches the operator's terminal, each is shown escaped.
TEST(StatusText, NoTerminalControlFromTheAnswerReachesTheText) {
  const std::string evil =
      "a\x1b]0;owned\x07"
      "b\xc2\x9b"
      "2J\xe2\x80\xae"
      "c\r\nfake: line";
  nlohmann::json s = {
      {"daemon",
       {{"running", true}, {"pid", 1}, {"version", evil}, {"policy_dir", evil}, {"metrics_url", evil}}},
      {"enforcement", {{"ready", false}, {"detail", evil}, {"pin_dir", evil}}},
      {"policies", {{{"slot", 1}, {"name", evil}, {"owner", "named"}, {"mode", "enforce"}}}},
      {"policy_files", {{{"file", evil}, {"state", "rejected"}, {"error", evil}}}},
      {"scopes", {{{"cgroup_id", 7}, {"policy", evil}, {"run_id", evil}}}},
      {"containers", {{{"container_id", evil}, {"cgroup_id", 8}, {"policy", evil}, {"workspace", evil}}}},
      {"counters", {{{"policy", evil}, {"hook", evil}}}}};
  const std::string text = daemon::format_status_text(s);
  for (const char* bad : {"\x1b", "\x07", "\xc2\x9b", "\xe2\x80\xae", "\r", "\nfake"})
    EXPECT_EQ(text.find(bad), std::string::npos) << text;
  EXPECT_NE(text.find("a\\x1b]0;owned\\x07b"), std::string::npos) << text;
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 10);
}

TEST(DaemonConfig, EmptyFileGivesDefaults) {
  EXPECT_TRUE(daemon::parse_config("# nothing set\n\n", "d.yaml").ok());
  auto r = daemon::parse_config("", "d.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->metrics_address, "127.0.0.1:9477");
  EXPECT_EQ(r.config->policy_dir, "/etc/agentcage/policies");
  EXPECT_EQ(r.config->control_socket, "/run/agentcage/control.sock");
  EXPECT_EQ(r.config->audit_log, "-");
  EXPECT_EQ(r.config->cgroup_parent, "agentcage/runs");
  EXPECT_EQ(r.config->cgroup_layout, cgroup::LayoutSetting::automatic);
  EXPECT_EQ(r.config->pin_root, "/sys/fs/bpf/agentcage");
  EXPECT_FALSE(r.config->control_group);
}

// The default number of runs at once, each at its limit of DNS pins, fits
// the kernel's pin map: one client's runs cannot starve another's names.
TEST(DaemonConfig, TheDefaultRunsFitThePinMap) {
  EXPECT_LE(daemon::Config{}.max_runs * run::kMaxPinsPerRun, size_t{AC_MAX_PINS});
  EXPECT_LE(daemon::Config{}.max_runs_per_client * run::kMaxPinsPerRun * 2, size_t{AC_MAX_PINS});
}

TEST(DaemonConfig, EverySetting) {
  auto r = daemon::parse_config(
      "policy_dir: /srv/policies\nmetrics_address: \"[::1]:9000\"\ncontrol_socket: /run/x.sock\n"
      "control_group: agentcage\naudit_log: /var/log/agentcage/audit.jsonl\ncgroup_parent: "
      "system.slice/runs\n"
      "pin_root: /sys/fs/bpf/ac\nstate_dir: /run/ac\nrecent_events: 10\nclient_buffer_bytes: "
      "65536\nmax_clients: 8\nring_buffer_size: 8Mi\ncgroup_layout: fixed\n",
      "d.yaml");
  ASSERT_TRUE(r.ok()) << r.errors.front().format();
  EXPECT_EQ(r.config->policy_dir, "/srv/policies");
  EXPECT_EQ(r.config->metrics_address, "[::1]:9000");
  EXPECT_EQ(*r.config->control_group, "agentcage");
  EXPECT_EQ(r.config->audit_log, "/var/log/agentcage/audit.jsonl");
  EXPECT_EQ(r.config->cgroup_parent, "system.slice/runs");
  EXPECT_EQ(r.config->cgroup_layout, cgroup::LayoutSetting::fixed);
  EXPECT_EQ(r.config->recent_events, 10u);
  EXPECT_EQ(r.config->client_buffer_bytes, 65536u);
  EXPECT_EQ(r.config->max_clients, 8u);
  EXPECT_EQ(r.config->ring_buffer_bytes, 8u << 20);
}

// Each setting changed alone is the one change found, live or for a
// restart as docs/daemon.md says; the same file twice changes nothing.
TEST(DaemonConfig, ChangesSayWhatAppliesNowAndWhatWaits) {
  struct Case {
    const char* line;
    const char* key;
    bool live;
  };
  const Case cases[] = {
      {"policy_dir: /srv/p", "policy_dir", false},
      {"control_socket: /run/x.sock", "control_socket", false},
      {"pin_root: /sys/fs/bpf/x", "pin_root", false},
      {"state_dir: /run/x", "state_dir", false},
      {"cgroup_parent: x/runs", "cgroup_parent", false},
      {"cgroup_layout: fixed", "cgroup_layout", false},
      {"ring_buffer_size: 4Mi", "ring_buffer_size", false},
      {"metrics_address: 127.0.0.1:1", "metrics_address", true},
      {"metrics_tls: {cert_file: /m.crt, key_file: /m.key}", "metrics_tls", true},
      {"metrics_basic_auth: {users_file: /m.users}", "metrics_basic_auth", true},
      {"control_group: agentcage", "control_group", true},
      {"audit_log: /var/log/x.jsonl", "audit_log", true},
      {"recent_events: 3", "recent_events", true},
      {"client_buffer_bytes: 8192", "client_buffer_bytes", true},
      {"max_clients: 3", "max_clients", true},
      {"max_clients_per_uid: 3", "max_clients_per_uid", true},
      {"max_runs: 3", "max_runs", true},
      {"max_runs_per_client: 3", "max_runs_per_client", true},
      {"run_max_memory: 1Gi", "run_max_memory", true},
      {"run_max_pids: 10", "run_max_pids", true},
      {"run_max_cpu: 1", "run_max_cpu", true},
      {"run_max_timeout: 1m", "run_max_timeout", true},
      {"run_max_disk: unlimited", "run_max_disk", true},
      {"attach: [{unit: a.service, policy: p}]", "attach", true},
  };
  const daemon::Config defaults;
  for (const Case& c : cases) {
    auto r = daemon::parse_config(c.line, "d.yaml");
    ASSERT_TRUE(r.ok()) << c.line << ": " << r.errors.front().format();
    auto changes = daemon::config_changes(defaults, *r.config);
    ASSERT_EQ(changes.size(), 1u) << c.line;
    EXPECT_EQ(changes[0].setting, c.key);
    EXPECT_EQ(changes[0].live, c.live) << c.key;
    EXPECT_TRUE(daemon::config_changes(*r.config, *r.config).empty()) << c.line;
  }
  // Where the daemon's runs live was settled at start (cgroup/delegation.h):
  // the same file read again is no change.
  daemon::Config settled;
  settled.settled_run_parent = "system.slice/agentcage.service/runs";
  EXPECT_EQ(settled.run_parent(), "system.slice/agentcage.service/runs");
  EXPECT_EQ(defaults.run_parent(), "agentcage/runs");
  EXPECT_TRUE(daemon::config_changes(settled, defaults).empty());
}

TEST(DaemonConfig, ShippedExampleIsValid) {
  auto r = daemon::load_config(std::string(AGENTCAGE_SOURCE_DIR) + "/packaging/systemd/daemon.yaml");
  ASSERT_TRUE(r.ok()) << r.errors.front().format();
  EXPECT_EQ(r.config->audit_log, "/var/log/agentcage/audit.jsonl");
  EXPECT_EQ(r.config->cgroup_layout, cgroup::LayoutSetting::automatic);
}

// The DaemonSet's configuration (deploy/kubernetes/daemon.yaml): the real
// parser takes it, and it says what the pod needs (deploy/kubernetes/check
// compares its paths with the DaemonSet's volumes).
TEST(DaemonConfig, KubernetesConfigIsValid) {
  auto r = daemon::load_config(std::string(AGENTCAGE_SOURCE_DIR) + "/deploy/kubernetes/daemon.yaml");
  ASSERT_TRUE(r.ok()) << r.errors.front().format();
  EXPECT_EQ(r.config->metrics_address, "0.0.0.0:9477");
  EXPECT_EQ(r.config->max_runs, 0u);
  EXPECT_EQ(r.config->policy_dir, "/etc/agentcage/policies");
}

TEST(DaemonConfig, MetricsOff) {
  auto r = daemon::parse_config("metrics_address: \"off\"\n", "d.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->metrics_address, "");
}

std::string first_error(const std::string& text) {
  auto r = daemon::parse_config(text, "d.yaml");
  EXPECT_FALSE(r.ok()) << text;
  return r.errors.empty() ? "" : r.errors.front().format();
}

TEST(DaemonConfig, ErrorsAreLocated) {
  EXPECT_EQ(first_error("policy_dir: /x\nmetrics_adress: 1.2.3.4:5\n"),
            "d.yaml:2:1: unknown setting 'metrics_adress' (did you mean 'metrics_address'?)");
  EXPECT_EQ(first_error("policy_dir: relative/dir\n"),
            "d.yaml:1:13: policy_dir: expected an absolute path, got 'relative/dir'");
  EXPECT_EQ(first_error("metrics_address: 127.0.0.1:99999\n"),
            "d.yaml:1:18: metrics_address: expected HOST:PORT (e.g. 127.0.0.1:9477) or \"off\", got "
            "'127.0.0.1:99999'");
  EXPECT_EQ(first_error("audit_log: log.txt\n"),
            "d.yaml:1:12: audit_log: expected an absolute file path or \"-\" (stdout), got 'log.txt'");
  EXPECT_EQ(first_error("cgroup_parent: ../escape\n"),
            "d.yaml:1:16: cgroup_parent: expected a path relative to the cgroup2 mount (e.g. "
            "agentcage/runs), got '../escape'");
  EXPECT_EQ(first_error("cgroup_layout: systemd\n"),
            "d.yaml:1:16: cgroup_layout: expected auto, delegated or fixed, got 'systemd'");
  EXPECT_EQ(first_error("max_clients: 0\n"),
            "d.yaml:1:14: max_clients: expected a whole number from 1 to 1024, got '0'");
  EXPECT_EQ(first_error("policy_dir: [/a]\n"), "d.yaml:1:13: policy_dir: expected a single value");
  for (const char* bad : {"3Mi", "32Ki", "2Gi", "lots", "0"})
    EXPECT_EQ(first_error(std::string("ring_buffer_size: ") + bad + "\n"),
              std::string("d.yaml:1:19: ring_buffer_size: expected a power of two from 64Ki to 1Gi (e.g. 4Mi), got '") +
                  bad + "'");
  EXPECT_EQ(first_error("control_group: \"a b\"\n"),
            "d.yaml:1:16: control_group: expected a group name or number, got 'a b'");
  EXPECT_EQ(first_error("- a\n"),
            "d.yaml:1:1: the daemon configuration must be a mapping of settings (see docs/daemon.md)");
  EXPECT_NE(first_error("a: &x 1\nb: *x\n").find("d.yaml:1:"), std::string::npos);  // anchors refused
  // The policy parser's form wins: it also gives the column (the config's own
  // copy said "first set at line 1").
  EXPECT_EQ(first_error("policy_dir: /a\npolicy_dir: /b\n"),
            "d.yaml:2:1: duplicate setting 'policy_dir' (first at 1:1)");
  // Likewise for a key that is not a string: say what it is (the config's
  // copy said "setting names must be plain words").
  EXPECT_EQ(first_error("[a]: 1\n"), "d.yaml:1:1: keys must be strings, got a list");
}

TEST(DaemonConfig, AttachBindsUnitsAndCgroups) {
  auto r = daemon::parse_config(
      "attach:\n"
      "  - {unit: agent-runner.service, policy: python-sandbox, workspace: /var/lib/agent}\n"
      "  - {unit: tool@1.service, slice: agent-tools.slice, policy: net-off}\n"
      "  - {unit: agent-batch.slice, policy: net-off}\n"
      "  - {cgroup: vm/runner, policy: net-off}\n"
      "  - {cgroup: /vm/other, policy: net-off}\n",
      "d.yaml");
  ASSERT_TRUE(r.ok()) << r.errors.front().format();
  const auto& a = r.config->attach;
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0].name, "agent-runner.service");
  EXPECT_EQ(a[0].cgroup, "/system.slice/agent-runner.service");
  EXPECT_EQ(a[0].policy, "python-sandbox");
  EXPECT_EQ(a[0].workspace, "/var/lib/agent");
  EXPECT_EQ(a[1].cgroup, "/agent.slice/agent-tools.slice/tool@1.service");
  EXPECT_EQ(a[2].cgroup, "/agent.slice/agent-batch.slice");
  EXPECT_EQ(a[3].name, "vm/runner");
  EXPECT_EQ(a[3].cgroup, "/vm/runner");
  EXPECT_EQ(a[4].cgroup, "/vm/other");
  EXPECT_EQ(a[3].pos.line, 5);
  EXPECT_TRUE(daemon::parse_config("attach: []\n", "d.yaml").ok());
}

TEST(DaemonConfig, AttachRefusesWhatCannotBeBound) {
  EXPECT_EQ(first_error("attach:\n  - {unit: a.service, policy: p, wrkspace: /w}\n"),
            "d.yaml:2:34: unknown key 'wrkspace' in an attach entry (did you mean 'workspace'?)");
  EXPECT_EQ(first_error("attach:\n  - {unit: a.service, cgroup: x, policy: p}\n"),
            "d.yaml:2:5: attach: an entry names exactly one of unit: (a systemd unit) or cgroup: (a path below "
            "the cgroup2 mount, for hosts without systemd)");
  EXPECT_EQ(first_error("attach:\n  - {unit: a.service}\n"),
            "d.yaml:2:5: attach: the entry needs policy: NAME (a policy of policy_dir)");
  EXPECT_EQ(first_error("attach:\n  - {unit: a.socket, policy: p}\n"),
            "d.yaml:2:12: unit 'a.socket': only services, scopes and slices have cgroups of their own (a .socket "
            "unit has none to bind)");
  EXPECT_EQ(first_error("attach:\n  - {unit: a@.service, policy: p}\n"),
            "d.yaml:2:12: unit 'a@.service': a template has no cgroup; bind an instance (e.g. a@1.service)");
  EXPECT_EQ(first_error("attach:\n  - {unit: \"a b.service\", policy: p}\n"),
            "d.yaml:2:12: unit 'a b.service': ' ' is not allowed in a unit name (letters, digits, \":-_.\\\" "
            "and @)");
  EXPECT_EQ(first_error("attach:\n  - {unit: -.slice, policy: p}\n"),
            "d.yaml:2:12: unit '-.slice': the root slice is the whole host; bind a slice below it");
  EXPECT_EQ(first_error("attach:\n  - {unit: a--b.slice, policy: p}\n"),
            "d.yaml:2:12: unit 'a--b.slice': a slice name's '-'-separated parts are not empty");
  EXPECT_EQ(first_error("attach:\n  - {unit: a.service, slice: b.service, policy: p}\n"),
            "d.yaml:2:30: slice 'b.service': expected a slice unit (NAME.slice)");
  EXPECT_EQ(first_error("attach:\n  - {cgroup: a/../b, policy: p}\n"),
            "d.yaml:2:14: cgroup: expected a path below the cgroup2 mount (e.g. agents/runner), with no empty, "
            "'.' or '..' component, got 'a/../b'");
  EXPECT_EQ(first_error("attach:\n  - {cgroup: a, policy: My_Policy}\n"),
            "d.yaml:2:25: policy: 'My_Policy' is not a policy name (1 to 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit) (did you mean 'my-policy'?)");
  EXPECT_EQ(first_error("attach:\n  - {cgroup: a, policy: p, workspace: rel}\n"),
            "d.yaml:2:39: workspace: expected an absolute directory other than /, got 'rel'");
  EXPECT_EQ(first_error("attach:\n  - {cgroup: a, policy: p}\n  - {cgroup: a/b, policy: q}\n"),
            "d.yaml:3:5: attach: /a/b and /a nest (line 2); scopes do not nest: bind the outer one only");
  EXPECT_EQ(first_error("attach:\n  - {cgroup: a, policy: p}\n  - {cgroup: /a, policy: q}\n"),
            "d.yaml:3:5: attach: /a is bound already (line 2); scopes do not nest: bind the outer one only");
  EXPECT_EQ(first_error("attach: {unit: a.service}\n"),
            "d.yaml:1:9: attach: expected a list of {unit: NAME, policy: NAME} or {cgroup: PATH, policy: NAME} "
            "entries (each with an optional workspace: DIR)");
  EXPECT_NE(first_error("attach:\n  - {cgroup: " + std::string(300, 'x') + ", policy: p}\n").find("longer than 254"),
            std::string::npos);
}

TEST(DaemonConfig, UnitCgroupPaths) {
  EXPECT_EQ(*daemon::unit_cgroup_path("sshd.service", ""), "/system.slice/sshd.service");
  EXPECT_EQ(*daemon::unit_cgroup_path("run-u1.scope", "user.slice"), "/user.slice/run-u1.scope");
  EXPECT_EQ(*daemon::unit_cgroup_path("a-b-c.slice", ""), "/a.slice/a-b.slice/a-b-c.slice");
  EXPECT_EQ(*daemon::unit_cgroup_path("x.service", "a-b.slice"), "/a.slice/a-b.slice/x.service");
  for (const char* bad : {"", ".service", "x", "x.mount", "x@y@z.service", "@x.service", "x@.slice", "a@1.slice",
                          "-a.slice", "a-.slice"})
    EXPECT_FALSE(daemon::unit_cgroup_path(bad, "").ok()) << bad;
  EXPECT_FALSE(daemon::unit_cgroup_path(std::string(256, 'a') + ".service", "").ok());
  // The longest path a binding takes, and one byte more.
  EXPECT_TRUE(daemon::parse_config("attach: [{cgroup: " + std::string(253, 'x') + ", policy: p}]\n", "d.yaml").ok());
  EXPECT_FALSE(daemon::parse_config("attach: [{cgroup: " + std::string(254, 'x') + ", policy: p}]\n", "d.yaml").ok());
}

// The whole YAML input guard (yaml/input_guard.h), as for policies, with
// messages that name the configuration.
TEST(DaemonConfig, InputGuard) {
  using namespace std::string_literals;
  // A file of only comments skipped the guard before (it meant "defaults"
  // without being looked at), so binary or non-UTF-8 bytes in it passed.
  EXPECT_EQ(first_error("# a\0b\n"s),
            "d.yaml:1:4: NUL byte: configuration files are UTF-8 text (is this a binary file?)");
  EXPECT_EQ(first_error("# caf\xe9\n"),
            "d.yaml:1:6: invalid UTF-8 (byte 0xe9): configuration files must be UTF-8 text");
  EXPECT_EQ(
      first_error("# \x1b[31m red\n"),
      "d.yaml:1:3: control character 0x1b: configuration files are UTF-8 text (is this a binary file?)");
  EXPECT_EQ(
      first_error("\n  \n# x\x7f\n"),
      "d.yaml:3:4: control character 0x7f: configuration files are UTF-8 text (is this a binary file?)");
  // Messages used to say "policy"/"policies" here.
  EXPECT_EQ(first_error("a: &x 1\nb: *x\n"),
            "d.yaml:1:4: anchor '&x': anchors and aliases are not allowed in the daemon configuration");
  EXPECT_EQ(first_error("policy_dir: !!str /x\n"),
            "d.yaml:1:13: YAML tag '!!str' is not allowed in the daemon configuration");
  EXPECT_EQ(first_error("policy_dir: /a\n---\npolicy_dir: /b\n"),
            "d.yaml:2:1: a second YAML document: a configuration file holds exactly one document");
  EXPECT_EQ(first_error("# only a comment\n" + std::string(70 * 1024, '#') + "\n"),
            "d.yaml: configuration is 71698 bytes; the limit is 65536 bytes");
  EXPECT_EQ(first_error("policy_dir: " + std::string(40, '[') + "\n"),
            "d.yaml:1:45: flow collections ([...] / {...}) nested deeper than 32 levels");
  EXPECT_EQ(first_error("policy_dir: [/a\n").rfind("d.yaml:", 0), 0u);
  EXPECT_NE(first_error("policy_dir: [/a\n").find(": YAML syntax error: "), std::string::npos);
  // An empty document still means all defaults.
  for (const char* empty : {"", "\n\n", "# x\n", "---\n", "--- # x\n...\n", "~\n"}) {
    auto r = daemon::parse_config(empty, "d.yaml");
    EXPECT_TRUE(r.ok()) << empty << (r.errors.empty() ? "" : r.errors[0].format());
  }
}

TEST(DaemonConfig, ListenAddresses) {
  for (const char* ok : {"127.0.0.1:9477", "[::1]:1", ":9477", "localhost:0", "0.0.0.0:65535"})
    EXPECT_TRUE(daemon::valid_listen_address(ok)) << ok;
  for (const char* bad : {"", "9477", "1.2.3.4:", "1.2.3.4:65536", "a b:1", "[]:1", "h:-1"})
    EXPECT_FALSE(daemon::valid_listen_address(bad)) << bad;
}

// ---- requests -----------------------------------------------------------------

std::string rejection(const std::string& line) {
  auto r = control::parse_request(line);
  EXPECT_FALSE(r.ok()) << line;
  return r.ok() ? "" : r.error().message;
}

TEST(ControlRequest, ValidRequests) {
  auto s = control::parse_request(R"({"op":"status"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->op, control::Op::status);
  auto e = control::parse_request(R"({"op":"events","follow":true})");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->follow);
  auto a = control::parse_request(
      R"({"op":"attach","cgroup":"system.slice/x.service","policy":"python-sandbox","workspace":"/srv/w"})");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->cgroup, "system.slice/x.service");
  EXPECT_EQ(a->workspace, "/srv/w");
  auto end = control::parse_request(
      R"({"op":"run_end","run_id":"0123456789abcdef","policy":"p","outcome":"setup_failed","exit_code":125,"duration_seconds":0.5,"fail_closed":"lsm_inactive"})");
  ASSERT_TRUE(end.ok()) << end.error().message;
  ASSERT_TRUE(end->fail_closed);
  EXPECT_EQ(*end->fail_closed, core::FailClosedReason::lsm_inactive);
  EXPECT_EQ(end->outcome, core::RunOutcome::setup_failed);
  // to_json round-trips.
  auto again = control::parse_request(control::to_json(*end).dump());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(control::to_json(*again), control::to_json(*end));
  EXPECT_EQ(end->syscalls_denied, 0u);
  auto counted = control::parse_request(
      R"({"op":"run_end","run_id":"0123456789abcdef","policy":"p","outcome":"ok","exit_code":0,"duration_seconds":1,"syscalls_denied":7})");
  ASSERT_TRUE(counted.ok()) << counted.error().message;
  EXPECT_EQ(counted->syscalls_denied, 7u);
  EXPECT_EQ(control::to_json(*counted)["syscalls_denied"], 7);
  auto most = control::parse_request(
      R"({"op":"run_end","run_id":"0123456789abcdef","policy":"p","outcome":"ok","exit_code":0,"duration_seconds":1,"syscalls_denied":9007199254740992})");
  ASSERT_TRUE(most.ok()) << most.error().message;
  EXPECT_EQ(most->syscalls_denied, control::kMaxSyscallsDenied);
  EXPECT_FALSE(most->policy_slot);
  EXPECT_FALSE(control::to_json(*most).contains("policy_slot"));
  auto slotted = control::parse_request(
      R"({"op":"run_end","run_id":"0123456789abcdef","policy":"p","outcome":"ok","exit_code":0,"duration_seconds":1,"policy_slot":17})");
  ASSERT_TRUE(slotted.ok()) << slotted.error().message;
  EXPECT_EQ(slotted->policy_slot, 17u);
  EXPECT_EQ(control::to_json(*slotted)["policy_slot"], 17);
  auto start = control::parse_request(
      R"({"op":"run_start","run_id":"0123456789abcdef","policy":"p","scope_id":18446744073709551615})");
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->scope_id, UINT64_MAX);
}

// A container's attach (the OCI hook's): its id, the process whose exec arms
// the scope, its labels; its detach by id once the cgroup may be gone.
TEST(ControlRequest, ContainerAttachAndDetach) {
  auto a = control::parse_request(
      R"({"op":"attach","cgroup":"/machine.slice/libpod-ab12.scope","policy":"python-sandbox",)"
      R"("workspace":"/workspace","container_id":"ab12","arm_pid":4242,"labels":{"container.name":"web"}})");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->container_id, "ab12");
  EXPECT_EQ(a->arm_pid, 4242);
  EXPECT_EQ(a->labels.at("container.name"), "web");
  auto again = control::parse_request(control::to_json(*a).dump());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(control::to_json(*again), control::to_json(*a));
  auto d = control::parse_request(R"({"op":"detach","container_id":"ab12"})");
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->container_id, "ab12");
  EXPECT_TRUE(d->cgroup.empty());
  EXPECT_EQ(control::to_json(*d), nlohmann::json::parse(R"({"op":"detach","container_id":"ab12"})"));

  const std::string att = R"({"op":"attach","cgroup":"a","policy":"p",)";
  EXPECT_EQ(rejection(att + R"("arm_pid":0})"), "request: \"arm_pid\" must be a process id 1..4194304");
  EXPECT_EQ(rejection(att + R"("arm_pid":-3})"), "request: \"arm_pid\" must be a process id 1..4194304");
  EXPECT_EQ(rejection(att + R"("arm_pid":4194305})"), "request: \"arm_pid\" must be a process id 1..4194304");
  EXPECT_EQ(rejection(att + R"("arm_pid":"12"})"), "request: \"arm_pid\" must be a process id 1..4194304");
  EXPECT_EQ(rejection(att + R"("container_id":"../etc"})"),
            "request: \"container_id\": container id '../etc' is not valid (1 to 128 bytes of letters, digits, "
            "'_', '.' and '-', not starting with '.' or '-')");
  EXPECT_NE(rejection(att + R"("container_id":"a/b"})").find("\"container_id\""), std::string::npos);
  EXPECT_NE(rejection(att + R"("container_id":")" + std::string(129, 'a') + "\"}").find("\"container_id\""),
            std::string::npos);
  EXPECT_EQ(rejection(att + R"("container_id":7})"), "request: \"container_id\" must be a string");
  EXPECT_NE(rejection(att + R"("labels":{"Bad":"x"}})").find("request: "), std::string::npos);
  EXPECT_EQ(rejection(R"({"op":"detach","cgroup":"a","container_id":"ab"})"),
            "request: detach takes \"cgroup\" or \"container_id\", not both");
  EXPECT_EQ(rejection(R"({"op":"detach"})"), "request: missing \"cgroup\"");
  EXPECT_EQ(rejection(R"({"op":"detach","cgroup":"a","arm_pid":3})"),
            "request: unknown field \"arm_pid\" for op detach");
}

TEST(ControlRequest, InvalidRequests) {
  EXPECT_EQ(rejection(""), "request: not valid JSON (one JSON object per line)");
  EXPECT_EQ(rejection("{\"op\":\"status\"} trailing"), "request: not valid JSON (one JSON object per line)");
  EXPECT_EQ(rejection("\"status\""), "request: expected a JSON object");
  EXPECT_EQ(rejection("{\"op\":1}"), "request: missing \"op\" (a string)");
  EXPECT_NE(rejection("{\"op\":\"rm\"}").find("unknown op \"rm\""), std::string::npos);
  EXPECT_EQ(rejection("{\"op\":\"status\",\"x\":1}"), "request: unknown field \"x\" for op status");
  // The one policy-name rule (policy/name.h), stated in full; this message
  // said "1-63 of a-z, 0-9, -" and the check accepted a leading '-'.
  EXPECT_EQ(
      rejection("{\"op\":\"attach\",\"cgroup\":\"a\",\"policy\":\"Bad_Name\"}"),
      "request: \"policy\" must be a policy name (1 to 63 lowercase letters, digits and '-', starting and "
      "ending with a letter or digit)");
  EXPECT_EQ(rejection("{\"op\":\"attach\",\"cgroup\":\"a\",\"policy\":\"p\",\"workspace\":\"rel\"}"),
            "request: \"workspace\" must be an absolute path");
  EXPECT_EQ(rejection("{\"op\":\"attach\",\"policy\":\"p\"}"), "request: missing \"cgroup\"");
  EXPECT_EQ(rejection(std::string("{\"op\":\"detach\",\"cgroup\":\"a\\u0000b\"}")),
            "request: \"cgroup\" must be a cgroup path (under 4096 bytes)");
  EXPECT_EQ(rejection("{\"op\":\"detach\",\"cgroup\":\"" + std::string(5000, 'a') + "\"}"),
            "request: \"cgroup\" must be a cgroup path (under 4096 bytes)");
  const std::string end = R"({"op":"run_end","run_id":"0123456789abcdef","policy":"p","outcome":"ok",)";
  EXPECT_EQ(rejection(end + R"("exit_code":256,"duration_seconds":1})"),
            "request: \"exit_code\" must be 0..255");
  EXPECT_EQ(rejection(end + R"("exit_code":1.5,"duration_seconds":1})"),
            "request: \"exit_code\" must be an integer");
  EXPECT_EQ(rejection(end + R"("exit_code":0,"duration_seconds":-1})"),
            "request: \"duration_seconds\" must be between 0 and 1e8");
  EXPECT_EQ(rejection(end + R"("exit_code":0,"duration_seconds":1,"fail_closed":"nope"})")
                .rfind("request: \"fail_closed\" must be one of", 0),
            0u);
  for (const char* bad : {"-1", "4294967296", "1.5", "\"7\"", "null"})
    EXPECT_EQ(rejection(end + R"("exit_code":0,"duration_seconds":1,"policy_slot":)" + bad + "}"),
              "request: \"policy_slot\" must be an integer 0..4294967295 (the slot the run's scope ran on)");
  // A client may send any JSON here: negative, past uint64 (parsed as a
  // double), past 2^53, fractional, exponent, string, bool, null.
  for (const char* bad : {"-1", "18446744073709551616", "18446744073709551615", "9007199254740993", "1.5",
                          "1e3", "\"7\"", "true", "null", "[7]"})
    EXPECT_EQ(
        rejection(end + R"("exit_code":0,"duration_seconds":1,"syscalls_denied":)" + bad + "}"),
        "request: \"syscalls_denied\" must be an integer 0..9007199254740992 (the run's count of denied "
        "system calls)")
        << bad;
  // Refused names: an object {total, by_name}, each name printable, each count
  // in the total, at most kMaxRefusedNames names.
  const std::string dns = end + R"("exit_code":0,"duration_seconds":1,"dns_refused":)";
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"[]", "\"dns_refused\" must be an object {\"total\": N, \"by_name\": {NAME: N}}"},
           {"{}", "\"dns_refused.total\" must be an integer 0..9007199254740992"},
           {R"({"total":9007199254740993})", "\"dns_refused.total\" must be an integer 0..9007199254740992"},
           {R"({"total":1,"by":{}})", "unknown field \"by\" in \"dns_refused\""},
           {R"({"total":1,"by_name":[]})",
            "\"dns_refused.by_name\" must be an object of at most 64 names, each with its count"},
           {R"({"total":1,"by_name":{"":1}})", "a name of \"dns_refused.by_name\" must be 1..253 bytes of printable ASCII"},
           {R"({"total":1,"by_name":{"\u00e9.test":1}})",
            "a name of \"dns_refused.by_name\" must be 1..253 bytes of printable ASCII"},
           {R"({"total":1,"by_name":{")" + std::string(254, 'a') + R"(":1}})",
            "a name of \"dns_refused.by_name\" must be 1..253 bytes of printable ASCII"},
           {R"({"total":1,"by_name":{"a.test":"1"}})", "the count of a refused name must be an integer 1..9007199254740992"},
           {R"({"total":3,"by_name":{"a.test":2,"b.test":2}})", "\"dns_refused.by_name\" counts more refusals than \"total\""}})
    EXPECT_EQ(rejection(dns + bad + "}"), "request: " + why) << bad;
  auto names = control::parse_request(dns + R"({"total":5,"by_name":{"a.test":2,"b c":1}}})");
  ASSERT_TRUE(names.ok()) << names.error().message;
  EXPECT_EQ(names->dns_refused.total, 5u);
  EXPECT_EQ(names->dns_refused.by_name, (std::map<std::string, uint64_t>{{"a.test", 2}, {"b c", 1}}));
  EXPECT_EQ(control::to_json(*names)["dns_refused"], json::parse(R"({"total":5,"by_name":{"a.test":2,"b c":1}})"));
  EXPECT_EQ(rejection(R"({"op":"run_start","run_id":"0123456789ABCDEF","policy":"p","scope_id":1})"),
            "request: \"run_id\" must be 16 lowercase hex digits");
  EXPECT_EQ(rejection(std::string(control::kMaxRequestBytes + 1, ' ')),
            "request: longer than " + std::to_string(control::kMaxRequestBytes) + " bytes");
  // Deep nesting is a parse, not a crash.
  EXPECT_FALSE(control::parse_request(std::string(5000, '[') + std::string(5000, ']')).ok());
}

TEST(ControlRequest, HelloSaysWhichProtocol) {
  auto r = control::parse_request(R"({"op":"hello","protocol":1,"client":"agentcage-client-py/0.1"})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->op, control::Op::hello);
  EXPECT_EQ(r->protocol, 1);
  EXPECT_EQ(control::to_json(*r), json::parse(R"({"op":"hello","protocol":1})"));
  EXPECT_EQ(rejection(R"({"op":"hello"})").rfind("request: \"protocol\" must be the protocol version", 0),
            0u);
  EXPECT_EQ(rejection(R"({"op":"hello","protocol":-1})").rfind("request: \"protocol\"", 0), 0u);
  EXPECT_EQ(rejection(R"({"op":"hello","protocol":1,"client":7})").rfind("request: \"client\"", 0), 0u);
}

TEST(ControlRequest, ARunNamesAPolicyAndCommand) {
  auto r = control::parse_request(
      R"j({"op":"run","policy":"python-sandbox","argv":["python3","-c","print(1)"],"env":["A=1"],)j"
      R"("workspace":"/home/u/ws","limits":{"memory":"512Mi","timeout":"30s"},"labels":{"task":"t-1"}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->op, control::Op::run);
  EXPECT_EQ(r->argv, (std::vector<std::string>{"python3", "-c", "print(1)"}));
  EXPECT_EQ(r->env, std::vector<std::string>{"A=1"});
  EXPECT_EQ(r->workspace, "/home/u/ws");
  EXPECT_EQ(r->limits.memory, "512Mi");
  EXPECT_EQ(r->limits.timeout, "30s");
  EXPECT_FALSE(r->limits.pids);
  EXPECT_EQ(r->labels.at("task"), "t-1");
  // The same request back (what the client library sends).
  auto again = control::parse_request(control::to_json(*r).dump());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(control::to_json(*again), control::to_json(*r));

  const std::string run = R"({"op":"run","policy":"p",)";
  // A client names a policy; it never sends one.
  EXPECT_EQ(rejection(R"({"op":"run","policy":"/tmp/evil.yaml","argv":["true"]})")
                .find("a client cannot send a policy file"),
            rejection(R"({"op":"run","policy":"/tmp/evil.yaml","argv":["true"]})").size() - 34);
  EXPECT_EQ(rejection(R"({"op":"run","argv":["true"]})").rfind("request: missing \"policy\"", 0), 0u);
  EXPECT_EQ(rejection(run + R"("argv":[]})"), "request: \"argv\" must start with a COMMAND");
  EXPECT_EQ(rejection(run + R"("argv":[""]})"), "request: \"argv\" must start with a COMMAND");
  EXPECT_EQ(rejection(run + R"("argv":"true"})"), "request: \"argv\" must be an array of strings");
  EXPECT_EQ(rejection(run + R"("argv":["true",1]})"), "request: \"argv\" must be an array of strings");
  EXPECT_EQ(rejection(run + R"("argv":["a\u0000b"]})").rfind("request: an entry of \"argv\"", 0), 0u);
  EXPECT_EQ(
      rejection(run + R"("argv":["true"],"workspace":"rel"})").rfind("request: \"workspace\" must be", 0),
      0u);
  EXPECT_EQ(rejection(run + R"("argv":["true"],"limits":{"swap":"1G"}})").rfind("request: unknown limit", 0),
            0u);
  EXPECT_EQ(rejection(run + R"("argv":["true"],"limits":{"memory":512}})").rfind("request: limit memory", 0),
            0u);
  EXPECT_EQ(rejection(run + R"("argv":["true"],"labels":{"Task":"x"}})").rfind("request: label key", 0), 0u);
  EXPECT_EQ(rejection(run + R"("argv":["true"],"labels":{"t":"a\nb"}})"),
            "request: a label value contains a control character (label t)");
  EXPECT_EQ(rejection(run + R"("argv":["true"],"user":"root"})"),
            "request: unknown field \"user\" for op run");
  std::string many = run + R"("argv":["true"],"labels":{)";
  for (size_t i = 0; i <= core::kMaxLabels; ++i)
    many += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":\"v\"";
  EXPECT_EQ(rejection(many + "}}"), "request: at most 16 labels");
}

// A runner's notices go over the channel the daemon passed it, one
// datagram each, never inherited by COMMAND; anything else named by the
// variable is not taken (and no notice lands in it). In a child process
// (in_child.h): the channel is the process's for good.
std::string notices_over_the_channel() {
  ::setenv("AGENTCAGE_CONTROL_SOCKET", "/nonexistent/agentcage-test.sock", 1);
  auto pending = [](int fd) {
    char b[4096];
    return ::recv(fd, b, sizeof b, MSG_DONTWAIT) > 0;
  };
  int pipe_fds[2], stream[2], channel[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0 ||
      ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, stream) != 0 ||
      ::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, channel) != 0)
    return "setup";
  const std::vector<std::string> bads = {
      "", "x", "4x", "-1", "1", "99999", std::to_string(pipe_fds[1]), std::to_string(stream[0])};
  for (const std::string& bad : bads) {
    ::setenv("AGENTCAGE_NOTIFY_FD", bad.c_str(), 1);
    control::adopt_notify_channel();
    if (std::getenv("AGENTCAGE_NOTIFY_FD")) return "variable kept: " + bad;
    control::notify_run_start("0123456789abcdef", "drun", 7, {});
    char b;
    if (pending(stream[1]) || ::read(pipe_fds[0], &b, 1) != -1) return "a notice went to " + bad;
  }
  if (::fcntl(channel[0], F_GETFD) & FD_CLOEXEC) return "setup: close-on-exec already";
  ::setenv("AGENTCAGE_NOTIFY_FD", std::to_string(channel[0]).c_str(), 1);
  control::adopt_notify_channel();
  if (std::getenv("AGENTCAGE_NOTIFY_FD")) return "variable kept";
  if (!(::fcntl(channel[0], F_GETFD) & FD_CLOEXEC)) return "COMMAND would inherit the channel";

  control::notify_run_start("0123456789abcdef", "drun", 42, {{"task", "t-1"}});
  control::RunEnd end;
  end.run_id = "0123456789abcdef";
  end.policy = "drun";
  end.outcome = core::RunOutcome::denied;
  end.exit_code = 1;
  end.syscalls_denied = 3;
  end.policy_slot = 5;
  // Names the daemon would refuse (and with them the whole notice) are left
  // out of the list; they stay counted in the total.
  end.dns_refused.total = 5;
  end.dns_refused.by_name = {{"", 1}, {"ok.test", 2}, {std::string(254, 'a'), 1}, {"bad\nname", 1}};
  control::notify_run_end(end);
  std::vector<control::Request> got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(channel[1], buf, sizeof buf, MSG_DONTWAIT)) > 0;) {
    auto r = control::parse_request(std::string_view(buf, static_cast<size_t>(n)));
    if (!r) return "not a request: " + r.error().message;
    got.push_back(*r);
  }
  if (got.size() != 2) return std::to_string(got.size()) + " notices";
  if (got[0].op != control::Op::run_start || got[0].run_id != "0123456789abcdef" || got[0].scope_id != 42 ||
      got[0].labels != core::Labels{{"task", "t-1"}})
    return "run_start: " + control::to_json(got[0]).dump();
  if (got[1].op != control::Op::run_end || got[1].outcome != core::RunOutcome::denied ||
      got[1].exit_code != 1 || got[1].syscalls_denied != 3 || got[1].policy_slot != 5u ||
      got[1].dns_refused.total != 5 ||
      got[1].dns_refused.by_name != std::map<std::string, uint64_t>{{"ok.test", 2}})
    return "run_end: " + control::to_json(got[1]).dump();
  return "";
}

TEST(RunNotices, GoOverTheChannelTheDaemonPassedOnly) { test::in_child(notices_over_the_channel); }

TEST(Labels, KeysAndValuesFollowOneRule) {
  EXPECT_TRUE(core::label_key_error("task").empty());
  EXPECT_TRUE(core::label_key_error("a.b-c_9").empty());
  EXPECT_FALSE(core::label_key_error("").empty());
  EXPECT_FALSE(core::label_key_error("-a").empty());
  EXPECT_FALSE(core::label_key_error("A").empty());
  EXPECT_FALSE(core::label_key_error(std::string(64, 'a')).empty());
  EXPECT_TRUE(core::label_value_error("").empty());
  EXPECT_TRUE(core::label_value_error("caf\xc3\xa9 ok").empty());
  EXPECT_FALSE(core::label_value_error("\xff").empty());
  EXPECT_FALSE(core::label_value_error("a\x1b[2J").empty());
  EXPECT_FALSE(core::label_value_error(std::string(257, 'v')).empty());
  auto kv = core::parse_label("task=a=b");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->first, "task");
  EXPECT_EQ(kv->second, "a=b");
  EXPECT_FALSE(core::parse_label("novalue").ok());
  core::Labels labels;
  EXPECT_TRUE(core::add_label(labels, "a", "1").ok());
  EXPECT_FALSE(core::add_label(labels, "a", "2").ok());
}

TEST(RunCaps, ALimitIsTheAskedOneOrThePolicysLoweredToTheCap) {
  policy::Limits caps;
  caps.memory_bytes = 1024 * 1024 * 1024;
  caps.timeout = std::chrono::minutes(10);
  policy::Limits from_policy;
  from_policy.memory_bytes = uint64_t{2} << 30;  // over the cap: lowered
  from_policy.unlimited.timeout = true;          // unlimited under a cap: the cap
  from_policy.pids = 64;
  auto out = daemon::capped_limits(from_policy, {}, caps);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->memory, "1073741824");
  EXPECT_EQ(out->timeout, "600000ms");
  EXPECT_EQ(out->pids, "64");
  EXPECT_EQ(out->cpu, "unlimited");                         // no cap, no limit
  EXPECT_EQ(out->disk, std::to_string(uint64_t{1} << 30));  // the default (core/limits.h)

  control::RunLimits asked;
  asked.memory = "512Mi";
  asked.cpu = "0.5";
  out = daemon::capped_limits(from_policy, asked, caps);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->memory, std::to_string(512u << 20));
  EXPECT_EQ(out->cpu, "0.5");

  asked = {};
  asked.memory = "2Gi";
  auto over = daemon::capped_limits(from_policy, asked, caps);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message,
            "limit memory 2Gi is over this daemon's cap of 1073741824 (run_max_memory in its configuration)");
  asked = {};
  asked.timeout = "unlimited";
  EXPECT_FALSE(daemon::capped_limits(from_policy, asked, caps).ok());
  asked = {};
  asked.pids = "lots";
  EXPECT_FALSE(daemon::capped_limits(from_policy, asked, caps).ok());
}

TEST(ControlRequest, GroupMayOnlyRead) {
  EXPECT_TRUE(control::op_allowed_for_group(control::Op::hello));
  EXPECT_TRUE(control::op_allowed_for_group(control::Op::run));
  EXPECT_TRUE(control::op_allowed_for_group(control::Op::status));
  EXPECT_TRUE(control::op_allowed_for_group(control::Op::events));
  for (auto op : {control::Op::attach, control::Op::detach, control::Op::run_start, control::Op::run_end,
                  control::Op::reload})
    EXPECT_FALSE(control::op_allowed_for_group(op)) << control::op_name(op);
}

TEST(RunOutcome, FromExitStatus) {
  EXPECT_EQ(core::name(core::run_outcome(0, false, false, std::nullopt)), "ok");
  EXPECT_EQ(core::name(core::run_outcome(1, false, false, std::nullopt)), "error");
  EXPECT_EQ(core::name(core::run_outcome(124, true, false, 9)), "timeout");
  EXPECT_EQ(core::name(core::run_outcome(137, false, true, 9)), "oom");
  EXPECT_EQ(core::name(core::run_outcome(137, false, false, 9)), "signal");
  EXPECT_EQ(core::name(core::run_outcome(143, false, false, std::nullopt)),
            "signal");  // agentcage got SIGTERM
  EXPECT_EQ(core::name(core::run_outcome(126, false, false, std::nullopt)), "denied");
  EXPECT_EQ(core::name(core::run_outcome(127, false, false, std::nullopt)), "denied");
  EXPECT_EQ(core::name(core::run_outcome(125, false, false, std::nullopt)), "setup_failed");
}

// ---- audit lines ----------------------------------------------------------------

ac_event_decision sample_event() {
  ac_event_decision ev{};
  ev.hdr.type = AC_EVENT_DECISION;
  ev.hdr.size = sizeof ev;
  ev.hdr.cgroup_id = 4321;
  ev.scope_id = 1234;
  ev.policy_slot = 3;
  ev.pid = 42;
  ev.tid = 43;
  ev.uid = 1879048192;
  ev.hook = AC_HOOK_FILE_OPEN;
  ev.decision = AC_DECISION_DENY;
  ev.reason = AC_REASON_DEFAULT_DENY;
  ev.target_kind = AC_TARGET_PATH;
  ev.error = -13;
  std::strcpy(ev.comm, "python3");
  std::strcpy(ev.target, "/etc/passwd");
  ev.target_len = 11;
  return ev;
}

TEST(AuditLine, StableFieldNames) {
  telemetry::EventContext ctx{1735787045123456789LL, "python-sandbox", "0123456789abcdef", {}, ""};
  std::string line = telemetry::event_line(sample_event(), ctx);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(
      line,
      R"({"cgroup_id":4321,"comm":"python3","decision":"deny","errno":13,"errno_name":"EACCES","hook":"file_open",)"
      R"("pid":42,"policy":"python-sandbox","policy_slot":3,"reason":"default_deny","run_id":"0123456789abcdef",)"
      R"("scope_id":1234,"target":"/etc/passwd","target_kind":"path","tid":43,"time":"2025-01-02T03:04:05.123456789Z",)"
      R"("uid":1879048192})"
      "\n");
}

// A sandbox names its files and sockets, a member its labels: what a
// terminal or a reader that splits on Unicode line breaks would take for a
// control (C1 such as U+009B CSI and U+0085, the bidirectional overrides,
// U+2028) and DEL are \u escapes in the line, so `agentcage events` and a
// `tail` of the log print none of them raw; the JSON value is the same.
TEST(AuditLine, NoTerminalControlReachesTheLine) {
  ac_event_decision ev = sample_event();
  const std::string target =
      "/w/\xc2\x9b"
      "2J\xe2\x80\xae"
      "txt.exe\xc2\x85\xe2\x80\xa8\x7f|\xe2\x80\x94";
  std::memset(ev.target, 0, sizeof ev.target);
  std::memcpy(ev.target, target.data(), target.size());
  ev.target_len = static_cast<uint16_t>(target.size());
  const std::string label =
      "\xc2\x9b"
      "31m";
  const std::string line = telemetry::event_line(ev, {0, "p", "0123456789abcdef", {{"task", label}}, ""});
  for (const char* raw : {"\xc2\x9b", "\xc2\x85", "\xe2\x80\xae", "\xe2\x80\xa8", "\x7f"})
    EXPECT_EQ(line.find(raw), std::string::npos) << line;
  EXPECT_NE(line.find(R"(\u009b2J\u202etxt.exe\u0085\u2028\u007f|)"), std::string::npos) << line;
  EXPECT_NE(line.find("\xe2\x80\x94"), std::string::npos) << "an ordinary character stays as it is: " << line;
  const json j = json::parse(line);
  EXPECT_EQ(j["target"], target);
  EXPECT_EQ(j["labels"]["task"], label);
}

TEST(AuditLine, InetTargetUnknownRunAndHostileBytes) {
  ac_event_decision ev = sample_event();
  ev.hook = AC_HOOK_SOCKET_CONNECT;
  ev.target_kind = AC_TARGET_INET;
  ev.family = 2;  // AF_INET
  ev.port = 443;
  ev.addr[0] = 10, ev.addr[1] = 0, ev.addr[2] = 0, ev.addr[3] = 1;
  std::memcpy(ev.comm, "\xff\xfe\"\n\\xyzxyzxyzxyzx", 16);  // not NUL-terminated, invalid UTF-8
  json j = json::parse(telemetry::event_line(ev, {0, "", "", {}, ""}));
  EXPECT_EQ(j["target"], "10.0.0.1:443");
  EXPECT_EQ(j["target_kind"], "inet");
  EXPECT_EQ(j["hook"], "socket_connect");
  EXPECT_TRUE(j["run_id"].is_null());
  EXPECT_TRUE(j["policy"].is_null());
  EXPECT_EQ(j["time"], "1970-01-01T00:00:00.000000000Z");
  EXPECT_LE(j["comm"].get<std::string>().size(), 3u * 16);
}

TEST(AuditLine, ARefusedNameHasTheShapeOfADecision) {
  telemetry::EventContext ctx{1735787045123456789, "python-sandbox", "0123456789abcdef", {{"team", "a"}}, ""};
  json j = json::parse(telemetry::refused_name_line("exfil.example.net", 3, ctx));
  EXPECT_EQ(j, json({{"time", "2025-01-02T03:04:05.123456789Z"},
                     {"run_id", "0123456789abcdef"},
                     {"policy", "python-sandbox"},
                     {"hook", "dns"},
                     {"decision", "deny"},
                     {"reason", "default_deny"},
                     {"target", "exfil.example.net"},
                     {"target_kind", "name"},
                     {"count", 3},
                     {"labels", {{"team", "a"}}}}));
  // An unknown run and policy are null, as in a kernel decision's line.
  j = json::parse(telemetry::refused_name_line("x.test", 1, {}));
  EXPECT_TRUE(j["run_id"].is_null());
  EXPECT_TRUE(j["policy"].is_null());
  EXPECT_FALSE(j.contains("labels"));
}

// ---- counters and metric names ---------------------------------------------------

TEST(CounterTracker, MonotonicAcrossResetAndReuse) {
  telemetry::CounterTracker t;
  bpf::SlotCounters c{};
  c.hooks[AC_HOOK_EXEC].decisions[AC_DECISION_DENY] = 5;
  auto d = t.observe(7, "a", c);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].amount, 5u);
  c.hooks[AC_HOOK_EXEC].decisions[AC_DECISION_DENY] = 8;
  d = t.observe(7, "a", c);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].amount, 3u);
  EXPECT_TRUE(t.observe(7, "a", c).empty());
  // The slot was reset (lower value): everything now is new.
  c.hooks[AC_HOOK_EXEC].decisions[AC_DECISION_DENY] = 2;
  d = t.observe(7, "a", c);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].amount, 2u);
  // Another policy took the slot.
  c.hooks[AC_HOOK_EXEC].decisions[AC_DECISION_DENY] = 4;
  d = t.observe(7, "b", c);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].amount, 4u);
}

TEST(Metrics, ExportsTheContractNames) {
  telemetry::Metrics m;
  m.decisions("p", AC_HOOK_FILE_OPEN, AC_DECISION_DENY, 3);
  m.event("p", AC_HOOK_FILE_OPEN, AC_DECISION_DENY);
  m.events_lost(2);
  m.events_suppressed(5);
  m.run_finished("p", core::RunOutcome::ok, 1.5);
  m.runs_active(1);
  m.policy_reload(true);
  m.policies_loaded(1);
  m.scopes_active(2);
  m.enforcement_ready(true);
  m.fail_closed(core::FailClosedReason::policy_invalid, telemetry::FailClosedSource::policy_file);
  m.fail_closed(core::FailClosedReason::cgroup, telemetry::FailClosedSource::run);
  m.map_fill({{"ac_pins", 12, 65536}});
  m.policy_states({{"p", true, 1700000000, "enforce"}, {"q", false, 0, ""}});
  m.process();
  m.daemon_drops(4, 0);
  m.daemon_drops(6, 1);
  m.containers_active(3);
  m.container_operation(telemetry::Metrics::ContainerOp::confine, true);
  m.container_operation(telemetry::Metrics::ContainerOp::confine, false);
  m.container_operation(telemetry::Metrics::ContainerOp::confine, false);
  m.container_operation(telemetry::Metrics::ContainerOp::sweep, true);
  m.bindings({{"agent.service", true, 0, 2}});
  m.bindings({{"agent.service", false, 1, 3}});
  const std::string text = m.text();
  for (const char* series :
       {"agentcage_decisions_total{decision=\"deny\",hook=\"file_open\",policy=\"p\"} 3",
        "agentcage_events_total{decision=\"deny\",hook=\"file_open\",policy=\"p\"} 1",
        "agentcage_events_lost_total 2", "agentcage_events_suppressed_total 5",
        "agentcage_runs_total{outcome=\"ok\",policy=\"p\"} 1",
        "agentcage_run_duration_seconds_count{policy=\"p\"} 1", "agentcage_runs_active 1",
        "agentcage_policy_reloads_total{result=\"success\"} 1",
        "agentcage_policy_reloads_total{result=\"failure\"} 0", "agentcage_policies_loaded 1",
        "agentcage_scopes_active 2", "agentcage_enforcement_ready 1",
        "agentcage_fail_closed_total{reason=\"policy_invalid\",source=\"policy_file\"} 1",
        "agentcage_fail_closed_total{reason=\"cgroup\",source=\"run\"} 1",
        "agentcage_fail_closed_total{reason=\"lsm_inactive\",source=\"daemon\"} 0",
        "agentcage_build_info{bpf_object=\"", "agentcage_bpf_map_entries{map=\"ac_pins\"} 12",
        "agentcage_bpf_map_capacity{map=\"ac_pins\"} 65536", "agentcage_policy_valid{policy=\"p\"} 1",
        "agentcage_policy_valid{policy=\"q\"} 0", "agentcage_policy_last_load_timestamp_seconds{policy=\"p\"} 1700000000",
        "agentcage_policy_info{mode=\"enforce\",policy=\"p\"} 1", "process_cpu_seconds_total ",
        "process_resident_memory_bytes ", "process_open_fds ", "process_max_fds ", "process_start_time_seconds ",
        "agentcage_daemon_dropped_total{what=\"audit_log\"} 6", "agentcage_daemon_dropped_total{what=\"event_stream\"} 1",
        "agentcage_binding_unconfined{binding=\"agent.service\"} 0",
        "agentcage_binding_late_total{binding=\"agent.service\"} 1",
        "agentcage_binding_confined_total{binding=\"agent.service\"} 3", "agentcage_containers_active 3",
        "agentcage_container_operations_total{op=\"confine\",result=\"success\"} 1",
        "agentcage_container_operations_total{op=\"confine\",result=\"failure\"} 2",
        "agentcage_container_operations_total{op=\"sweep\",result=\"success\"} 1",
        "agentcage_container_operations_total{op=\"release\",result=\"failure\"} 0"})
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  EXPECT_EQ(text.find("agentcage_policy_info{mode=\"enforce\",policy=\"q\"}"), std::string::npos);
  // A policy whose mode changes keeps one info series; one that goes loses all of its series.
  m.policy_states({{"p", true, 1700000100, "audit"}});
  m.bindings({});
  const std::string after = m.text();
  EXPECT_EQ(after.find("binding=\"agent.service\""), std::string::npos) << after;
  EXPECT_NE(after.find("agentcage_policy_info{mode=\"audit\",policy=\"p\"} 1"), std::string::npos) << after;
  EXPECT_EQ(after.find("agentcage_policy_info{mode=\"enforce\""), std::string::npos) << after;
  EXPECT_EQ(after.find("policy=\"q\""), std::string::npos) << after;
  EXPECT_NE(after.find("agentcage_build_info{bpf_object=\"" + bpf::Enforcer::object_digest() + "\",revision=\""),
            std::string::npos)
      << after;
}

}  // namespace
}  // namespace agentcage
