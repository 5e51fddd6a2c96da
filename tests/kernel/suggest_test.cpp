// SPDX-License-Identifier: Apache-2.0
// Record -> audit -> enforce with the real binary: `agentcage run --record`
// keeps every decision record of a run (its own ring buffer, outside the
// audit log's budget and beyond the report's first records), and
// `agentcage policy suggest` turns an audit-mode recording into a policy
// under which the workload passes while everything else stays denied.
// Needs root and a kernel that enforces (the VM).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "core/paths.h"
#include "kernel_env.h"
#include "probes.h"
#include "run_helpers.h"
#include "util/unique_fd.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Record : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists(agentcage_bin())) << agentcage_bin();
  }
};

// Is there a recording ring for scope `id` in the shared set?
bool ring_registered(uint64_t id) {
  const std::string map = bpf::Enforcer::shared_pin_dir(core::kDefaultPinRoot) + "/maps/ac_scope_rings";
  UniqueFd fd(bpf_obj_get(map.c_str()));
  EXPECT_TRUE(fd) << map;
  uint32_t inner = 0;
  return fd && bpf_map_lookup_elem(fd.get(), &id, &inner) == 0;
}

// 300 denied stats of distinct existing files in well under a second: past
// the report's 8 records and the audit log's budget of 256 a second, yet the
// recording holds each one, once, with its count, and says it is complete.
TEST_F(Record, KeepsEveryDistinctOperationPastTheReportAndTheAuditBudget) {
  // Existing files the policy does not let the run see (listed here, by
  // the unconfined test: the run may not list the directory).
  std::vector<std::string> docs;
  for (const auto& e : fs::directory_iterator("/usr/share/doc")) docs.push_back(e.path().string());
  std::sort(docs.begin(), docs.end());
  ASSERT_GE(docs.size(), 300u) << "the test needs 300 entries in /usr/share/doc";
  docs.resize(300);
  std::string code = "import os\nnames = " + json(docs).dump() +
                     "\nn = 0\n"
                     "for _ in range(2):\n"
                     "    for name in names:\n"
                     "        try:\n"
                     "            os.lstat(name)\n"
                     "        except PermissionError:\n"
                     "            n += 1\n"
                     "print(n)\n";
  Ran r = run(py(code, {"--record"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  const json& rec = r.result["recording"];
  ASSERT_TRUE(rec.is_object()) << r.result.dump(2);
  EXPECT_TRUE(rec["complete"].get<bool>()) << rec.dump(2).substr(0, 2000);
  EXPECT_EQ(rec["lost"], 0);
  // Every record the kernel offered is in the recording.
  EXPECT_EQ(rec["total"], r.result["denials"]["records_total"])
      << r.result["denials"].dump(2).substr(0, 2000);
  EXPECT_EQ(r.result["denials"]["records"].size(), 8u);
  std::set<std::string> docs_seen;
  for (const auto& x : rec["records"]) {
    EXPECT_GE(x["count"].get<uint64_t>(), 1u);
    const std::string t = x["target"];
    if (x["hook"] == "file_stat" && t.rfind("/usr/share/doc/", 0) == 0) {
      docs_seen.insert(t);
      EXPECT_EQ(x["access"], json::array({"read"})) << x.dump();
      // The kernel says which targets are directories (lstat: a symbolic
      // link is not).
      EXPECT_EQ(x.value("directory", false), fs::is_directory(fs::symlink_status(t))) << x.dump();
    }
  }
  EXPECT_EQ(r.out, "600\n") << r.describe();
  // Each denied stat was made twice: once per distinct operation, count 2.
  EXPECT_EQ(docs_seen.size(), 300u);
  for (const auto& x : rec["records"]) {
    if (x["hook"] == "file_stat" && docs_seen.count(x["target"])) {
      EXPECT_EQ(x["count"], 2) << x.dump();
    }
  }
  // More than the audit log's budget came in that second: suppressed there,
  // recorded here.
  EXPECT_GT(r.result["denials"]["events_suppressed"].get<uint64_t>(), 0u);
  EXPECT_FALSE(ring_registered(r.result["scope_id"].get<uint64_t>()));

  // The legitimate case beside it: no --record, no recording, no ring.
  Ran plain = run(py("print(1)\n"));
  ASSERT_EQ(plain.code, 0) << plain.describe();
  EXPECT_TRUE(plain.result["recording"].is_null());
}

// The seed scenario, as an agent would run it: generated Python that writes
// a CSV into its workspace, reads it back, computes with numpy, plots with
// matplotlib (which also runs fc-list) and writes a JSON summary.
const char* const kSeed =
    "import csv, json, random, statistics\n"
    "random.seed(7)\n"
    "with open('data.csv', 'w', newline='') as f:\n"
    "    w = csv.writer(f)\n"
    "    w.writerow(['x', 'y'])\n"
    "    for i in range(200):\n"
    "        w.writerow([i, i * 2 + random.random()])\n"
    "ys = [float(r['y']) for r in csv.DictReader(open('data.csv'))]\n"
    "import numpy as np\n"
    "a = np.array(ys)\n"
    "import matplotlib\n"
    "matplotlib.use('Agg')\n"
    "import matplotlib.pyplot as plt\n"
    "plt.plot(a)\n"
    "plt.savefig('plot.png')\n"
    "json.dump({'mean': statistics.mean(ys), 'std': float(a.std())}, open('summary.json', 'w'))\n"
    "print('ok')\n";

// Runs `agentcage ARGS` to completion: its exit status, stdout in *out and
// stderr in *err.
int agentcage(const std::vector<std::string>& args, std::string* out, std::string* err) {
  const fs::path dir = fs::temp_directory_path() / ("agentcage-kt-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string cmd = agentcage_bin();
  for (const auto& a : args) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " " + q + "'";
  }
  cmd += " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
  const int st = std::system(cmd.c_str());
  *out = slurp(dir / "out");
  *err = slurp(dir / "err");
  fs::remove_all(dir);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class Suggest : public Record {};

// Record -> suggest -> enforce: an audit-mode recording of the seed scenario
// under a policy that allows nothing becomes a draft under which the
// scenario passes with no denial, while /etc/passwd, the network and other
// programs stay denied, as under python-sandbox.
TEST_F(Suggest, ADraftFromAnAuditRecordingRunsTheScenarioAndDeniesTheRest) {
  const std::string deny_all = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/deny-all.yaml";
  SpawnOptions base;
  base.policy = deny_all;
  Ran rec = run(py(kSeed, {"--mode", "audit", "--record", "--timeout", "10m", "--memory", "1Gi"}), base);
  ASSERT_EQ(rec.code, 0) << rec.describe();
  ASSERT_EQ(rec.out, "ok\n") << rec.describe();
  ASSERT_TRUE(rec.result["recording"].is_object()) << rec.describe();
  ASSERT_TRUE(rec.result["recording"]["complete"].get<bool>()) << rec.result["recording"]["lost"];
  // Under deny-all everything the scenario did was a would-be denial.
  EXPECT_GT(rec.result["denials"]["audited_total"].get<uint64_t>(), 100u);
  EXPECT_EQ(rec.result["denials"]["total"], 0);

  const fs::path dir = fs::temp_directory_path() / ("agentcage-kt-suggest-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string rec_file = (dir / "rec.json").string(), draft = (dir / "seed-draft.yaml").string();
  std::ofstream(rec_file) << rec.result.dump();
  std::string out, err;
  ASSERT_EQ(agentcage({"policy", "suggest", rec_file, "--name", "seed-draft", "-o", draft}, &out, &err), 0)
      << err;
  const std::string text = slurp(draft);
  // The rules a reviewer expects, each with the operations behind it.
  EXPECT_NE(text.find("      - /usr/lib/python3.11\n"), std::string::npos) << text;
  EXPECT_NE(text.find("      - ${workspace}"), std::string::npos) << text;
  EXPECT_NE(text.find("# exec by agentcage"), std::string::npos) << text;
  EXPECT_EQ(text.find("/etc/passwd"), std::string::npos) << text;
  EXPECT_EQ(text.find("network:"), std::string::npos) << text;  // nothing connected
  ASSERT_EQ(agentcage({"policy", "check", draft}, &out, &err), 0) << out << err;

  SpawnOptions drafted;
  drafted.policy = draft;
  Ran enforced = run(py(kSeed, {"--timeout", "10m", "--memory", "1Gi"}), drafted);
  ASSERT_EQ(enforced.code, 0) << enforced.describe() << text;
  EXPECT_EQ(enforced.out, "ok\n");
  EXPECT_EQ(enforced.result["mode"], "enforce");
  // Denied only what the draft says it left out (its closing "Not allowed"
  // comment, e.g. fc-list listing /etc/fonts/conf.d: no rule may name a
  // directory under /etc whole), each record seen.
  const json& den = enforced.result["denials"];
  EXPECT_EQ(den["records_total"], den["records"].size()) << den.dump(2);
  const size_t left_out = text.find("# Not allowed by this draft");
  for (const auto& x : den["records"]) {
    const std::string note = "#   " + x["hook"].get<std::string>() + " ";
    const std::string target = x["target"];
    EXPECT_TRUE(left_out != std::string::npos && text.find(note, left_out) != std::string::npos &&
                text.find(target, left_out) != std::string::npos)
        << x.dump() << "\n"
        << text;
  }

  // What the scenario never did stays denied.
  Ran passwd = run(py("import sys\n"
                      "try:\n"
                      "    open('/etc/passwd').read()\n"
                      "except PermissionError:\n"
                      "    sys.exit(42)\n"),
                   drafted);
  EXPECT_EQ(passwd.code, 42) << passwd.describe();
  EXPECT_TRUE(has_record(passwd, "file_open", "/etc/passwd")) << passwd.result.dump(2);

  uint16_t port = 0;
  int srv = listen_tcp(AF_INET, &port);
  ASSERT_GE(srv, 0);
  Ran net = run(py("import socket, sys\n"
                   "try:\n"
                   "    socket.create_connection(('127.0.0.1', " +
                   std::to_string(port) +
                   "), timeout=5)\n"
                   "except PermissionError:\n"
                   "    sys.exit(42)\n"),
                drafted);
  ::close(srv);
  EXPECT_EQ(net.code, 42) << net.describe();
  EXPECT_GE(denied(net, "socket_connect"), 1u) << net.result.dump(2);

  Ran sh = run(py("import subprocess, sys\n"
                  "try:\n"
                  "    subprocess.run(['/bin/sh', '-c', 'id'])\n"
                  "except PermissionError:\n"
                  "    sys.exit(42)\n"),
               drafted);
  EXPECT_EQ(sh.code, 42) << sh.describe();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace agentcage::kt
