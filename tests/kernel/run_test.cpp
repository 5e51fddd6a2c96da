// SPDX-License-Identifier: Apache-2.0
// `agentcage run` end to end: the real binary (build/agentcage) with the
// shipped policies/python-sandbox.yaml, real processes, real limits. Needs
// root and a kernel that enforces (the VM: tests/vm/run --kernel 6.1|6.12).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <bpf/bpf.h>
#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "fuse_server.h"
#include "kernel_env.h"
#include "probes.h"
#include "run/options.h"
#include "run/sandbox.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

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
  // Root's, with what the run made in it: its dynamic uid will be another run's.
  EXPECT_EQ(st.st_uid, 0u);
  ASSERT_EQ(::stat((ws / "plot.png").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  std::error_code ec;
  fs::remove_all(ws, ec);
}

// Imports stat and realpath() their way down /usr/lib: the directories on
// the way to allowed paths stay stat'able, host files and host processes do
// not, and the run's own /proc stays readable.
TEST_F(Run, LargeImportsWorkWhileHostMetadataIsHidden) {
  Ran r =
      run(py("import numpy, json, sqlite3, decimal, email.mime.text, xml.etree.ElementTree\n"
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
  uint16_t port = 0;
  int srv = listen_tcp(AF_INET, &port);
  ASSERT_GE(srv, 0);
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

// The ids of the UDP receive filters (any set's) attached to cgroup `cg` at
// BPF_CGROUP_INET_INGRESS.
std::vector<uint32_t> receive_filters_on(const fs::path& cg) {
  std::vector<uint32_t> out;
  int dir = ::open(cg.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return out;
  const std::vector<uint32_t> ids = ingress_programs(dir);
  ::close(dir);
  for (uint32_t id : ids) {
    int prog = bpf_prog_get_fd_by_id(id);
    if (prog < 0) continue;
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(prog, &info, &len) == 0 && std::string(info.name) == "ac_udp_client_f")
      out.push_back(id);
    ::close(prog);
  }
  return out;
}

// The program id of the shared set's UDP receive filter (pinned under its
// programs/ as ac_udp_client_filter); 0 when there is none.
uint32_t shared_filter_id() {
  const std::string pin =
      bpf::Enforcer::shared_pin_dir(bpf::SharedOptions{}.pin_root) + "/programs/ac_udp_client_filter";
  int prog = bpf_obj_get(pin.c_str());
  if (prog < 0) return 0;
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  const uint32_t id = bpf_obj_get_info_by_fd(prog, &info, &len) == 0 ? info.id : 0;
  ::close(prog);
  return id;
}

// python-sandbox.yaml that may send UDP to 127.0.0.1:port, written to a
// file of its own; its path.
std::string udp_client_policy(uint16_t port) {
  const std::string file = "/tmp/agentcage-kt-udp-client.yaml";
  std::string text = slurp(kPythonSandbox);
  const size_t at = text.find("  # No network section");
  if (at == std::string::npos) return "";
  text.insert(at, "  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" + std::to_string(port) +
                      "], protocol: udp}\n");
  std::ofstream(file) << text;
  return file;
}

// A run whose UDP client sends to the host socket `echo` and prints what it
// hears within 2 s: the answer ("p"), and another host socket's datagram
// to the same client ("i") unless the receive filter drops it.
Ran udp_client_run(int echo, int other, SpawnOptions o) {
  const uint16_t port = port_of(echo);
  o.policy = udp_client_policy(port);
  const std::string code =
      "import socket\n"
      "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
      "s.settimeout(2)\n"
      "s.sendto(b'q', ('127.0.0.1', " +
      std::to_string(port) +
      "))\n"
      "got = b''\n"
      "try:\n"
      "    while True:\n"
      "        got += s.recv(1)\n"
      "except TimeoutError:\n"
      "    pass\n"
      "print(got.decode())\n";
  std::thread t = answer_then_spray(echo, other);
  Ran r = run(py(code), o);
  t.join();
  ::unlink(o.policy.c_str());
  return r;
}

TEST_F(Run, EveryRunsUdpClientHearsOnlyFromWhereItSentThroughOneFilterOnTheRunParent) {
  // The filter of what a run's UDP client hears was attached to each run's
  // cgroup and detached at its end: with no other such program on the
  // host, that switched the kernel's cgroup ingress branch on and off, a
  // patch of kernel text with every CPU stopped for it, twice per run. It
  // is attached once, to the run parent, where only runs live, and every
  // run's cgroup inherits it: the answer of the peer a run sent to
  // arrives, another host socket's datagram to the same client does not.
  int echo = udp_bound(AF_INET, "127.0.0.1"), other = udp_bound(AF_INET, "127.0.0.1");
  ASSERT_TRUE(echo >= 0 && other >= 0) << std::strerror(errno);
  std::vector<uint32_t> kept;
  for (int i = 0; i < 2; ++i) {
    Ran r = udp_client_run(echo, other, {});
    EXPECT_EQ(r.code, 0) << r.describe();
    EXPECT_EQ(r.out, "p\n") << "run " << i
                            << ": \"pi\": the other socket's datagram arrived; \"\": not even the answer";
    EXPECT_EQ(denied(r, "ingress"), 1u) << r.result["denials"].dump(2);
    auto filters = receive_filters_on(kRunsCgroup);
    const uint32_t ours = shared_filter_id();
    ASSERT_NE(ours, 0u);
    EXPECT_NE(std::find(filters.begin(), filters.end(), ours), filters.end())
        << "the shared set's receive filter is not on " << kRunsCgroup;
    if (i == 0)
      kept = filters;
    else
      EXPECT_EQ(filters, kept) << "the second run attached another filter, or took the first one off";
  }
  ::close(echo);
  ::close(other);
}

TEST_F(Run, ARunParentThatTakesNoMoreProgramsPutsTheFilterOnEachRun) {
  // The kernel takes 64 programs per cgroup and attach type. A run parent
  // full of other programs (other tools', older sets' filters) cannot take
  // the filter: each run's own cgroup gets it instead, as any other
  // scope's does, and the run's UDP client still hears only from where it
  // sent. The parent is left as it was.
  const std::string name = "full-parent-" + std::to_string(::getpid());
  auto parent = test_cgroup(name);
  ASSERT_TRUE(parent.ok()) << parent.error().message;
  std::vector<int> tools;
  struct CloseAll {
    std::vector<int>& fds;
    ~CloseAll() {
      for (int fd : fds) ::close(fd);
    }
  } close_tools{tools};
  for (int i = 0; i < 64; ++i) {
    int tool = pass_all_program();
    ASSERT_GE(tool, 0) << std::strerror(errno);
    tools.push_back(tool);
    ASSERT_EQ(bpf_prog_attach(tool, parent->fd(), BPF_CGROUP_INET_INGRESS, BPF_F_ALLOW_MULTI), 0)
        << "program " << i << ": " << std::strerror(errno);
  }
  int echo = udp_bound(AF_INET, "127.0.0.1"), other = udp_bound(AF_INET, "127.0.0.1");
  ASSERT_TRUE(echo >= 0 && other >= 0) << std::strerror(errno);
  SpawnOptions o;
  o.env = {"AGENTCAGE_CGROUP_PARENT=agentcage-kt/" + name};
  Ran r = udp_client_run(echo, other, o);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "p\n") << "\"pi\": the other socket's datagram arrived; \"\": not even the answer";
  EXPECT_EQ(denied(r, "ingress"), 1u) << r.result["denials"].dump(2);
  EXPECT_EQ(r.result.value("cgroup", ""), (parent->path() / r.result.value("run_id", "")).string())
      << r.result.dump(2);
  EXPECT_TRUE(receive_filters_on(parent->path()).empty());
  for (int tool : tools) EXPECT_EQ(bpf_prog_detach2(tool, parent->fd(), BPF_CGROUP_INET_INGRESS), 0);
  ::close(echo);
  ::close(other);
  EXPECT_TRUE(parent->remove().ok());
}

TEST_F(Run, AFilterAttachedAboveTheRunParentThatAdmitsNoOtherRefusesTheNextRun) {
  // Another tool's ingress program attached with no flag above the run
  // parent once the filter is there: the kernel lets it be attached (it
  // checks the cgroups above, not below) and leaves it out for every
  // cgroup below the run parent, whose own program comes first. The next
  // run is refused, naming that cgroup, as a run was when its own cgroup
  // took the filter (the kernel admits nothing below such a program); with
  // the tool's program gone, runs go on.
  const std::string name = "tool-above-" + std::to_string(::getpid());
  auto outer = test_cgroup(name);
  ASSERT_TRUE(outer.ok()) << outer.error().message;
  SpawnOptions o;
  o.env = {"AGENTCAGE_CGROUP_PARENT=agentcage-kt/" + name + "/runs"};
  o.policy = std::string(AGENTCAGE_SOURCE_DIR) + "/bench/run-true.yaml";  // /usr/bin/true, allowed
  Ran first = run({"--", "/usr/bin/true"}, o);
  EXPECT_EQ(first.code, 0) << first.describe();
  EXPECT_FALSE(receive_filters_on(outer->path() / "runs").empty());
  int tool = pass_all_program();
  ASSERT_GE(tool, 0) << std::strerror(errno);
  ASSERT_EQ(bpf_prog_attach(tool, outer->fd(), BPF_CGROUP_INET_INGRESS, 0), 0) << std::strerror(errno);
  Ran refused = run({"--", "/usr/bin/true"}, o);
  EXPECT_EQ(refused.code, 125) << refused.describe();
  EXPECT_NE(refused.err.find(outer->path().string() +
                             " has BPF_CGROUP_INET_INGRESS programs attached without BPF_F_ALLOW_MULTI"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(bpf_prog_detach2(tool, outer->fd(), BPF_CGROUP_INET_INGRESS), 0);
  ::close(tool);
  Ran again = run({"--", "/usr/bin/true"}, o);
  EXPECT_EQ(again.code, 0) << again.describe();
  EXPECT_EQ(::rmdir((outer->path() / "runs").c_str()), 0) << std::strerror(errno);
  EXPECT_TRUE(outer->remove().ok());
}

// policies/llm-proxy-only.yaml is python-sandbox.yaml (include:) plus the
// proxy's address: the included rules are enforced as if written there, and
// the policy's own rule opens exactly its one way out.
TEST_F(Run, AnIncludingPolicyEnforcesTheIncludedRulesAndItsOwn) {
  int proxy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(proxy, 0);
  int one = 1;
  ::setsockopt(proxy, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(8080);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(proxy, reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
      << "the test stands in for the LLM proxy on 127.0.0.1:8080, which is taken";
  ASSERT_EQ(::listen(proxy, 8), 0);
  uint16_t other_port = 0;
  const int other = listen_tcp(AF_INET, &other_port);
  ASSERT_GE(other, 0);
  SpawnOptions o;
  o.policy = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/llm-proxy-only.yaml";
  Ran r = run(py("import socket\n"
                 "out = []\n"
                 "for port in (8080, " +
                 std::to_string(other_port) +
                 "):\n"
                 "    try:\n"
                 "        socket.create_connection(('127.0.0.1', port), timeout=5).close()\n"
                 "        out.append('connected')\n"
                 "    except PermissionError:\n"
                 "        out.append('denied')\n"
                 "try:\n"
                 "    open('/etc/passwd').read()\n"
                 "    out.append('read')\n"
                 "except PermissionError:\n"
                 "    out.append('denied')\n"
                 "print(' '.join(out))\n"),
              o);
  ::close(proxy);
  ::close(other);
  ASSERT_EQ(r.code, 0) << r.describe();  // python3: exec.allow of the included file
  EXPECT_EQ(r.out, "connected denied denied\n") << r.describe();
  EXPECT_EQ(r.result["policy"], "llm-proxy-only");
  EXPECT_TRUE(has_record(r, "file_open", "/etc/passwd")) << r.result.dump(2);
  EXPECT_GE(denied(r, "socket_connect"), 1u) << r.result.dump(2);
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

// --mode audit: the policy's rules for one run, nothing denied, every
// would-be denial reported as audited (record, then enforce). The next run
// of the same policy is enforced again (the audit run's policy is a
// transient slot of its own), and --mode enforce enforces an audit-mode file.
TEST_F(Run, ModeAuditReportsWhatThePolicyWouldDenyForOneRunOnly) {
  const std::string code = "print(open('/etc/passwd').read()[:5])\n";
  Ran audit = run(py(code, {"--mode", "audit"}));
  ASSERT_EQ(audit.code, 0) << audit.describe();
  EXPECT_EQ(audit.out, "root:\n");
  EXPECT_EQ(audit.result["mode"], "audit");
  EXPECT_EQ(audit.result["denials"]["total"], 0) << audit.result["denials"].dump(2);
  EXPECT_GE(audit.result["denials"]["audited_by_hook"].value("file_open", 0), 1)
      << audit.result["denials"].dump(2);

  Ran enforced = run(py(code));
  EXPECT_EQ(enforced.code, 1) << enforced.describe();  // PermissionError
  EXPECT_EQ(enforced.result["mode"], "enforce");
  EXPECT_TRUE(has_record(enforced, "file_open", "/etc/passwd")) << enforced.result.dump(2);

  const std::string audit_file = "/tmp/agentcage-kt-python-sandbox-audit.yaml";
  std::string text = slurp(kPythonSandbox);
  const size_t at = text.find("mode: enforce");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 13, "mode: audit  ");
  std::ofstream(audit_file) << text;
  SpawnOptions o;
  o.policy = audit_file;
  Ran as_written = run(py(code), o);
  EXPECT_EQ(as_written.code, 0) << as_written.describe();
  EXPECT_EQ(as_written.result["mode"], "audit");
  Ran forced = run(py(code, {"--mode", "enforce"}), o);
  EXPECT_EQ(forced.code, 1) << forced.describe();
  EXPECT_EQ(forced.result["mode"], "enforce");
  EXPECT_GE(denied(forced, "file_open"), 1u) << forced.result.dump(2);
  ::unlink(audit_file.c_str());
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

// The timeout and a signal end a run whose COMMAND never finishes its exec:
// here the exec's lookup of argv[0] waits for a FUSE server that reads
// nothing. agentcage waits in the clone (CLONE_VFORK) until the child has
// exec'd; without a watch of its own there, it saw neither the timeout nor
// the signal, and waited with the child until something killed it.
TEST_F(Run, TheTimeoutAndASignalEndARunWhoseExecNeverFinishes) {
  FuseServer fuse(fs::path("/tmp") / ("agentcage-stopped-" + std::to_string(::getpid())));
  ASSERT_TRUE(fuse.ok()) << fuse.why();
  // Answered (INIT included) before the server stops: what waits from now
  // on waits for a request nobody reads.
  struct stat st {};
  ASSERT_EQ(::stat(fuse.file().c_str(), &st), 0) << std::strerror(errno);
  fuse.stop_reading();
  // Whether `s` has ended (not reaped: finish() does that); SIGKILL after
  // `limit`, so that a failure here ends too.
  const auto ended_within = [](const Started& s, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      siginfo_t si{};
      if (::waitid(P_PID, static_cast<id_t>(s.pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          si.si_pid == s.pid)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(s.pid, SIGKILL);
    return false;
  };

  // The timeout: 3 s, counted from before the clone.
  Started s = start({"--timeout", "3s", "--", (fuse.file().parent_path() / "first").string()});
  const bool timed = ended_within(s, std::chrono::seconds(40));
  Ran r = finish(s);
  EXPECT_TRUE(timed) << "agentcage run was still waiting for the exec 40 s after its 3 s timeout";
  EXPECT_EQ(r.code, 124) << r.describe();
  EXPECT_GE(r.seconds, 3.0);
  ASSERT_TRUE(r.result.is_object()) << r.describe();
  EXPECT_TRUE(r.result["timed_out"].get<bool>()) << r.result.dump(2);
  EXPECT_FALSE(r.result["started"].get<bool>()) << r.result.dump(2);
  EXPECT_NE(r.err.find("timed out after 3000 ms while COMMAND was starting"), std::string::npos) << r.err;

  // SIGINT (a ^C) and SIGTERM right after it, with no timeout at all, once
  // the child is in the run's cgroup (its exec waits): the first ends the
  // run, the second must not end agentcage before it reports.
  const auto before = run_cgroups();
  s = start({"--timeout", "unlimited", "--", (fuse.file().parent_path() / "second").string()});
  const auto child_started = [&] {
    for (const auto& cg : run_cgroups())
      if (std::find(before.begin(), before.end(), cg) == before.end() && !is_spare_run(cg) &&
          !slurp(fs::path(cg) / "cgroup.procs").empty())
        return true;
    return false;
  };
  const auto started_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!child_started() && std::chrono::steady_clock::now() < started_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(child_started()) << "no child in the run's cgroup after 30 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(s.pid, SIGINT);
  ::kill(s.pid, SIGTERM);
  const bool interrupted = ended_within(s, std::chrono::seconds(30));
  r = finish(s);
  EXPECT_TRUE(interrupted) << "agentcage run was still waiting for the exec 30 s after SIGINT";
  EXPECT_EQ(r.code, 130) << r.describe();
  ASSERT_TRUE(r.result.is_object()) << r.describe();
  EXPECT_EQ(r.result["interrupted_by"], "SIGINT") << r.result.dump(2);
  EXPECT_FALSE(r.result["started"].get<bool>()) << r.result.dump(2);
  EXPECT_NE(r.err.find("interrupted by SIGINT while COMMAND was starting"), std::string::npos) << r.err;
  // Nothing of either run is left.
  for (const auto& cg : run_cgroups()) EXPECT_TRUE(is_spare_run(cg)) << cg;
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
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

TEST_F(Run, AnExecOverTheMemoryLimitFailsTheRunNotAgentcage) {
  // COMMAND's process shares agentcage's memory until it execs (docs/run.md,
  // step 5), and exec's copy of its arguments is charged to the run's
  // cgroup. Over memory.max, the kernel must not pick that process as an
  // out-of-memory victim: every process sharing its memory would go with
  // it, agentcage included, with nothing reported and nothing removed.
  if (cgroup::can_spawn_sharing_memory()) {
    ASSERT_TRUE(run::child_may_share_memory())
        << "fs.suid_dumpable 1: runs fork, the shared clone goes untested";
  }
  SpawnOptions o;
  o.policy = std::string(AGENTCAGE_SOURCE_DIR) + "/bench/run-true.yaml";  // /usr/bin/true, allowed
  std::vector<std::string> args = {"--memory", "1Mi", "--", "/usr/bin/true"};
  for (int i = 0; i < 1900; ++i) args.emplace_back(1023, 'x');  // 1.9 MB of arguments
  Ran r = run(args, o);
  ASSERT_TRUE(r.result.is_object()) << "agentcage did not report: " << r.describe();
  EXPECT_NE(r.code, 0) << r.describe();
  EXPECT_EQ(r.result["exit_code"], r.code) << r.result.dump(2);
  EXPECT_TRUE(run_cgroups().empty()) << testing::PrintToString(run_cgroups());
  // The same limit with arguments that fit: the run goes as usual.
  Ran fits = run({"--memory", "1Mi", "--", "/usr/bin/true"}, o);
  EXPECT_EQ(fits.code, 0) << fits.describe();
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
  // A fixed identity among the dynamic uids would share one with a run.
  for (const char* dynamic : {"1879048200", "1000:1879048200"}) {
    Ran leased = run(py("print('ran')", {"--user", dynamic}));
    EXPECT_EQ(leased.code, 125) << leased.describe();
    EXPECT_EQ(leased.out, "");
    EXPECT_NE(leased.err.find("range of dynamic uids"), std::string::npos) << leased.err;
  }

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

// ---- where the result goes, and what a kept workspace hands back ------------

// Runs agentcage with exactly `args` (no --result added); stdout and stderr
// are captured; `fd3` (if >= 0) is passed down as descriptor 3.
struct Plain {
  int code = -1;
  std::string out, err;
};
Plain run_plain(const std::vector<std::string>& args, int fd3 = -1) {
  char tmpl[] = "/tmp/ac-run-plain-XXXXXX";
  const fs::path dir = ::mkdtemp(tmpl);
  std::vector<std::string> argv = {agentcage_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open((dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open((dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (fd3 >= 0) ::dup2(fd3, 3);  // dup2 clears close-on-exec
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(99);
  }
  if (fd3 >= 0) ::close(fd3);
  Plain r;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir / "stdout");
  r.err = slurp(dir / "stderr");
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

// --result-fd: the document arrives on the caller's pipe, then end-of-file;
// COMMAND never holds the descriptor. --result -: on stdout after COMMAND's.
TEST_F(Run, ResultReachesAPipeAndStdout) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const std::string probe =
      "import os\n"
      "try:\n"
      "    os.fstat(3)\n"
      "    print('fd 3 open')\n"
      "except OSError:\n"
      "    print('fd 3 closed')\n";
  Plain r =
      run_plain({"run", "--policy", kPythonSandbox, "--result-fd", "3", "--", "python3", "-c", probe}, p[1]);
  std::string doc;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) doc.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "fd 3 closed\n");
  json j = json::parse(doc, nullptr, false);
  ASSERT_TRUE(j.is_object()) << doc;
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_TRUE(j["started"].get<bool>());
  all_scopes().insert(j["scope_id"].get<uint64_t>());

  Plain s = run_plain(
      {"run", "--policy", kPythonSandbox, "--result", "-", "--", "python3", "-c", "print('hello')"});
  EXPECT_EQ(s.code, 0) << s.err;
  ASSERT_EQ(s.out.rfind("hello\n", 0), 0u) << s.out;
  json k = json::parse(s.out.substr(6), nullptr, false);
  ASSERT_TRUE(k.is_object()) << s.out;
  EXPECT_EQ(k["exit_status"], 0);
  all_scopes().insert(k["scope_id"].get<uint64_t>());

  // Not a descriptor the caller opened: refused before anything runs.
  Plain bad = run_plain({"run", "--policy", kPythonSandbox, "--result-fd", "9", "--", "true"});
  EXPECT_EQ(bad.code, 125);
  EXPECT_NE(bad.err.find("--result-fd 9"), std::string::npos) << bad.err;
}

// A --result path that is a symbolic link is refused (125, COMMAND never
// runs) and the link and its target stay as they were; a plain path is
// replaced atomically, with nothing left beside it.
TEST_F(Run, ResultFileIsNeverASymlinkAndIsReplacedWhole) {
  char tmpl[] = "/tmp/ac-run-result-XXXXXX";
  const fs::path dir = ::mkdtemp(tmpl);
  std::ofstream(dir / "target") << "mine";
  fs::create_symlink(dir / "target", dir / "link");
  Plain r = run_plain({"run", "--policy", kPythonSandbox, "--result", (dir / "link").string(), "--",
                       "python3", "-c", "open('ran', 'w')"});
  EXPECT_EQ(r.code, 125);
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir / "link"));
  EXPECT_EQ(slurp(dir / "target"), "mine");

  std::ofstream(dir / "out.json") << "old";
  Plain ok = run_plain({"run", "--policy", kPythonSandbox, "--result", (dir / "out.json").string(), "--",
                        "python3", "-c", "pass"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  json j = json::parse(slurp(dir / "out.json"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  all_scopes().insert(j["scope_id"].get<uint64_t>());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"link", "out.json", "target"}));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Whatever way the run makes a set-id file or directory in its workspace,
// the kept workspace has none; a link it planted to a host set-uid program is
// not followed (the program keeps its bits).
TEST_F(Run, KeptWorkspaceCarriesNoSetIdBits) {
  struct stat host {};
  ASSERT_EQ(::stat("/usr/bin/passwd", &host), 0);
  ASSERT_TRUE(host.st_mode & S_ISUID) << "the test needs a set-uid program at /usr/bin/passwd";
  Ran r =
      run(py("import os\n"
             "open('chmodded', 'w').close()\n"
             "os.chmod('chmodded', 0o4755)\n"
             "os.close(os.open('created', os.O_CREAT | os.O_WRONLY, 0o6755))\n"
             "os.mkdir('dir')\n"
             "os.chmod('dir', 0o2775)\n"
             "os.mkdir('dir/inherits')\n"
             "open('dir/inherits/f', 'w').close()\n"
             "os.chmod('dir/inherits/f', 0o2700)\n"
             "os.symlink('/usr/bin/passwd', 'passwd')\n"
             "modes = [os.stat(p).st_mode & 0o7000 for p in ('chmodded', 'created', 'dir', 'dir/inherits')]\n"
             "print(sum(1 for m in modes if m))\n",
             {"--keep"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "4\n") << "the run could not make set-id files: the test proves nothing";
  const fs::path ws = r.result["workspace"].get<std::string>();
  for (const char* name : {"chmodded", "created", "dir", "dir/inherits", "dir/inherits/f"}) {
    struct stat st {};
    ASSERT_EQ(::lstat((ws / name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u) << name << " mode " << std::oct << st.st_mode;
  }
  EXPECT_TRUE(fs::is_symlink(ws / "passwd"));
  struct stat after {};
  ASSERT_EQ(::stat("/usr/bin/passwd", &after), 0);
  EXPECT_EQ(after.st_mode, host.st_mode);
  std::error_code ec;
  fs::remove_all(ws, ec);
}

// A caller's --workspace whose path someone turns into a link during the
// run (the owner of a directory on the way can: rename it, put a link to
// anywhere in its place): at the end, root hands back the directory the run
// had, through the descriptor it opened at the start, and never touches
// the link's target. Before, teardown chowned and chmodded by path, and so
// gave the target (here root's own directory) to the swapper.
TEST_F(Run, ACallersWorkspaceWhosePathTurnsIntoALinkIsHandedBackNotTheTarget) {
  constexpr uid_t kOwner = 4321;
  char tmpl[] = "/tmp/agentcage-swap-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path t = tmpl;
  ::chmod(t.c_str(), 0755);
  fs::create_directories(t / "home/proj/ws");
  for (const char* d : {"home", "home/proj", "home/proj/ws"})
    ASSERT_EQ(::chown((t / d).c_str(), kOwner, kOwner), 0);
  ::chmod((t / "home/proj/ws").c_str(), 0755);
  fs::create_directories(t / "victim/ws");
  ::chmod((t / "victim/ws").c_str(), 0755);
  const fs::path ws = t / "home/proj/ws";
  Started s = start(py("import time\ntime.sleep(5)\n", {"--workspace", ws.string(), "--disk", "unlimited"}));
  struct stat st {};
  // Handed to the run's identity: the run has begun.
  bool begun = false;
  for (int i = 0; i < 600 && !begun; ++i)
    if (!(begun = ::stat(ws.c_str(), &st) == 0 && st.st_uid != kOwner))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(begun) << "the run never took the workspace";
  fs::rename(t / "home/proj", t / "home/proj.real");
  fs::create_directory_symlink(t / "victim", t / "home/proj");
  Ran r = finish(s);
  EXPECT_EQ(r.code, 0) << r.describe();
  ASSERT_EQ(::stat((t / "victim/ws").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the link's target was given away";
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((t / "home/proj.real/ws").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kOwner) << "the run's directory was not handed back";
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  std::error_code ec;
  fs::remove_all(t, ec);
}

// What a run makes in a workspace that outlives it is not left to its
// dynamic uid, which the next run to lease it would own: in a caller's
// --workspace it goes to the directory's owner, in a kept one to root. A
// file of more than one link keeps its owner (the same file may be
// elsewhere, and nobody is given what the run did not make here).
TEST_F(Run, WhatTheRunMadeInAWorkspaceThatOutlivesItIsNotLeftToItsUid) {
  const std::string make =
      "import os\n"
      "open('top', 'w').write('x')\n"
      "os.mkdir('sub')\n"
      "open('sub/f', 'w').write('y')\n"
      "os.symlink('/etc/passwd', 'link')\n"
      "open('pair', 'w').write('z')\n"
      "os.link('pair', 'pair2')\n"
      "os.chmod('sub', 0o777)\n"
      "os.chmod('sub/f', 0o666)\n"
      "print(os.getuid())\n";
  constexpr uid_t kOwner = 4321;
  char tmpl[] = "/tmp/agentcage-handback-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path ws = tmpl;
  ASSERT_EQ(::chown(ws.c_str(), kOwner, kOwner), 0);
  ::chmod(ws.c_str(), 0755);
  Ran mine = run(py(make, {"--workspace", ws.string(), "--disk", "unlimited"}));
  ASSERT_EQ(mine.code, 0) << mine.describe();
  const uid_t sandbox = static_cast<uid_t>(std::stoul(mine.out));
  ASSERT_GE(sandbox, agentcage::run::kDynamicUidBase)
      << "the run did not have a dynamic uid: the test proves nothing";
  struct stat st {};
  for (const char* name : {".", "top", "sub", "sub/f", "link"}) {
    ASSERT_EQ(::lstat((ws / name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, kOwner) << name << " was left to uid " << st.st_uid;
    EXPECT_EQ(st.st_gid, kOwner) << name;
    if (!S_ISLNK(st.st_mode)) {
      EXPECT_EQ(st.st_mode & 0022, 0u)
          << name << " is writable by group or others: " << std::oct << st.st_mode;
    }
  }
  ASSERT_EQ(::lstat((ws / "pair").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, sandbox) << "a file of two links was given away";
  ASSERT_EQ(::stat("/etc/passwd", &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the link was followed";

  Ran kept = run(py(make, {"--keep"}));
  ASSERT_EQ(kept.code, 0) << kept.describe();
  const fs::path kws = kept.result["workspace"].get<std::string>();
  for (const char* name : {".", "top", "sub", "sub/f", "link"}) {
    ASSERT_EQ(::lstat((kws / name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, 0u) << name << " was left to uid " << st.st_uid;
  }
  std::error_code ec;
  fs::remove_all(ws, ec);
  fs::remove_all(kws, ec);
}

// A run can make its workspace thousands of levels deep. On the host's disk
// (--disk unlimited: no tmpfs to unmount) it is still removed at the end,
// under the usual limit of 1024 open files: a removal that held one
// descriptor per level stopped there and left the tree, the record and the
// run's uid for a reaper that could never finish either.
TEST_F(Run, AWorkspaceThousandsOfLevelsDeepIsRemoved) {
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit usual {
    1024, saved.rlim_max
  };
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &usual), 0);
  // The kernel denies a change deeper than its path walk (64 levels from
  // /), but a tree moved whole under a deep directory keeps its own depth:
  // 100 chains of 20, each moved under the next, are 2100 levels.
  Ran r =
      run(py("import os\n"
             "chain = '/'.join(['d'] * 20)\n"
             "for i in range(100):\n"
             "    os.makedirs('n/' + chain)\n"
             "    open('n/f', 'w').close()\n"
             "    if i:\n"
             "        os.rename('t', 'n/' + chain + '/t')\n"
             "    os.rename('n', 't')\n"
             "print(i + 1)\n",
             {"--disk", "unlimited"}));
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "100\n");
  EXPECT_EQ(r.err.find("not fully removed"), std::string::npos) << r.err;
  const fs::path ws = r.result["workspace"].get<std::string>();
  EXPECT_FALSE(fs::exists(ws)) << ws << " was left";
  EXPECT_FALSE(r.result["workspace_kept"].get<bool>());
}

// ---- the result's records come from the run's own storage ------------------

// Python that tries to open `path` for `seconds` (or `times` times) and
// prints how often it was refused.
std::vector<std::string> deny_loop(const std::string& path, int times, double seconds = 0) {
  return py(
      "import time\n"
      "path, times, seconds = '" +
      path + "', " + std::to_string(times) + ", " + std::to_string(seconds) +
      "\n"
      "end = time.time() + seconds\n"
      "refused = tries = 0\n"
      "while tries < times or time.time() < end:\n"
      "    tries += 1\n"
      "    try:\n"
      "        open(path).close()\n"
      "    except PermissionError:\n"
      "        refused += 1\n"
      "print(refused, tries)\n");
}

// With nobody draining the shared ring buffer (no daemon), it fills up; a
// run's result must still carry its own denial records. (Before records were
// built in the task's storage they were kept only when the shared buffer had
// room: every later run's result had counts and no records.)
TEST_F(Run, ResultKeepsItsRecordsWhenTheSharedRingBufferIsFull) {
  auto e = bpf::Enforcer::open_shared();
  ASSERT_TRUE(e) << e.error().message;
  const uint64_t lost0 = *(*e)->stat(AC_STAT_EVENTS_LOST);
  // 1 MiB holds about 2900 records, and one run may put at most
  // AC_SCOPE_EVENT_BUDGET a second into it: 16 runs denying at once overflow it.
  constexpr int kRuns = 16, kEach = 375;
  static_assert(uint64_t{kRuns} * AC_SCOPE_EVENT_BUDGET > (1u << 20) / sizeof(ac_event_decision));
  std::vector<Started> floods;
  for (int i = 0; i < kRuns; ++i) floods.push_back(start(deny_loop("/etc/passwd", kEach)));
  for (const auto& s : floods) {
    Ran flood = finish(s);
    ASSERT_EQ(flood.code, 0) << flood.describe();
    EXPECT_EQ(flood.out, "375 375\n") << flood.describe();
    EXPECT_EQ(flood.result["denials"]["records"].size(), static_cast<size_t>(AC_REPORT_RECORDS));
  }
  const uint64_t lost1 = *(*e)->stat(AC_STAT_EVENTS_LOST);
  ASSERT_GT(lost1, lost0) << "the shared ring buffer did not overflow (is a daemon draining it?)";

  Ran later = run(deny_loop("/etc/group", 3));
  ASSERT_EQ(later.code, 0) << later.describe();
  EXPECT_EQ(later.out, "3 3\n");
  EXPECT_GT(*(*e)->stat(AC_STAT_EVENTS_LOST), lost1)
      << "the ring buffer had room again: the test proves nothing";
  EXPECT_GE(denied(later, "file_open"), 3u) << later.result.dump(2);
  int group_records = 0;
  for (const auto& rec : later.result["denials"]["records"]) {
    EXPECT_EQ(rec["scope_id"], later.result["scope_id"]);
    if (rec["target"] == "/etc/group") {
      ++group_records;
      EXPECT_EQ(rec["comm"], "python3");
      EXPECT_EQ(rec["hook"], "file_open");
    }
  }
  EXPECT_EQ(group_records, 3) << later.result.dump(2);
}

// The run names itself and the file it is refused with invalid UTF-8, a
// terminal escape and control characters: the result is valid JSON that
// still tells what happened, and agentcage's own stderr carries no escape.
TEST_F(Run, HostileNamesLeaveTheResultValidAndTheTerminalAlone) {
  const fs::path dir = "/tmp/ac-hostile-" + std::to_string(::getpid());
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  const std::string name = "\xff\x1b]0;owned\x07" + std::string(200, 'n');
  { std::ofstream(dir / name) << "secret"; }
  fs::permissions(dir / name, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  Ran r =
      run(py("import ctypes, os\n"
             "ctypes.CDLL(None).prctl(15, b'\\xff\\x1b[31mevil\\x01', 0, 0, 0)\n"
             "name = os.fsencode('" +
             dir.string() +
             "/') + b'\\xff\\x1b]0;owned\\x07' + b'n' * 200\n"
             "try:\n"
             "    open(name, 'rb').close()\n"
             "    print('read')\n"
             "except OSError as e:\n"
             "    print(e.errno)\n"));
  fs::remove_all(dir);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "13\n") << "refused by the policy (EACCES), not by permissions";
  ASSERT_TRUE(r.result.is_object()) << r.describe();
  int found = 0;
  for (const auto& rec : r.result["denials"]["records"]) {
    const std::string target = rec["target"].get<std::string>();
    if (target.rfind(dir.string() + "/", 0) != 0) continue;
    ++found;
    EXPECT_EQ(rec["hook"], "file_open");
    EXPECT_NE(target.find("owned"), std::string::npos) << target;
    EXPECT_NE(rec["comm"].get<std::string>().find("evil"), std::string::npos) << rec.dump();
  }
  EXPECT_EQ(found, 1) << r.result.dump(2);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "an escape reached agentcage's stderr: " << r.err;
  EXPECT_EQ(r.err.find('\x07'), std::string::npos) << r.err;
}

// Two runs denying at the same time: each result holds its own records only.
TEST_F(Run, ConcurrentRunsReportOnlyTheirOwnRecords) {
  Started a = start(deny_loop("/etc/passwd", 0, 2.0));
  Started b = start(deny_loop("/etc/group", 0, 2.0));
  Ran ra = finish(a), rb = finish(b);
  ASSERT_EQ(ra.code, 0) << ra.describe();
  ASSERT_EQ(rb.code, 0) << rb.describe();
  for (const auto& [r, target] :
       {std::pair<const Ran&, std::string>{ra, "/etc/passwd"}, {rb, "/etc/group"}}) {
    const auto& records = r.result["denials"]["records"];
    const std::string other = target == "/etc/passwd" ? "/etc/group" : "/etc/passwd";
    int own = 0;
    for (const auto& rec : records) {
      EXPECT_NE(rec["target"], other) << r.result.dump(2);
      EXPECT_EQ(rec["scope_id"], r.result["scope_id"]);
      own += rec["target"] == target;
    }
    EXPECT_GE(own, 1) << r.result.dump(2);
  }
  EXPECT_NE(ra.result["scope_id"], rb.result["scope_id"]);
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
