// SPDX-License-Identifier: Apache-2.0
// The run's seccomp filter in real runs (policies/python-sandbox.yaml): every
// denied call fails with EPERM and is counted in the result's denials (by
// name, with its process), from threads and child processes too; ordinary
// multi-process workloads (forked workers, multiprocessing, joblib) meet no
// syscall denial; a dead or stopped agentcage never lets a denied call
// through.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernel_env.h"
#include "policy/syscalls.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Syscalls : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists(agentcage_bin())) << agentcage_bin();
  }
};

// Python that calls syscall(nr, args...) through ctypes and prints
// "name errno" per call (0 for success).
const std::string kCaller =
    "import ctypes, ctypes.util, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def call(nr, *args):\n"
    "    ctypes.set_errno(0)\n"
    "    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n"
    "    return 0 if r >= 0 else ctypes.get_errno()\n";

uint64_t syscall_count(const Ran& r, const std::string& name) {
  const json& s = r.result["denials"]["syscalls"];
  if (!s.is_object() || !s["by_name"].contains(name)) return 0;
  return s["by_name"][name].get<uint64_t>();
}

TEST_F(Syscalls, EveryDeniedCallFailsWithEpermAndIsCountedByName) {
  // Every call of every denied group this architecture has, with harmless
  // arguments (zeros: the run holds no capability, so none would do
  // anything if it got through; personality: READ_IMPLIES_EXEC).
  std::vector<std::pair<std::string, int>> calls;
  std::ostringstream code;
  code << kCaller << "calls = [\n";
  for (const auto& g : policy::syscall_groups())
    for (std::string_view name : g.syscalls) {
      const int nr = seccomp_syscall_resolve_name(std::string(name).c_str());
      if (nr < 0) continue;
      calls.emplace_back(std::string(name), nr);
      code << "  ('" << name << "', " << nr << ", " << (g.by_argument ? "0x0400000" : "0") << "),\n";
    }
  // An x32 call (getpid) reaches the same counting as a native one.
  code << "  ('x32:getpid', 0x40000000 | 39, 0),\n]\n"
          "for name, nr, a0 in calls:\n"
          "    print(name, call(nr, a0, 0, 0, 0, 0, 0))\n";
  calls.emplace_back("x32:getpid", 0x40000000 | 39);
  ASSERT_GT(calls.size(), 40u);

  Ran r = run(py(code.str(), {"--timeout", "2m"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  std::istringstream lines(r.out);
  size_t seen = 0;
  for (std::string name, err; lines >> name >> err; ++seen) EXPECT_EQ(err, "1") << name << " (1 = EPERM)";
  EXPECT_EQ(seen, calls.size()) << r.out;

  const json& d = r.result["denials"];
  ASSERT_TRUE(d["syscalls"].is_object()) << r.result.dump(2);
  EXPECT_EQ(d["syscalls"]["total"], calls.size());
  for (const auto& [name, nr] : calls) EXPECT_EQ(syscall_count(r, name), 1u) << name << " (" << nr << ")";
  EXPECT_EQ(d["syscalls"]["by_name"].size(), calls.size());
  EXPECT_EQ(denied(r, "syscall"), calls.size());
  EXPECT_GE(d["total"].get<uint64_t>(), calls.size());
  // Records in the shape of every other denial record.
  size_t records = 0;
  for (const auto& rec : d["records"]) {
    if (rec["hook"] != "syscall") continue;
    ++records;
    EXPECT_EQ(rec["decision"], "deny");
    EXPECT_EQ(rec["errno_name"], "EPERM");
    EXPECT_EQ(rec["target_kind"], "syscall");
    EXPECT_EQ(rec["comm"], "python3");
    EXPECT_EQ(rec["uid"], r.result["uid"]);
    EXPECT_EQ(rec["scope_id"], r.result["scope_id"]);
    EXPECT_GT(rec["pid"].get<int64_t>(), 1);
  }
  EXPECT_EQ(records, 8u);
  EXPECT_TRUE(has_record(r, "syscall", calls.front().first)) << d["records"].dump(2);
  EXPECT_GE(d["records_total"].get<uint64_t>(), calls.size());
  // The one-line summary on stderr names them too.
  EXPECT_NE(r.err.find("syscall " + calls.front().first), std::string::npos) << r.err;
}

TEST_F(Syscalls, AllowedGroupIsNeitherDeniedNorCounted) {
  SpawnOptions keys;
  keys.policy = python_sandbox_with_keyctl();
  Ran r = run(py(kCaller + "print(call(" + std::to_string(SYS_keyctl) + ", 0, -3, 0))\n"), keys);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "0\n");
  EXPECT_EQ(r.result["denials"]["syscalls"]["total"], 0);
  EXPECT_EQ(denied(r, "syscall"), 0u);
}

TEST_F(Syscalls, ThreadsAndForkedChildrenAreCounted) {
  const std::string nr = std::to_string(SYS_unshare);
  Ran r = run(py(kCaller +
                     "import threading\n"
                     "t = threading.Thread(target=lambda: print('thread', call(" +
                     nr +
                     ", 0), flush=True))\n"
                     "t.start(); t.join()\n"
                     "for name in ('child', 'grandchild'):\n"
                     "    pid = os.fork()\n"
                     "    if pid:\n"
                     "        os.waitpid(pid, 0)\n"
                     "        os._exit(0) if name == 'grandchild' else None\n"
                     "        break\n"
                     "    print(name, call(" +
                     nr + ", 0), flush=True)\n",
                 {"--timeout", "2m"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "thread 1\nchild 1\ngrandchild 1\n");
  EXPECT_EQ(syscall_count(r, "unshare"), 3u) << r.result["denials"].dump(2);
  std::set<int64_t> pids, tids;
  for (const auto& rec : r.result["denials"]["records"])
    if (rec["hook"] == "syscall") {
      pids.insert(rec["pid"].get<int64_t>());
      if (rec["tid"] != rec["pid"]) tids.insert(rec["tid"].get<int64_t>());
    }
  EXPECT_EQ(pids.size(), 3u) << "the main process, its child and grandchild";
  EXPECT_EQ(tids.size(), 1u) << "the thread's call names its thread";
}

// Ordinary multi-process Python meets no seccomp denial. Under
// python-sandbox: numpy in forked workers, a python3 subprocess, and joblib
// (which, without a writable /dev/shm for its semaphores, runs serially).
// multiprocessing.Pool needs POSIX semaphores in /dev/shm, which
// python-sandbox does not let a run write (README, IPC): with that one files
// rule added, Pool works under the same filter, by fork and by spawn.
// (forkserver also needs a unix socket, which python-sandbox denies.)
const std::string kJob =
    "import multiprocessing, numpy, os, subprocess, sys\n"
    "def work(i):\n"
    "    return int(numpy.arange(i * 1000).sum())\n"
    "want = [work(i) for i in range(6)]\n"
    "def forked():\n"
    "    pids = []\n"
    "    for i in range(2):\n"
    "        pid = os.fork()\n"
    "        if pid == 0:\n"
    "            os._exit(0 if work(i) == want[i] else 1)\n"
    "        pids.append(pid)\n"
    "    assert all(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 0 for p in pids)\n"
    "    out = subprocess.run([sys.executable, '-c', 'print(6*7)'], capture_output=True, text=True)\n"
    "    assert out.stdout == '42\\n', out\n"
    "    import joblib\n"
    "    assert joblib.Parallel(n_jobs=2)(joblib.delayed(work)(i) for i in range(6)) == want\n"
    "    print('forked ok', flush=True)\n"
    "def pool():\n"
    "    for method in ('fork', 'spawn'):\n"
    "        with multiprocessing.get_context(method).Pool(2) as p:\n"
    "            assert p.map(work, range(6)) == want, method\n"
    "    print('pool ok', flush=True)\n";

// ARGS that write job.py into the workspace and call job.WHAT(): spawned
// workers import the work function by module name.
std::vector<std::string> job(const std::string& what) {
  std::string quoted;
  for (char c : kJob)
    quoted += c == '\n'   ? std::string("\\n")
              : c == '\'' ? std::string("\\'")
              : c == '\\' ? std::string("\\\\")
                          : std::string(1, c);
  return py("open('job.py', 'w').write('" + quoted +
                "')\n"
                "import sys; sys.path.insert(0, '.')\n"
                "import job\n"
                "if __name__ == '__main__':\n"
                "    job." +
                what + "()\n",
            {"--timeout", "5m", "--memory", "1Gi"});
}

TEST_F(Syscalls, NumpyForkedWorkersSubprocessAndJoblibMeetNoSyscallDenial) {
  Ran r = run(job("forked"));
  ASSERT_EQ(r.code, 0) << r.describe() << r.result["denials"].dump(2);
  EXPECT_EQ(r.out, "forked ok\n");
  EXPECT_EQ(r.result["denials"]["syscalls"]["total"], 0) << r.result["denials"].dump(2);
}

TEST_F(Syscalls, MultiprocessingPoolMeetsNoSyscallDenial) {
  static const std::string policy = [] {
    const std::string p = "/tmp/agentcage-kt-python-sandbox-shm.yaml";
    std::string text = slurp(kPythonSandbox);
    const std::string ws = "      - ${workspace}\n";
    const auto at = text.find(ws);
    if (at != std::string::npos) text.insert(at + ws.size(), "      - /dev/shm\n");
    std::ofstream(p) << text;
    return p;
  }();
  ASSERT_NE(slurp(policy).find("- /dev/shm"), std::string::npos);
  SpawnOptions o;
  o.policy = policy;
  Ran r = run(job("pool"), o);
  ASSERT_EQ(r.code, 0) << r.describe() << r.result["denials"].dump(2);
  EXPECT_EQ(r.out, "pool ok\n");
  EXPECT_EQ(r.result["denials"]["syscalls"]["total"], 0) << r.result["denials"].dump(2);
}

// agentcage stopped (a slow supervisor): the denied call waits, it does not
// run. agentcage killed: the kernel fails the call (ENOSYS), never runs it.
// A grandchild in its own session outlives agentcage (no parent-death
// signal) and keeps calling unshare(0), which would succeed unfiltered. It
// writes the answers to a file in its workspace, not to stdout: a file
// stdout is relayed through agentcage, which dies here.
TEST_F(Syscalls, StoppedOrDeadAgentcageNeverLetsADeniedCallThrough) {
  const std::string nr = std::to_string(SYS_unshare);
  const fs::path ws = fs::temp_directory_path() / ("ac-seccomp-dead-" + std::to_string(::getpid()));
  std::error_code ws_ec;
  fs::remove_all(ws, ws_ec);
  ASSERT_TRUE(fs::create_directories(ws));
  Started s = start(py(kCaller +
                           "import time\n"
                           "if os.fork() == 0:\n"
                           "    os.setsid()\n"
                           "    f = open('calls.txt', 'a')\n"
                           "    for i in range(100000):\n"
                           "        print(call(" +
                           nr +
                           ", 0), file=f, flush=True)\n"
                           "        time.sleep(0.01)\n"
                           "    os._exit(0)\n"
                           "time.sleep(600)\n",
                       {"--timeout", "5m", "--workspace", ws.string(), "--disk", "unlimited"}));
  const fs::path out = ws / "calls.txt";
  auto lines = [&] {
    const std::string text = slurp(out);
    return static_cast<long>(std::count(text.begin(), text.end(), '\n'));
  };
  auto wait_for_lines = [&](long n) {
    for (int i = 0; i < 600 && lines() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  wait_for_lines(5);
  ASSERT_GE(lines(), 5) << slurp(s.dir / "stderr");

  ASSERT_EQ(::kill(s.pid, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long stopped_at = lines();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_LE(lines(), stopped_at + 1) << "calls went on while agentcage could not answer";

  ASSERT_EQ(::kill(s.pid, SIGKILL), 0);
  // Not finish(): that removes the directory the grandchild still writes to.
  int status = 0;
  while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const long at_kill = lines();
  wait_for_lines(at_kill + 5);

  std::istringstream all(slurp(out));
  size_t eperm = 0, enosys = 0, other = 0;
  for (std::string l; std::getline(all, l);) {
    if (l == "1")
      ++eperm;
    else if (l == "38")
      ++enosys;
    else
      ++other;
  }
  EXPECT_GE(eperm, 5u);
  EXPECT_GE(enosys, 3u) << "after agentcage died the calls fail with ENOSYS";
  EXPECT_EQ(other, 0u) << slurp(out);

  std::error_code ec;
  fs::remove_all(s.dir, ec);
  // The next run reaps what is left (run_test.cpp's stale-run test checks
  // the details).
  Ran next = run(py("pass"));
  EXPECT_EQ(next.code, 0) << next.describe();
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
  fs::remove_all(ws, ec);
}

}  // namespace
}  // namespace agentcage::kt
