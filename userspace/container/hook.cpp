// SPDX-License-Identifier: Apache-2.0
#include "container/hook.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "cgroup/delegation.h"
#include "core/labels.h"
#include "oci/annotations.h"
#include "oci/bundle.h"
#include "policy/name.h"
#include "util/file.h"
#include "util/text.h"
#include "util/unique_fd.h"

namespace agentcage::container {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxProcCgroupBytes = 64 * 1024;
// Where a workspace is found without an io.agentcage.workspace annotation:
// the bind mount at this path, if the container has one.
constexpr const char* kDefaultWorkspace = "/workspace";

// Well-known annotations that name a container, carried as its labels (audit
// lines, `agentcage status`): annotation -> label key.
constexpr std::pair<const char*, const char*> kLabelAnnotations[] = {
    {"io.kubernetes.pod.namespace", "k8s.namespace"},
    {"io.kubernetes.pod.name", "k8s.pod"},
    {"io.kubernetes.container.name", "container.name"},
    {"io.kubernetes.cri.container-name", "container.name"},
    {"io.kubernetes.cri.sandbox-namespace", "k8s.namespace"},
    {"io.kubernetes.cri.sandbox-name", "k8s.pod"},
    {"io.container.manager", "container.manager"},
};

std::string annotation(const oci::State& state, std::string_view key) {
  auto it = state.annotations.find(std::string(key));
  return it == state.annotations.end() ? std::string() : it->second;
}

Error refuse(const oci::State& state, const std::string& why) {
  return Error{"container " + state.id + " is not started: " + why, EINVAL};
}

// The workspace, as the container sees it: the annotation's path or the bind
// mount at /workspace; it must be a bind mount of the container (what the
// policy's ${workspace} rules may write is a host directory the operator
// chose, never the image's own tree), reached inside the container's root
// without a symbolic link (one would move where the mount is, and the text
// the kernel sees).
Result<std::string> find_workspace(const oci::State& state, const oci::Bundle& bundle, const HookEnv& env) {
  std::string ws = annotation(state, oci::kWorkspaceAnnotation);
  const bool named = !ws.empty();
  if (!named) {
    if (!oci::bind_mount_at(bundle, kDefaultWorkspace)) return std::string();
    ws = kDefaultWorkspace;
  }
  if (!normal_absolute_path(ws))
    return refuse(state, std::string(oci::kWorkspaceAnnotation) + "=" + quote(ws, 80) +
                             ": not a normalised absolute path other than /");
  if (!oci::bind_mount_at(bundle, ws))
    return refuse(state, std::string(oci::kWorkspaceAnnotation) + "=" + quote(ws, 80) +
                             ": the container has no bind mount there; mount a host directory there "
                             "(-v DIR:PATH)");
  // The init is parked before pivot_root: its root is still the runtime's,
  // and the container's tree, with its mounts, is at root.path below it.
  const std::string root = env.proc + "/" + std::to_string(state.pid) + "/root" + bundle.root.string();
  UniqueFd rootfd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd) return refuse(state, Error::from_errno("the container's root " + root).message);
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string rel = ws.substr(1);
  UniqueFd dir(static_cast<int>(::syscall(SYS_openat2, rootfd.get(), rel.c_str(), &how, sizeof how)));
  if (!dir)
    return refuse(state, Error::from_errno("workspace " + quote(ws, 80) + " inside the container (a directory, reached without "
                                           "a symbolic link)")
                             .message);
  return ws;
}

core::Labels labels_of(const oci::State& state) {
  core::Labels out;
  for (const auto& [key, label] : kLabelAnnotations) {
    const std::string value = annotation(state, key);
    // Informational, and written by whoever made the container: a value the
    // label rule refuses is left out, never an error.
    if (value.empty() || out.count(label) || !core::label_value_error(value).empty()) continue;
    out[label] = value;
  }
  return out;
}

}  // namespace

Result<json> attach_request(const oci::State& state, const HookEnv& env) {
  const std::string policy = annotation(state, oci::kPolicyAnnotation);
  if (policy.empty() || oci::is_sandbox_container(state.annotations, state.id)) return json();
  if (!policy::valid_policy_name(policy))
    return refuse(state, std::string(oci::kPolicyAnnotation) + "=" + quote(policy, 80) +
                             ": not a policy name (" + std::string(policy::kPolicyNameRule) +
                             "); a container names a policy of the daemon's policy directory, never a file");
  if (Status s = oci::check_container_id(state.id); !s) return s.error();
  if (state.pid <= 0)
    return refuse(state, "the runtime's state names no process (pid " + std::to_string(state.pid) +
                             "): run agentcage oci-hook at the createRuntime stage");

  auto text = read_regular_file(env.proc + "/" + std::to_string(state.pid) + "/cgroup", kMaxProcCgroupBytes);
  if (!text) return refuse(state, text.error().message);
  std::optional<std::string> cg = cgroup::parse_proc_cgroup(*text);
  if (!cg) return refuse(state, "its init is in no cgroup v2 hierarchy (agentcage needs the unified hierarchy)");
  if (cg->empty()) return refuse(state, "its init is in the root cgroup: the runtime gave it no cgroup of its own");
  if (!env.own_cgroup.empty() && *cg == env.own_cgroup)
    return refuse(state, "its init is in the hook's own cgroup " + *cg +
                             ": the runtime gave it no cgroup of its own (was it started with cgroups disabled?)");

  auto bundle = oci::read_bundle(state.bundle);
  if (!bundle) return refuse(state, bundle.error().message);
  auto workspace = find_workspace(state, *bundle, env);
  if (!workspace) return workspace.error();

  json req = {{"op", "attach"},         {"cgroup", *cg},     {"policy", policy},
              {"container_id", state.id}, {"arm_pid", state.pid}};
  if (!workspace->empty()) req["workspace"] = *workspace;
  if (core::Labels labels = labels_of(state); !labels.empty()) req["labels"] = labels;
  return req;
}

Result<HookOutcome> run_hook(Stage stage, const oci::State& state, const HookEnv& env) {
  HookOutcome out;
  if (stage == Stage::create_runtime) {
    auto req = attach_request(state, env);
    if (!req) return req.error();
    if (req->is_null()) {
      out.message = "container " + state.id +
                    (oci::is_sandbox_container(state.annotations, state.id)
                         ? ": a pod's sandbox (pause) container; left alone"
                         : ": no " + std::string(oci::kPolicyAnnotation) + " annotation; left alone");
      return out;
    }
    auto answer = env.ask_daemon(*req);
    if (!answer) return refuse(state, "the agentcage daemon cannot be asked: " + answer.error().message);
    if (!answer->value("ok", false))
      return refuse(state, "the agentcage daemon refused: " + answer->value("error", std::string("(no reason)")));
    out.acted = true;
    out.reply = *answer;
    out.message = "container " + state.id + " is confined by policy " + (*req)["policy"].get<std::string>() +
                  " from its entrypoint's exec on (cgroup " + (*req)["cgroup"].get<std::string>() + ")";
    return out;
  }

  // poststop: never fails the runtime's delete; says what it could not do.
  if (annotation(state, oci::kPolicyAnnotation).empty() ||
      oci::is_sandbox_container(state.annotations, state.id)) {
    out.message = "container " + state.id + ": not confined by agentcage; nothing to release";
    return out;
  }
  if (Status s = oci::check_container_id(state.id); !s) return s.error();
  auto answer = env.ask_daemon(json{{"op", "detach"}, {"container_id", state.id}});
  if (!answer)
    return Error{"container " + state.id + ": the agentcage daemon cannot be asked (" + answer.error().message +
                     "); it releases the container's scope once it runs again",
                 answer.error().code};
  if (!answer->value("ok", false))
    return Error{"container " + state.id + ": " + answer->value("error", std::string("(no reason)")), EINVAL};
  out.acted = true;
  out.reply = *answer;
  out.message = "container " + state.id + " released (" + std::to_string(answer->value("denied", uint64_t{0})) +
                " operations denied)";
  if (!env.result_dir.empty()) {
    const std::string file = env.result_dir + "/" + state.id + ".json";
    if (Status st = replace_file(file, answer->dump(2) + "\n", 0640); !st)
      return Error{"container " + state.id + " released, but its result was not kept: " + st.error().message,
                   st.error().code};
    out.message += "; result in " + file;
  }
  return out;
}

}  // namespace agentcage::container
