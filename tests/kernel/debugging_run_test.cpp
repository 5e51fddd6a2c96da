// SPDX-License-Identifier: Apache-2.0
// exec.native_code and exec.debugging through `agentcage run` with the
// shipped python-sandbox policy (native_test.cpp proves each trick against
// the enforcer directly): written memory never runs, and a debugger works
// on the run's own processes only when the policy says `debugging: allow`.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
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

// python-sandbox with `tool` allowed to run (and `reads` readable), and
// `debugging` as given.
std::string sandbox_with(const std::string& tool, const std::string& debugging,
                         const std::vector<std::string>& reads = {}) {
  std::string text = slurp(kPythonSandbox);
  const std::string exec_line = "      - /usr/bin/python3\n", debug_line = "debugging: deny",
                    read_line = "    read:\n";
  const size_t e = text.find(exec_line), d = text.find(debug_line), r = text.find(read_line);
  if (e == std::string::npos || d == std::string::npos || r == std::string::npos) return {};
  text.replace(d, debug_line.size(), "debugging: " + debugging);
  std::string more;
  for (const auto& path : reads) more += "      - " + path + "\n";
  text.insert(text.find(read_line) + read_line.size(), more);
  text.insert(text.find(exec_line) + exec_line.size(), "      - " + tool + "\n");
  const std::string path = "/tmp/agentcage-kt-" + std::filesystem::path(tool).filename().string() + "-" +
                           debugging + "-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

std::string sandbox_with_strace(const std::string& debugging) {
  return sandbox_with("/usr/bin/strace", debugging);
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

TEST_F(DebuggingRun, GdbWorksOnTheRunsOwnProcessesOnlyWithDebuggingAllowed) {
  // gdb starts its program under PTRACE_TRACEME, writes a breakpoint into
  // its text and reads its registers: all of it on the run's own process,
  // and only under `debugging: allow`. A host process stays out of reach
  // even then.
  ASSERT_EQ(::access("/usr/bin/gdb", X_OK), 0) << "gdb is not installed (scripts/install-deps)";
  const std::vector<std::string> debugged = {"/usr/bin/gdb",
                                             "-nx",
                                             "-batch",
                                             "-ex",
                                             "set startup-with-shell off",
                                             "-ex",
                                             "set breakpoint pending on",
                                             "-ex",
                                             "break write",
                                             "-ex",
                                             "run",
                                             "-ex",
                                             "continue",
                                             "--args",
                                             "/usr/bin/python3",
                                             "-V"};
  SpawnOptions allow;
  allow.policy = sandbox_with("/usr/bin/gdb", "allow", {"/usr/share/gdb"});
  ASSERT_FALSE(allow.policy.empty()) << "python-sandbox.yaml changed shape";
  Ran ok = run(debugged, allow);
  EXPECT_EQ(ok.code, 0) << ok.describe();
  EXPECT_NE(ok.out.find("Breakpoint 1, "), std::string::npos)
      << "the breakpoint was never hit: " << ok.describe();
  // (gdb passes shell characters in its program's arguments on escaped
  // when it starts it without a shell: hence -V, not -c.)
  EXPECT_NE(ok.out.find("Python 3."), std::string::npos) << ok.describe();
  EXPECT_NE(ok.out.find("exited normally"), std::string::npos)
      << "the program did not finish: " << ok.describe();
  EXPECT_EQ(denied(ok, "debug"), 0u) << ok.result.dump(2);

  // The same gdb on a process of the host.
  pid_t host = ::fork();
  ASSERT_GE(host, 0);
  if (host == 0) {
    ::alarm(60);
    ::pause();
    ::_exit(0);
  }
  Ran outside =
      run({"/usr/bin/gdb", "-nx", "-batch", "-p", std::to_string(host), "-ex", "info registers rip"}, allow);
  ::kill(host, SIGKILL);
  ::waitpid(host, nullptr, 0);
  EXPECT_EQ(outside.out.find("rip "), std::string::npos)
      << "gdb read a host process's registers: " << outside.describe();
  // gdb gives up at the process's /proc entry (proc), or at ptrace itself
  // (scope_escape).
  EXPECT_GE(denied(outside, "proc") + denied(outside, "scope_escape"), 1u) << outside.result.dump(2);

  SpawnOptions deny;
  deny.policy = sandbox_with("/usr/bin/gdb", "deny", {"/usr/share/gdb"});
  Ran refused = run(debugged, deny);
  EXPECT_EQ(refused.out.find("Python 3."), std::string::npos)
      << "the program ran under a refused debugger: " << refused.describe();
  EXPECT_EQ(refused.out.find("Breakpoint 1, "), std::string::npos) << refused.describe();
  EXPECT_GE(denied(refused, "debug"), 1u) << refused.result.dump(2);
  ::unlink(allow.policy.c_str());
  ::unlink(deny.policy.c_str());
}

}  // namespace
}  // namespace agentcage::kt
