// SPDX-License-Identifier: Apache-2.0
// policies/coding-agent.yaml on a workload this project did not write:
// pyflakes' own test suite (Debian's python3-pyflakes ships it), run as a
// coding agent would -- git init and commit in the workspace, then pytest --
// under the policy and, for comparison, unconfined as an unprivileged user.
// pyflakes because its suite is pure Python, needs no network and runs in
// seconds (half a minute under the VM's emulation) with Debian's pytest; its
// few integration tests that start ../bin/pyflakes fail in Debian's layout,
// confined or not, which the comparison shows too. Needs root and a kernel
// that enforces (the VM).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "kernel_env.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kSuite = "/usr/lib/python3/dist-packages/pyflakes/test";
const std::string kPolicy = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/coding-agent.yaml";

// What the agent does in its workspace.
const char* const kAgent =
    "set -e\n"
    "git init -q\n"
    "git add -A\n"
    "git -c user.name=agent -c user.email=agent@example.invalid commit -qm 'import the tests'\n"
    "echo commits: $(git log --oneline | wc -l)\n"
    "python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1\n";

// A fresh project directory holding the suite as tests/, owned by `uid`.
fs::path make_project(const std::string& name, uid_t uid) {
  const fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(kSuite, dir / "tests", fs::copy_options::recursive);
  fs::remove_all(dir / "tests" / "__pycache__");
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (::lchown(e.path().c_str(), uid, uid) != 0) ADD_FAILURE() << "chown " << e.path();
  if (::chown(dir.c_str(), uid, uid) != 0) ADD_FAILURE() << "chown " << dir;
  return dir;
}

struct Suite {
  int passed = -1, failed = 0, skipped = 0;
  int commits = -1;
  double seconds = 0;
};

// pytest's last line ("5 failed, 724 passed, 17 skipped in 12.26s") and
// the commit count the agent printed.
Suite parse(const std::string& out, double seconds) {
  Suite s;
  s.seconds = seconds;
  std::smatch m;
  auto count = [&](const char* what) {
    std::regex re(std::string("([0-9]+) ") + what);
    return std::regex_search(out, m, re) ? std::stoi(m[1]) : 0;
  };
  if (std::regex_search(out, m, std::regex("([0-9]+) passed"))) s.passed = std::stoi(m[1]);
  s.failed = count("failed");
  s.skipped = count("skipped");
  if (std::regex_search(out, m, std::regex("commits: ([0-9]+)"))) s.commits = std::stoi(m[1]);
  return s;
}

std::string describe(const Suite& s) {
  return std::to_string(s.passed) + " passed, " + std::to_string(s.failed) + " failed, " +
         std::to_string(s.skipped) + " skipped, " + std::to_string(s.commits) + " commit(s), " +
         std::to_string(s.seconds) + " s";
}

class CodingAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists(agentcage_bin())) << agentcage_bin();
    ASSERT_TRUE(fs::exists(kSuite / "test_imports.py"))
        << "needs Debian's python3-pyflakes (scripts/install-deps installs it)";
    ASSERT_EQ(std::system("/usr/bin/python3 -c 'import pytest' 2>/dev/null"), 0)
        << "needs Debian's python3-pytest (scripts/install-deps installs it)";
  }
};

TEST_F(CodingAgent, PyflakesSuiteGivesTheSameResultsConfinedAsUnconfined) {
  // Unconfined: the same commands as an unprivileged user (the confined run
  // has an unprivileged uid of its own too: some tests skip as root), with
  // the environment a run gets.
  const uid_t nobody = 65534;
  const fs::path plain = make_project("agentcage-kt-pyflakes-plain", nobody);
  const std::string script =
      (plain.parent_path() / ("agentcage-kt-agent-" + std::to_string(::getpid()))).string();
  std::ofstream(script) << kAgent;
  ::chmod(script.c_str(), 0644);
  const std::string out_file = plain.string() + ".out";
  const std::string cmd = "cd " + plain.string() +
                          " && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=" + plain.string() +
                          " TMPDIR=" + plain.string() +
                          " LANG=C.UTF-8 setpriv --reuid=65534 --regid=65534 --clear-groups /bin/sh " +
                          script + " >" + out_file + " 2>&1";
  auto t0 = Clock::now();
  const int st = std::system(cmd.c_str());
  const Suite unconfined = parse(slurp(out_file), std::chrono::duration<double>(Clock::now() - t0).count());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(out_file);

  // Confined: the project goes into the run's workspace (--io-dir), the
  // agent's commands run there under coding-agent.yaml.
  const fs::path project = make_project("agentcage-kt-pyflakes", nobody);
  SpawnOptions o;
  o.policy = kPolicy;
  Ran r = run(
      {"--io-dir", project.string(), "--timeout", "20m", "--memory", "2Gi", "--", "/bin/sh", "-c", kAgent},
      o);
  ASSERT_EQ(r.code, 0) << r.describe();
  const Suite confined = parse(r.out, r.seconds);

  std::printf("pyflakes test suite, unconfined: %s\n", describe(unconfined).c_str());
  std::printf("pyflakes test suite, coding-agent.yaml: %s\n", describe(confined).c_str());
  std::printf("time ratio confined/unconfined: %.2f\n", confined.seconds / unconfined.seconds);
  EXPECT_EQ(unconfined.commits, 1) << slurp(out_file);
  EXPECT_EQ(confined.commits, 1) << r.out;
  EXPECT_GT(unconfined.passed, 500) << slurp(out_file);
  EXPECT_EQ(confined.passed, unconfined.passed) << r.out << r.err;
  EXPECT_EQ(confined.failed, unconfined.failed) << r.out << r.err;
  EXPECT_EQ(confined.skipped, unconfined.skipped) << r.out << r.err;
  // The git history came back with the workspace.
  EXPECT_TRUE(fs::exists(project / ".git" / "HEAD"));
  // What the suite needed was allowed; the only denials are Python trying
  // to write bytecode next to the installed pyflakes.
  for (const auto& rec : r.result["denials"]["records"])
    EXPECT_NE(rec["target"].get<std::string>().find("/usr/lib/python3/dist-packages/"), std::string::npos)
        << rec.dump();
  std::error_code ec;
  fs::remove_all(plain, ec);
  fs::remove_all(project, ec);
  fs::remove(script, ec);
  fs::remove(out_file, ec);
}

// What a poisoned agent would try next, under the same policy: each denied
// in the kernel, beside the legitimate case that works.
TEST_F(CodingAgent, SecretsTheNetworkHostFilesAndNewProgramsStayOutOfReach) {
  const fs::path project = make_project("agentcage-kt-agent-attacks", 65534);
  std::ofstream(project / ".env") << "API_KEY=secret\n";
  std::ofstream(project / "deploy.pem") << "-----BEGIN PRIVATE KEY-----\n";
  (void)::chown((project / ".env").c_str(), 65534, 65534);
  (void)::chown((project / "deploy.pem").c_str(), 65534, 65534);
  SpawnOptions o;
  o.policy = kPolicy;
  auto attempt = [&](const std::string& sh) {
    return run({"--io-dir", project.string(), "--timeout", "5m", "--", "/bin/sh", "-c", sh}, o);
  };
  // Legitimate: files of the project, git, python.
  Ran ok = attempt("cat tests/__init__.py >/dev/null && git --version >/dev/null && python3 -c 'print(7)'");
  EXPECT_EQ(ok.code, 0) << ok.describe();
  EXPECT_EQ(ok.out, "7\n");
  // Secrets by name, in the project too.
  Ran env = attempt("cat .env");
  EXPECT_NE(env.code, 0) << env.describe();
  EXPECT_EQ(env.out.find("secret"), std::string::npos);
  bool env_denied = false;
  for (const auto& rec : env.result["denials"]["records"]) {
    const std::string t = rec["target"];
    env_denied |= rec["hook"] == "file_open" && rec["reason"] == "rule_deny" && t.ends_with("/.env");
  }
  EXPECT_TRUE(env_denied) << env.result.dump(2);
  Ran pem = attempt("cat deploy.pem");
  EXPECT_NE(pem.code, 0) << pem.describe();
  // Host files outside the policy, and writing outside the workspace.
  Ran passwd = attempt("cat /etc/passwd");
  EXPECT_NE(passwd.code, 0) << passwd.describe();
  EXPECT_TRUE(has_record(passwd, "file_open", "/etc/passwd")) << passwd.result.dump(2);
  Ran tmp = attempt("touch /tmp/agentcage-kt-agent-was-here");
  EXPECT_NE(tmp.code, 0) << tmp.describe();
  EXPECT_FALSE(fs::exists("/tmp/agentcage-kt-agent-was-here"));
  // The network: an allowed program that would connect.
  Ran net = attempt("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9), timeout=3)\"");
  EXPECT_NE(net.code, 0) << net.describe();
  EXPECT_GE(denied(net, "socket_connect"), 1u) << net.result.dump(2);
  // A program the run wrote or copied never starts.
  Ran copied = attempt("cp /usr/bin/true ./mytrue && chmod +x ./mytrue && ./mytrue");
  EXPECT_NE(copied.code, 0) << copied.describe();
  EXPECT_GE(denied(copied, "exec") + denied(copied, "file_open"), 1u) << copied.result.dump(2);
  std::error_code ec;
  fs::remove_all(project, ec);
}

}  // namespace
}  // namespace agentcage::kt
