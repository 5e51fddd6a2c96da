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
// The runner ends its run (cgroup killed, everything removed) when the
// client hangs up (SIGTERM from here), when the daemon stops (SIGTERM, then
// the client is told), and when the daemon dies (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/protocol.h"
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

  // Runners come from `forker` while it runs (no exec), else by fork + exec.
  RunService(const Config& cfg, EventLoop& loop, Finish finish, RunForker* forker = nullptr);
  ~RunService();
  RunService(const RunService&) = delete;
  RunService& operator=(const RunService&) = delete;

  // Starts the run, or the refusal (with "exit_code": 125). `limits` are
  // the policy's (nullopt: no policy of that name enforces now).
  std::optional<nlohmann::json> start(const control::Request& request, const Peer& peer,
                                      std::vector<UniqueFd> stdio,
                                      const std::optional<policy::Limits>& limits);
  // The client hung up: its run ends (its answer goes nowhere).
  void client_gone(uint64_t client);
  // The daemon stops: every run ends (SIGTERM to its runner, which kills and
  // removes it), each client is told, within `grace_ms` (then SIGKILL: the
  // next run's reaper removes what is left).
  void stop_all(int grace_ms);
  size_t active() const { return runs_.size(); }

 private:
  struct Running {
    uint64_t client = 0;
    uid_t uid = 0;
    pid_t pid = 0;
    UniqueFd pidfd, result;  // the runner's pidfd; the read end of its --result-fd
    std::string document;    // what the runner wrote so far
    bool abandoned = false;  // the client is gone
    bool stopping = false;   // the daemon stops
  };
  void read_result(Running& r);
  void reaped(int pidfd);

  const Config& cfg_;
  EventLoop& loop_;
  Finish finish_;
  RunForker* forker_;
  std::map<int, Running> runs_;  // by pidfd
};

}  // namespace agentcage::daemon
