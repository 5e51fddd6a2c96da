// SPDX-License-Identifier: Apache-2.0
// What a run derives from its policy file's bytes alone (the parsed policy,
// its compiled rules, its seccomp filter), prepared ahead of the run; and
// the shared program set, opened ahead (prepare_enforcer below). The
// daemon's fork server (daemon/run_forker.h) prepares the policy of each run
// before it clones the runner, which inherits this process's cache: a run
// through the daemon under a policy it ran before skips parsing, compiling
// and building the filter. The cache is keyed by the file's path and holds
// its bytes: check_request (run/steps.cpp) reads the file as always and uses
// an entry only when the bytes it read are exactly the cached ones, and
// every file the policy includes still holds the bytes it was prepared
// from, so a changed, replaced or removed file is parsed afresh, never
// served stale.
#pragma once

#include <linux/filter.h>

#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "bpf/compiled.h"
#include "bpf/enforcer.h"
#include "policy/policy.h"
#include "util/result.h"

namespace agentcage::run {

struct PreparedPolicy {
  policy::Policy policy;
  bpf::CompiledPolicy compiled;
  std::vector<sock_filter> seccomp_filter;
};

// This process's entry for `path` when it was prepared from exactly `text`
// (and its includes from what they hold now); nullptr otherwise.
const PreparedPolicy* prepared_policy(const std::string& path, std::string_view text);

// Reads the policy file `path`, parses and compiles it and builds its seccomp
// filter, and caches the outcome (at most kMaxPreparedPolicies files: when
// full, the cache starts afresh). A file that cannot be read or is invalid
// is an error and leaves no entry; the run reports it itself.
Status prepare_policy(const std::string& path);

inline constexpr size_t kMaxPreparedPolicies = 64;

// The shared program set (bpf/enforcer.h), adopted ahead in the same way:
// the fork server adopts the pinned set once, not each runner (a dozen
// bpf() calls and a walk of the pin directory each). Before each run it
// checks that the set it holds is still the one pinned (the inode of the
// set's "ready" pin); a set pinned anew since is adopted afresh. Its copy
// holds no lock file (Enforcer::close_lock_file): each runner opens its own
// for its map updates. An error (no set pinned, say) leaves nothing
// prepared: the runner opens the set itself, as `agentcage run` does, and
// reports what fails.
Status prepare_enforcer();
// The descriptors of the prepared set, for a child that inherits it (the
// runner keeps them open); empty when there is none.
std::vector<int> prepared_enforcer_fds();
// The prepared set, handed over once (nullptr when there is none, or when
// it is no longer the set pinned: checked again here): the runner's
// open_enforcement takes it instead of adopting the set again.
std::unique_ptr<bpf::Enforcer> take_prepared_enforcer();

// The daemon's go-ahead to a runner of its fork server, read by the run
// itself: the runner parses its command line and checks its request and
// policy (check_request) while the daemon takes its pidfd, and waits for the
// go-ahead (await_start_gate, the step after check_request) before it
// creates anything or starts COMMAND. `fd`: the read end of a pipe, on
// which the daemon writes one byte once it knows the runner, and which
// reaches end-of-file when it never will. Until then std::cerr is held:
// what the runner says (a usage error, a policy's errors) reaches the
// client's stderr only once the go-ahead came, and is dropped otherwise.
void set_start_gate(int fd);
// True once the go-ahead came (what std::cerr held is written out), or when
// this process has no gate; false when the daemon will not give it (what it
// held is dropped). The gate is closed either way; later calls answer true.
bool await_start_gate();

}  // namespace agentcage::run
