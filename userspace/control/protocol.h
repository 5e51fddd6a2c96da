// SPDX-License-Identifier: Apache-2.0
// The control socket's protocol: one JSON object per line, both ways.
// Requests come from other processes and are validated like any untrusted
// input: a size cap, a JSON object, a known "op", exactly the fields that op
// takes, each of the right type and within bounds. docs/daemon.md lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fail_closed.h"
#include "core/labels.h"
#include "core/run_outcome.h"
#include "util/result.h"

namespace agentcage::control {

// A run's id: 16 lowercase hex digits, as run/options.h formats them (in
// requests, run records and the uid leases that name them).
bool valid_run_id(std::string_view s);

// The protocol's version: a client says which it speaks in "hello", the
// daemon answers with its own. Changes that old clients could misread bump
// it; new optional fields do not.
inline constexpr int kProtocolVersion = 1;

// A request line longer than this is refused and the connection closed.
inline constexpr size_t kMaxRequestBytes = 64 * 1024;
// A run request's argv and env at most (entries), each entry at most 4096 bytes.
inline constexpr size_t kMaxRunArgs = 1024;
inline constexpr size_t kMaxArgBytes = 4096;
// The descriptors a run request carries (SCM_RIGHTS): stdin, stdout, stderr.
inline constexpr size_t kRunDescriptors = 3;

// run_end's "syscalls_denied" at most: 2^53, the largest count a Prometheus
// counter (a double) still holds exactly. No run gets near it (one denial per
// notification round trip), so a larger value is a client bug or a lie.
inline constexpr uint64_t kMaxSyscallsDenied = uint64_t{1} << 53;

// run_end's "dns_refused": the names a run's resolver refused (NXDOMAIN,
// never forwarded), for the audit log and agentcage_decisions_total{hook="dns"}.
// `total` counts every refused query (at most kMaxSyscallsDenied, for the same
// reason); `by_name` holds at most kMaxRefusedNames names (1..253 bytes of
// printable ASCII, as the resolver shows them) with their counts, each
// counted in `total`.
inline constexpr size_t kMaxRefusedNames = 64;
struct RefusedNames {
  uint64_t total = 0;
  std::map<std::string, uint64_t> by_name;
};

// The largest process id Linux hands out (PID_MAX_LIMIT on 64-bit).
inline constexpr uint64_t kMaxPid = 4194304;

enum class Op { hello, status, events, attach, detach, run, run_start, run_end, reload };
inline constexpr Op kOps[] = {Op::hello,  Op::status,    Op::events,  Op::attach, Op::detach,
                              Op::run,    Op::run_start, Op::run_end, Op::reload};
std::string_view op_name(Op op);
// Operations the configured group may use; everything else needs uid 0
// (attach/detach change enforcement; run_start, run_end and reload feed the
// daemon). A run by a member of the group runs under a policy of the
// daemon's policy directory with the daemon's caps.
bool op_allowed_for_group(Op op);

// A run request's limits, as written on agentcage run's command line
// ("512Mi", "30s", "unlimited"); unset: the policy's (capped by the daemon).
struct RunLimits {
  std::optional<std::string> timeout, memory, pids, cpu, disk;
};

struct Request {
  Op op = Op::status;
  int protocol = kProtocolVersion;                    // hello
  bool follow = false;                                // events
  std::string cgroup;                                 // attach; detach (or container_id)
  // attach (optional): the cgroup is a container's (oci/annotations.h); its
  // workspace is then a path as the container sees it, checked as text.
  // detach: the container to release instead of a cgroup (its cgroup may be
  // gone already: an OCI poststop hook runs after the runtime removed it).
  std::string container_id;
  // attach (optional): the scope stays pending until this process (its pid
  // in the daemon's pid namespace, which must be the host's) execs, and only
  // then confines; it must be the cgroup's one process. A container's init,
  // parked by its runtime at the createRuntime hook.
  int arm_pid = 0;
  std::string policy;                                 // attach, run, run_start, run_end: a policy name
  std::string workspace;                              // attach, run (optional)
  std::string run_id;                                 // run_start, run_end
  uint64_t scope_id = 0;                              // run_start
  core::RunOutcome outcome = core::RunOutcome::ok;    // run_end
  int exit_code = 0;                                  // run_end
  double duration_seconds = 0;                        // run_end
  std::optional<core::FailClosedReason> fail_closed;  // run_end
  std::optional<uint32_t> policy_slot;                // run_end (optional): its scope's slot
  uint64_t syscalls_denied = 0;                       // run_end (optional): seccomp denials
  RefusedNames dns_refused;                           // run_end (optional): the resolver's refusals
  std::vector<std::string> argv;                      // run: COMMAND [ARGS...]
  std::vector<std::string> env;                       // run (optional): KEY=VALUE
  RunLimits limits;                                   // run (optional)
  core::Labels labels;                                // run, run_start, attach (optional)
};

// Parses and validates one request line (without its '\n').
Result<Request> parse_request(std::string_view line);
nlohmann::json to_json(const Request& r);

}  // namespace agentcage::control
