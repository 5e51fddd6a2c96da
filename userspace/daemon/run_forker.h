// SPDX-License-Identifier: Apache-2.0
// Runs through the daemon start without an exec. A run's start used to pay
// for a whole new agentcage process (exec, the dynamic loader, static
// initialisation, page faults on a fresh image) before the run itself. The
// fork server is a copy of the daemon made before the daemon starts any
// thread: single-threaded, it waits on a socket pair; per run it clones a
// runner with CLONE_PARENT (so the runner is the daemon's child, exactly as
// a forked and exec'd one: pidfd, waitid, PR_SET_PDEATHSIG all refer to the
// daemon) and the runner calls agentcage's own command line with the words
// the daemon chose (`agentcage run --policy=NAME ... -- ARGV`), under the
// environment the daemon chose, with only the client's stdin, stdout and
// stderr, the result pipe and the notice channel open (0..4). So parsing, checks, lifecycle and
// result are those of `agentcage run`, minus the exec. Before it clones, the
// server prepares the run's policy file (run/policy_cache.h): the runner
// inherits the parsed and compiled policy and its seccomp filter, used only
// when the file still holds exactly the bytes they were prepared from. It
// holds the shared program set adopted, too (checked before each clone to
// be the one pinned now), and each runner inherits it instead of adopting
// the set again.
//
// The client's stdin, stdout and stderr never pass through the server: the
// daemon hands them to the runner itself, over a socket pair of the run's,
// once the server has answered. A close of a client's descriptor can wait as
// long as the client likes (daemon/closer.h), and the server starts every run.
//
// A runner creates and writes nothing until the daemon, holding its pidfd,
// sends it a go-ahead byte on a pipe of its own (meanwhile it parses its
// command line and checks its request and policy): a runner whose answer
// was lost (the server died or timed out after the clone) reads
// end-of-file and exits, so a run never starts twice nor unwatched.
//
// When the server is gone (it died, could not start, or this kernel or a
// seccomp profile refuses clone3), the daemon falls back to fork + exec of
// /proc/self/exe (run_service.cpp): same words, same descriptors.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "run/options.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

// agentcage's command line: argv (argv[0] first) -> exit status.
using CommandLine = std::function<int(std::vector<std::string> argv)>;

// A runner's descriptors, in this order: stdin, stdout, stderr, the result
// pipe (--result-fd=3) and its notice channel to the daemon (fd 4, named by
// AGENTCAGE_NOTIFY_FD: control/notify.h).
constexpr int kRunnerFds = 5;

// Puts the runner's descriptors at 0..kRunnerFds-1, without close-on-exec,
// whatever numbers they had. Async-signal-safe (for a child between fork
// and exec). false with errno on failure.
bool install_runner_fds(const int fds[kRunnerFds]);

struct Runner {
  UniqueFd pidfd;
  pid_t pid = 0;
};

// A runner's result pipe (its 3, --result-fd) and notice channel (its 4):
// the daemon's ends and the runner's.
struct RunnerChannels {
  UniqueFd result, notices;                // the daemon's: read
  UniqueFd result_runner, notices_runner;  // the runner's
};
Result<RunnerChannels> runner_channels();

// A spare runner (RunForker::spare): cloned and given the go-ahead ahead
// of a request, it prepares a run (run::prepare_spare_run) and waits for
// the run's words and the client's stdin, stdout and stderr (hand_over).
// Then it is a runner like any other, with these ends of its result pipe
// and notice channel. When the daemon closes `handover` unused, the spare
// removes what it prepared and exits.
struct SpareRunner {
  Runner runner;
  UniqueFd handover;
  UniqueFd result, notices;  // the daemon's ends of the runner's 3 and 4
};

class RunForker {
 public:
  RunForker() = default;
  ~RunForker();
  RunForker(const RunForker&) = delete;
  RunForker& operator=(const RunForker&) = delete;

  // Forks the server. Only while this process has one thread (otherwise an
  // error, and the daemon execs its runners).
  Status start(CommandLine command_line);

  bool running() const { return static_cast<bool>(sock_); }
  pid_t pid() const { return pid_; }

  // Starts a runner: `argv` and `env` replace the command line and the
  // environment; fds = the runner's descriptors (kRunnerFds);
  // `policy_file` (or "") is the policy file the run will read, prepared
  // by the server first.
  // An error when the server is gone (then running() is false: start the
  // run another way) or could not start this one (the message says why).
  Result<Runner> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const int fds[kRunnerFds], const std::string& policy_file = {});

  // A spare runner with `env` (as spawn's), which prepares its run at once.
  // `policy_file`: prepared by the server first, as spawn's (the spare
  // inherits every policy the server prepared before it). `limits`: those
  // of the run it expects, as a run's --memory, --pids, --cpu and --disk
  // (a value or `unlimited`; --timeout is not used), written ahead.
  Result<SpareRunner> spare(const std::vector<std::string>& env, const std::string& policy_file = {},
                            const run::RunOptions& limits = {});
  // Hands `spare` its run: `argv` as spawn's, and the client's stdin,
  // stdout and stderr. An error: the spare did not get them (kill it).
  static Status hand_over(SpareRunner& spare, const std::vector<std::string>& argv, const int stdio[3]);

  // Ends the server (the daemon stops; runners already started go on).
  void stop();

 private:
  // A runner cloned by the server for `msg`, with its result pipe and
  // notice channel; not yet given its go-ahead (`go`) nor its stdio
  // (`handover`).
  struct Cloned {
    Runner runner;
    UniqueFd go, handover;
  };
  Result<Cloned> clone_runner(const std::string& msg, int result, int notices);
  void lost(const std::string& why);
  UniqueFd sock_;
  pid_t pid_ = 0;
};

}  // namespace agentcage::daemon
