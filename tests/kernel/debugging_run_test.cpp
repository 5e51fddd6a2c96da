// SPDX-License-Identifier: Apache-2.0
// exec.native_code and exec.debugging through `agentcage run` with the
// shipped python-sandbox policy (native_test.cpp proves each trick against
// the enforcer directly): written memory never runs, and a debugger works
// on the run's own processes only when the policy says `debugging: allow`.
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "kernel_env.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

class DebuggingRun : public ::testing::Test {
 protected:
  void SetUp() override { AC_REQUIRE_ENFORCER(); }
};

TEST_F(DebuggingRun, PythonSandboxKeepsWrittenMemoryFromRunning) {
  Ran r =
      run(py("import mmap\n"
             "try:\n"
             "    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
             "    print('wx')\n"
             "except PermissionError:\n"
             "    print('refused')\n"
             "m = mmap.mmap(-1, 4096)\n"
             "m.write(b'data')\n"
             "print('rw')\n"));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "refused\nrw\n") << r.describe();
  EXPECT_EQ(denied(r, "native_code"), 1u) << r.result.dump(2);
}

// python-sandbox with strace allowed to run, and `debugging` as given.
std::string sandbox_with_strace(const std::string& debugging) {
  std::string text = slurp(kPythonSandbox);
  const std::string exec_line = "      - /usr/bin/python3\n", debug_line = "debugging: deny";
  const size_t e = text.find(exec_line), d = text.find(debug_line);
  if (e == std::string::npos || d == std::string::npos) return {};
  text.replace(d, debug_line.size(), "debugging: " + debugging);
  text.insert(text.find(exec_line) + exec_line.size(), "      - /usr/bin/strace\n");
  const std::string path =
      "/tmp/agentcage-kt-strace-" + debugging + "-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST_F(DebuggingRun, StraceWorksOnTheRunsOwnProcessesOnlyWithDebuggingAllowed) {
  ASSERT_EQ(::access("/usr/bin/strace", X_OK), 0) << "strace is not installed (scripts/install-deps)";
  const std::vector<std::string> traced = {
      "/usr/bin/strace", "-f", "-e", "trace=write", "/usr/bin/python3", "-c", "print('traced')"};
  SpawnOptions allow;
  allow.policy = sandbox_with_strace("allow");
  ASSERT_FALSE(allow.policy.empty()) << "python-sandbox.yaml changed shape";
  Ran ok = run(traced, allow);
  EXPECT_EQ(ok.code, 0) << ok.describe();
  EXPECT_EQ(ok.out, "traced\n") << ok.describe();
  EXPECT_NE(ok.err.find("write(1, \"traced\\n\", 7)"), std::string::npos) << ok.describe();
  EXPECT_EQ(denied(ok, "debug"), 0u) << ok.result.dump(2);

  SpawnOptions deny;
  deny.policy = sandbox_with_strace("deny");
  Ran refused = run(traced, deny);
  EXPECT_NE(refused.code, 0) << refused.describe();
  EXPECT_EQ(refused.out, "") << "the program ran under a refused tracer: " << refused.describe();
  EXPECT_GE(denied(refused, "debug"), 1u) << refused.result.dump(2);
  ::unlink(allow.policy.c_str());
  ::unlink(deny.policy.c_str());
}

}  // namespace
}  // namespace agentcage::kt
