// SPDX-License-Identifier: Apache-2.0
// `agentcage run` end to end: the real binary (build/agentcage) with the
// shipped policies/python-sandbox.yaml, real processes, real limits. Needs
// root and a kernel that enforces (the VM: tests/vm/run --kernel 6.1|6.12).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"

#ifndef AGENTCAGE_SOURCE_DIR
#error "AGENTCAGE_SOURCE_DIR must point at the repository (set by tests/kernel/CMakeLists.txt)"
#endif

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kPolicy = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/python-sandbox.yaml";
const fs::path kRunsCgroup = "/sys/fs/cgroup/agentcage/runs";

std::string agentcage_bin() {
  return (fs::read_symlink("/proc/self/exe").parent_path() / ".." / "agentcage").lexically_normal().string();
}

// Scope ids and cgroups of every run in this file, for the final check.
std::set<uint64_t>& all_scopes() {
  static std::set<uint64_t> s;
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Started {
  pid_t pid = -1;
  fs::path dir;  // holds stdout, stderr, result.json
  Clock::time_point t0;
};

struct SpawnOptions {
  std::vector<std::string> env;  // added to this process's environment
  int inherit_fd = -1;           // left open (not CLOEXEC) in agentcage
};

// Starts `agentcage run --policy <python-sandbox> --result DIR/result.json ARGS`.
Started start(const std::vector<std::string>& args, const SpawnOptions& o = {}) {
  Started s;
  char tmpl[] = "/tmp/ac-run-test-XXXXXX";
  s.dir = ::mkdtemp(tmpl);
  std::vector<std::string> argv = {agentcage_bin(), "run",      "--policy",
                                   kPolicy,         "--result", (s.dir / "result.json").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  s.t0 = Clock::now();
  s.pid = ::fork();
  if (s.pid == 0) {
    int out = ::open((s.dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open((s.dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::close(out);
    ::close(err);
    if (o.inherit_fd >= 0) ::fcntl(o.inherit_fd, F_SETFD, 0);
    for (const auto& e : o.env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(99);
  }
  return s;
}

struct Ran {
  int code = -1;
  double seconds = 0;
  std::string out, err;
  json result;
  std::string describe() const {
    return "exit " + std::to_string(code) + "\nstdout: " + out + "\nstderr: " + err;
  }
};

Ran finish(const Started& s) {
  Ran r;
  int status = 0;
  while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - s.t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(s.dir / "stdout");
  r.err = slurp(s.dir / "stderr");
  std::error_code ec;
  if (fs::exists(s.dir / "result.json", ec)) {
    r.result = json::parse(slurp(s.dir / "result.json"), nullptr, false);
    if (r.result.is_object() && r.result.contains("scope_id"))
      all_scopes().insert(r.result["scope_id"].get<uint64_t>());
  }
  fs::remove_all(s.dir, ec);
  return r;
}

Ran run(const std::vector<std::string>& args, const SpawnOptions& o = {}) { return finish(start(args, o)); }

std::vector<std::string> py(const std::string& code, std::vector<std::string> before = {}) {
  before.insert(before.end(), {"--", "python3", "-c", code});
  return before;
}

uint64_t denied(const Ran& r, const std::string& hook) {
  const auto& by = r.result["denials"]["by_hook"];
  return by.contains(hook) ? by[hook].get<uint64_t>() : 0;
}

bool has_record(const Ran& r, const std::string& hook, const std::string& target) {
  for (const auto& rec : r.result["denials"]["records"])
    if (rec["hook"] == hook && rec["target"] == target) return true;
  return false;
}

// A process is gone when /proc has no entry or only a zombie (the VM's
// init may reap late); either way it runs no code.
bool process_gone(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

std::vector<pid_t> processes_of_dynamic_uids() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (st.st_uid >= 0x70000000u && st.st_uid < 0x70000000u + 65536u && !process_gone(std::stoi(name)))
      out.push_back(std::stoi(name));
  }
  return out;
}

std::vector<std::string> run_cgroups() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kRunsCgroup, ec))
    if (e.is_directory(ec)) out.push_back(e.path().string());
  return out;
}

class Run : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists(agentcage_bin())) << agentcage_bin();
  }
};

// ---- the seed scenarios ------------------------------------------------------

TEST_F(Run, MatplotlibSavesPngIntoWorkspace) {
  // A fresh workspace means a fresh font cache: ~30 s under TCG.
  Ran r =
      run(py("import matplotlib\n"
             "matplotlib.use('Agg')\n"
             "import matplotlib.pyplot as plt\n"
             "plt.plot([1, 4, 9, 16])\n"
             "plt.title('agentcage')\n"
             "plt.savefig('plot.png')\n"
             "print('saved')\n",
             {"--keep", "--timeout", "10m", "--memory", "1Gi"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "saved\n");
  ASSERT_TRUE(r.result.is_object()) << r.describe();
  EXPECT_EQ(r.result["exit_code"], 0);
  EXPECT_EQ(r.result["policy"], "python-sandbox");
  EXPECT_TRUE(r.result["workspace_kept"].get<bool>());
  fs::path ws = r.result["workspace"].get<std::string>();
  std::string png = slurp(ws / "plot.png");
  ASSERT_GE(png.size(), 8u) << "no PNG in " << ws;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  struct stat st {};
  ASSERT_EQ(::stat(ws.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, r.result["uid"].get<uint32_t>());
  std::error_code ec;
  fs::remove_all(ws, ec);
}

// Imports stat and realpath() their way down /usr/lib: the directories on
// the way to allowed paths stay stat'able, host files and host processes do
// not, and the run's own /proc stays readable.
TEST_F(Run, LargeImportsWorkWhileHostMetadataIsHidden) {
  Ran r = run(py("import numpy, json, sqlite3, decimal, email.mime.text, xml.etree.ElementTree\n"
                 "import multiprocessing, asyncio, unittest, os\n"
                 "print(os.path.realpath(numpy.__file__).startswith('/usr/lib/'))\n"
                 "print(os.stat('/usr').st_uid == 0)\n"
                 "for p in ('/etc/passwd', '/root', '/proc/1/status', '/proc/1'):\n"
                 "    try:\n"
                 "        os.stat(p)\n"
                 "        print('visible', p)\n"
                 "    except PermissionError:\n"
                 "        print('denied')\n"
                 "print(open('/proc/self/status').readline().split()[0])\n",
                 {"--timeout", "5m", "--memory", "1Gi"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "True\nTrue\ndenied\ndenied\ndenied\ndenied\nName:\n") << r.describe();
}

TEST_F(Run, OtherProgramsCannotBeExecuted) {
  Ran sh = run({"--", "/bin/sh", "-c", "echo should-not-run"});
  EXPECT_EQ(sh.code, 126) << sh.describe();
  EXPECT_EQ(sh.out, "");
  // The program file is opened for exec first: denied as file_open when the
  // policy does not let it be read, else at bprm_check_security as exec.
  EXPECT_GE(denied(sh, "exec") + denied(sh, "file_open"), 1u) << sh.result.dump(2);
  EXPECT_NE(sh.err.find("denied by policy python-sandbox"), std::string::npos) << sh.err;
  EXPECT_FALSE(sh.result["started"].get<bool>());

  std::string curl = fs::exists("/usr/bin/curl") ? "/usr/bin/curl" : "/usr/bin/env";
  Ran c = run({"--", curl, "http://127.0.0.1:1/"});
  EXPECT_EQ(c.code, 126) << c.describe();

  // From inside python: every spawn is denied.
  Ran p =
      run(py("import subprocess, sys\n"
             "try:\n"
             "    subprocess.run(['/usr/bin/id'])\n"
             "except PermissionError:\n"
             "    sys.exit(42)\n"));
  EXPECT_EQ(p.code, 42) << p.describe();
  EXPECT_TRUE(has_record(p, "exec", "/usr/bin/id") || has_record(p, "file_open", "/usr/bin/id"))
      << p.result.dump(2);
}

TEST_F(Run, DirectSocketConnectionFails) {
  // A real listener: the connection would succeed if it were not denied.
  int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(srv, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(srv, 8), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  Ran r =
      run(py("import socket, sys\n"
             "try:\n"
             "    socket.create_connection(('127.0.0.1', " +
             std::to_string(port) +
             "), timeout=5)\n"
             "except PermissionError:\n"
             "    sys.exit(42)\n"
             "print('connected')\n"));
  ::close(srv);
  EXPECT_EQ(r.code, 42) << r.describe();
  EXPECT_TRUE(has_record(r, "socket_connect", "127.0.0.1:" + std::to_string(port))) << r.result.dump(2);
}

TEST_F(Run, HostFilesCannotBeRead) {
  Ran r =
      run(py("import os, sys\n"
             "denied = 0\n"
             "for f in ['/etc/passwd', '/etc/shadow', '/root/.bashrc']:\n"
             "    try:\n"
             "        open(f).read()\n"
             "    except (PermissionError, FileNotFoundError):\n"
             "        denied += 1\n"
             "for d in ['/etc', '/home', '/root', '/var/lib/agentcage/workspaces']:\n"
             "    try:\n"
             "        os.listdir(d)\n"
             "    except PermissionError:\n"
             "        denied += 1\n"
             "sys.exit(42 if denied == 7 else denied)\n"));
  EXPECT_EQ(r.code, 42) << r.describe();
  EXPECT_TRUE(has_record(r, "file_open", "/etc/passwd")) << r.result.dump(2);
  EXPECT_GE(denied(r, "file_open"), 3u);
}

TEST_F(Run, ForkBombIsHeldByPidsMaxAndEndedAtTimeout) {
  Started s =
      start(py("import os\n"
               "while True:\n"
               "    try:\n"
               "        os.fork()\n"
               "    except OSError:\n"
               "        pass\n",
               {"--pids", "32", "--timeout", "15s"}));
  // While the bomb runs, the host must still start processes quickly.
  std::this_thread::sleep_for(std::chrono::seconds(8));
  auto t0 = Clock::now();
  int st = std::system("/bin/true");
  double host_spawn = std::chrono::duration<double>(Clock::now() - t0).count();
  uint64_t pids_peak = 0;
  for (const auto& cg : run_cgroups()) {
    std::string peak = slurp(fs::path(cg) / "pids.current");
    if (!peak.empty()) pids_peak = std::max<uint64_t>(pids_peak, std::stoull(peak));
  }
  Ran r = finish(s);
  EXPECT_EQ(st, 0);
  EXPECT_LT(host_spawn, 5.0) << "the host did not stay responsive";
  EXPECT_LE(pids_peak, 32u);
  EXPECT_EQ(r.code, 124) << r.describe();
  EXPECT_TRUE(r.result["timed_out"].get<bool>());
  EXPECT_EQ(r.result["limits"]["pids"], 32);
}

TEST_F(Run, InfiniteLoopEndsAtTimeout) {
  Ran r = run(py("while True:\n    pass\n", {"--timeout", "4s"}));
  EXPECT_EQ(r.code, 124) << r.describe();
  EXPECT_TRUE(r.result["timed_out"].get<bool>());
  // wall_time_ms runs from the start of COMMAND to the empty cgroup.
  double wall = r.result["wall_time_ms"].get<double>();
  EXPECT_GE(wall, 4000.0);
  EXPECT_LE(wall, 6000.0) << "the run ended more than 2 s after its timeout";
}

TEST_F(Run, MemoryBombIsOomKilled) {
  Ran r =
      run(py("chunks = []\n"
             "while True:\n"
             "    chunks.append(bytearray(4 << 20))\n",
             {"--memory", "96Mi", "--timeout", "5m"}));
  EXPECT_EQ(r.code, 137) << r.describe();
  EXPECT_TRUE(r.result["oom_killed"].get<bool>()) << r.result.dump(2);
  EXPECT_EQ(r.result["signal"], "SIGKILL");
  EXPECT_FALSE(r.result["timed_out"].get<bool>());
  EXPECT_LE(r.result["peak_memory_bytes"].get<uint64_t>(), 96u << 20);
}

// ---- the exit-status contract -------------------------------------------------

TEST_F(Run, ExitStatusContract) {
  Ran ok = run(py("import sys; sys.exit(7)"));
  EXPECT_EQ(ok.code, 7) << ok.describe();
  EXPECT_EQ(ok.result["exit_status"], 7);

  Ran bad_limit = run(py("print('ran')", {"--memory", "lots"}));
  EXPECT_EQ(bad_limit.code, 125) << bad_limit.describe();
  EXPECT_EQ(bad_limit.out, "");
  EXPECT_NE(bad_limit.err.find("--memory"), std::string::npos) << bad_limit.err;

  Ran bad_user = run(py("print('ran')", {"--user", "no-such-user-agentcage"}));
  EXPECT_EQ(bad_user.code, 125) << bad_user.describe();
  EXPECT_EQ(bad_user.out, "");
  EXPECT_FALSE(bad_user.result["started"].get<bool>());

  Ran not_exec = run({"--", "/etc/passwd"});
  EXPECT_EQ(not_exec.code, 126) << not_exec.describe();

  Ran missing = run({"--", "/nonexistent/program"});
  EXPECT_EQ(missing.code, 127) << missing.describe();
  Ran missing_in_path = run({"--", "no-such-program-agentcage"});
  EXPECT_EQ(missing_in_path.code, 127) << missing_in_path.describe();

  Ran sig = run(py("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)"));
  EXPECT_EQ(sig.code, 128 + SIGUSR1) << sig.describe();
  EXPECT_EQ(sig.result["signal"], "SIGUSR1");
}

// ---- lifecycle -----------------------------------------------------------------

TEST_F(Run, DaemonizedChildIgnoringSigtermIsGoneAfterTheRun) {
  Ran r =
      run(py("import os, signal, sys, time\n"
             "r, w = os.pipe()\n"
             "if os.fork() == 0:\n"
             "    os.setsid()\n"
             "    if os.fork() == 0:\n"
             "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "        os.write(w, str(os.getpid()).encode())\n"
             "        os.close(w)\n"
             "        while True:\n"
             "            time.sleep(1)\n"
             "    os._exit(0)\n"
             "os.close(w)\n"
             "print(os.read(r, 32).decode())\n"));
  ASSERT_EQ(r.code, 0) << r.describe();
  pid_t daemon = std::stoi(r.out);
  ASSERT_GT(daemon, 1);
  EXPECT_TRUE(process_gone(daemon)) << "pid " << daemon << " survived the run";
  EXPECT_FALSE(fs::exists(r.result["cgroup"].get<std::string>()));
}

TEST_F(Run, SigtermToAgentcageLeavesNothing) {
  Started s = start(py("import time\nprint('up', flush=True)\ntime.sleep(600)\n"));
  // Wait until COMMAND runs (it prints), then stop agentcage.
  for (int i = 0; i < 600 && slurp(s.dir / "stdout").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(slurp(s.dir / "stdout"), "up\n");
  ::kill(s.pid, SIGTERM);
  Ran r = finish(s);
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.describe();
  EXPECT_EQ(r.result["interrupted_by"], "SIGTERM");
  EXPECT_FALSE(fs::exists(r.result["cgroup"].get<std::string>()));
  EXPECT_FALSE(fs::exists(r.result["workspace"].get<std::string>()));
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
}

TEST_F(Run, CallerEnvironmentAndFdsAreInvisible) {
  int fd = ::open("/etc/hostname", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  SpawnOptions o;
  o.env = {"AGENTCAGE_TEST_SECRET=hunter2", "OPENAI_API_KEY=sk-test"};
  o.inherit_fd = fd;
  Ran r = run(py("import os, json\n"
                 "fds = []\n"
                 "for fd in range(3, 1024):\n"
                 "    try:\n"
                 "        os.fstat(fd)\n"
                 "        fds.append(fd)\n"
                 "    except OSError:\n"
                 "        pass\n"
                 "print(json.dumps({'env': sorted(os.environ), 'fds': fds, 'uid': os.getuid(),\n"
                 "                  'sid': os.getsid(0) == os.getpid(), 'umask': os.umask(0)}))\n",
                 {"--env", "GREETING=hi"}),
              o);
  ::close(fd);
  ASSERT_EQ(r.code, 0) << r.describe();
  json seen = json::parse(r.out);
  EXPECT_EQ(seen["env"], json({"GREETING", "HOME", "LANG", "PATH", "TMPDIR"}));
  EXPECT_EQ(seen["fds"], json::array()) << "inherited descriptors are open inside";
  EXPECT_NE(seen["uid"], 0);
  EXPECT_TRUE(seen["sid"].get<bool>());
  EXPECT_EQ(seen["umask"], 077);
}

TEST_F(Run, ConcurrentRunsCannotTouchEachOthersWorkspace) {
  Started a =
      start(py("import os, time\n"
               "open('secret.txt', 'w').write('a')\n"
               "print(os.getcwd(), flush=True)\n"
               "time.sleep(600)\n"));
  for (int i = 0; i < 600 && slurp(a.dir / "stdout").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string ws_a = slurp(a.dir / "stdout");
  ASSERT_FALSE(ws_a.empty());
  ws_a.pop_back();
  // python3 -c CODE ARG: pass A's workspace as argv[1].
  Ran b2 = run({"--", "python3", "-c",
                "import os, sys\n"
                "a = sys.argv[1]\n"
                "blocked = 0\n"
                "for op in (lambda: open(a + '/secret.txt').read(), lambda: os.listdir(a),\n"
                "           lambda: open(a + '/planted.txt', 'w')):\n"
                "    try:\n"
                "        op()\n"
                "    except PermissionError:\n"
                "        blocked += 1\n"
                "sys.exit(42 if blocked == 3 else blocked)\n",
                ws_a});
  ::kill(a.pid, SIGTERM);
  Ran ra = finish(a);
  EXPECT_EQ(b2.code, 42) << b2.describe();
  EXPECT_NE(b2.result["uid"], ra.result["uid"]);
  EXPECT_FALSE(fs::exists(ws_a + "/planted.txt"));
}

TEST_F(Run, StaleRunOfKilledAgentcageIsReapedByNextRun) {
  auto before = run_cgroups();
  // The grandchild outlives its parent (PR_SET_PDEATHSIG only covers the
  // direct child): only the reaper can end it.
  Started s =
      start(py("import os, time\n"
               "if os.fork() == 0:\n"
               "    os.setsid()\n"
               "    while True:\n"
               "        time.sleep(1)\n"
               "print('up', flush=True)\n"
               "time.sleep(600)\n"));
  for (int i = 0; i < 600 && slurp(s.dir / "stdout").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(slurp(s.dir / "stdout"), "up\n");
  std::string stale;
  for (const auto& cg : run_cgroups())
    if (std::find(before.begin(), before.end(), cg) == before.end()) stale = cg;
  ASSERT_FALSE(stale.empty());
  const std::string stale_id = fs::path(stale).filename().string();
  ::kill(s.pid, SIGKILL);
  Ran killed = finish(s);
  ASSERT_EQ(killed.code, 128 + SIGKILL);
  // Left behind for now: the cgroup with the grandchild in it, the record.
  ASSERT_TRUE(fs::exists(stale));
  EXPECT_FALSE(slurp(fs::path(stale) / "cgroup.procs").empty());
  EXPECT_TRUE(fs::exists("/run/agentcage/runs/" + stale_id + ".json"));
  auto stale_scope = cgroup::cgroup_id(stale);
  ASSERT_TRUE(stale_scope) << stale_scope.error().message;
  all_scopes().insert(*stale_scope);
  auto shared = bpf::Enforcer::open_shared();
  ASSERT_TRUE(shared) << shared.error().message;
  auto scopes_before = (*shared)->scopes();
  ASSERT_TRUE(scopes_before);
  EXPECT_TRUE(std::any_of(scopes_before->begin(), scopes_before->end(), [&](const bpf::ScopeInfo& i) {
    return i.scope_id == *stale_scope;
  })) << "the stale run's scope must stay registered until it is reaped";

  Ran next = run(py("pass"));
  EXPECT_EQ(next.code, 0) << next.describe();
  EXPECT_NE(next.err.find("reaped stale run " + stale_id), std::string::npos) << next.err;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists("/run/agentcage/runs/" + stale_id + ".json"));
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
  auto scopes = (*shared)->scopes();
  ASSERT_TRUE(scopes) << scopes.error().message;
  for (const auto& i : *scopes) EXPECT_NE(i.scope_id, *stale_scope) << "stale scope not removed";
  EXPECT_TRUE(run_cgroups().empty());
}

// Last in this file (gtest keeps declaration order): nothing of any run here
// is left -- no cgroup, no scope in the shared maps, no process, no record.
TEST_F(Run, ZzNothingLeftBehind) {
  ASSERT_FALSE(all_scopes().empty());
  EXPECT_EQ(run_cgroups(), std::vector<std::string>{});
  auto shared = bpf::Enforcer::open_shared();
  ASSERT_TRUE(shared) << shared.error().message;
  auto scopes = (*shared)->scopes();
  ASSERT_TRUE(scopes) << scopes.error().message;
  for (const auto& s : *scopes)
    EXPECT_EQ(all_scopes().count(s.scope_id), 0u) << "scope " << s.scope_id << " left";
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/agentcage/runs", ec))
    ADD_FAILURE() << "run record left: " << e.path();
}

}  // namespace
}  // namespace agentcage::kt
