// SPDX-License-Identifier: Apache-2.0
// `agentcage daemon` end to end, through the real binary: a real Prometheus
// server scraping it, hot reload of the policy directory proven with real
// allowed/denied operations, the control socket (validation, permissions,
// unreachable from a sandbox), SIGKILL and restart with runs in flight, and
// a forced ring-buffer overflow with exact accounting. Needs root and a
// kernel that enforces (the VM: tests/vm/run --kernel 6.1|6.12).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/configmap_volume.h"
#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "control/client.h"
#include "control/protocol.h"
#include "daemon_env.h"
#include "kernel_env.h"
#include "util/unique_fd.h"

#ifndef AGENTCAGE_SOURCE_DIR
#error "AGENTCAGE_SOURCE_DIR must point at the repository (set by tests/kernel/CMakeLists.txt)"
#endif

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class Daemon : public DaemonEnv {};

// ---- metrics through a real Prometheus server -----------------------------

TEST_F(Daemon, PrometheusScrapesDecisionsAfterADeniedRun) {
  start_daemon();
  start_prometheus("  - job_name: agentcage\n"
                   "    static_configs: [{targets: ['127.0.0.1:" +
                   std::to_string(kMetricsPort) + "']}]\n");
  ASSERT_TRUE(wait_until([] { return promql("up{job=\"agentcage\"}") == 1; }, 180s))
      << "Prometheus never scraped the daemon:\n"
      << slurp(dir_ / "prometheus.log");
  EXPECT_EQ(promql("agentcage_enforcement_ready"), 1);
  EXPECT_EQ(promql("agentcage_policies_loaded"), 1);
  const std::string denials = "sum(agentcage_decisions_total{decision=\"deny\",policy=\"dtest\"})";
  double before = std::max(0.0, promql(denials));

  Proc run = start_run({"cat", "/etc/passwd"}, "denied");
  int code = wait_exit(run.pid);
  ASSERT_EQ(code, 1) << slurp(run.out);  // cat: /etc/passwd: Permission denied
  json result = json::parse(slurp(dir_ / "denied.json"), nullptr, false);
  ASSERT_TRUE(result.is_object());

  EXPECT_TRUE(wait_until([&] { return promql(denials) > before; }, 60s))
      << "the deny counter never rose in Prometheus (before " << before << ", now " << promql(denials) << ")";
  EXPECT_TRUE(wait_until(
      [] { return promql("agentcage_runs_total{policy=\"dtest\",outcome=\"error\"}") >= 1; }, 30s));
  EXPECT_TRUE(wait_until(
      [] {
        return promql("sum(agentcage_events_total{decision=\"deny\",policy=\"dtest\",hook=\"file_open\"})") >=
               1;
      },
      30s));
  EXPECT_GE(promql("agentcage_run_duration_seconds_count{policy=\"dtest\"}"), 1);

  // The audit log has the denial, with the run id and the target.
  json ev = wait_for_audit_line(dir_ / "audit.jsonl", [&](const json& e) {
    return e.value("target", "") == "/etc/passwd" && e.contains("run_id") && e["run_id"] == result["run_id"];
  });
  ASSERT_TRUE(ev.is_object()) << slurp(dir_ / "audit.jsonl");
  EXPECT_EQ(ev["policy"], "dtest");
  EXPECT_EQ(ev["hook"], "file_open");
  EXPECT_EQ(ev["decision"], "deny");
  EXPECT_EQ(ev["errno"], 13);
  EXPECT_EQ(ev["comm"], "cat");
  EXPECT_EQ(ev["scope_id"], result["scope_id"]);
  EXPECT_EQ(ev["time"].get<std::string>().size(), std::string("2025-01-02T03:04:05.123456789Z").size());
  // What the kernel and the daemon hold: map fill against capacity, the
  // policy's validity, load time and mode, the build, the process.
  EXPECT_EQ(scrape("agentcage_bpf_map_capacity{map=\"ac_scopes\"}"), AC_MAX_SCOPES);
  EXPECT_EQ(scrape("agentcage_bpf_map_capacity{map=\"ac_pins\"}"), AC_MAX_PINS);
  EXPECT_EQ(scrape("agentcage_bpf_map_capacity{map=\"ac_policies\"}"), AC_MAX_POLICIES);
  EXPECT_GE(scrape("agentcage_bpf_map_entries{map=\"ac_policies\"}"), 1);  // dtest's slot at least
  EXPECT_GE(scrape("agentcage_bpf_map_entries{map=\"ac_path_rules\"}"), 1);
  EXPECT_EQ(scrape("agentcage_policy_valid{policy=\"dtest\"}"), 1);
  EXPECT_GT(scrape("agentcage_policy_last_load_timestamp_seconds{policy=\"dtest\"}"), 1.7e9);
  EXPECT_EQ(scrape("agentcage_policy_info{mode=\"enforce\",policy=\"dtest\"}"), 1);
  EXPECT_EQ(scrape("agentcage_fail_closed_total{reason=\"policy_invalid\",source=\"policy_file\"}"), 0);
  EXPECT_GT(scrape("process_resident_memory_bytes"), 1e6);
  EXPECT_GT(scrape("process_open_fds"), 3);
  EXPECT_NE(http_get(kMetricsPort, "/metrics")
                .find("agentcage_build_info{bpf_object=\"" + bpf::Enforcer::object_digest() + "\""),
            std::string::npos);
  // Bounded labels only.
  std::string text = http_get(kMetricsPort, "/metrics");
  EXPECT_EQ(text.find(result["run_id"].get<std::string>()), std::string::npos);
  EXPECT_EQ(text.find("/etc/passwd"), std::string::npos);
}

// A run on a transient slot of its own (--mode audit: not the named policy's
// rules) has its last decisions counted when it ends: the daemon reads the
// slot its run_end notice names before it answers the notice, so they are
// in the metrics when `agentcage run` exits (the daemon's own look at every
// slot comes once a second: a decision in the run's last moments, after
// two seconds, is rarely there by then without it).
TEST_F(Daemon, ARunsLastDecisionsOnItsTransientSlotAreCountedAtItsEnd) {
  start_daemon();
  const std::optional<uint32_t> named = named_slot(status(), "dtest");
  ASSERT_TRUE(named);
  const std::string audits =
      "agentcage_decisions_total{decision=\"audit\",hook=\"file_open\",policy=\"dtest\"}";
  const double before = std::max(0.0, scrape(audits));
  Proc run = start_run({"sh", "-c", "sleep 2; cat /etc/passwd"}, "audited", {"--mode", "audit"});
  ASSERT_EQ(wait_exit(run.pid), 0) << slurp(run.out);
  const double after = scrape(audits);
  const json result = json::parse(slurp(dir_ / "audited.json"), nullptr, false);
  ASSERT_TRUE(result.is_object()) << slurp(run.out);
  // The slot its decisions were taken on (its records say): its own.
  const json records = result["denials"].value("records", json::array());
  ASSERT_FALSE(records.empty()) << result.dump();
  EXPECT_NE(records[0]["policy_slot"].get<uint32_t>(), *named) << "not a transient slot";
  // Every one of them (cat's at the end included), no later than the run's end.
  const double audited = result["denials"]["audited_by_hook"].value("file_open", 0.0);
  EXPECT_GE(audited, 1) << result.dump();
  EXPECT_EQ(after - before, audited) << "before " << before << ", after " << after;
}

// A name the run's resolver refused reaches the daemon when the run ends: one
// audit line per name (with the run id and the count the result has) and
// agentcage_decisions_total{hook="dns",decision="deny"}.
TEST_F(Daemon, NamesARunsResolverRefusedAreAuditLinesAndDenialMetrics) {
  write_file(dir_ / "policies" / "dtest.yaml",
             "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: dtest}\nspec:\n"
             "  exec: {allow: [/usr/bin/getent]}\n"
             // No /etc/nsswitch.conf nor /etc/resolv.conf: glibc's defaults, DNS on 127.0.0.1.
             "  files: {read: [/usr/lib, /usr/lib64, /etc/ld.so.cache, \"${workspace}\"]}\n"
             "  network: {allow: [{domain: api.allowed.test, ports: [443], protocol: tcp}]}\n");
  // The resolver's upstream is never asked for a refused name; nothing listens there.
  std::ofstream(dir_ / "resolv.conf") << "nameserver 127.0.0.1\n";
  start_daemon();
  const std::string denied = "agentcage_decisions_total{decision=\"deny\",hook=\"dns\",policy=\"dtest\"}";
  EXPECT_EQ(http_get(kMetricsPort, "/metrics").find(denied), std::string::npos);

  std::vector<std::string> argv = {agentcage_bin(), "run", "--policy", "dtest", "--policy-dir",
                                   (dir_ / "policies").string(), "--result", (dir_ / "dns.json").string(),
                                   "--label", "case=dns", "--", "getent", "hosts", "exfil.secret.test"};
  Proc run = spawn(argv, dir_ / "dns.out", {"AGENTCAGE_RESOLV_CONF=" + (dir_ / "resolv.conf").string()});
  EXPECT_EQ(wait_exit(run.pid), 2) << slurp(run.out);  // getent: not found
  json result = json::parse(slurp(dir_ / "dns.json"), nullptr, false);
  ASSERT_TRUE(result.is_object()) << slurp(run.out);
  const json& by_name = result["denials"]["dns"]["by_name"];
  ASSERT_TRUE(by_name.contains("exfil.secret.test")) << result["denials"].dump() << slurp(run.out);
  const uint64_t total = result["denials"]["dns"]["total"].get<uint64_t>();

  json line = wait_for_audit_line(dir_ / "audit.jsonl", [](const json& ev) {
    return ev.value("hook", "") == "dns" && ev.value("target", "") == "exfil.secret.test";
  });
  ASSERT_TRUE(line.is_object()) << "no audit line for the refused name:\n"
                                << slurp(dir_ / "audit.jsonl") << log();
  EXPECT_EQ(line["run_id"], result["run_id"]);
  EXPECT_EQ(line["policy"], "dtest");
  EXPECT_EQ(line["decision"], "deny");
  EXPECT_EQ(line["reason"], "default_deny");
  EXPECT_EQ(line["target_kind"], "name");
  EXPECT_EQ(line["count"], by_name["exfil.secret.test"]);
  EXPECT_EQ(line["labels"], json({{"case", "dns"}}));
  EXPECT_EQ(line["time"].get<std::string>().size(), std::string("2025-01-02T03:04:05.123456789Z").size());
  // Every refusal is counted, listed or not; the name never becomes a label.
  EXPECT_GE(total, 1u);
  EXPECT_EQ(scrape(denied), static_cast<double>(total)) << http_get(kMetricsPort, "/metrics");
  EXPECT_EQ(http_get(kMetricsPort, "/metrics").find("exfil.secret.test"), std::string::npos);
}

// ---- hot reload ----------------------------------------------------------------

TEST_F(Daemon, HotReloadAppliesValidChangesRejectsInvalidOnesAndFailsClosedOnDelete) {
  start_daemon();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-reload-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg) << cg.error().message;
  auto att = control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}});
  ASSERT_TRUE(att && att->value("ok", false)) << (att ? att->dump() : att.error().message);
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  const uint32_t slot = *named_slot(status(), "dtest");
  double failures = scrape("agentcage_policy_reloads_total{result=\"failure\"}");

  // Invalid: rejected with FILE:LINE:COL, counted, the previous policy enforces.
  write_file(
      dir_ / "policies" / "dtest.yaml",
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: dtest}\nspec:\n  files:\n    raed: [/etc]\n");
  ASSERT_TRUE(wait_until(
      [&] { return scrape("agentcage_policy_reloads_total{result=\"failure\"}") > failures; }, 30s))
      << log();
  const std::string where = (dir_ / "policies" / "dtest.yaml").string() + ":6:5: unknown key 'raed'";
  EXPECT_NE(log().find(where), std::string::npos) << log();
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(named_slot(status(), "dtest"), slot);
  bool rejected = false;
  const json files = status()["policy_files"];
  for (const auto& f : files) rejected |= f["state"] == "rejected_previous_enforcing";
  EXPECT_TRUE(rejected);

  // A name that does not match the file: rejected too, located.
  write_file(dir_ / "policies" / "dtest.yaml",
             "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: other\nspec: {}\n");
  ASSERT_TRUE(wait_until(
      [&] { return log().find("dtest.yaml:4:9: metadata.name 'other'") != std::string::npos; }, 30s))
      << log();
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);

  // A file whose name is not a policy name (the one rule, policy/name.h): rejected
  // with how to rename it, never installed, and the other policies are untouched.
  write_file(dir_ / "policies" / "Bad_Name.yaml",
             "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: bad-name}\nspec: {}\n");
  const std::string bad_name = "Bad_Name.yaml: the file name 'Bad_Name.yaml' does not name a policy";
  ASSERT_TRUE(wait_until([&] { return log().find(bad_name) != std::string::npos; }, 30s)) << log();
  EXPECT_NE(log().find("(rename it to 'bad-name.yaml')"), std::string::npos) << log();
  EXPECT_FALSE(named_slot(status(), "Bad_Name").has_value());
  EXPECT_FALSE(named_slot(status(), "bad-name").has_value());
  EXPECT_EQ(named_slot(status(), "dtest"), slot);
  fs::remove(dir_ / "policies" / "Bad_Name.yaml");

  // Valid: swapped atomically into the same slot; the attached scope follows.
  write_file(dir_ / "policies" / "dtest.yaml", dtest_policy(true));
  ASSERT_TRUE(wait_until([&] { return open_in(*cg, "/etc/passwd") == 0; }, 30s)) << log();
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);
  EXPECT_EQ(named_slot(status(), "dtest"), slot);

  // Deleted: the policy is removed and its scope fails closed.
  fs::remove(dir_ / "policies" / "dtest.yaml");
  ASSERT_TRUE(wait_until([&] { return !named_slot(status(), "dtest").has_value(); }, 30s)) << log();
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), EACCES);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(scrape("agentcage_policies_loaded"), 0);

  auto det = control({{"op", "detach"}, {"cgroup", cg->path().string()}});
  EXPECT_TRUE(det && det->value("ok", false)) << (det ? det->dump() : det.error().message);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0);
  EXPECT_TRUE(cg->remove());
}

// The policy directory as a Kubernetes ConfigMap volume
// (deploy/kubernetes/daemonset.yaml): every file a link through ..data, an
// update the kubelet's ..data swap (tests/common/configmap_volume.h). The
// daemon loads the policies through their links and nothing of the ..
// entries; the swap changes one policy in its slot, adds one and removes
// one; an attached cgroup and a new run both follow the new content.
TEST_F(Daemon, AConfigMapVolumeSwapChangesAddsAndRemovesPolicies) {
  const fs::path dir = dir_ / "policies";
  fs::remove(dir / "dtest.yaml");
  auto policy = [](const std::string& name) {
    return "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: " + name +
           "}\nspec:\n  exec: {allow: [/usr/bin/true]}\n";
  };
  test_support::ConfigMapVolume volume(dir);
  volume.write({{"dtest.yaml", dtest_policy(false)}, {"dextra.yaml", policy("dextra")}});
  ASSERT_TRUE(fs::is_symlink(dir / "dtest.yaml") && fs::is_symlink(dir / "..data"));
  start_daemon();
  auto reload = [&](const std::string& tag) {
    Proc p = spawn({agentcage_bin(), "reload"}, dir_ / ("reload-" + tag + ".out"));
    EXPECT_EQ(wait_exit(p.pid), 0) << slurp(p.out);
    return slurp(p.out);
  };
  const std::string config = "configuration " + (dir_ / "daemon.yaml").string() + ": unchanged\n";
  // Exactly the two keys (in file-name order): no ..data, ..data_tmp or
  // ..TIMESTAMP entry.
  EXPECT_EQ(reload("before"), config + "dextra: loaded\ndtest: loaded\n") << log();
  const std::optional<uint32_t> slot = named_slot(status(), "dtest");
  ASSERT_TRUE(slot && named_slot(status(), "dextra"));

  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-configmap-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg) << cg.error().message;
  auto att = control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}});
  ASSERT_TRUE(att && att->value("ok", false)) << (att ? att->dump() : att.error().message);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  Proc denied = start_run({"cat", "/etc/passwd"}, "configmap-before");
  EXPECT_EQ(wait_exit(denied.pid), 1) << slurp(denied.out);  // cat: /etc/passwd: Permission denied

  // The update, as the kubelet makes it: dtest changed, dextra gone, dnew new.
  volume.write({{"dtest.yaml", dtest_policy(true)}, {"dnew.yaml", policy("dnew")}});
  ASSERT_TRUE(wait_until(
      [&] {
        const json st = status();
        return named_slot(st, "dnew") && !named_slot(st, "dextra") && open_in(*cg, "/etc/passwd") == 0;
      },
      30s))
      << log();
  EXPECT_EQ(named_slot(status(), "dtest"), slot);  // swapped in place
  EXPECT_EQ(reload("after"), config + "dnew: loaded\ndtest: loaded\n") << log();
  Proc allowed = start_run({"cat", "/etc/passwd"}, "configmap-after");
  EXPECT_EQ(wait_exit(allowed.pid), 0) << slurp(allowed.out);
  // No .. entry was ever taken for a policy file (it would have been
  // rejected by its name, and logged).
  EXPECT_EQ(log().find("'.."), std::string::npos) << log();

  auto det = control({{"op", "detach"}, {"cgroup", cg->path().string()}});
  EXPECT_TRUE(det && det->value("ok", false)) << (det ? det->dump() : det.error().message);
  EXPECT_TRUE(cg->remove());
}

// ---- control socket ------------------------------------------------------------

TEST_F(Daemon, AttachRefusesACgroupThatIsAlreadyConfined) {
  start_daemon();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-twice-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg) << cg.error().message;
  const json req = {
      {"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}};
  auto first = control(req);
  ASSERT_TRUE(first && first->value("ok", false)) << (first ? first->dump() : first.error().message);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);

  // Attached through the daemon already: refused, and said so precisely.
  auto second = control(req);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->value("ok", true)) << second->dump();
  const std::string error = second->value("error", "");
  EXPECT_NE(error.find(cg->path().string() + " is already confined by agentcage (policy dtest, slot "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("agentcage detach --cgroup " + cg->path().string()), std::string::npos) << error;
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES) << "still confined as before";
  auto det = control({{"op", "detach"}, {"cgroup", cg->path().string()}});
  ASSERT_TRUE(det && det->value("ok", false)) << (det ? det->dump() : det.error().message);

  // Confined by `agentcage attach` (a transient slot of its own): the same.
  fs::path file = dir_ / "passwd-ok.yaml";
  std::ofstream(file) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: passwd-ok}\n"
                         "spec:\n  files:\n    read: [/etc/passwd]\n";
  const int attached =
      wait_exit(spawn({agentcage_bin(), "attach", "--cgroup", cg->path().string(), "--policy", file.string()},
                      dir_ / "cli-attach.out")
                    .pid);
  ASSERT_EQ(attached, 0) << slurp(dir_ / "cli-attach.out");
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0);
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), EACCES);
  auto over = control(req);
  ASSERT_TRUE(over) << over.error().message;
  EXPECT_FALSE(over->value("ok", true)) << over->dump();
  EXPECT_NE(over->value("error", "").find("is already confined by agentcage (policy passwd-ok, slot "),
            std::string::npos)
      << over->dump();
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0) << "the attached policy still governs";
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), EACCES);

  det = control({{"op", "detach"}, {"cgroup", cg->path().string()}});
  EXPECT_TRUE(det && det->value("ok", false)) << (det ? det->dump() : det.error().message);
  EXPECT_TRUE(cg->remove());
}

// The slot that confines cgroup `id`, per the daemon's status.
std::optional<uint32_t> scope_slot(const json& st, uint64_t id) {
  for (const auto& s : st.value("scopes", json::array()))
    if (s.value("cgroup_id", uint64_t{0}) == id) return s.value("policy_slot", uint32_t{0});
  return std::nullopt;
}

TEST_F(Daemon, CliAttachGoesThroughTheDaemonSoReloadsAndRestartsApply) {
  start_daemon();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-cli-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg) << cg.error().message;
  const std::string policies = (dir_ / "policies").string();
  auto cli = [&](const std::vector<std::string>& args, const std::string& tag) {
    std::vector<std::string> argv = {agentcage_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    return wait_exit(spawn(argv, dir_ / (tag + ".out")).pid);
  };

  // A NAME of the daemon's directory: the daemon's named slot.
  ASSERT_EQ(cli({"attach", "--cgroup", cg->path().string(), "--policy", "dtest", "--policy-dir", policies,
                 "--workspace", "/tmp"},
                "attach"),
            0)
      << slurp(dir_ / "attach.out");
  const std::string out = slurp(dir_ / "attach.out");
  EXPECT_NE(out.find("confined by policy dtest (enforce, from " + policies + "/dtest.yaml)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("the daemon's named policy: its reloads apply"), std::string::npos) << out;
  const uint32_t slot = *named_slot(status(), "dtest");
  EXPECT_EQ(scope_slot(status(), cg->id()), slot);
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);

  // A reload of the file reaches the attached cgroup.
  write_file(dir_ / "policies" / "dtest.yaml", dtest_policy(true));
  ASSERT_TRUE(wait_until([&] { return open_in(*cg, "/etc/passwd") == 0; }, 30s)) << log();

  // The daemon stops: the cgroup stays confined (the maps are pinned) ...
  stop_daemon(SIGTERM);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0);
  EXPECT_EQ(open_in(*cg, "/etc/group"), EACCES);
  // ... and after a restart the daemon's reloads still reach it.
  start_daemon();
  EXPECT_EQ(named_slot(status(), "dtest"), slot);
  write_file(dir_ / "policies" / "dtest.yaml", dtest_policy(false));
  ASSERT_TRUE(wait_until([&] { return open_in(*cg, "/etc/passwd") == EACCES; }, 30s)) << log();
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);

  // `agentcage detach` through the daemon: what was decided while attached.
  ASSERT_EQ(cli({"detach", "--cgroup", cg->path().string()}, "detach"), 0) << slurp(dir_ / "detach.out");
  const std::string det = slurp(dir_ / "detach.out");
  // At least the three denials above (the waits for a reload may add some).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      det, m, std::regex(R"(is no longer confined \(was policy dtest\); while attached: (\d+) denied, 0 audited \(file_open (\d+)\))")))
      << det;
  EXPECT_GE(std::stoi(m[1]), 3) << det;
  EXPECT_EQ(m[1], m[2]) << det;
  EXPECT_FALSE(scope_slot(status(), cg->id()).has_value());
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0);

  // A file the daemon rejected: refused with the daemon's reason; nothing is
  // attached (no quiet fallback to the file as it is on disk).
  write_file(dir_ / "policies" / "broken.yaml",
             "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: broken}\nspec:\n  files:\n    raed: [/]\n");
  ASSERT_TRUE(wait_until([&] { return log().find("broken.yaml:6:5: unknown key 'raed'") != std::string::npos; }, 30s))
      << log();
  EXPECT_EQ(cli({"attach", "--cgroup", cg->path().string(), "--policy", "broken", "--policy-dir", policies},
                "broken"),
            1);
  EXPECT_NE(slurp(dir_ / "broken.out").find("the daemon refused: no policy named 'broken' is loaded"),
            std::string::npos)
      << slurp(dir_ / "broken.out");
  EXPECT_FALSE(scope_slot(status(), cg->id()).has_value());
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0);

  // What only a direct attachment does (--mode, --direct): a slot of its
  // own, said so; detach works through the daemon for it too.
  ASSERT_EQ(cli({"attach", "--cgroup", cg->path().string(), "--policy", "dtest", "--policy-dir", policies,
                 "--workspace", "/tmp", "--mode", "audit"},
                "audit"),
            0)
      << slurp(dir_ / "audit.out");
  const std::string audit = slurp(dir_ / "audit.out");
  EXPECT_NE(audit.find("note: attaching directly, not through the daemon: --mode"), std::string::npos) << audit;
  EXPECT_NE(audit.find("a policy slot of its own: the daemon's reloads do not apply"), std::string::npos) << audit;
  const auto audit_slot = scope_slot(status(), cg->id());
  ASSERT_TRUE(audit_slot.has_value());
  EXPECT_NE(*audit_slot, slot);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), 0) << "audit mode denies nothing";
  ASSERT_EQ(cli({"detach", "--cgroup", cg->path().string()}, "detach2"), 0) << slurp(dir_ / "detach2.out");
  EXPECT_TRUE(std::regex_search(slurp(dir_ / "detach2.out"),
                                std::regex(R"(while attached: 0 denied, [1-9]\d* audited \(file_open [1-9]\d*\))")))
      << slurp(dir_ / "detach2.out");

  ASSERT_EQ(cli({"attach", "--direct", "--cgroup", cg->path().string(), "--policy", "dtest", "--policy-dir",
                 policies, "--workspace", "/tmp"},
                "direct"),
            0)
      << slurp(dir_ / "direct.out");
  EXPECT_NE(scope_slot(status(), cg->id()), std::optional<uint32_t>(slot));
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  ASSERT_EQ(cli({"detach", "--direct", "--cgroup", cg->path().string()}, "detach3"), 0) << slurp(dir_ / "detach3.out");
  EXPECT_FALSE(scope_slot(status(), cg->id()).has_value());
  EXPECT_TRUE(cg->remove());
}

TEST_F(Daemon, DetachReportsThePolicyAndWhatWasDecidedPerHook) {
  write_file(dir_ / "policies" / "daudit.yaml",
             "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: daudit}\n"
             "spec:\n  mode: audit\n  files:\n    read: [/etc/hostname]\n");
  start_daemon();
  ASSERT_TRUE(wait_until([&] { return named_slot(status(), "daudit").has_value(); }, 30s)) << log();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-report-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg) << cg.error().message;
  const json detach = {{"op", "detach"}, {"cgroup", cg->path().string()}};

  // Enforcing: two denials of file_open.
  auto att = control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}});
  ASSERT_TRUE(att && att->value("ok", false)) << (att ? att->dump() : att.error().message);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);
  auto det = control(detach);
  ASSERT_TRUE(det && det->value("ok", false)) << (det ? det->dump() : det.error().message);
  EXPECT_EQ((*det)["cgroup"], cg->path().string());
  EXPECT_EQ((*det)["policy"], "dtest") << det->dump();
  EXPECT_EQ((*det)["reported"], true) << det->dump();
  EXPECT_EQ((*det)["denied"], 2) << det->dump();
  EXPECT_EQ((*det)["audited"], 0) << det->dump();
  EXPECT_EQ((*det)["denied_by_hook"], json({{"file_open", 2}})) << det->dump();
  EXPECT_EQ((*det)["audited_by_hook"], json::object()) << det->dump();

  // Auditing: allowed, and counted as audited. The file is on /run (tmpfs):
  // an open through overlayfs (the test VM's root) is decided twice, once
  // for the overlay file and once for the real file it opens underneath.
  const std::string audited_file = "/run/ac-daemon-audit-" + std::to_string(::getpid());
  std::ofstream(audited_file) << "audited\n";
  att = control({{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "daudit"}});
  ASSERT_TRUE(att && att->value("ok", false)) << (att ? att->dump() : att.error().message);
  EXPECT_EQ(open_in(*cg, audited_file), 0);
  fs::remove(audited_file);
  det = control(detach);
  ASSERT_TRUE(det && det->value("ok", false)) << (det ? det->dump() : det.error().message);
  EXPECT_EQ((*det)["policy"], "daudit") << det->dump();
  EXPECT_EQ((*det)["denied"], 0) << det->dump();
  EXPECT_EQ((*det)["audited"], 1) << det->dump();
  EXPECT_EQ((*det)["denied_by_hook"], json::object()) << det->dump();
  EXPECT_EQ((*det)["audited_by_hook"], json({{"file_open", 1}})) << det->dump();
  EXPECT_TRUE(cg->remove());
}

TEST_F(Daemon, MalformedControlRequestsAreRejectedAndChangeNothing) {
  start_daemon();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-malformed-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg);
  auto att = control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}});
  ASSERT_TRUE(att && att->value("ok", false));
  json before = status();
  // The run metrics a run_end feeds, as /metrics text: must not move.
  auto run_metrics = [] {
    std::istringstream in(http_get(kMetricsPort, "/metrics"));
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("agentcage_runs_total{", 0) == 0 ||
          line.rfind("agentcage_run_duration_seconds_count", 0) == 0 ||
          line.find("hook=\"syscall\"") != std::string::npos || line.find("hook=\"dns\"") != std::string::npos)
        out += line + "\n";
    return out;
  };
  ASSERT_NE(http_get(kMetricsPort, "/metrics").find("agentcage_build_info"), std::string::npos);
  const std::string metrics_before = run_metrics();

  auto raw = [&](const std::string& line) -> json {
    auto fd = control::connect_control(kSocket, 10000);
    if (!fd) return json{{"connect", fd.error().message}};
    (void)control::write_all(fd->get(), line, 10000);
    std::string buf;
    auto l = control::read_line(fd->get(), buf, 10000);
    return l ? json::parse(*l, nullptr, false) : json{{"read", l.error().message}};
  };
  std::vector<std::pair<std::string, std::string>> cases = {
      {"not json\n", "not valid JSON"},
      {"[1,2]\n", "expected a JSON object"},
      {"{}\n", "missing \"op\""},
      {"{\"op\":\"format-disk\"}\n", "unknown op"},
      {"{\"op\":\"status\",\"extra\":1}\n", "unknown field \"extra\""},
      {"{\"op\":\"events\",\"follow\":\"yes\"}\n", "\"follow\" must be true or false"},
      {"{\"op\":\"detach\",\"cgroup\":5}\n", "\"cgroup\" must be a string"},
      {"{\"op\":\"detach\"}\n", "missing \"cgroup\""},
      {"{\"op\":\"attach\",\"cgroup\":\"/sys/fs/cgroup\",\"policy\":\"../etc\"}\n",
       "\"policy\" must be a policy name"},
      {"{\"op\":\"attach\",\"cgroup\":\"/\",\"policy\":\"dtest\"}\n", "not inside the cgroup v2 hierarchy"},
      {"{\"op\":\"attach\",\"cgroup\":\"" + cg->path().string() + "\",\"policy\":\"nope\"}\n",
       "no policy named 'nope'"},
      {"{\"op\":\"detach\",\"cgroup\":\"/sys/fs/cgroup\"}\n", "refusing to confine the root cgroup"},
      {"{\"op\":\"run_end\",\"run_id\":\"0123456789abcdef\",\"policy\":\"dtest\",\"outcome\":\"great\","
       "\"exit_code\":0,"
       "\"duration_seconds\":1}\n",
       "\"outcome\" must be one of"},
      {"{\"op\":\"run_end\",\"run_id\":\"xyz\",\"policy\":\"dtest\",\"outcome\":\"ok\",\"exit_code\":0,"
       "\"duration_seconds\":1}\n",
       "\"run_id\" must be 16 lowercase hex digits"},
      {"{\"op\":\"run_start\",\"run_id\":\"0123456789abcdef\",\"policy\":\"dtest\",\"scope_id\":-1}\n",
       "\"scope_id\" must be a non-negative integer"},
      {std::string(control::kMaxRequestBytes + 10, 'x'), "longer than"},
  };
  // run_end's optional count of denied system calls, from any client: only
  // an integer 0..2^53 passes; everything else is refused whole (no run
  // counted, no duration observed, no syscall denials added).
  const std::string end_prefix =
      "{\"op\":\"run_end\",\"run_id\":\"0123456789abcdef\",\"policy\":\"dtest\",\"outcome\":\"ok\","
      "\"exit_code\":0,\"duration_seconds\":1,\"syscalls_denied\":";
  for (const char* bad : {"-1", "18446744073709551616", "18446744073709551615", "9007199254740993", "2.5",
                          "\"7\"", "true", "null", "{}"})
    cases.emplace_back(end_prefix + bad + "}\n",
                       "\"syscalls_denied\" must be an integer 0..9007199254740992");
  // run_end's refused names: a bounded object of printable names and counts.
  const std::string dns_prefix =
      "{\"op\":\"run_end\",\"run_id\":\"0123456789abcdef\",\"policy\":\"dtest\",\"outcome\":\"ok\","
      "\"exit_code\":0,\"duration_seconds\":1,\"dns_refused\":";
  std::string many = "{\"total\":100,\"by_name\":{";
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + std::string("\"n") + std::to_string(i) + ".test\":1";
  for (const auto& [bad, expect] : std::vector<std::pair<std::string, std::string>>{
           {"7", "\"dns_refused\" must be an object"},
           {"{\"total\":-1}", "\"dns_refused.total\" must be an integer"},
           {"{\"total\":1,\"names\":{}}", "unknown field \"names\" in \"dns_refused\""},
           {"{\"total\":1,\"by_name\":{\"a\\nb\":1}}", "1..253 bytes of printable ASCII"},
           {"{\"total\":1,\"by_name\":{\"a.test\":0}}", "the count of a refused name must be"},
           {"{\"total\":1,\"by_name\":{\"a.test\":2}}", "counts more refusals than \"total\""},
           {many + "}}", "at most 64 names"}})
    cases.emplace_back(dns_prefix + bad + "}\n", expect);
  for (const auto& [line, expect] : cases) {
    json r = raw(line);
    EXPECT_EQ(r.value("ok", true), false) << line.substr(0, 200) << " -> " << r.dump();
    EXPECT_NE(r.value("error", std::string()).find(expect), std::string::npos)
        << line.substr(0, 200) << " -> " << r.dump();
  }
  // Nothing changed: same policies, same scopes, the policy still enforces.
  json after = status();
  EXPECT_EQ(after["policies"], before["policies"]);
  EXPECT_EQ(after["scopes"].size(), before["scopes"].size());
  EXPECT_EQ(run_metrics(), metrics_before);
  EXPECT_EQ(metrics_before.find("hook=\"syscall\""), std::string::npos) << metrics_before;
  EXPECT_EQ(metrics_before.find("hook=\"dns\""), std::string::npos) << metrics_before;
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), 0);
  EXPECT_TRUE(control({{"op", "detach"}, {"cgroup", cg->path().string()}}));
  EXPECT_TRUE(cg->remove());

  // Not root, not in the group: the socket file's mode refuses the connect.
  struct stat st {};
  ASSERT_EQ(::stat(kSocket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // no control_group configured
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    auto fd = control::connect_control(kSocket, 5000);
    ::_exit(!fd && fd.error().code == EACCES ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
}

TEST_F(Daemon, ControlGroupMembersMayReadButNotChangeEnforcement) {
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "control_group: \"4242\"\n";
  start_daemon();
  struct stat st {};
  ASSERT_EQ(::stat(kSocket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 4242u);
  pid_t child = ::fork();
  if (child == 0) {
    gid_t groups[] = {4242};
    if (::setgroups(1, groups) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    auto s = control({{"op", "status"}});
    if (!s || !s->value("ok", false)) ::_exit(3);
    auto d = control({{"op", "detach"}, {"cgroup", "/sys/fs/cgroup/x"}});
    if (!d || d->value("ok", true) ||
        d->value("error", std::string()).find("needs root") == std::string::npos)
      ::_exit(4);
    ::_exit(0);
  }
  EXPECT_EQ(wait_exit(child), 0);
}

TEST_F(Daemon, SandboxedProcessCannotReachTheControlSocket) {
  start_daemon();
  // As uid 0 inside the sandbox (no capabilities): the socket file's mode
  // would let the owner connect, so only the policy stops it.
  const std::string policy = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/python-sandbox.yaml";
  Proc p = spawn({agentcage_bin(), "run", "--policy", policy, "--user", "0:0", "--result",
                  (dir_ / "sock.json").string(), "--", "python3", "-c",
                  "import socket\n"
                  "s = socket.socket(socket.AF_UNIX)\n"
                  "try:\n"
                  "    s.connect('" +
                      kSocket +
                      "')\n"
                      "    print('CONNECTED')\n"
                      "except OSError as e:\n"
                      "    print('refused', e.errno)\n"},
                 dir_ / "sock.out");
  EXPECT_EQ(wait_exit(p.pid), 0) << slurp(p.out);
  EXPECT_NE(slurp(p.out).find("refused 13"), std::string::npos) << slurp(p.out);
  EXPECT_EQ(slurp(p.out).find("CONNECTED"), std::string::npos);
  json r = json::parse(slurp(dir_ / "sock.json"), nullptr, false);
  ASSERT_TRUE(r.is_object());
  EXPECT_GE(r["denials"]["by_hook"].value("unix_connect", 0), 1) << r.dump(2);
}

// ---- the CLI: status and events ------------------------------------------------

// Under systemd: READY=1 only once the daemon enforces with its policy
// directory loaded, STATUS= lines, watchdog keep-alives, RELOADING=1 then
// READY=1 around SIGHUP's rescan, STOPPING=1; SIGUSR1 reopens the audit log
// without a rescan; with stderr a journal stream, every line has its priority.
TEST_F(Daemon, TellsItsServiceManagerAndTheJournal) {
  const std::string notify = (dir_ / "notify").string();
  UniqueFd sm(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  notify.copy(a.sun_path, sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(sm.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{1, 0};
  ::setsockopt(sm.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // Messages until one contains `what` (or `limit` passes): all of them.
  std::vector<std::string> seen;
  auto until = [&](const std::string& what, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      char buf[4096];
      ssize_t n = ::recv(sm.get(), buf, sizeof buf, 0);
      if (n <= 0) continue;
      seen.emplace_back(buf, static_cast<size_t>(n));
      if (seen.back().find(what) != std::string::npos) return true;
    }
    return false;
  };
  auto all = [&] {
    std::string out;
    for (const auto& m : seen) out += "[" + m + "]\n";
    return out;
  };
  { std::ofstream(dir_ / "daemon.log"); }
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "daemon.log").c_str(), &st), 0);
  daemon_ = spawn({agentcage_bin(), "daemon", "--config", (dir_ / "daemon.yaml").string()}, dir_ / "daemon.log",
                  {"NOTIFY_SOCKET=" + notify, "WATCHDOG_USEC=2000000",
                   "JOURNAL_STREAM=" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)});
  ASSERT_TRUE(until("READY=1", 120s)) << all() << log();
  // Ready means enforcing with the directory loaded: no waiting for it here.
  EXPECT_TRUE(named_slot(status(), "dtest").has_value()) << status().dump(2);
  EXPECT_NE(seen.back().find("STATUS=enforcing; 1 policies loaded from " + (dir_ / "policies").string()),
            std::string::npos)
      << all();
  EXPECT_TRUE(until("WATCHDOG=1", 10s)) << all();
  // Every line of its log carries a journald priority.
  std::istringstream lines(log());
  size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n)
    EXPECT_TRUE(line.rfind("<6>agentcage: info: ", 0) == 0 || line.rfind("<4>agentcage: warning: ", 0) == 0 ||
                line.rfind("<3>agentcage: error: ", 0) == 0)
        << line;
  EXPECT_GT(n, 0u);

  // SIGUSR1: the audit log is reopened, the policy directory is not rescanned.
  fs::rename(dir_ / "audit.jsonl", dir_ / "audit.jsonl.1");
  ::kill(daemon_.pid, SIGUSR1);
  EXPECT_TRUE(wait_until([&] { return fs::exists(dir_ / "audit.jsonl"); }, 30s)) << log();
  EXPECT_NE(log().find("SIGUSR1: reopening the audit log"), std::string::npos) << log();
  EXPECT_EQ(log().find("SIGHUP"), std::string::npos) << log();
  Proc run = start_run({"cat", "/etc/passwd"}, "after-usr1");
  EXPECT_EQ(wait_exit(run.pid), 1) << slurp(run.out);
  EXPECT_TRUE(wait_until([&] { return slurp(dir_ / "audit.jsonl").find("/etc/passwd") != std::string::npos; }, 30s))
      << "no denial in the reopened audit log\n"
      << log();

  // SIGHUP: RELOADING=1, then READY=1 again.
  seen.clear();
  ::kill(daemon_.pid, SIGHUP);
  ASSERT_TRUE(until("RELOADING=1", 30s)) << all();
  EXPECT_NE(seen.back().find("MONOTONIC_USEC="), std::string::npos) << all();
  EXPECT_TRUE(until("READY=1", 30s)) << all();
  // SIGTERM: STOPPING=1.
  ::kill(daemon_.pid, SIGTERM);
  EXPECT_TRUE(until("STOPPING=1", 30s)) << all();
  EXPECT_EQ(wait_exit(daemon_.pid), 0) << log();
  daemon_.pid = -1;
}

// Under journald, a message that carries fields is one structured entry:
// MESSAGE, PRIORITY, SYSLOG_IDENTIFIER and AGENTCAGE_* (what `journalctl
// AGENTCAGE_POLICY=NAME` finds). journald is stood in for by a datagram socket
// at its native path (the VM has no systemd); without it the message goes to
// stderr with its priority, as every other line.
TEST_F(Daemon, ErrorsReachTheJournalWithFieldsThatNameThem) {
  const fs::path journal = "/run/systemd/journal/socket";
  ASSERT_FALSE(fs::exists(journal)) << "a journald runs here: this test stands in for it only where none does";
  fs::create_directories(journal.parent_path());
  UniqueFd jd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  journal.string().copy(a.sun_path, sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(jd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{1, 0};
  ::setsockopt(jd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  { std::ofstream(dir_ / "daemon.log"); }
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "daemon.log").c_str(), &st), 0);
  daemon_ = spawn({agentcage_bin(), "daemon", "--config", (dir_ / "daemon.yaml").string()}, dir_ / "daemon.log",
                  {"JOURNAL_STREAM=" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)});
  ASSERT_TRUE(wait_until([&] { return named_slot(status(), "dtest").has_value(); }, 120s)) << log();

  const std::string file = (dir_ / "policies" / "broken.yaml").string();
  write_file(file, "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: broken}\nspec:\n  files:\n    raed: [/]\n");
  std::string entry;
  const auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline && entry.find("raed") == std::string::npos) {
    char buf[65536];
    ssize_t n = ::recv(jd.get(), buf, sizeof buf, 0);
    if (n > 0) entry.assign(buf, static_cast<size_t>(n));
  }
  // One entry, in journald's native form (KEY=VALUE lines).
  EXPECT_NE(entry.find("MESSAGE=agentcage: error: " + file + ":6:5: unknown key 'raed'"), std::string::npos) << entry;
  EXPECT_NE(entry.find("\nPRIORITY=3\n"), std::string::npos) << entry;
  EXPECT_NE(entry.find("\nSYSLOG_IDENTIFIER=agentcage\n"), std::string::npos) << entry;
  EXPECT_NE(entry.find("\nAGENTCAGE_POLICY=broken\n"), std::string::npos) << entry;
  EXPECT_NE(entry.find("\nAGENTCAGE_POLICY_FILE=" + file), std::string::npos) << entry;
  EXPECT_EQ(log().find("unknown key 'raed'"), std::string::npos) << "sent twice:\n" << log();

  // No journal to take it: the same message on stderr, with its priority.
  jd.reset();
  fs::remove(journal);
  write_file(file, "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: broken}\nspec:\n  files:\n    riad: [/]\n");
  EXPECT_TRUE(wait_until(
      [&] { return log().find("<3>agentcage: error: " + file + ":6:5: unknown key 'riad'") != std::string::npos; },
      30s))
      << log();
}

// `agentcage reload`: the daemon reads the directory again and says each
// file's state; a rejected file makes it exit 1 with the located error.
TEST_F(Daemon, ReloadCommandSaysEachPolicysState) {
  start_daemon();
  Proc ok = spawn({agentcage_bin(), "reload"}, dir_ / "reload-ok.out");
  EXPECT_EQ(wait_exit(ok.pid), 0) << slurp(ok.out);
  EXPECT_EQ(slurp(ok.out), "configuration " + (dir_ / "daemon.yaml").string() + ": unchanged\ndtest: loaded\n");
  write_file(dir_ / "policies" / "dtest.yaml", dtest_policy(false) + "  bogus: 1\n");
  Proc bad = spawn({agentcage_bin(), "reload", "--json"}, dir_ / "reload-bad.out");
  EXPECT_EQ(wait_exit(bad.pid), 1) << slurp(bad.out);
  json answer = json::parse(slurp(bad.out), nullptr, false);
  ASSERT_TRUE(answer.is_object()) << slurp(bad.out);
  EXPECT_TRUE(answer["config"]["errors"].empty()) << answer.dump(2);
  const json files = answer["policies"];
  ASSERT_TRUE(files.is_array() && files.size() == 1) << slurp(bad.out);
  EXPECT_EQ(files[0]["policy"], "dtest");
  EXPECT_EQ(files[0]["state"], "rejected_previous_enforcing");
  EXPECT_NE(files[0].value("error", std::string()).find("dtest.yaml:"), std::string::npos) << files.dump(2);
  // The previous version still enforces, and the gauge says the file is not valid.
  EXPECT_TRUE(named_slot(status(), "dtest").has_value());
  EXPECT_TRUE(wait_until([] { return scrape("agentcage_policy_valid{policy=\"dtest\"}") == 0; }, 10s))
      << http_get(kMetricsPort, "/metrics");
}

// The configuration read again (`agentcage reload`, SIGHUP): what can change
// while running applies at once (a new audit log, a new control group whose
// old members lose their connections), what cannot waits for a restart and
// is named, and an invalid file changes nothing.
TEST_F(Daemon, ReloadAppliesTheConfigurationItCanAndNamesWhatWaits) {
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "control_group: \"4242\"\n";
  start_daemon();
  const std::string base = "policy_dir: " + (dir_ / "policies").string() + "\nmetrics_address: 127.0.0.1:" +
                           std::to_string(kMetricsPort) + "\n";

  // A member of group 4242 follows the event stream; it is told nothing
  // more once the group is no longer the control group: its connection ends.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t member = ::fork();
  if (member == 0) {
    gid_t groups[] = {4242};
    if (::setgroups(1, groups) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    auto stream = control::open_stream(kSocket, {{"op", "events"}, {"follow", true}}, 10000);
    if (!stream) ::_exit(3);
    (void)!::write(ready[1], "x", 1);
    for (;;) {
      auto line = control::read_line(stream->fd.get(), stream->buffer, 60000);
      if (!line) ::_exit(4);               // timed out: still connected
      if (line->empty()) ::_exit(0);       // EOF: the daemon closed it
    }
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the group member could not follow events";
  ::close(ready[0]);

  // A new audit log and no control group apply now; a new state_dir waits.
  std::ofstream(dir_ / "daemon.yaml", std::ios::trunc)
      << base << "audit_log: " << (dir_ / "audit2.jsonl").string() << "\nstate_dir: /run/agentcage-elsewhere\n";
  Proc ok = spawn({agentcage_bin(), "reload"}, dir_ / "reload.out");
  EXPECT_EQ(wait_exit(ok.pid), 0) << slurp(ok.out);
  EXPECT_EQ(slurp(ok.out), "configuration " + (dir_ / "daemon.yaml").string() +
                               ": applied audit_log, control_group; changed, applied when the daemon "
                               "restarts: state_dir\ndtest: loaded\n");
  EXPECT_EQ(wait_exit(member), 0) << "the former member's stream was not closed";
  struct stat st {};
  ASSERT_EQ(::stat(kSocket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_NE(log().find("state_dir changed: takes effect when the daemon restarts"), std::string::npos) << log();
  EXPECT_EQ(status()["daemon"].value("audit_log", std::string()), (dir_ / "audit2.jsonl").string());
  EXPECT_EQ(scrape("agentcage_config_reloads_total{result=\"success\"}"), 1);

  // Decisions now go to the new audit log.
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-config-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg) << cg.error().message;
  auto att = control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}});
  ASSERT_TRUE(att && att->value("ok", false)) << (att ? att->dump() : att.error().message);
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  EXPECT_TRUE(wait_until(
      [&] { return slurp(dir_ / "audit2.jsonl").find("\"/etc/passwd\"") != std::string::npos; }, 30s))
      << slurp(dir_ / "audit2.jsonl");
  auto det = control({{"op", "detach"}, {"cgroup", cg->path().string()}});
  EXPECT_TRUE(det && det->value("ok", false));
  EXPECT_TRUE(cg->remove());

  // An invalid file (SIGHUP, as systemctl reload sends): located errors,
  // nothing applied, the gauge says so; the audit log stays the new one.
  std::ofstream(dir_ / "daemon.yaml", std::ios::trunc)
      << base << "audit_log: " << (dir_ / "audit3.jsonl").string() << "\nmax_runs: lots\n";
  ::kill(daemon_.pid, SIGHUP);
  const std::string where = (dir_ / "daemon.yaml").string() + ":4:11: max_runs: expected a whole number";
  ASSERT_TRUE(wait_until([&] { return log().find(where) != std::string::npos; }, 30s)) << log();
  EXPECT_NE(log().find("is not valid: not applied"), std::string::npos) << log();
  EXPECT_TRUE(wait_until([] { return scrape("agentcage_config_last_reload_successful") == 0; }, 10s));
  EXPECT_EQ(status()["daemon"].value("audit_log", std::string()), (dir_ / "audit2.jsonl").string());
  Proc bad = spawn({agentcage_bin(), "reload", "--json"}, dir_ / "reload-bad.out");
  EXPECT_EQ(wait_exit(bad.pid), 1) << slurp(bad.out);
  json answer = json::parse(slurp(bad.out), nullptr, false);
  ASSERT_TRUE(answer.is_object()) << slurp(bad.out);
  ASSERT_EQ(answer["config"]["errors"].size(), 1u) << answer.dump(2);
  EXPECT_NE(answer["config"]["errors"][0].get<std::string>().find(where), std::string::npos) << answer.dump(2);
  EXPECT_TRUE(answer["config"]["applied"].empty());
}

// ring_buffer_size: a set already pinned keeps its size and the daemon says
// the setting waits for the next load; a load takes the size.
TEST_F(Daemon, RingBufferSizeWaitsForTheNextLoadAndALoadTakesIt) {
  auto pinned = bpf::Enforcer::open_shared();  // the host's set, pinned by now
  ASSERT_TRUE(pinned) << pinned.error().message;
  const uint32_t ring = (*pinned)->ring_buffer_bytes();
  ASSERT_EQ(ring, 1u << 20) << "the pinned set has another size than the default";
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "ring_buffer_size: 2Mi\n";
  start_daemon();
  EXPECT_NE(log().find("has a ring buffer of 1048576 bytes, not ring_buffer_size's 2097152"), std::string::npos)
      << log();
  EXPECT_EQ((*pinned)->ring_buffer_bytes(), 1u << 20);  // unchanged
  // What the daemon asks of a load (LoadOptions::ringbuf_bytes) is what a load gets.
  bpf::LoadOptions opts;
  opts.ringbuf_bytes = 2u << 20;
  auto loaded = bpf::Enforcer::load(opts);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ((*loaded)->ring_buffer_bytes(), 2u << 20);
}

TEST_F(Daemon, StatusAndEventsCommands) {
  start_daemon();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-cli-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg);
  ASSERT_TRUE(control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}}));
  Proc follow = spawn({agentcage_bin(), "events", "--follow"}, dir_ / "follow.out");
  ASSERT_TRUE(
      wait_until([&] { return status().value("daemon", json::object()).value("clients", 0) >= 1; }, 30s));
  EXPECT_EQ(open_in(*cg, "/etc/shadow"), EACCES);
  EXPECT_TRUE(wait_until(
      [&] { return slurp(follow.out).find("\"target\":\"/etc/shadow\"") != std::string::npos; }, 30s))
      << slurp(follow.out);
  ::kill(follow.pid, SIGTERM);
  wait_exit(follow.pid);

  Proc recent = spawn({agentcage_bin(), "events"}, dir_ / "recent.out");
  EXPECT_EQ(wait_exit(recent.pid), 0);
  json last;
  std::istringstream lines(slurp(recent.out));
  for (std::string l; std::getline(lines, l);) last = json::parse(l, nullptr, false);
  EXPECT_EQ(last.value("target", ""), "/etc/shadow") << slurp(recent.out);
  EXPECT_EQ(last.value("policy", ""), "dtest");

  Proc st = spawn({agentcage_bin(), "status", "--json"}, dir_ / "status.out");
  EXPECT_EQ(wait_exit(st.pid), 0) << slurp(st.out);
  json s = json::parse(slurp(st.out), nullptr, false);
  ASSERT_TRUE(s.is_object()) << slurp(st.out);
  EXPECT_TRUE(s["daemon"]["running"].get<bool>());
  EXPECT_TRUE(s["enforcement"]["ready"].get<bool>());
  EXPECT_TRUE(named_slot(s, "dtest").has_value());
  EXPECT_TRUE(control({{"op", "detach"}, {"cgroup", cg->path().string()}}));
  EXPECT_TRUE(cg->remove());

  // Without the daemon: status reads the pinned maps; events says why not.
  stop_daemon(SIGTERM);
  Proc st2 = spawn({agentcage_bin(), "status"}, dir_ / "status2.out");
  EXPECT_EQ(wait_exit(st2.pid), 0) << slurp(st2.out);
  EXPECT_NE(slurp(st2.out).find("daemon:      not running"), std::string::npos) << slurp(st2.out);
  EXPECT_NE(slurp(st2.out).find("enforcement: ready"), std::string::npos) << slurp(st2.out);
  Proc ev2 = spawn({agentcage_bin(), "events"}, dir_ / "events2.out");
  EXPECT_EQ(wait_exit(ev2.pid), 1);
  EXPECT_NE(slurp(ev2.out).find("the daemon is not reachable"), std::string::npos) << slurp(ev2.out);
}

// Recent events over a client's buffer: the newest that fit are sent and
// the older ones counted, not the whole answer dropped.
TEST_F(Daemon, RecentEventsOverTheClientsBufferAreTheNewestThatFit) {
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "client_buffer_bytes: 4096\nrecent_events: 100\n";
  start_daemon();
  auto cg = cgroup::Cgroup::create(root_, root_, "ac-daemon-recent-" + std::to_string(::getpid()));
  ASSERT_TRUE(cg);
  ASSERT_TRUE(control(
      {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}}));
  constexpr int kDenials = 40;  // some 300 bytes each: three times the buffer
  for (int i = 0; i < kDenials; ++i) EXPECT_EQ(open_in(*cg, "/etc/shadow"), EACCES);
  EXPECT_TRUE(control({{"op", "detach"}, {"cgroup", cg->path().string()}}));
  EXPECT_TRUE(cg->remove());
  ASSERT_TRUE(wait_until([&] { return status()["daemon"].value("events_delivered", 0) >= kDenials; }, 30s))
      << status().dump(2);
  Proc recent = spawn({agentcage_bin(), "events"}, dir_ / "recent.out");
  EXPECT_EQ(wait_exit(recent.pid), 0);
  const std::string out = slurp(recent.out);
  int shown = 0;
  size_t bytes = 0;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) {
    json e = json::parse(l, nullptr, false);
    if (!e.is_object()) continue;
    EXPECT_EQ(e.value("target", ""), "/etc/shadow") << l;
    ++shown;
    bytes += l.size() + 1;
  }
  EXPECT_GT(shown, 3) << out;
  EXPECT_LT(shown, kDenials) << out;
  EXPECT_LE(bytes, 4096u);
  EXPECT_NE(out.find("oldest recent events did not fit the daemon's client_buffer_bytes; shown: the newest " +
                     std::to_string(shown)),
            std::string::npos)
      << out;
  // What the connection has queued already counts: hellos and events in
  // one write get all their answers, the events fewer.
  auto fd = control::connect_control(kSocket, 5000);
  ASSERT_TRUE(fd);
  std::string both;
  for (int i = 0; i < 4; ++i) both += "{\"op\":\"hello\",\"protocol\":1}\n";
  both += "{\"op\":\"events\"}\n";
  ASSERT_TRUE(control::write_all(fd->get(), both, 5000));
  std::string buf, got;
  for (;;) {
    auto l = control::read_line(fd->get(), buf, 10000);
    if (!l || l->empty()) break;
    got += *l + "\n";
  }
  EXPECT_EQ(got.rfind("{", 0), 0u) << got;
  EXPECT_NE(got.find("\"protocol\":1"), std::string::npos) << got;
  EXPECT_NE(got.find("\"omitted\":"), std::string::npos) << got;
  EXPECT_NE(got.find("/etc/shadow"), std::string::npos) << got;
  EXPECT_LE(got.size(), 4096u);
}

// ---- SIGKILL and restart -----------------------------------------------------

TEST_F(Daemon, SigkilledDaemonKeepsEnforcingAndARestartReadoptsAndReaps) {
  start_daemon();
  const uint32_t slot = *named_slot(status(), "dtest");
  const size_t scopes_before = status()["scopes"].size();
  fs::create_directories(dir_ / "ws");
  fs::create_directories(dir_ / "ws2");
  // Run A loops on a denied read until told to stop; run B loops forever and
  // loses its agentcage to SIGKILL while the daemon is down.
  const std::string loop =
      "while [ ! -e stop ]; do cat /etc/passwd 2>/dev/null; sleep 0.2; done; cat /etc/hostname";
  // The workspaces are directories the test reaches into (stop); their file
  // system is larger than any disk limit, which --disk unlimited accepts.
  Proc a = start_run({"sh", "-c", loop}, "a", {"--workspace", (dir_ / "ws").string(), "--disk", "unlimited"});
  Proc b =
      start_run({"sh", "-c", loop}, "b", {"--workspace", (dir_ / "ws2").string(), "--disk", "unlimited"});
  auto e = bpf::Enforcer::open_shared();
  ASSERT_TRUE(e) << e.error().message;
  auto denies = [&] {
    auto c = (*e)->counters(slot);
    uint64_t n = 0;
    if (c)
      for (const auto& h : c->hooks) n += h.decisions[AC_DECISION_DENY];
    return n;
  };
  ASSERT_TRUE(
      wait_until([&] { return status().value("daemon", json::object()).value("runs_active", 0) == 2; }, 60s));
  uint64_t d0 = denies();
  ASSERT_TRUE(wait_until([&] { return denies() > d0; }, 60s));

  stop_daemon(SIGKILL);
  uint64_t d1 = denies();
  EXPECT_TRUE(wait_until([&] { return denies() >= d1 + 3; }, 60s)) << "no denials while the daemon was dead";
  ::kill(b.pid, SIGKILL);  // its sandbox dies with it (PDEATHSIG); record, cgroup and scope stay
  wait_exit(b.pid);
  json rec_b;
  for (const auto& entry : fs::directory_iterator("/run/agentcage/runs"))
    if (entry.path().extension() == ".json") {
      json rec = json::parse(slurp(entry.path()), nullptr, false);
      if (rec.is_object() && rec.value("workspace", "") == (dir_ / "ws2").string()) rec_b = rec;
    }
  ASSERT_TRUE(rec_b.is_object());

  start_daemon();  // re-adopts the pinned set, reaps run B
  EXPECT_EQ(named_slot(status(), "dtest"), slot) << "the restart did not swap in place";
  size_t dtest_slots = 0;
  const json policies = status()["policies"];
  for (const auto& p : policies) dtest_slots += p["name"] == "dtest";
  EXPECT_EQ(dtest_slots, 1u);
  EXPECT_NE(log().find("reaped stale run " + rec_b["run_id"].get<std::string>()), std::string::npos) << log();
  EXPECT_FALSE(fs::exists(rec_b["cgroup"].get<std::string>()));

  std::ofstream(dir_ / "ws" / "stop") << "";
  EXPECT_EQ(wait_exit(a.pid), 0) << slurp(a.out);
  json ra = json::parse(slurp(dir_ / "a.json"), nullptr, false);
  ASSERT_TRUE(ra.is_object());
  EXPECT_GE(ra["denials"]["by_hook"].value("file_open", 0), 3);

  // Nothing leaked: scopes as before, no run records, no run cgroups.
  EXPECT_TRUE(wait_until([&] { return status()["scopes"].size() == scopes_before; }, 30s))
      << status().dump(2);
  std::error_code ec;
  size_t records = 0;
  for (const auto& entry : fs::directory_iterator("/run/agentcage/runs", ec))
    records += entry.path().extension() == ".json";
  EXPECT_EQ(records, 0u);
  EXPECT_TRUE(
      wait_until([&] { return status().value("daemon", json::object()).value("runs_active", 1) == 0; }, 30s));
}

// ---- ring buffer overflow ---------------------------------------------------

TEST_F(Daemon, RingBufferOverflowIsCountedExactlyAndEnforcementIsUnaffected) {
  start_daemon();
  // Many scopes, as one alone cannot fill the buffer: each may put at most
  // AC_SCOPE_EVENT_BUDGET records a second into it.
  constexpr int kScopes = 16;
  std::vector<cgroup::Cgroup> cgs;
  for (int i = 0; i < kScopes; ++i) {
    auto cg = cgroup::Cgroup::create(
        root_, root_, "ac-daemon-overflow-" + std::to_string(::getpid()) + "-" + std::to_string(i));
    ASSERT_TRUE(cg);
    auto att = control(
        {{"op", "attach"}, {"cgroup", cg->path().string()}, {"policy", "dtest"}, {"workspace", "/tmp"}});
    ASSERT_TRUE(att && att->value("ok", false));
    cgs.push_back(std::move(cg).value());
  }
  static_assert(uint64_t{kScopes} * AC_SCOPE_EVENT_BUDGET > (1u << 20) / sizeof(ac_event_decision),
                "the scopes' budgets together must exceed the ring buffer");
  const uint32_t slot = *named_slot(status(), "dtest");
  auto e = bpf::Enforcer::open_shared();
  ASSERT_TRUE(e);
  auto denies = [&] {
    uint64_t n = 0;
    if (auto c = (*e)->counters(slot))
      for (const auto& h : c->hooks) n += h.decisions[AC_DECISION_DENY];
    return n;
  };
  auto delivered = [&] {
    return status().value("daemon", json::object()).value("events_delivered", uint64_t{0});
  };
  auto lost_metric = [&] { return scrape("agentcage_events_lost_total"); };
  // Let the daemon settle (its tick exports the lost counter).
  std::this_thread::sleep_for(1500ms);
  const uint64_t deny0 = denies(), sent0 = *(*e)->stat(AC_STAT_EVENTS_SENT),
                 lost0 = *(*e)->stat(AC_STAT_EVENTS_LOST),
                 suppressed0 = *(*e)->stat(AC_STAT_EVENTS_SUPPRESSED);
  const uint64_t del0 = delivered();
  const double lost_metric0 = lost_metric(), suppressed_metric0 = scrape("agentcage_events_suppressed_total");

  // The consumer stops; processes in every scope deny far more often than
  // the 1 MiB ring buffer has room for.
  constexpr int kAttempts = 6000, kEach = kAttempts / kScopes;
  static_assert(kEach * kScopes == kAttempts);
  ASSERT_EQ(::kill(daemon_.pid, SIGSTOP), 0);
  std::vector<pid_t> pids;
  for (const auto& cg : cgs) {
    auto pid = cgroup::spawn_in_cgroup(cg.fd(), [&]() -> int {
      int denied = 0;
      for (int i = 0; i < kEach; ++i) {
        int fd = ::open("/etc/passwd", O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
          ::close(fd);
        else if (errno == EACCES)
          ++denied;
      }
      return denied == kEach ? 0 : 1;
    });
    ASSERT_TRUE(pid);
    pids.push_back(*pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    auto st = cgroup::wait_for(pid);
    failed += !(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  }
  ::kill(daemon_.pid, SIGCONT);
  EXPECT_EQ(failed, 0) << "an open was not denied while the ring buffer was full";

  const uint64_t deny1 = denies(), sent1 = *(*e)->stat(AC_STAT_EVENTS_SENT),
                 lost1 = *(*e)->stat(AC_STAT_EVENTS_LOST),
                 suppressed1 = *(*e)->stat(AC_STAT_EVENTS_SUPPRESSED);
  EXPECT_EQ(deny1 - deny0, static_cast<uint64_t>(kAttempts));
  EXPECT_GT(lost1 - lost0, 0u) << "the ring buffer did not overflow";
  ASSERT_TRUE(wait_until([&] { return delivered() - del0 == sent1 - sent0; }, 60s))
      << "delivered " << delivered() - del0 << " of " << sent1 - sent0 << " sent";
  // produced = delivered + counted lost + counted over a scope's budget, exactly.
  EXPECT_EQ(deny1 - deny0, (delivered() - del0) + (lost1 - lost0) + (suppressed1 - suppressed0));
  EXPECT_TRUE(wait_until(
      [&] {
        return scrape("agentcage_events_suppressed_total") - suppressed_metric0 ==
               static_cast<double>(suppressed1 - suppressed0);
      },
      30s));
  EXPECT_TRUE(
      wait_until([&] { return lost_metric() - lost_metric0 == static_cast<double>(lost1 - lost0); }, 30s))
      << lost_metric() - lost_metric0 << " vs " << lost1 - lost0;
  // And enforcement went on after the overflow.
  EXPECT_EQ(open_in(cgs[0], "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(cgs[0], "/etc/hostname"), 0);
  for (auto& cg : cgs) {
    EXPECT_TRUE(control({{"op", "detach"}, {"cgroup", cg.path().string()}}));
    EXPECT_TRUE(cg.remove());
  }
}

}  // namespace
}  // namespace agentcage::kt
