// SPDX-License-Identifier: Apache-2.0
// Reading policy files, `agentcage policy check`, and the shipped policies.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "policy/policy.h"

namespace agentcage::policy {
namespace {

namespace fs = std::filesystem;

// The repository's policies/ directory, found from this source file so the
// test does not depend on the working directory.
const fs::path kPolicies = fs::path(AGENTCAGE_SOURCE_DIR) / "policies";

class PolicyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agentcage-policy-check-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  fs::path dir_;
};

const char* kValid =
    "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: ok}\n"
    "spec:\n  files: {read: [/usr/lib], write: [/tmp/out]}\n";

TEST_F(PolicyFiles, LoadsAFile) {
  const std::string path = write("a.yaml", kValid);
  const ParseResult r = load_policy_file(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.policy->name, "ok");
  EXPECT_EQ(r.policy->source, path);
}

TEST_F(PolicyFiles, ReadErrorsAreLineZeroDiagnostics) {
  const std::string missing = (dir_ / "missing.yaml").string();
  ParseResult r = load_policy_file(missing);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].format(), missing + ": cannot open: No such file or directory");

  r = load_policy_file(dir_.string());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].pos.line, 0);
  EXPECT_NE(r.errors[0].message.find("is a directory"), std::string::npos);

  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = load_policy_file(fifo);  // must not block waiting for a writer
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("not a regular file"), std::string::npos);
}

TEST_F(PolicyFiles, OversizedFileIsNotRead) {
  const std::string path = write("big.yaml", std::string(300 * 1024, '#'));
  const ParseResult r = load_policy_file(path);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].format(), path + ": policy is 307200 bytes; the limit is 262144 bytes");
}

TEST_F(PolicyFiles, CheckCommandReportsEachFile) {
  const std::string good = write("good.yaml", kValid);
  const std::string bad =
      write("bad.yaml", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: x}\nspec: {mode: on}\n");
  std::ostringstream out, err;
  EXPECT_EQ(check_command({good}, out, err), 0);
  EXPECT_EQ(out.str(),
            good + ": ok (policy ok, mode enforce, 0 exec, 1 read, 1 write, 0 deny, 0 network rules)\n");
  EXPECT_EQ(err.str(), "");

  out.str("");
  EXPECT_EQ(check_command({bad, good}, out, err), 1);
  EXPECT_EQ(err.str(), bad + ":4:14: invalid mode 'on' (expected 'enforce' or 'audit')\n");
  EXPECT_EQ(out.str(),
            good + ": ok (policy ok, mode enforce, 0 exec, 1 read, 1 write, 0 deny, 0 network rules)\n");
}

TEST_F(PolicyFiles, CheckCommandNeedsFiles) {
  std::ostringstream out, err;
  EXPECT_EQ(check_command({}, out, err), 1);
  EXPECT_NE(err.str().find("no policy files"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Shipped policies
// ---------------------------------------------------------------------------

TEST(ShippedPolicies, AllPassPolicyCheck) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(kPolicies)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  }
  ASSERT_GE(files.size(), 3u) << kPolicies;
  std::ostringstream out, err;
  EXPECT_EQ(check_command(files, out, err), 0) << err.str();
  EXPECT_EQ(err.str(), "");
}

// Every shipped policy bounds its workspace (limits.disk), and the seed
// policy states all of its limits instead of relying on the defaults.
TEST(ShippedPolicies, EachStatesADiskLimit) {
  for (const auto& entry : fs::directory_iterator(kPolicies)) {
    if (entry.path().extension() != ".yaml") continue;
    const ParseResult r = load_policy_file(entry.path().string());
    ASSERT_TRUE(r.ok()) << entry.path();
    EXPECT_TRUE(r.policy->limits.disk_bytes) << entry.path() << " states no limits.disk";
    EXPECT_FALSE(r.policy->limits.unlimited.disk) << entry.path();
  }
  const ParseResult py = load_policy_file((kPolicies / "python-sandbox.yaml").string());
  ASSERT_TRUE(py.ok());
  const Limits& l = py.policy->limits;
  EXPECT_TRUE(l.memory_bytes && l.pids && l.timeout && l.disk_bytes);
}

TEST(ShippedPolicies, PythonSandbox) {
  const ParseResult r = load_policy_file((kPolicies / "python-sandbox.yaml").string());
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].format());
  const Policy& p = *r.policy;
  EXPECT_EQ(p.name, "python-sandbox");
  EXPECT_EQ(p.mode, Mode::enforce);
  ASSERT_EQ(p.exec_allow.size(), 1u);
  EXPECT_EQ(p.exec_allow[0].path, "/usr/bin/python3");
  EXPECT_EQ(p.exec_allow[0].resolved, fs::canonical("/usr/bin/python3").string());
  ASSERT_EQ(p.write.size(), 1u);
  EXPECT_TRUE(p.write[0].in_workspace);
  EXPECT_EQ(p.write[0].path, "");
  EXPECT_TRUE(p.network_allow.empty());
  EXPECT_TRUE(p.deny.empty());
  // Nothing that holds secrets or user data.
  for (const PathEntry& e : p.read) {
    EXPECT_FALSE(e.in_workspace);
    for (const char* forbidden :
         {"/", "/etc", "/home", "/root", "/etc/passwd", "/etc/shadow", "/proc", "/tmp"}) {
      EXPECT_NE(e.path, forbidden);
    }
    EXPECT_NE(e.path.rfind("/home/", 0), 0u) << e.path;
  }
}

TEST(ShippedPolicies, DenyAll) {
  const ParseResult r = load_policy_file((kPolicies / "deny-all.yaml").string());
  ASSERT_TRUE(r.ok());
  const Policy& p = *r.policy;
  EXPECT_TRUE(p.exec_allow.empty());
  EXPECT_TRUE(p.read.empty());
  EXPECT_TRUE(p.write.empty());
  EXPECT_TRUE(p.network_allow.empty());
}

TEST(ShippedPolicies, LlmProxyOnly) {
  const ParseResult r = load_policy_file((kPolicies / "llm-proxy-only.yaml").string());
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].format());
  const Policy& p = *r.policy;
  ASSERT_EQ(p.network_allow.size(), 2u);
  EXPECT_EQ(p.network_allow[0].kind, NetRule::Kind::cidr);
  EXPECT_EQ(p.network_allow[0].prefix_len, 32);
  EXPECT_EQ(p.network_allow[0].protocol, Protocol::tcp);
  ASSERT_EQ(p.network_allow[0].ports.size(), 1u);
  EXPECT_EQ(p.network_allow[0].ports[0].first, 8080);
  EXPECT_EQ(p.network_allow[1].kind, NetRule::Kind::unix_path);
  EXPECT_EQ(p.network_allow[1].unix_name, "/run/llm-proxy.sock");
  // Same files as python-sandbox.
  const ParseResult base = load_policy_file((kPolicies / "python-sandbox.yaml").string());
  ASSERT_TRUE(base.ok());
  ASSERT_EQ(p.read.size(), base.policy->read.size());
  for (size_t i = 0; i < p.read.size(); ++i) EXPECT_EQ(p.read[i].path, base.policy->read[i].path);
}

}  // namespace
}  // namespace agentcage::policy
