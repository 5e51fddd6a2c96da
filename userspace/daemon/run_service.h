// SPDX-License-Identifier: Apache-2.0
// Runs through the daemon (the control protocol's "run"): a client of the
// control group asks for COMMAND under a policy of the policy directory, by
// name, with its own stdin, stdout and stderr (SCM_RIGHTS). The daemon
// checks the request against its caps (concurrent runs in all and per
// client uid, each limit) and starts `agentcage run` as a child with the
// client's descriptors, every limit stated, the client's labels and, for a
// workspace the client names, --io-dir as the client (run/artifacts.h: the
// directory is opened with the client's permissions, copied into the run's
// own workspace and back). So a run through the daemon has exactly the
// lifecycle, limits and fail-closed rules of `agentcage run`.
//
// The runner sends its run_start and run_end notices over a channel of its
// own (control/notify.h), read before its client is answered; the answer
// goes out when the result document is complete, without waiting for the
// runner to exit: by then COMMAND has ended, the run's cgroup is killed and
// drained, its scope released and its workspace copied back, and the
// runner lets go of the client's descriptors; it removes the rest (the
// empty cgroup, a fresh workspace, the run record and uid) after the answer
// (run/runner.h). Until the runner has exited, its run counts against the
// caps; a request over a cap only because of such runs waits for them.
// A runner that could not remove everything is logged and its run reaped.
//
// The runner ends its run (cgroup killed, everything removed) when the
// client hangs up (SIGTERM from here), when the daemon stops (SIGTERM, then
// the client is told), and when the daemon dies (PR_SET_PDEATHSIG).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/protocol.h"
#include "daemon/closer.h"
#include "daemon/config.h"
#include "daemon/control_server.h"
#include "daemon/loop.h"
#include "daemon/run_forker.h"
#include "policy/model.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

// The limits a run through the daemon gets, each stated (as `agentcage run`
// takes it): what the client asked for, else the policy's or the default,
// lowered to the cap. A request over a cap (or unlimited where there is
// one) is an error naming the cap. Pure, for the unit tests.
Result<control::RunLimits> capped_limits(const policy::Limits& policy_limits, const control::RunLimits& asked,
                                         const policy::Limits& caps);

class RunService {
 public:
  // Called with the client's id and the answer when a run ends.
  using Finish = std::function<void(uint64_t client, const nlohmann::json& reply)>;
  // Called with each run_start and run_end notice a runner sends on its
  // channel (control/notify.h), in order; every notice of a run comes
  // before its client's answer. `owner`: the uid of the run's client.
  using Notice = std::function<void(const control::Request& notice, uid_t owner)>;

  // Runners come from `forker` while it runs (no exec), else by fork + exec.
  // The descriptors of requests it holds (parked) are closed by `closer`.
  RunService(const Config& cfg, EventLoop& loop, Finish finish, Notice notice, Closer& closer,
             RunForker* forker = nullptr);
  ~RunService();
  RunService(const RunService&) = delete;
  RunService& operator=(const RunService&) = delete;

  // Starts the run, or the refusal (with "exit_code": 125). `limits` are
  // the policy's (nullopt: no policy of that name enforces now). What it
  // keeps of `stdio` (a parked request's) it moves out; the caller closes
  // the rest (the runner has its own copies).
  std::optional<nlohmann::json> start(const control::Request& request, const Peer& peer,
                                      std::vector<UniqueFd>& stdio,
                                      const std::optional<policy::Limits>& limits);
  // The client hung up: its run ends (its answer goes nowhere). Its runner
  // gets SIGTERM, and SIGKILL kAbandonedGrace later if it is still there
  // (tick): a runner can wait on a write to the client's stdout or stderr
  // (a full pipe it holds), and must not keep the run, nor its place under
  // the caps, for that.
  void client_gone(uint64_t client);
  static constexpr std::chrono::seconds kAbandonedGrace{10};
  // Once a second: kills the runners whose grace ran out, and makes a spare
  // when none is held (after a run that was never answered, or once the
  // pause after a spare that failed is over); otherwise a spare is made
  // when a run is answered (answer()).
  void tick();
  // The daemon stops: every run ends (SIGTERM to its runner, which kills and
  // removes it), each client is told, within `grace_ms` (then SIGKILL: the
  // next run's reaper removes what is left).
  void stop_all(int grace_ms);
  // How long stop_all waits for runners after their SIGKILL.
  static constexpr std::chrono::seconds kKilledWait{2};
  // Hands every notice the runners have sent so far to `notice` (before
  // the daemon reads decision records: a run's start comes before them).
  void read_all_notices();
  // Runs not fully gone: from their start until their runner has exited,
  // answered or not (what the caps count).
  size_t active() const;
  // Called after a runner ended without removing everything of its run
  // after its answer (logged), or without an answer at all (killed, say):
  // the daemon reaps then.
  void on_left_behind(std::function<void()> reap) { left_behind_ = std::move(reap); }

 private:
  struct Running {
    uint64_t client = 0;
    uid_t uid = 0;
    pid_t pid = 0;
    UniqueFd pidfd, result;  // the runner's pidfd; the read end of its --result-fd
    UniqueFd notices;        // the daemon's end of the runner's notice channel
    std::string document;    // what the runner wrote so far
    bool abandoned = false;  // the client is gone
    bool stopping = false;   // the daemon stops
    bool answered = false;   // the client has its answer; the runner removes the rest, then exits
    // When the runner gets SIGKILL if it has not exited (its client hung up).
    std::optional<std::chrono::steady_clock::time_point> kill_at;
    bool killed = false;
    // The run's notices: at most one run_start, then one run_end of the same run id.
    std::string noticed_run_id;
    bool start_noticed = false, end_noticed = false;
  };
  // A request over a cap only because of runs that were answered and are
  // removing what is left (milliseconds): it waits for them, at most one
  // request per such run, then starts or is refused (retry_parked).
  struct Parked {
    control::Request request;
    Peer peer;
    std::vector<UniqueFd> stdio;
    std::optional<policy::Limits> limits;
  };
  // The refusal when a run of `uid` would go over a cap, counting the runs
  // still removing what is left or not.
  std::optional<std::string> over_cap(uid_t uid, bool count_removing) const;
  std::optional<nlohmann::json> launch(const control::Request& request, const Peer& peer,
                                       const std::vector<UniqueFd>& stdio, const policy::Limits& limits);
  void retry_parked();
  void read_result(Running& r);
  void read_notices(Running& r);
  void answer(Running& r, std::optional<int> runner_status);
  void reaped(int pidfd);

  const Config& cfg_;
  EventLoop& loop_;
  Finish finish_;
  Notice notice_;
  std::vector<char> notice_buf_;  // one notice at a time, reused
  Closer& closer_;
  rlimit nofile_{};  // RLIMIT_NOFILE as the daemon started: its exec'd runners get it back
  RunForker* forker_;
  // The environment of every runner.
  std::vector<std::string> runner_env() const;
  // A spare runner (daemon/run_forker.h) whose run is prepared ahead: the
  // next run takes it, skipping the clone and the run's record, uid,
  // workspace and cgroup. One at a time, while the fork server runs; after
  // one that failed, none for kSparePause.
  void prepare_spare();
  void spare_exited();
  // The spare goes: told so, it removes what it prepared, within `wait`
  // (else SIGKILL, and the reaper removes it). `in_loop`: registered in
  // the loop (not from the destructor).
  void drop_spare(std::chrono::milliseconds wait, bool in_loop = true);
  static constexpr std::chrono::seconds kSparePause{60};

  std::function<void()> left_behind_;
  std::optional<SpareRunner> spare_;
  std::map<int, UniqueFd> dying_;  // spares killed, reaped once gone (by pidfd)
  std::string spare_policy_file_;  // the last run's, prepared for the next spare
  run::RunOptions spare_limits_;   // the last run's limits, written ahead by the next spare
  std::chrono::steady_clock::time_point spares_paused_until_{};
  bool stopping_ = false;        // stop_all: no more spares
  std::map<int, Running> runs_;  // by pidfd
  std::deque<Parked> parked_;
};

}  // namespace agentcage::daemon
