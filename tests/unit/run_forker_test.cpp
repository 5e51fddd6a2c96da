// SPDX-License-Identifier: Apache-2.0
// The daemon's fork server (daemon/run_forker.h) on the host, with a real
// server process and real runners: a runner calls the command line with the
// daemon's words and environment and only the runner's descriptors open; a
// server whose clone3 is refused (a seccomp filter here, as a container
// runtime's profile would) or that was killed is "gone", so the daemon
// starts runs by exec instead. Each case runs in a child process: the
// server may only be started by a process with one thread.
#include "daemon/run_forker.h"
#include "in_child.h"
#include "run/policy_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace agentcage::daemon {
namespace {

constexpr int kPidfdIdType = 3;  // waitid's P_PIDFD

using test::in_child;

// The command line the runners call: waits for the daemon's go-ahead as a
// run does (run/policy_cache.h), then writes its words, $MARK, whether the
// go-ahead came and the descriptors it has open then to the result pipe
// (fd 3), exits 7.
int command_line(std::vector<std::string> argv) {
  const bool go = run::await_start_gate();
  std::string text;
  for (const auto& a : argv) text += a + " ";
  const char* mark = std::getenv("MARK");
  text += std::string("MARK=") + (mark ? mark : "-") + " go=" + (go ? "1" : "0") + " fds=";
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const std::string n = e.path().filename().string();
    text += n + ",";
  }
  (void)!::write(3, text.data(), text.size());
  return 7;
}

struct Plumbing {
  int result[2] = {-1, -1}, channel[2] = {-1, -1};
  int null = -1;
  bool ok() {
    null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    return null >= 0 && ::pipe2(result, O_CLOEXEC) == 0 &&
           ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) == 0;
  }
  std::vector<int> fds() const { return {null, null, null, result[1], channel[1]}; }
};

TEST(RunForker, ARunnerCallsTheCommandLineWithTheDaemonsWordsAndOnlyItsDescriptors) {
  in_child([]() -> std::string {
    RunForker forker;
    if (Status st = forker.start(command_line); !st) return "start: " + st.error().message;
    Plumbing p;
    if (!p.ok()) return "setup";
    const auto fds = p.fds();
    auto runner = forker.spawn({"agentcage", "run", "--x=1"}, {"MARK=m1", "PATH=/usr/bin"}, fds.data());
    if (!runner) return "spawn: " + runner.error().message;
    ::close(p.result[1]);
    ::close(p.channel[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(p.result[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    siginfo_t info{};
    if (::waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(runner->pidfd.get()), &info,
                 WEXITED) != 0)
      return std::string("waitid: ") + std::strerror(errno);
    if (info.si_code != CLD_EXITED || info.si_status != 7)
      return "runner status " + std::to_string(info.si_status);
    // The go-ahead came; then 0..4 and the directory listing's own
    // descriptor: nothing of the daemon, and the go-ahead's pipe is closed.
    const std::string want = "agentcage run --x=1 MARK=m1 go=1 fds=0,1,2,3,4,5,";
    if (got != want) return "runner wrote '" + got + "', want '" + want + "'";
    if (!forker.running()) return "the server is gone after a run";
    return "";
  });
}

TEST(RunForker, AServerWhoseClone3IsRefusedIsGone) {
  in_child([]() -> std::string {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0 ||
        seccomp_load(ctx) != 0)
      return "seccomp";
    seccomp_release(ctx);
    RunForker forker;
    if (Status st = forker.start(command_line); !st) return "start: " + st.error().message;
    Plumbing p;
    if (!p.ok()) return "setup";
    const auto fds = p.fds();
    auto runner = forker.spawn({"agentcage", "run"}, {"MARK=m2"}, fds.data());
    if (runner) return "a runner started although clone3 is refused";
    if (forker.running()) return "the server still counts as running: " + runner.error().message;
    if (runner.error().message != "the fork server is gone") return "error: " + runner.error().message;
    return "";
  });
}

TEST(RunForker, AKilledServerIsGoneAndReaped) {
  in_child([]() -> std::string {
    RunForker forker;
    if (Status st = forker.start(command_line); !st) return "start: " + st.error().message;
    const pid_t server = forker.pid();
    ::kill(server, SIGKILL);
    Plumbing p;
    if (!p.ok()) return "setup";
    const auto fds = p.fds();
    auto runner = forker.spawn({"agentcage", "run"}, {"MARK=m3"}, fds.data());
    if (runner) return "a runner started from a killed server";
    if (forker.running()) return "the server still counts as running";
    if (::kill(server, 0) == 0 || errno != ESRCH) return "the killed server was not reaped";
    return "";
  });
}

// What a runner says before the daemon's go-ahead (std::cerr: a usage
// error, a policy's errors) is held: it reaches stderr with the go-ahead,
// and is dropped when the go-ahead never comes (run/policy_cache.h).
TEST(RunForker, WhatARunnerSaysBeforeTheGoAheadIsHeldUntilIt) {
  in_child([]() -> std::string {
    const int saved = ::dup(2);
    int err[2];
    if (saved < 0 || ::pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0 || ::dup2(err[1], 2) < 0) return "setup";
    auto said = [&] {
      std::string s;
      char b[256];
      for (ssize_t n; (n = ::read(err[0], b, sizeof b)) > 0;) s.append(b, static_cast<size_t>(n));
      return s;
    };
    std::string problem;
    for (const bool go : {true, false}) {
      int gate[2];
      if (::pipe2(gate, O_CLOEXEC) != 0) return "pipe2";
      run::set_start_gate(gate[0]);
      std::cerr << "held " << go << "\n";
      if (!said().empty()) problem += "written before the go-ahead; ";
      if (go) (void)!::write(gate[1], "g", 1);
      ::close(gate[1]);
      if (run::await_start_gate() != go) problem += "the gate answered wrong; ";
      const std::string out = said();
      if (go && out != "held 1\n") problem += "with the go-ahead, stderr got '" + out + "'; ";
      if (!go && !out.empty()) problem += "without it, stderr got '" + out + "'; ";
      std::cerr << "after\n";
      if (said() != "after\n") problem += "std::cerr was not given back; ";
      if (!run::await_start_gate()) problem += "a second wait said no; ";
    }
    ::dup2(saved, 2);
    return problem;
  });
}

TEST(RunForker, OnlyASingleThreadedProcessStartsOne) {
  in_child([]() -> std::string {
    pthread_t t;
    if (pthread_create(
            &t, nullptr,
            [](void*) -> void* {
              ::pause();
              return nullptr;
            },
            nullptr) != 0)
      return "pthread_create";
    RunForker forker;
    Status st = forker.start(command_line);
    if (st) return "started with two threads";
    if (st.error().message.find("one thread") == std::string::npos) return "error: " + st.error().message;
    return "";
  });
}

}  // namespace
}  // namespace agentcage::daemon
