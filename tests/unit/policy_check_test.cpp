// SPDX-License-Identifier: Apache-2.0
// Reading policy files, `agentcage policy check`, and the shipped policies.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/compile.h"
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

// `policy check` with the real compiler, as the command line runs it.
int check(const std::vector<std::string>& files, std::ostream& out, std::ostream& err,
          std::optional<std::string> dir = std::nullopt, bool json = false) {
  CheckOptions o;
  o.files = files;
  o.dir = std::move(dir);
  o.json = json;
  return check_command(o, bpf::compile_problem, out, err);
}

TEST_F(PolicyFiles, CheckCommandReportsEachFile) {
  const std::string good = write("good.yaml", kValid);
  const std::string bad =
      write("bad.yaml", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: x}\nspec: {mode: on}\n");
  std::ostringstream out, err;
  EXPECT_EQ(check({good}, out, err), 0);
  EXPECT_EQ(out.str(),
            good + ": ok (policy ok, mode enforce, 0 exec, 1 read, 1 write, 0 deny, 0 network rules)\n");
  EXPECT_EQ(err.str(), "");

  out.str("");
  EXPECT_EQ(check({bad, good}, out, err), 1);
  EXPECT_EQ(err.str(), bad + ":4:14: invalid mode 'on' (expected 'enforce' or 'audit')\n");
  EXPECT_EQ(out.str(),
            good + ": ok (policy ok, mode enforce, 0 exec, 1 read, 1 write, 0 deny, 0 network rules)\n");
}

TEST_F(PolicyFiles, CheckCommandNeedsFiles) {
  std::ostringstream out, err;
  EXPECT_EQ(check({}, out, err), 2);
  EXPECT_NE(err.str().find("no policy files"), std::string::npos);
  // An empty policy directory is valid: the daemon loads nothing from it.
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  err.str("");
  EXPECT_EQ(check({}, out, err, empty.string(), true), 0) << err.str();
  EXPECT_EQ(nlohmann::json::parse(out.str(), nullptr, false),
            (nlohmann::json{{"ok", true}, {"files", nlohmann::json::array()}}));
}

// "ok" means "this loads": a policy that parses but that the compiler
// refuses (a program a run could overwrite) is an error, located at the
// program's entry and naming the write rule.
TEST_F(PolicyFiles, CheckCommandRunsTheCompiler) {
  const std::string path = write("w.yaml",
                                 "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: w}\nspec:\n"
                                 "  exec:\n    allow:\n      - /usr/bin/true\n"
                                 "  files:\n    write:\n      - /usr/bin\n");
  ASSERT_TRUE(load_policy_file(path).ok());  // it parses
  std::ostringstream out, err;
  EXPECT_EQ(check({path}, out, err), 1);
  EXPECT_EQ(out.str(), "");
  const std::string real = fs::canonical("/usr/bin/true").string();
  EXPECT_EQ(err.str(),
            path + ":7:9: policy w: exec.allow " + real +
                " lies under a files.write rule (10:9: /usr/bin); a run could replace the program\n")
      << err.str();
  // Located at the program's entry even when a files rule names it too.
  const std::string also_read = write("r.yaml",
                                      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: r}\nspec:\n"
                                      "  files:\n    read: [" +
                                          real +
                                          "]\n    write: [/usr/bin]\n"
                                          "  exec:\n    allow:\n      - /usr/bin/true\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(check({also_read}, out2, err2), 1);
  EXPECT_EQ(err2.str().rfind(also_read + ":10:9: policy r: exec.allow ", 0), 0u) << err2.str();
  // The same located message from the compiler itself (runs, the daemon).
  auto compiled = bpf::compile(*load_policy_file(path).policy);
  ASSERT_FALSE(compiled);
  EXPECT_EQ(compiled.error().message + "\n", err.str());
}

// --dir: every NAME.yaml the daemon would load, under its file-name rules;
// hidden files and other extensions are not policies there.
TEST_F(PolicyFiles, CheckCommandDirAppliesTheDaemonsFileNameRules) {
  const fs::path pdir = dir_ / "policies";
  fs::create_directories(pdir);
  auto policy_named = [](const std::string& name) {
    return "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: " + name + "\nspec: {}\n";
  };
  write("policies/good.yaml", policy_named("good"));
  write("policies/other.yaml", policy_named("good"));
  write("policies/Bad_Name.yaml", policy_named("bad-name"));
  write("policies/.hidden.yaml", "not: [a policy");
  write("policies/notes.txt", "not a policy");
  fs::create_directories(pdir / "adir.yaml");                     // not a file: the daemon skips it
  fs::create_symlink("/nonexistent/x.yaml", pdir / "gone.yaml");  // dangling: skipped too
  std::ostringstream out, err;
  EXPECT_EQ(check({}, out, err, pdir.string()), 1);
  EXPECT_EQ(out.str(),
            (pdir / "good.yaml").string() +
                ": ok (policy good, mode enforce, 0 exec, 0 read, 0 write, 0 deny, 0 network rules)\n");
  const std::string e = err.str();
  EXPECT_NE(
      e.find((pdir / "Bad_Name.yaml").string() + ": the file name 'Bad_Name.yaml' does not name a policy"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("rename it to 'bad-name.yaml'"), std::string::npos) << e;
  EXPECT_NE(e.find((pdir / "other.yaml").string() +
                   ":4:9: metadata.name 'good' does not match the file name (the daemon names a policy "
                   "by its file: expected 'other')"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("hidden"), std::string::npos) << e;
  EXPECT_EQ(e.find("notes"), std::string::npos) << e;
  EXPECT_EQ(e.find("adir"), std::string::npos) << e;
  EXPECT_EQ(e.find("gone"), std::string::npos) << e;
  // The same file given by name is checked without the directory's rules.
  out.str("");
  err.str("");
  EXPECT_EQ(check({(pdir / "other.yaml").string()}, out, err), 0) << err.str();

  err.str("");
  EXPECT_EQ(check({}, out, err, (dir_ / "missing").string()), 2);
  EXPECT_NE(err.str().find("cannot list the policy directory"), std::string::npos) << err.str();
}

TEST_F(PolicyFiles, CheckCommandJson) {
  const std::string good = write("good.yaml", kValid);
  const std::string bad = write("bad.yaml",
                                "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: x}\n"
                                "spec:\n  files: {deny: [\"${workspace}/*.key\"]}\n");
  std::ostringstream out, err;
  EXPECT_EQ(check({good, bad}, out, err, std::nullopt, true), 1);
  EXPECT_EQ(err.str(), "");
  const nlohmann::json j = nlohmann::json::parse(out.str(), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out.str();
  EXPECT_EQ(j["ok"], false);
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["file"], good);
  EXPECT_EQ(j["files"][0]["ok"], true);
  EXPECT_EQ(j["files"][0]["policy"], "ok");
  EXPECT_EQ(j["files"][0]["mode"], "enforce");
  EXPECT_EQ(j["files"][0]["rules"]["read"], 1);
  EXPECT_EQ(j["files"][0]["errors"], nlohmann::json::array());
  EXPECT_EQ(j["files"][1]["ok"], false);
  EXPECT_FALSE(j["files"][1].contains("policy"));
  ASSERT_EQ(j["files"][1]["errors"].size(), 1u);
  const auto& e = j["files"][1]["errors"][0];
  EXPECT_EQ(e["file"], bad);
  EXPECT_EQ(e["line"], 5);
  EXPECT_EQ(e["column"], 18);
  EXPECT_NE(e["message"].get<std::string>().find("not patterns"), std::string::npos) << e;

  out.str("");
  EXPECT_EQ(check({good}, out, err, std::nullopt, true), 0);
  EXPECT_EQ(nlohmann::json::parse(out.str(), nullptr, false)["ok"], true);
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
  EXPECT_EQ(check(files, out, err), 0) << err.str();
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
