// SPDX-License-Identifier: Apache-2.0
// Runs through the daemon for callers that are not root (the control
// protocol's "run", daemon/run_service.h), end to end: the real daemon, the
// real `agentcage run` started by an unprivileged user (uid 65534) in and
// out of the control group, its workspace checks, its caps, clients that die
// and a daemon that stops with runs in flight. Needs root and a kernel that
// enforces (the VM: tests/vm/run --kernel 6.1|6.12).
#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "control/protocol.h"
#include "core/limits.h"
#include "core/paths.h"
#include "daemon_run_env.h"
#include "fuse_server.h"
#include "util/fd_passing.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST_F(DaemonRun, AGroupMemberRunsUnderANamedPolicyWithItsLabelsAndDenialsReported) {
  start();
  const std::string ok_runs = "agentcage_runs_total{outcome=\"ok\",policy=\"drun\"}";
  const double ok_before = std::max(0.0, scrape(ok_runs));
  Proc ok = client_run("ok", {"--label", "task=t-1", "--label", "agent=demo"}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(ok.pid), 0) << out("ok") << log();
  // The run's end is counted before its client has the answer (the
  // runner's notices are read first).
  EXPECT_EQ(scrape(ok_runs), ok_before + 1);
  EXPECT_EQ(out("ok"), slurp("/etc/hostname"));  // its stdout is the client's
  json r = result("ok");
  ASSERT_TRUE(r.is_object()) << out("ok");
  EXPECT_EQ(r["version"], 1);
  EXPECT_EQ(r["policy"], "drun");
  EXPECT_EQ(r["labels"], json({{"task", "t-1"}, {"agent", "demo"}}));
  EXPECT_TRUE(r["started_at"].is_string());
  EXPECT_TRUE(r["ended_at"].is_string());
  EXPECT_EQ(r["exit_code"], 0);
  EXPECT_EQ(r["fail_closed"], nullptr);
  EXPECT_GE(r["uid"].get<uint64_t>(), 0x70000000u);  // a sandbox uid, not the client's
  // Limits: the policy's memory (under the cap), the daemon's caps elsewhere.
  EXPECT_EQ(r["limits"]["memory_bytes"], 256u << 20);

  Proc denied = client_run("denied", {"--label", "task=t-2"}, {"cat", "/etc/passwd"});
  EXPECT_EQ(wait_exit(denied.pid), 1) << out("denied");
  json d = result("denied");
  ASSERT_TRUE(d.is_object()) << out("denied");
  EXPECT_GE(d["denials"]["by_hook"].value("file_open", 0), 1) << d.dump(2);
  EXPECT_NE(out("denied").find("agentcage: policy drun denied"), std::string::npos) << out("denied");
  // The audit log carries the run's labels with its denial.
  EXPECT_TRUE(wait_until(
      [&] {
        std::istringstream lines(slurp(dir_ / "audit.jsonl"));
        for (std::string line; std::getline(lines, line);) {
          json e = json::parse(line, nullptr, false);
          if (e.is_object() && e.value("target", "") == "/etc/passwd" &&
              e.value("run_id", json()) == d["run_id"])
            return e.contains("labels") && e["labels"] == json({{"task", "t-2"}});
        }
        return false;
      },
      15s))
      << slurp(dir_ / "audit.jsonl");
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 10s));
}

// Members of the control group share the daemon, not each other's runs: a
// member sees the audit events (recent and followed) and the status scopes
// of its own runs only, and no containers, bindings or counters; root sees
// all. Another member's denial carries its paths and labels.
TEST_F(DaemonRun, AMemberSeesOnlyItsOwnRunsEventsAndScopes) {
  start();
  constexpr uid_t kOtherUid = 65533;
  const auto become_other = [] {
    gid_t groups[] = {kControlGid};
    if (::setgroups(1, groups) != 0 || ::setgid(kOtherUid) != 0 || ::setuid(kOtherUid) != 0) ::_exit(98);
  };
  const fs::path other_dir = dir_ / "other";
  fs::create_directories(other_dir);
  ASSERT_EQ(::chown(other_dir.c_str(), kOtherUid, kOtherUid), 0);
  const std::vector<std::string> follow = {agentcage_bin(), "events", "--follow"};
  Proc root_follows = spawn(follow, dir_ / "root-follow.out");
  Proc own_follows = spawn(follow, client_ / "own-follow.out", {}, become_client(true));
  Proc other_follows = spawn(follow, other_dir / "follow.out", {}, become_other);
  ASSERT_TRUE(wait_until([&] { return status()["daemon"].value("clients", 0) >= 3; }, 20s)) << log();

  Proc run = client_run("mine", {"--label", "secret=alpha"}, {"sh", "-c", "cat /etc/passwd; sleep 4"});
  std::string run_id;
  ASSERT_TRUE(wait_until(
      [&] {
        const json st = status();
        for (const json& sc : st["scopes"])
          if (sc.value("policy", json()) == "drun" && sc.value("run_id", json()).is_string())
            run_id = sc["run_id"];
        return !run_id.empty();
      },
      30s))
      << out("mine");
  const auto status_as = [&](const fs::path& file, const std::function<void()>& become) {
    Proc p = spawn({agentcage_bin(), "status", "--json"}, file, {}, become);
    wait_exit(p.pid);
    return json::parse(slurp(file), nullptr, false);
  };
  const json own = status_as(client_ / "status.out", become_client(true));
  const json other = status_as(other_dir / "status.out", become_other);
  ASSERT_TRUE(own.is_object()) << slurp(client_ / "status.out");
  ASSERT_TRUE(other.is_object()) << slurp(other_dir / "status.out");
  EXPECT_EQ(own["view"], "own runs");
  ASSERT_EQ(own["scopes"].size(), 1u) << own.dump(2);
  EXPECT_EQ(own["scopes"][0]["run_id"], run_id);
  EXPECT_EQ(other["view"], "own runs");
  EXPECT_TRUE(other["scopes"].empty()) << other.dump(2);
  const json root_view = status();
  for (const char* hidden : {"containers", "bindings", "counters", "events"}) {
    EXPECT_FALSE(other.contains(hidden)) << hidden;
    EXPECT_TRUE(root_view.contains(hidden)) << hidden;  // root's view has them
  }
  // Nor the daemon's totals, which move with other tenants' runs and decisions.
  for (const char* hidden :
       {"events_delivered", "runs_active", "clients", "audit_dropped", "stream_dropped"}) {
    EXPECT_FALSE(other["daemon"].contains(hidden)) << hidden;
    EXPECT_TRUE(root_view["daemon"].contains(hidden)) << hidden;
  }
  EXPECT_TRUE(named_slot(other, "drun").has_value());  // the policies are everyone's
  EXPECT_EQ(status()["view"], "all");
  EXPECT_EQ(wait_exit(run.pid), 0) << out("mine");

  // The denial reaches root's stream and the member's own, not the other's.
  const auto has_denial = [&](const fs::path& file) {
    std::istringstream lines(slurp(file));
    for (std::string line; std::getline(lines, line);) {
      json e = json::parse(line, nullptr, false);
      if (e.is_object() && e.value("run_id", json()) == run_id && e.value("target", "") == "/etc/passwd")
        return true;
    }
    return false;
  };
  EXPECT_TRUE(wait_until([&] { return has_denial(dir_ / "root-follow.out"); }, 15s))
      << slurp(dir_ / "root-follow.out");
  EXPECT_TRUE(wait_until([&] { return has_denial(client_ / "own-follow.out"); }, 15s))
      << slurp(client_ / "own-follow.out");
  // And the recent events: the member's own, not the other's.
  Proc own_recent = spawn({agentcage_bin(), "events"}, client_ / "recent.out", {}, become_client(true));
  Proc other_recent = spawn({agentcage_bin(), "events"}, other_dir / "recent.out", {}, become_other);
  EXPECT_EQ(wait_exit(own_recent.pid), 0) << slurp(client_ / "recent.out");
  EXPECT_EQ(wait_exit(other_recent.pid), 0) << slurp(other_dir / "recent.out");
  EXPECT_TRUE(has_denial(client_ / "recent.out")) << slurp(client_ / "recent.out");
  for (const char* file : {"follow.out", "recent.out"}) {
    const std::string seen = slurp(other_dir / file);
    EXPECT_EQ(seen.find(run_id), std::string::npos) << file << ": " << seen;
    EXPECT_EQ(seen.find("alpha"), std::string::npos) << file << ": " << seen;
  }
  for (const Proc& p : {root_follows, own_follows, other_follows}) {
    ::kill(p.pid, SIGTERM);
    wait_exit(p.pid);
  }
}

TEST_F(DaemonRun, ACallerOutsideTheGroupIsRefused) {
  start();
  Proc p = client_run("outsider", {}, {"cat", "/etc/hostname"}, false);
  EXPECT_EQ(wait_exit(p.pid), 125) << out("outsider");
  EXPECT_NE(out("outsider").find("permission denied"), std::string::npos) << out("outsider");
  EXPECT_NE(out("outsider").find("control_group"), std::string::npos) << out("outsider");
  EXPECT_EQ(slurp("/etc/hostname").empty() ? 1u : out("outsider").find(slurp("/etc/hostname")),
            std::string::npos);
  EXPECT_TRUE(run_cgroups().empty());
}

TEST_F(DaemonRun, APolicyFileOrAnotherIdentityIsRefusedBeforeTheDaemonIsAsked) {
  start();
  const std::string file = (dir_ / "policies" / "drun.yaml").string();
  Proc p = client_run("file", {}, {"true"}, true, file);
  EXPECT_EQ(wait_exit(p.pid), 125);
  EXPECT_NE(out("file").find("by name"), std::string::npos) << out("file");
  Proc u = client_run("user", {"--user", "0"}, {"true"});
  EXPECT_EQ(wait_exit(u.pid), 125);
  EXPECT_NE(out("user").find("--user"), std::string::npos) << out("user");
  // Without root, a run is enforced as its policy says: no --mode audit.
  Proc audit = client_run("audit", {"--mode", "audit"}, {"true"});
  EXPECT_EQ(wait_exit(audit.pid), 125);
  EXPECT_NE(out("audit").find("--mode: a run through the daemon takes its policy's mode"), std::string::npos)
      << out("audit");
  Proc missing = client_run("missing", {}, {"true"}, true, "no-such-policy");
  EXPECT_EQ(wait_exit(missing.pid), 125);
  EXPECT_NE(out("missing").find("no policy named 'no-such-policy'"), std::string::npos) << out("missing");
}

TEST_F(DaemonRun, TheClientsWorkspaceIsCopiedInAndBackAndAnyOtherIsRefused) {
  start();
  // The client's own directory: its file goes in, the run's file comes back, the client's.
  const fs::path ws = client_ / "ws";
  fs::create_directories(ws);
  std::ofstream(ws / "in.txt") << "input\n";
  ASSERT_EQ(::chown(ws.c_str(), kClientUid, kClientGid), 0);
  ASSERT_EQ(::chown((ws / "in.txt").c_str(), kClientUid, kClientGid), 0);
  // A file in it that is not the client's stays out of the run.
  std::ofstream(ws / "roots.txt") << "secret\n";
  ::chmod((ws / "roots.txt").c_str(), 0644);
  Proc p =
      client_run("ws", {"--workspace", ws.string()},
                 {"sh", "-c",
                  "cat in.txt > out.txt && echo made >> out.txt; umask 0; echo w > open.txt; cat roots.txt"});
  EXPECT_EQ(wait_exit(p.pid), 1) << out("ws");  // roots.txt is not there
  EXPECT_EQ(slurp(ws / "out.txt"), "input\nmade\n");
  struct stat st {};
  ASSERT_EQ(::stat((ws / "out.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kClientUid);
  EXPECT_EQ(st.st_gid, kClientGid);
  // The run made it 0666; it comes back writable by the caller only.
  ASSERT_EQ(::stat((ws / "open.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  json r = result("ws");
  ASSERT_TRUE(r.is_object()) << out("ws");
  EXPECT_EQ(r["io"]["copied_in"], 1);
  EXPECT_EQ(r["io"]["skipped_total"], 1);
  EXPECT_GE(r["io"]["copied_out"], 3);  // in.txt, out.txt, open.txt

  // A directory the client does not own (root's), and one reached through a
  // symbolic link: refused, nothing runs, nothing is written there.
  Proc root_dir = client_run("rootdir", {"--workspace", dir_.string()}, {"sh", "-c", "echo x > pwned"});
  EXPECT_EQ(wait_exit(root_dir.pid), 125) << out("rootdir");
  EXPECT_NE(out("rootdir").find("owns"), std::string::npos) << out("rootdir");
  EXPECT_FALSE(fs::exists(dir_ / "pwned"));
  json rr = result("rootdir");
  ASSERT_TRUE(rr.is_object()) << out("rootdir");
  EXPECT_EQ(rr["started"], false);
  EXPECT_EQ(rr["fail_closed"], "internal");
  // /tmp is root's and writable by all: not the client's either.
  Proc tmp = client_run("tmp", {"--workspace", "/tmp"}, {"sh", "-c", "echo x > /tmp/ac-pwned"});
  EXPECT_EQ(wait_exit(tmp.pid), 125) << out("tmp");
  EXPECT_FALSE(fs::exists("/tmp/ac-pwned"));
  // A symbolic link the client made, to a directory it owns: refused by the
  // daemon's runner (the CLI resolves its own paths, so ask over the socket).
  fs::create_directory_symlink(ws, client_ / "link");
  pid_t child = ::fork();
  if (child == 0) {
    become_client(true)();
    const int stdio[3] = {0, 1, 2};
    json req = {
        {"op", "run"}, {"policy", "drun"}, {"argv", {"true"}}, {"workspace", (client_ / "link").string()}};
    auto a = control::call_with_fds(kSocket, req, stdio, 3, 60000);
    const bool refused = a && a->value("exit_code", 0) == 125 && (*a)["result"].is_object() &&
                         (*a)["result"].value("error", "").find("symbolic link") != std::string::npos;
    if (!refused) std::fprintf(stderr, "%s\n", a ? a->dump().c_str() : a.error().message.c_str());
    ::_exit(refused ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 10s));
}

TEST_F(DaemonRun, AClientKilledMidRunLeavesNothing) {
  start();
  Proc p = client_run("killed", {}, {"sleep", "300"});
  ASSERT_TRUE(
      wait_until([&] { return !runs_in_flight().empty() && !processes_of_dynamic_uids().empty(); }, 30s))
      << out("killed") << log();
  ::kill(p.pid, SIGKILL);
  wait_exit(p.pid);
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s)) << log();
  EXPECT_NE(log().find("hung up: ending its run"), std::string::npos) << log();
  // The daemon serves the next client as before.
  Proc next = client_run("next", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(next.pid), 0) << out("next");
}

// A client that hangs up with its stderr a full pipe it still holds: the
// runner ends the run (SIGTERM) before it writes why, and the write that
// then waits does not keep it: the daemon kills the runner after its grace
// and reaps the run. Before, the write came first and waited forever, so
// the run went on without its timeout and kept its place under the caps.
TEST_F(DaemonRun, AClientThatHangsUpWithAFullStderrLeavesNothing) {
  start();
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(go[1]);
    become_client(true)();
    int err[2];
    if (::pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0) ::_exit(90);
    const std::string fill(4096, 'x');
    while (::write(err[1], fill.data(), fill.size()) > 0) {
    }
    if (::fcntl(err[1], F_SETFL, 0) != 0) ::_exit(91);  // full, and blocking again
    auto fd = control::connect_control(kSocket, 5000);
    if (!fd) ::_exit(92);
    const int fds[3] = {0, 1, err[1]};
    const std::string line = R"({"op":"run","policy":"drun","argv":["sleep","300"]})"
                             "\n";
    if (send_with_fds(fd->get(), line.data(), line.size(), fds, 3) != static_cast<ssize_t>(line.size()))
      ::_exit(93);
    ::close(err[1]);
    char byte;
    if (::read(go[0], &byte, 1) != 1) ::_exit(94);
    fd->reset();  // hangs up; err[0] stays open, unread
    ::pause();
    ::_exit(0);
  }
  ::close(go[0]);
  ASSERT_TRUE(
      wait_until([&] { return !runs_in_flight().empty() && !processes_of_dynamic_uids().empty(); }, 30s))
      << log();
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  ::close(go[1]);
  // SIGTERM ends the run at once; the runner is killed after its 10 s grace.
  EXPECT_TRUE(wait_until([&] { return processes_of_dynamic_uids().empty(); }, 10s)) << log();
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 45s)) << log();
  EXPECT_TRUE(wait_until([&] { return status()["daemon"]["runs_active"] == 0; }, 45s)) << log();
  EXPECT_NE(log().find("after its client hung up: killed"), std::string::npos) << log();
  ::kill(child, SIGKILL);
  wait_exit(child);
  // The daemon serves the next client as before.
  Proc next = client_run("next", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(next.pid), 0) << out("next");
}

// A client that never reads the run's output and never hangs up cannot keep
// the run past its timeout: a pipe is handed to COMMAND as it is (only a
// regular file goes through the runner's relay, run/stdio.h), so it is
// COMMAND that waits on the full pipe, while the runner's timer fires.
TEST_F(DaemonRun, AClientThatNeverReadsCannotKeepTheRunPastItsTimeout) {
  start();
  pid_t child = ::fork();
  if (child == 0) {
    become_client(true)();
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) ::_exit(90);
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    auto fd = control::connect_control(kSocket, 5000);
    if (!fd || null < 0) ::_exit(91);
    const int fds[3] = {null, out[1], null};
    const std::string line =
        R"({"op":"run","policy":"drun","argv":["sh","-c","while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done"],)"
        R"("limits":{"timeout":"3s"}})"
        "\n";
    if (send_with_fds(fd->get(), line.data(), line.size(), fds, 3) != static_cast<ssize_t>(line.size()))
      ::_exit(92);
    ::close(out[1]);
    ::pause();  // never reads out[0], never hangs up
    ::_exit(0);
  }
  ASSERT_TRUE(wait_until([&] { return !processes_of_dynamic_uids().empty(); }, 30s)) << log();
  // 3 s of timeout and slack for the VM.
  EXPECT_TRUE(wait_until([&] { return processes_of_dynamic_uids().empty(); }, 30s)) << log();
  // The client goes: its pipe closes, the runner's write fails, and the run
  // is removed.
  ::kill(child, SIGKILL);
  wait_exit(child);
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 30s)) << log();
  EXPECT_TRUE(wait_until([&] { return status()["daemon"]["runs_active"] == 0; }, 30s)) << log();
}

// Members holding every place on the control socket (max_clients) do not
// lock root out: root's status is answered, a member's next connection is
// refused. Before, root counted against the same places.
TEST_F(DaemonRun, MembersHoldingEveryConnectionDoNotLockRootOut) {
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "max_clients: 4\n";
  start();
  int go[2], said[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(said, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(go[1]);
    ::close(said[0]);
    become_client(true)();
    std::vector<UniqueFd> held;
    for (int i = 0; i < 4; ++i) {
      auto fd = control::connect_control(kSocket, 5000);
      if (!fd) ::_exit(90);
      held.push_back(std::move(*fd));
    }
    // The fifth is refused with its reason.
    std::string answer = "no answer";
    if (auto fifth = control::connect_control(kSocket, 5000)) {
      std::string buf;
      if (auto l = control::read_line(fifth->get(), buf, 5000)) answer = *l;
    }
    (void)!::write(said[1], answer.data(), answer.size());
    ::close(said[1]);
    char byte;
    (void)!::read(go[0], &byte, 1);  // holds the four until the parent is done
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(said[1]);
  std::string fifth;
  char buf[512];
  for (ssize_t n; (n = ::read(said[0], buf, sizeof buf)) > 0;) fifth.append(buf, static_cast<size_t>(n));
  ::close(said[0]);
  EXPECT_NE(fifth.find("too many clients (max_clients 4)"), std::string::npos) << fifth;
  // Root, while the members hold all four.
  EXPECT_TRUE(named_slot(status(), "drun").has_value()) << log();
  ::close(go[1]);
  EXPECT_EQ(wait_exit(child), 0);
}

std::vector<std::string> cmdline_of(pid_t pid) {
  std::vector<std::string> words;
  const std::string raw = slurp("/proc/" + std::to_string(pid) + "/cmdline");
  for (size_t start = 0; start < raw.size();) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    words.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

// Runs start from the daemon's fork server (made before the daemon's
// threads): the runner is the daemon's child and was never exec'd (its
// command line is still the daemon's). Once the server is gone, runs start
// by fork + exec of `agentcage run`, with the same outcome.
TEST_F(DaemonRun, RunsStartFromTheForkServerAndByExecOnceItIsGone) {
  start();
  pid_t server = 0;
  for (const auto& [pid, comm] : children_of(daemon_.pid))
    if (comm == "agentcage-fork") server = pid;
  ASSERT_GT(server, 0) << "no fork server among the daemon's children\n" << log();

  auto runner_words = [&]() -> std::vector<std::string> {
    // (An exec'd runner's command name is "exe", from /proc/self/exe.)
    const std::vector<pid_t> spares = spare_pids();
    for (const auto& [pid, comm] : children_of(daemon_.pid))
      if (pid != server && std::find(spares.begin(), spares.end(), pid) == spares.end())
        return cmdline_of(pid);
    return {};
  };
  auto has = [](const std::vector<std::string>& words, const std::string& w) {
    return std::find(words.begin(), words.end(), w) != words.end();
  };

  Proc forked = client_run("forked", {}, {"sleep", "300"});
  std::vector<std::string> words;
  ASSERT_TRUE(wait_until([&] { return !(words = runner_words()).empty() && !runs_in_flight().empty(); }, 30s))
      << out("forked") << log();
  // (agentcage daemon execs agentcage-daemon: the command line is whatever
  // that program was started with, the runner's is the same.)
  EXPECT_EQ(words, cmdline_of(daemon_.pid)) << "the runner was exec'd: " << testing::PrintToString(words);
  EXPECT_FALSE(has(words, "run")) << testing::PrintToString(words);
  ::kill(forked.pid, SIGKILL);
  wait_exit(forked.pid);
  ASSERT_TRUE(wait_until([&] { return nothing_left(); }, 15s)) << log();

  ASSERT_TRUE(wait_until([&] { return spare_pids().size() == 1; }, 15s)) << log();
  const pid_t spare = spare_pids().front();
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  // The spare the server cloned before it went takes the next run: a
  // runner like any other, not exec'd.
  Proc spared = client_run("spared", {}, {"sleep", "300"});
  ASSERT_TRUE(wait_until([&] { return !runs_in_flight().empty() && spare_pids().empty(); }, 30s))
      << out("spared") << log();
  EXPECT_EQ(cmdline_of(spare), cmdline_of(daemon_.pid)) << out("spared");
  ::kill(spared.pid, SIGKILL);
  wait_exit(spared.pid);
  ASSERT_TRUE(wait_until([&] { return nothing_left(); }, 15s)) << log();
  Proc execd = client_run("execd", {}, {"sleep", "300"});
  ASSERT_TRUE(wait_until([&] { return !(words = runner_words()).empty() && !runs_in_flight().empty(); }, 30s))
      << out("execd") << log();
  EXPECT_TRUE(has(words, "run")) << testing::PrintToString(words);
  EXPECT_NE(log().find("fork server (pid " + std::to_string(server) + ") lost"), std::string::npos) << log();
  ::kill(execd.pid, SIGKILL);
  wait_exit(execd.pid);
  ASSERT_TRUE(wait_until([&] { return nothing_left(); }, 15s)) << log();

  Proc after = client_run("after", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(after.pid), 0) << out("after");
  EXPECT_EQ(out("after"), slurp("/etc/hostname"));
  json r = result("after");
  ASSERT_TRUE(r.is_object()) << out("after");
  EXPECT_EQ(r["exit_code"], 0);
}

// A runner started by fork and exec (no fork server) reaps the stale runs it
// finds, as `agentcage run` does, but tells its client nothing of them: they
// are other tenants' (here root's run whose agentcage was killed), with
// their ids, cgroups and workspaces.
TEST_F(DaemonRun, ARunnerTellsItsClientNothingOfOtherRunsItReaps) {
  start();
  pid_t server = 0;
  for (const auto& [pid, comm] : children_of(daemon_.pid))
    if (comm == "agentcage-fork") server = pid;
  ASSERT_GT(server, 0) << log();
  ASSERT_EQ(::kill(server, SIGKILL), 0);  // the next run starts by fork and exec

  const auto daemon_reaps = [&] {
    const std::string l = log();
    size_t n = 0;
    for (size_t at = 0; (at = l.find("reaped stale run", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  // The daemon reaps once a minute too: an attempt whose stale run it
  // reaped first proves nothing, and the next one (seconds later) cannot
  // meet its minute again.
  std::vector<std::string> stale;
  bool conclusive = false;
  for (int attempt = 0; attempt < 2 && !conclusive; ++attempt) {
    const size_t reaps_before = daemon_reaps();
    Proc roots = spawn({agentcage_bin(), "run", "--policy", "drun", "--policy-dir",
                        (dir_ / "policies").string(), "--", "sleep", "300"},
                       dir_ / "roots.out");
    ASSERT_TRUE(wait_until([&] { return !runs_in_flight().empty(); }, 30s)) << slurp(dir_ / "roots.out");
    stale = runs_in_flight();
    ::kill(roots.pid, SIGKILL);
    wait_exit(roots.pid);

    Proc mine = client_run("mine", {}, {"cat", "/etc/hostname"});
    EXPECT_EQ(wait_exit(mine.pid), 0) << out("mine");
    EXPECT_EQ(out("mine"), slurp("/etc/hostname"));
    conclusive = daemon_reaps() == reaps_before;
    if (!conclusive) {
      ASSERT_TRUE(wait_until([&] { return nothing_left(); }, 15s));
    }
  }
  ASSERT_TRUE(conclusive) << "the daemon's own reaping came first twice\n" << log();
  EXPECT_NE(log().find("fork server (pid " + std::to_string(server) + ") lost"), std::string::npos) << log();
  // The runner reaped it (nothing of it is left) and said nothing of it.
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s)) << testing::PrintToString(run_cgroups());
  EXPECT_EQ(out("mine").find("stale"), std::string::npos) << out("mine");
  for (const std::string& cg : stale)
    EXPECT_EQ(out("mine").find(fs::path(cg).filename().string()), std::string::npos) << out("mine");
}

// The fork server prepares each run's policy ahead (run/policy_cache.h) and
// its runners inherit that: a policy changed on disk must govern the very
// next run, both ways, never the prepared copy of the bytes before.
TEST_F(DaemonRun, APolicyChangedOnDiskGovernsTheNextRunNotAPreparedCopy) {
  start();
  Proc before = client_run("before", {}, {"cat", "/etc/hostname"});
  ASSERT_EQ(wait_exit(before.pid), 0) << out("before") << log();

  std::string narrowed = kRunPolicy;
  const std::string hostname = " /etc/hostname,";
  ASSERT_NE(narrowed.find(hostname), std::string::npos);
  narrowed.erase(narrowed.find(hostname), hostname.size());
  write_file(dir_ / "policies" / "drun.yaml", narrowed);
  Proc narrow = client_run("narrow", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(narrow.pid), 1) << out("narrow") << log();
  json r = result("narrow");
  ASSERT_TRUE(r.is_object()) << out("narrow");
  EXPECT_GE(r["denials"]["by_hook"].value("file_open", 0), 1) << r.dump(2);

  write_file(dir_ / "policies" / "drun.yaml", kRunPolicy);
  Proc after = client_run("after", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(after.pid), 0) << out("after") << log();
  EXPECT_EQ(out("after"), slurp("/etc/hostname"));
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 10s));
}

// A run that fails before its steps (here: its policy names destinations
// by name, and its stdout is a TCP socket) removes the spare run it took:
// no record, cgroup, workspace or uid of it stays for the reaper.
TEST_F(DaemonRun, ARunThatFailsEarlyRemovesTheSpareRunItTook) {
  std::string by_name = kRunPolicy;
  by_name.replace(by_name.find("name: drun"), 10, "name: dnsrun");
  by_name += "  network: {allow: [{domain: api.allowed.test, ports: [443], protocol: tcp}]}\n";
  write_file(dir_ / "policies" / "dnsrun.yaml", by_name);
  start();
  ASSERT_TRUE(wait_until([&] { return named_slot(status(), "dnsrun").has_value(); }, 60s)) << log();
  Proc warm = client_run("warm", {}, {"true"});
  ASSERT_EQ(wait_exit(warm.pid), 0) << out("warm");
  json spare;
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& e : fs::directory_iterator("/run/agentcage/runs"))
          if (e.path().extension() == ".json")
            if (json r = json::parse(slurp(e.path()), nullptr, false);
                r.is_object() && r.value("spare", false) && r.value("cgroup_id", uint64_t{0}) != 0 &&
                is_spare_run(r.value("cgroup", "")))
              spare = r;
        return spare.is_object();
      },
      15s));
  int said[2];
  ASSERT_EQ(::pipe2(said, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(said[0]);
    become_client(true)();
    const int tcp = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto fd = control::connect_control(kSocket, 5000);
    if (tcp < 0 || !fd) ::_exit(90);
    const int fds[3] = {0, tcp, 2};
    const std::string line = R"({"op":"run","policy":"dnsrun","argv":["true"]})"
                             "\n";
    if (send_with_fds(fd->get(), line.data(), line.size(), fds, 3) != static_cast<ssize_t>(line.size()))
      ::_exit(91);
    std::string buf, answer = "no answer";
    if (auto l = control::read_line(fd->get(), buf, 60000)) answer = *l;
    (void)!::write(said[1], answer.data(), answer.size());
    ::_exit(0);
  }
  ::close(said[1]);
  const std::string answer = read_to_end(said[0]);
  ::close(said[0]);
  EXPECT_EQ(wait_exit(child), 0);
  // The spare's runner refused it, with its result.
  const json reply = json::parse(answer, nullptr, false);
  ASSERT_TRUE(reply.is_object()) << answer;
  EXPECT_EQ(reply["ok"], true) << answer;
  EXPECT_EQ(reply["exit_code"], 125) << answer;
  EXPECT_NE(reply["result"].value("error", "").find("is an IPv4/IPv6 socket"), std::string::npos) << answer;
  EXPECT_NE(log().find("runner pid " + std::to_string(spare["owner_pid"].get<pid_t>())), std::string::npos)
      << log();
  EXPECT_TRUE(wait_until(
      [&] {
        return !fs::exists(spare["cgroup"].get<std::string>()) &&
               !fs::exists(spare["workspace"].get<std::string>()) &&
               !fs::exists("/run/agentcage/runs/" + spare["run_id"].get<std::string>() + ".json");
      },
      10s))
      << spare.dump() << log();
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 10s)) << testing::PrintToString(run_cgroups());
  EXPECT_EQ(log().find("reaped stale run " + spare["run_id"].get<std::string>()), std::string::npos) << log();
}

// A run's record, uid, workspace and cgroup are made ahead by a spare
// runner, between requests: the next run takes them, and they are that
// run's alone. A spare nobody took goes with the daemon, stopped or killed.
TEST_F(DaemonRun, ASpareRunMadeAheadServesOneRunAndGoesWithTheDaemon) {
  start();
  Proc first = client_run("first", {}, {"cat", "/etc/hostname"});
  ASSERT_EQ(wait_exit(first.pid), 0) << out("first");
  ASSERT_TRUE(wait_until([&] { return spare_pids().size() == 1; }, 15s)) << log();
  // What the spare made: an empty cgroup and an empty workspace of its uid.
  auto spare_record = [] {
    for (const auto& e : fs::directory_iterator("/run/agentcage/runs")) {
      const json r = json::parse(slurp(e.path()), nullptr, false);
      if (e.path().extension() == ".json" && r.is_object() && r.value("spare", false)) return r;
    }
    return json();
  };
  json spare;
  ASSERT_TRUE(wait_until(
      [&] {
        return (spare = spare_record()).contains("sandbox_uid") && spare["cgroup_id"].get<uint64_t>() != 0;
      },
      15s))
      << spare.dump();
  const std::string cg = spare["cgroup"], ws = spare["workspace"], id = spare["run_id"];
  const uint32_t uid = spare["sandbox_uid"];
  EXPECT_TRUE(is_spare_run(cg)) << cg;
  EXPECT_EQ(slurp(fs::path(cg) / "cgroup.procs"), "");
  struct stat st {};
  ASSERT_EQ(::stat(ws.c_str(), &st), 0) << ws;
  EXPECT_EQ(st.st_uid, uid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(fs::is_empty(ws));
  EXPECT_NE(uid, result("first")["uid"].get<uint32_t>());
  // (The first run's last removals follow its answer.)
  EXPECT_TRUE(wait_until([&] { return runs_in_flight().empty(); }, 10s));
  EXPECT_TRUE(wait_until([&] { return status()["daemon"]["runs_active"] == 0; }, 10s))
      << "a spare is not a run";

  // The next run is the spare's: its id, uid, workspace and cgroup, with
  // the run's limits (the first run's: written ahead by the spare).
  Proc second = client_run("second", {}, {"sh", "-c", "cat /proc/self/cgroup; sleep 2"});
  // Its record is a run's now, and the daemon counts it.
  const fs::path record = "/run/agentcage/runs/" + id + ".json";
  json live;
  EXPECT_TRUE(wait_until(
      [&] {
        live = json::parse(slurp(record), nullptr, false);
        return live.is_object() && !live.contains("spare");
      },
      15s))
      << live.dump();
  EXPECT_EQ(slurp(fs::path(cg) / "memory.max"), std::to_string(256u << 20) + "\n");
  EXPECT_TRUE(wait_until([&] { return status()["daemon"]["runs_active"] == 1; }, 5s));
  EXPECT_EQ(wait_exit(second.pid), 0) << out("second");
  json r = result("second");
  ASSERT_TRUE(r.is_object()) << out("second");
  EXPECT_EQ(r["run_id"], id);
  EXPECT_EQ(r["uid"], uid);
  EXPECT_EQ(r["workspace"], ws);
  EXPECT_EQ(r["cgroup"], cg);
  EXPECT_NE(out("second").find(cg.substr(std::string("/sys/fs/cgroup").size())), std::string::npos)
      << out("second");
  // Gone with its run; the next spare is another uid, cgroup and workspace.
  EXPECT_TRUE(wait_until([&] { return !fs::exists(cg) && !fs::exists(ws); }, 15s)) << log();
  json next;
  ASSERT_TRUE(wait_until(
      [&] { return (next = spare_record()).contains("sandbox_uid") && next["run_id"] != id; }, 15s))
      << next.dump();
  EXPECT_NE(next["sandbox_uid"], uid);
  EXPECT_NE(next["workspace"], ws);

  // A stop: the spare removes what it made.
  stop_daemon(SIGTERM);
  EXPECT_TRUE(run_cgroups().empty()) << testing::PrintToString(run_cgroups());
  EXPECT_FALSE(fs::exists(next["workspace"].get<std::string>()));
  EXPECT_TRUE(spare_pids().empty());

  // The daemon killed: its spare ends (PR_SET_PDEATHSIG) and removes what
  // it made, with no reaper.
  start();
  Proc third = client_run("third", {}, {"true"});
  ASSERT_EQ(wait_exit(third.pid), 0) << out("third");
  ASSERT_TRUE(wait_until([&] { return spare_record().contains("sandbox_uid"); }, 15s)) << log();
  const json last = spare_record();
  stop_daemon(SIGKILL);
  EXPECT_TRUE(wait_until([&] { return run_cgroups().empty() && spare_pids().empty(); }, 15s))
      << testing::PrintToString(run_cgroups());
  EXPECT_FALSE(fs::exists(last["workspace"].get<std::string>()));
}

// The limits a spare wrote ahead (the last run's) serve a run with the same
// ones; a run with others has exactly its own: what it lacks goes back to
// the kernel's default, and its workspace's tmpfs is of its own size.
TEST_F(DaemonRun, TheLimitsASpareWroteAheadAreTheRunsOwnOrReplacedByThem) {
  // (So that a run may go without a pids limit after a spare with one.)
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "run_max_pids: unlimited\n";
  start();
  const auto spare = [] {
    for (const auto& e : fs::directory_iterator("/run/agentcage/runs")) {
      const json r = json::parse(slurp(e.path()), nullptr, false);
      if (e.path().extension() == ".json" && r.is_object() && r.value("spare", false) &&
          r.contains("sandbox_uid") && r.value("cgroup_id", uint64_t{0}) != 0)
        return r;
    }
    return json();
  };
  const auto tmpfs_bytes = [](const std::string& dir) -> uint64_t {
    struct statfs s {};
    if (::statfs(dir.c_str(), &s) != 0 || s.f_type != TMPFS_MAGIC) return 0;
    return static_cast<uint64_t>(s.f_blocks) * static_cast<uint64_t>(s.f_bsize);
  };
  // How many file systems are mounted at `dir` (one tmpfs, never one over another).
  const auto mounts_at = [](const std::string& dir) {
    std::ifstream in("/proc/self/mountinfo");
    size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string id, parent, dev, root, point;
      fields >> id >> parent >> dev >> root >> point;
      n += point == dir;
    }
    return n;
  };
  struct Seen {
    std::string memory, pids, cpu;
    uint64_t disk = 0;
    bool operator==(const Seen&) const = default;
  };
  const auto seen = [&](const json& record) {
    const fs::path cg = record["cgroup"].get<std::string>();
    return Seen{slurp(cg / "memory.max"), slurp(cg / "pids.max"), slurp(cg / "cpu.max"),
                tmpfs_bytes(record["workspace"].get<std::string>())};
  };
  const auto text = [](const Seen& v) {
    return "memory.max " + v.memory + "pids.max " + v.pids + "cpu.max " + v.cpu + "tmpfs " +
           std::to_string(v.disk);
  };
  const std::string mi300 = std::to_string(300u << 20) + "\n", mi256 = std::to_string(256u << 20) + "\n";
  // The next spare, once it has written `want` (the cpu.max of a cgroup
  // whose parent never had the cpu controller is left out: "").
  json next;
  const auto spare_with = [&](Seen want) {
    return wait_until(
        [&] {
          if (!(next = spare()).is_object()) return false;
          Seen now = seen(next);
          if (want.cpu.empty()) now.cpu.clear();
          return now == want;
        },
        15s);
  };
  // A run's cgroup and workspace as it runs (its COMMAND writes out.txt first).
  const auto started = [&](const std::string& tag) {
    return wait_until(
        [&] {
          return result(tag).is_object() ||
                 fs::exists(fs::path(next["workspace"].get<std::string>()) / "out.txt");
        },
        15s);
  };
  const auto memory_files = [&](const json& record) {
    const fs::path cg = record["cgroup"].get<std::string>();
    return slurp(cg / "memory.swap.max") + slurp(cg / "memory.oom.group");
  };

  const std::vector<std::string> first = {"--memory", "300Mi", "--pids", "8", "--disk", "2Mi"};
  Proc a = client_run("a", first, {"true"});
  ASSERT_EQ(wait_exit(a.pid), 0) << out("a");
  // Ahead: the cgroup's limits and the workspace's tmpfs, in the record too.
  ASSERT_TRUE(spare_with({mi300, "8\n", "", 2u << 20})) << text(seen(next)) << log();
  EXPECT_EQ(next.value("workspace_tmpfs_bytes", uint64_t{0}), 2u << 20) << next.dump();
  EXPECT_EQ(memory_files(next), "0\n1\n");
  EXPECT_EQ(mounts_at(next["workspace"]), 1u);

  // The same limits: the spare's, as they are.
  Proc b = client_run("b", first, {"sh", "-c", "echo x > out.txt; sleep 2"});
  ASSERT_TRUE(started("b")) << out("b") << log();
  Seen s = seen(next);
  EXPECT_EQ(s.memory, mi300);
  EXPECT_EQ(s.pids, "8\n");
  EXPECT_EQ(s.disk, 2u << 20);
  EXPECT_EQ(mounts_at(next["workspace"]), 1u);
  ASSERT_EQ(wait_exit(b.pid), 0) << out("b");
  EXPECT_EQ(result("b")["run_id"], next["run_id"]);
  EXPECT_EQ(result("b")["limits"]["pids"], 8);

  // Others: a cpu limit the spare had not, the policy's memory, no pids
  // limit where it had one, another disk size.
  ASSERT_TRUE(spare_with({mi300, "8\n", "", 2u << 20})) << text(seen(next)) << log();
  Proc c = client_run("c", {"--cpu", "0.5", "--disk", "4Mi", "--pids", "unlimited"},
                      {"sh", "-c", "echo x > out.txt; sleep 2"});
  ASSERT_TRUE(started("c")) << out("c") << log();
  s = seen(next);
  EXPECT_EQ(s.memory, mi256);
  EXPECT_EQ(s.pids, "max\n");
  EXPECT_EQ(s.cpu, "50000 100000\n");
  EXPECT_EQ(s.disk, 4u << 20);
  EXPECT_EQ(mounts_at(next["workspace"]), 1u);
  const json live = json::parse(slurp("/run/agentcage/runs/" + next["run_id"].get<std::string>() + ".json"),
                                nullptr, false);
  EXPECT_EQ(live.value("workspace_tmpfs_bytes", uint64_t{0}), 4u << 20) << live.dump();
  ASSERT_EQ(wait_exit(c.pid), 0) << out("c");
  EXPECT_EQ(result("c")["run_id"], next["run_id"]);

  // A limit the spare wrote (the cpu's) and the run has none of goes; the
  // defaults come back.
  ASSERT_TRUE(spare_with({mi256, "max\n", "50000 100000\n", 4u << 20})) << text(seen(next)) << log();
  Proc d = client_run("d", {}, {"sh", "-c", "echo x > out.txt; sleep 2"});
  ASSERT_TRUE(started("d")) << out("d") << log();
  s = seen(next);
  EXPECT_EQ(s.memory, mi256);
  EXPECT_EQ(s.pids, std::string(core::kDefaultPids) + "\n");
  EXPECT_EQ(s.cpu, "max 100000\n");
  EXPECT_EQ(s.disk, uint64_t{1} << 30);
  EXPECT_EQ(memory_files(next), "0\n1\n");
  EXPECT_EQ(mounts_at(next["workspace"]), 1u);
  ASSERT_EQ(wait_exit(d.pid), 0) << out("d");
  EXPECT_EQ(result("d")["run_id"], next["run_id"]);
  // (A run without a memory limit after a spare with one: the caps here
  // always give one; write_limits' "max" for memory is the same code.)
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s));
}

TEST_F(DaemonRun, TwentyConcurrentClientsEachGetTheirOwnOutputAndResult) {
  start();
  std::vector<Proc> procs;
  for (int i = 0; i < 20; ++i)
    procs.push_back(client_run("c" + std::to_string(i),
                               {"--env", "N=" + std::to_string(i), "--label", "n=" + std::to_string(i)},
                               {"sh", "-c", "sleep 1; echo run $N"}));
  std::set<std::string> run_ids;
  for (int i = 0; i < 20; ++i) {
    const std::string tag = "c" + std::to_string(i);
    EXPECT_EQ(wait_exit(procs[static_cast<size_t>(i)].pid), 0) << out(tag);
    EXPECT_EQ(out(tag), "run " + std::to_string(i) + "\n");
    json r = result(tag);
    ASSERT_TRUE(r.is_object()) << out(tag);
    EXPECT_EQ(r["labels"]["n"], std::to_string(i));
    run_ids.insert(r["run_id"].get<std::string>());
  }
  EXPECT_EQ(run_ids.size(), 20u);
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s));
}

TEST_F(DaemonRun, ARequestOverTheCapsIsRefused) {
  std::ofstream(dir_ / "daemon.yaml", std::ios::app) << "run_max_timeout: 1m\n";
  start();
  Proc mem = client_run("mem", {"--memory", "1Gi"}, {"true"});
  EXPECT_EQ(wait_exit(mem.pid), 125);
  EXPECT_NE(out("mem").find("limit memory 1Gi is over this daemon's cap"), std::string::npos) << out("mem");
  Proc unl = client_run("unl", {"--timeout", "unlimited"}, {"true"});
  EXPECT_EQ(wait_exit(unl.pid), 125);
  EXPECT_NE(out("unl").find("run_max_timeout"), std::string::npos) << out("unl");
  // The policy's 2m timeout is lowered to the cap.
  Proc low = client_run("low", {}, {"true"});
  EXPECT_EQ(wait_exit(low.pid), 0) << out("low");
  EXPECT_EQ(result("low")["limits"]["timeout_ms"], 60000);

  // Concurrent runs per client: 22 allowed, the 23rd refused while they run.
  std::vector<Proc> sleepers;
  for (int i = 0; i < 22; ++i) sleepers.push_back(client_run("s" + std::to_string(i), {}, {"sleep", "300"}));
  ASSERT_TRUE(wait_until([&] { return runs_in_flight().size() == 22; }, 60s))
      << runs_in_flight().size() << log();
  Proc over = client_run("over", {}, {"true"});
  EXPECT_EQ(wait_exit(over.pid), 125);
  EXPECT_NE(out("over").find("max_runs_per_client 22"), std::string::npos) << out("over");
  for (auto& s : sleepers) ::kill(s.pid, SIGTERM);
  for (auto& s : sleepers) wait_exit(s.pid);
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 30s));
}

// A run is answered as soon as its result is final, before its last
// removals (run/runner.h), but it counts against the caps until its runner
// has removed everything and exited: with one run per client, the client's
// next run starts only once the first is fully gone (it waits for it, not
// refused), and nothing is left after. The first run leaves 12000 files in
// its fresh workspace, a plain directory (no disk limit: no tmpfs to
// unmount at once), so that removing it takes a while; its record goes last.
TEST_F(DaemonRun, ARunAnsweredBeforeItsRemovalCountsAgainstTheCapsUntilItIsGone) {
  std::string cfg = slurp(dir_ / "daemon.yaml");
  const std::string cap = "max_runs_per_client: 22";
  ASSERT_NE(cfg.find(cap), std::string::npos) << cfg;
  cfg.replace(cfg.find(cap), cap.size(), "max_runs_per_client: 1\nrun_max_disk: unlimited");
  write_file(dir_ / "daemon.yaml", cfg);
  start();
  Proc first = client_run(
      "first", {"--disk", "unlimited"}, {"sh", "-c", "i=0; while [ $i -lt 12000 ]; do : > f$i; i=$((i+1)); done; echo made $i"});
  ASSERT_EQ(wait_exit(first.pid), 0) << out("first") << log();
  const auto answered = std::chrono::system_clock::now();
  EXPECT_EQ(out("first"), "made 12000\n");
  const json a = result("first");
  ASSERT_TRUE(a.is_object()) << out("first");
  const fs::path workspace = a.value("workspace", "");
  ASSERT_FALSE(workspace.empty()) << a.dump(2);
  const fs::path record = fs::path(core::kDefaultStateDir) / "runs" / (a.value("run_id", "") + ".json");

  // The client's next run, while the first one's workspace still goes.
  Proc next = client_run("next", {}, {"cat", "/etc/hostname"});
  std::chrono::system_clock::time_point last_seen{};
  std::error_code ec;
  while (fs::exists(workspace, ec) || fs::exists(record, ec)) {
    last_seen = std::chrono::system_clock::now();
    std::this_thread::sleep_for(1ms);
  }
  // The answer came before the removal (the workspace or record outlived it)...
  EXPECT_GT(last_seen, answered) << "the first run was gone when its client had its answer";
  // ...and the next run started only after it (the run's start, in ms).
  ASSERT_EQ(wait_exit(next.pid), 0) << out("next") << log();
  EXPECT_EQ(out("next"), slurp("/etc/hostname"));
  const json b = result("next");
  ASSERT_TRUE(b.is_object()) << out("next");
  const std::string started = b.value("started_at", "");
  std::tm tm{};
  int ms = 0;
  ASSERT_EQ(std::sscanf(started.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                        &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms),
            7)
      << started;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const auto next_started = std::chrono::system_clock::from_time_t(::timegm(&tm)) + std::chrono::milliseconds(ms);
  EXPECT_GE(next_started, std::chrono::time_point_cast<std::chrono::milliseconds>(last_seen))
      << "the next run started while the first one was still being removed (started " << started << ")";
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s)) << log();
  EXPECT_EQ(log().find("could not remove everything"), std::string::npos) << log();
}

// Raw requests as a group member: each gets an error and starts nothing.
TEST_F(DaemonRun, MalformedAndOversizedRunRequestsGetAnErrorAndChangeNothing) {
  start();
  pid_t child = ::fork();
  if (child == 0) {
    become_client(true)();
    auto ask = [](const std::string& line, int nfds) -> json {
      auto fd = control::connect_control(kSocket, 5000);
      if (!fd) return json();
      const int fds[4] = {0, 1, 2, 0};
      ssize_t n = send_with_fds(fd->get(), line.data(), line.size(), fds, static_cast<size_t>(nfds));
      if (n > 0 && static_cast<size_t>(n) < line.size())
        (void)control::write_all(fd->get(), std::string_view(line).substr(static_cast<size_t>(n)), 10000);
      std::string buf;
      auto l = control::read_line(fd->get(), buf, 10000);
      return l && !l->empty() ? json::parse(*l, nullptr, false) : json();
    };
    const std::string good = R"({"op":"run","policy":"drun","argv":["true"]})";
    struct Case {
      std::string line;
      int fds;
      const char* expect;
    } cases[] = {
        {good + "\n", 0, "exactly 3 descriptors"},
        {good + "\n", 4, "at most 3 descriptors"},
        {R"({"op":"status"})"
         "\n",
         3, "descriptors go only with a run request"},
        {R"({"op":"run","policy":"../etc/x","argv":["true"]})"
         "\n",
         3, "policy"},
        {R"({"op":"run","policy":"drun","argv":["true"],"user":"0"})"
         "\n",
         3, "unknown field"},
        {R"({"op":"run","policy":"drun","argv":["true"],"limits":{"memory":"9Gi"}})"
         "\n",
         3, "over this daemon's cap"},
        {std::string(control::kMaxRequestBytes + 10, 'x') + "\n", 3, "longer than"},
        {R"({"op":"hello","protocol":99})"
         "\n",
         0, "not spoken here"},
    };
    int failed = 0;
    for (const auto& c : cases) {
      json a = ask(c.line, c.fds);
      if (!a.is_object() || a.value("ok", true) || a.value("error", "").find(c.expect) == std::string::npos) {
        std::fprintf(stderr, "case %.60s: %s\n", c.line.c_str(), a.dump().c_str());
        ++failed;
      }
    }
    json hello = ask(R"({"op":"hello","protocol":1})"
                     "\n",
                     0);
    if (!hello.value("ok", false) || hello["protocol"] != 1 ||
        std::find(hello["ops"].begin(), hello["ops"].end(), "run") == hello["ops"].end() ||
        std::find(hello["ops"].begin(), hello["ops"].end(), "attach") != hello["ops"].end()) {
      std::fprintf(stderr, "hello: %s\n", hello.dump().c_str());
      ++failed;
    }
    ::_exit(failed);
  }
  EXPECT_EQ(wait_exit(child), 0);
  EXPECT_TRUE(run_cgroups().empty());
  EXPECT_EQ(status()["daemon"]["runs_active"], 0);
}

// A descriptor whose close waits as long as its sender likes: a TCP socket
// with SO_LINGER whose unsent data its peer never takes. A member sends one
// with a request the daemon refuses (descriptors with a status request; a run
// of a policy that does not exist) and drops its own copy while the request
// is incomplete, so that the daemon's close is the last. The daemon closes such descriptors off its
// loop (daemon/closer.h): root's status is answered at once, the daemon lets
// go of both sockets (the linger wait is interrupted), and a member's run
// goes on as before. Without that, the loop waited in close() for the
// linger's hour, and every client, root's too, with it.
TEST_F(DaemonRun, ADescriptorWhoseCloseWaitsDoesNotStallTheDaemon) {
  start();
  const size_t before = daemon_fds();
  int said[2], go[2];
  ASSERT_EQ(::pipe2(said, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(said[0]);
    ::close(go[1]);
    become_client(true)();
    // A listener that never accepts: the connections wait in its backlog,
    // their receive buffers full.
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 8) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &alen) != 0)
      ::_exit(90);
    const auto lingering = [&a]() -> int {
      const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ::_exit(91);
      const linger l{1, 3600};
      ::setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l);
      ::fcntl(s, F_SETFL, O_NONBLOCK);
      static char junk[65536];
      while (::send(s, junk, sizeof junk, MSG_NOSIGNAL) > 0) {
      }
      return s;
    };
    auto ask = [](const std::string& line, int sock, int count) -> std::string {
      auto fd = control::connect_control(kSocket, 5000);
      if (!fd) return "no connection";
      // The descriptors go with the first byte of the request; the daemon
      // keeps them until the line is complete, so this copy is dropped
      // before the daemon can close its own, which is then the last (were
      // this one the last, this close would wait the linger's hour).
      const int fds[3] = {sock, sock, sock};
      if (send_with_fds(fd->get(), line.data(), 1, fds, static_cast<size_t>(count)) < 0) return "send failed";
      ::close(sock);
      if (!control::write_all(fd->get(), std::string_view(line).substr(1), 5000)) return "send failed";
      std::string buf;
      auto l = control::read_line(fd->get(), buf, 10000);
      return l ? *l : "no answer";
    };
    std::string answers =
        ask("{\"op\":\"status\"}\n", lingering(), 1) + "\n" +
        ask("{\"op\":\"run\",\"policy\":\"nosuchpolicy\",\"argv\":[\"true\"]}\n", lingering(), 3);
    (void)!::write(said[1], answers.data(), answers.size());
    ::close(said[1]);
    char byte;
    (void)!::read(go[0], &byte, 1);  // the listener stays until the parent is done
    ::_exit(0);
  }
  ::close(said[1]);
  ::close(go[0]);
  const std::string answers = read_to_end(said[0]);
  ::close(said[0]);
  EXPECT_NE(answers.find("descriptors go only with a run request"), std::string::npos) << answers;
  EXPECT_NE(answers.find("no policy named 'nosuchpolicy'"), std::string::npos) << answers;
  // Root is answered at once.
  const auto asked = std::chrono::steady_clock::now();
  const json st = status();
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_TRUE(named_slot(st, "drun").has_value()) << log();
  EXPECT_LT(took, 3s) << "the daemon's loop was held";
  // Both sockets are let go of: no descriptor is kept waiting.
  EXPECT_TRUE(wait_until([&] { return daemon_fds() <= before; }, 10s))
      << daemon_fds() << " descriptors, " << before << " before";
  // A member's run goes on as before.
  Proc after = client_run("after-linger", {}, {"cat", "/etc/hostname"});
  EXPECT_EQ(wait_exit(after.pid), 0) << out("after-linger");
  ::close(go[1]);
  EXPECT_EQ(wait_exit(child), 0);
}

// A FUSE file as a run's stdout is refused at once, and the daemon's loop
// asks the FUSE server nothing on the way: this one never answers STATFS,
// and with allow_other it is asked (an fstatfs on the loop held every
// client, root's too, until the server died).
TEST_F(DaemonRun, AFuseFileAsStdioIsRefusedWithoutAskingItsServer) {
  start();
  FuseServer fuse(dir_ / "fuse");
  ASSERT_TRUE(fuse.ok()) << fuse.why();
  const fs::path file = fuse.file();
  // A member's run request with `out` as its stdout (none: the member opens
  // the FUSE file itself); the daemon's answer.
  const auto ask_with_stdout = [&](int out) {
    int answer[2];
    if (::pipe2(answer, O_CLOEXEC) != 0) return std::string("pipe2 failed");
    pid_t child = ::fork();
    if (child == 0) {
      ::close(answer[0]);
      become_client(true)();
      if (out < 0) out = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
      if (out < 0) ::_exit(90);
      const int stdio[3] = {0, out, 2};
      json req = {{"op", "run"}, {"policy", "drun"}, {"argv", {"true"}}};
      auto a = control::call_with_fds(kSocket, req, stdio, 3, 20000);
      const std::string text = a ? a->dump() : "no answer: " + a.error().message;
      (void)!::write(answer[1], text.data(), text.size());
      ::_exit(0);
    }
    ::close(answer[1]);
    std::string got = read_to_end(answer[0]);
    ::close(answer[0]);
    EXPECT_EQ(wait_exit(child), 0);
    return got;
  };
  const auto root_is_answered_at_once = [&] {
    const auto asked = std::chrono::steady_clock::now();
    EXPECT_TRUE(named_slot(status(), "drun").has_value()) << log();
    EXPECT_LT(std::chrono::steady_clock::now() - asked, 3s) << "the daemon's loop was held";
  };
  std::string got = ask_with_stdout(-1);
  EXPECT_NE(got.find("is a file of a FUSE file system"), std::string::npos) << got;
  EXPECT_EQ(fuse.statfs_asked(), 0);
  root_is_answered_at_once();

  // The same file once its mount is detached (umount -l): in no mount table,
  // its file system is not asked what it is; it is refused all the same.
  const int detached = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(detached, 0);
  ASSERT_EQ(::umount2((dir_ / "fuse").c_str(), MNT_DETACH), 0);
  got = ask_with_stdout(detached);
  EXPECT_NE(got.find("is a file of a mount the daemon does not see"), std::string::npos) << got;
  EXPECT_EQ(fuse.statfs_asked(), 0);
  root_is_answered_at_once();
  ::close(detached);
}

// Closes that never end hold only their sender's workers (daemon/closer.h):
// a member sends six descriptors of a FUSE file whose server never answers
// FLUSH (a close then waits, uninterruptibly, until the server is gone),
// each with a request the daemon refuses. At most 4 of the daemon's closes
// wait; root's status is answered at once, another member's run goes on;
// once the server is gone, every descriptor is let go of.
TEST_F(DaemonRun, FuseClosesThatNeverEndHoldOnlyTheirSendersWorkers) {
  start();
  // A first run: the spare for the next one is in place (its descriptors
  // are the daemon's from here on).
  Proc warm = client_run("warm", {}, {"true"});
  ASSERT_EQ(wait_exit(warm.pid), 0) << out("warm");
  ASSERT_TRUE(wait_until([&] { return spare_pids().size() == 1; }, 15s)) << log();
  const size_t before = daemon_fds();
  constexpr int kSent = 6;
  pid_t sender = -1;
  {
    FuseServer fuse(dir_ / "fuse", /*answer_flush=*/false);
    ASSERT_TRUE(fuse.ok()) << fuse.why();
    int said[2];
    ASSERT_EQ(::pipe2(said, O_CLOEXEC), 0);
    const fs::path file = fuse.file();
    sender = ::fork();
    if (sender == 0) {
      ::close(said[0]);
      constexpr uid_t kOtherUid = 65533;
      gid_t groups[] = {kControlGid};
      if (::setgroups(1, groups) != 0 || ::setgid(kOtherUid) != 0 || ::setuid(kOtherUid) != 0) ::_exit(98);
      std::string answers;
      for (int i = 0; i < kSent; ++i) {
        // Its own copies stay open: their close would wait too.
        const int f = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
        auto fd = control::connect_control(kSocket, 5000);
        if (f < 0 || !fd) ::_exit(90);
        const std::string line = "{\"op\":\"status\"}\n";
        if (send_with_fds(fd->get(), line.data(), line.size(), &f, 1) < 0) ::_exit(91);
        std::string buf;
        auto l = control::read_line(fd->get(), buf, 10000);
        answers += (l ? *l : "no answer") + "\n";
        (void)fd->release();  // not closed either: nothing here waits
      }
      (void)!::write(said[1], answers.data(), answers.size());
      ::close(said[1]);
      ::pause();
      ::_exit(0);
    }
    ::close(said[1]);
    const std::string answers = read_to_end(said[0]);
    ::close(said[0]);
    size_t refused = 0;
    for (size_t at = 0;
         (at = answers.find("descriptors go only with a run request", at)) != std::string::npos; ++at)
      ++refused;
    EXPECT_EQ(refused, static_cast<size_t>(kSent)) << answers;
    ASSERT_TRUE(wait_until([&] { return fuse.flushes_held() >= 1; }, 10s));
    std::this_thread::sleep_for(1s);
    EXPECT_LE(fuse.flushes_held(), 4) << "more than the sender's 4 workers wait";
    // Root is answered at once, another member's run goes on.
    const auto asked = std::chrono::steady_clock::now();
    EXPECT_TRUE(named_slot(status(), "drun").has_value()) << log();
    EXPECT_LT(std::chrono::steady_clock::now() - asked, 3s) << "the daemon's loop was held";
    Proc other = client_run("beside-fuse", {}, {"cat", "/etc/hostname"});
    EXPECT_EQ(wait_exit(other.pid), 0) << out("beside-fuse");
    EXPECT_EQ(out("beside-fuse"), slurp("/etc/hostname"));
    // The two queued behind the four held are still the daemon's (a held
    // one has left its table: close takes it out before the FLUSH). Counted
    // by what they open, not by the table's size, which the runs' and the
    // spare's descriptors move.
    EXPECT_TRUE(wait_until([&] { return daemon_fds_to(file) == 2; }, 10s))
        << daemon_fds_to(file) << " of the daemon's descriptors open " << file;
    ::kill(sender, SIGKILL);
  }  // the server is gone: every FLUSH ends
  wait_exit(sender);
  EXPECT_TRUE(wait_until([&] { return daemon_fds() <= before; }, 15s))
      << daemon_fds() << " descriptors, " << before << " before";
}

TEST_F(DaemonRun, ADaemonStopEndsRunsInFlightAndTheClientIsTold) {
  start();
  Proc p = client_run("stop", {}, {"sleep", "300"});
  ASSERT_TRUE(wait_until([&] { return !processes_of_dynamic_uids().empty(); }, 30s)) << out("stop");
  stop_daemon(SIGTERM);
  EXPECT_EQ(wait_exit(p.pid), 143) << out("stop");
  EXPECT_NE(out("stop").find("the daemon is stopping: the run was ended"), std::string::npos) << out("stop");
  json r = result("stop");
  ASSERT_TRUE(r.is_object()) << out("stop");
  EXPECT_EQ(r["interrupted_by"], "SIGTERM");
  EXPECT_TRUE(nothing_left());
}

// The copy of the caller's directory into the workspace is the run's: its
// tmpfs pages count against the run's memory limit (256Mi here), not the
// runner's. A 300 MiB file (sparse: it costs the caller nothing) fits the
// disk limit but not the memory: the run is refused and nothing is left.
TEST_F(DaemonRun, TheCopyIntoTheWorkspaceCountsAgainstTheRunsMemory) {
  start();
  const fs::path ws = client_ / "big";
  fs::create_directories(ws);
  ASSERT_EQ(::chown(ws.c_str(), kClientUid, kClientGid), 0);
  { std::ofstream(ws / "sparse.bin"); }
  fs::resize_file(ws / "sparse.bin", 300u << 20);
  ASSERT_EQ(::chown((ws / "sparse.bin").c_str(), kClientUid, kClientGid), 0);
  Proc p = client_run("big", {"--workspace", ws.string()}, {"true"});
  EXPECT_EQ(wait_exit(p.pid), 125) << out("big");
  EXPECT_NE(out("big").find("copying --io-dir into the workspace"), std::string::npos) << out("big");
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s));
  // The same directory under a limit it fits: the run goes ahead.
  Proc fits = client_run("fits", {"--workspace", ws.string(), "--memory", "512Mi"}, {"true"});
  EXPECT_EQ(wait_exit(fits.pid), 0) << out("fits");
}

// What the caller passes as stdin must be readable by the caller: an
// O_PATH descriptor of a file it may not read, or a file of /proc, is
// refused (the runner, root, reopens a file stdin read-only).
TEST_F(DaemonRun, AStdinTheCallerCannotReadIsRefused) {
  start();
  int out_pipe[2];
  ASSERT_EQ(::pipe(out_pipe), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(out_pipe[0]);
    become_client(true)();
    int failed = 0;
    auto ask = [&](int stdin_fd, const char* expect) {
      const int stdio[3] = {stdin_fd, out_pipe[1], 2};
      json req = {{"op", "run"}, {"policy", "drun"}, {"argv", {"cat"}}};
      auto a = control::call_with_fds(kSocket, req, stdio, 3, 60000);
      if (!a || a->value("ok", true) || a->value("error", "").find(expect) == std::string::npos) {
        std::fprintf(stderr, "%s: %s\n", expect, a ? a->dump().c_str() : a.error().message.c_str());
        ++failed;
      }
    };
    int shadow = ::open("/etc/shadow", O_PATH | O_CLOEXEC);
    if (shadow < 0) ::_exit(90);
    ask(shadow, "O_PATH descriptor");
    int status = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ask(status, "/proc or /sys");
    int wronly = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ask(wronly, "not open for reading");
    ::_exit(failed);
  }
  ::close(out_pipe[1]);
  EXPECT_EQ(wait_exit(child), 0);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out_pipe[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(out_pipe[0]);
  EXPECT_EQ(got.find("root:"), std::string::npos) << got;
  EXPECT_TRUE(run_cgroups().empty());
}

// The Python client (clients/python), as an agent framework would call it,
// by an unprivileged member of the control group: its unittest suite
// against this daemon (clients/python/tests/test_daemon.py).
TEST_F(DaemonRun, ThePythonClientRunsTheSeedScenarioAsAnUnprivilegedUser) {
  fs::copy_file(kPythonSandbox, dir_ / "policies" / "python-sandbox.yaml");
  start();
  ASSERT_TRUE(wait_until([&] { return named_slot(status(), "python-sandbox").has_value(); }, 60s)) << log();
  const std::string tests = std::string(AGENTCAGE_SOURCE_DIR) + "/clients/python/tests";
  Proc p = spawn({"/usr/bin/python3", "-m", "unittest", "-v", "test_daemon"}, client_ / "py.out",
                 {"AGENTCAGE_DAEMON_TEST=1", "PYTHONDONTWRITEBYTECODE=1", "TMPDIR=" + client_.string(),
                  "HOME=" + client_.string()},
                 [&] {
                   become_client(true)();
                   if (::chdir(tests.c_str()) != 0) ::_exit(97);
                 });
  EXPECT_EQ(wait_exit(p.pid), 0) << slurp(client_ / "py.out") << log();
  const std::string text = slurp(client_ / "py.out");
  EXPECT_NE(text.find("Ran 7 tests"), std::string::npos) << text;
  EXPECT_EQ(text.find("skipped"), std::string::npos) << text;
  EXPECT_TRUE(wait_until([&] { return nothing_left(); }, 15s));
}

}  // namespace
}  // namespace agentcage::kt
