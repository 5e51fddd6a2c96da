// SPDX-License-Identifier: Apache-2.0
// Record -> audit -> enforce with the real binary: `agentcage run --record`
// keeps every decision record of a run (its own ring buffer, outside the
// audit log's budget and beyond the report's first records), and
// `agentcage policy suggest` turns an audit-mode recording into a policy
// under which the workload passes while everything else stays denied.
// Needs root and a kernel that enforces (the VM).
#include <bpf/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "core/paths.h"
#include "kernel_env.h"
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

}  // namespace
}  // namespace agentcage::kt
