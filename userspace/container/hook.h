// SPDX-License-Identifier: Apache-2.0
// `agentcage oci-hook`: what an OCI runtime hook does for a container that
// names a policy in its io.agentcage.policy annotation (docs/containers.md).
//
// createRuntime: the runtime has made the container's namespaces, mounts and
// cgroup, and holds its init parked until the hook returns. The hook asks the
// daemon to confine the init's cgroup under the named policy, *pending* until
// the init execs: the runtime's own remaining work (pivot_root, mounts, the
// exec fifo) runs unconfined, and the container's entrypoint is decided by the
// policy at its exec and confined from its first instruction, with every
// process it starts. Any error: the hook fails, so the container never starts.
//
// poststop: the container is gone; the daemon releases its scope (the cgroup
// is usually removed already, so by container id) and the hook may keep what
// was denied as the container's result.
//
// Containers without the annotation are left alone. The annotation can only
// pick a policy of the daemon's policy directory by NAME; no path from an
// annotation is ever opened.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "oci/state.h"
#include "util/result.h"

namespace agentcage::container {

enum class Stage { create_runtime, poststop };

struct HookEnv {
  // One control-socket request to the daemon: its answer (which may refuse:
  // "ok": false), or why there is none.
  std::function<Result<nlohmann::json>(const nlohmann::json&)> ask_daemon;
  std::string proc = "/proc";  // procfs (tests: a fake tree)
  // The hook's own cgroup below the cgroup2 root, as cgroup::own_cgroup
  // says it ("" : the root, or unknown); a container
  // whose init is in it was given no cgroup of its own.
  std::string own_cgroup;
  std::string result_dir;  // poststop: where ID.json goes ("" : nowhere)
};

struct HookOutcome {
  bool acted = false;   // false: nothing to do for this container
  std::string message;  // one line for the runtime's log
  nlohmann::json reply;  // the daemon's answer, when asked
};

// What createRuntime sends the daemon for this container (the attach
// request), or why the container must not start. Unannotated or a sandbox
// (pause) container: a null json.
Result<nlohmann::json> attach_request(const oci::State& state, const HookEnv& env);

Result<HookOutcome> run_hook(Stage stage, const oci::State& state, const HookEnv& env);

}  // namespace agentcage::container
