// SPDX-License-Identifier: Apache-2.0
// `agentcage attach` and `agentcage detach`: confine an existing cgroup
// under a policy, and lift it again. With the daemon running they go through
// it (control protocol "attach"/"detach"): the cgroup is confined on the
// daemon's named slot of the policy, so the policy directory's hot reloads
// apply to it. Without a daemon, or with what only a direct attachment can
// do (a policy FILE, --mode, another policy directory, --direct), the
// cgroup gets a slot of its own (scope/attach.h).
#include <agentcage/abi.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/names.h"
#include "cli/command.h"
#include "cli/help.h"
#include "control/client.h"
#include "policy/locate.h"
#include "policy/policy.h"
#include "policy/values.h"
#include "scope/attach.h"

namespace agentcage::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kDaemonTimeoutMs = 10000;

// The daemon at the control socket, as attach and detach see it.
struct DaemonView {
  bool running = false;
  std::string policy_dir;  // its policy directory (status answer)
};

// Asks the daemon for its status. Not running (no socket, nobody listening):
// running = false. A daemon that is there but does not answer is an error:
// an attachment must not silently bypass it.
Result<DaemonView> ask_daemon(const std::string& socket) {
  auto answer = control::call(socket, json{{"op", "status"}}, kDaemonTimeoutMs);
  if (!answer) {
    if (answer.error().code == ENOENT || answer.error().code == ECONNREFUSED) return DaemonView{};
    if (answer.error().code == EACCES)
      return Error{answer.error().message + " (attach and detach need root)", EACCES};
    return Error{answer.error().message + " (the daemon did not answer; fix it, or pass --direct)", answer.error().code};
  }
  DaemonView v;
  v.running = true;
  const json& st = answer->value("status", json::object());
  if (st.contains("daemon") && st["daemon"].is_object())
    v.policy_dir = st["daemon"].value("policy_dir", std::string());
  return v;
}

// One request to the daemon: its answer, or why there is none (it could not
// be asked, or it refused).
Result<json> ask(const std::string& socket, const json& request) {
  auto answer = control::call(socket, request, kDaemonTimeoutMs);
  if (!answer) return answer.error();
  if (!answer->value("ok", false))
    return Error{"the daemon refused: " + answer->value("error", std::string("(no reason given)")), EPERM};
  return answer;
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::canonical(a, ea), cb = fs::canonical(b, eb);
  return !ea && !eb && ca == cb;
}

// Why this attachment cannot be the daemon's ("" : it can): the daemon
// confines with the policy its directory holds, in that policy's mode.
std::string direct_only(const scope::AttachRequest& req, const DaemonView& d) {
  if (policy::is_file_ref(req.policy)) return "the policy is a file, not a NAME of the daemon's policy directory";
  if (req.mode) return "--mode changes the policy's mode for this attachment only";
  const std::string dir = req.policy_dir.empty() ? policy::default_policy_dir() : req.policy_dir;
  if (!same_directory(dir, d.policy_dir))
    return "the policy directory " + dir + " is not the daemon's (" + d.policy_dir + ")";
  return {};
}

void print_attached(const std::string& cgroup, uint64_t cgroup_id, const std::string& policy, policy::Mode mode,
                    const std::string& file, const std::string& workspace, bool named) {
  std::cout << "attached: " << cgroup << " (cgroup id " << cgroup_id << ") is confined by policy " << policy << " ("
            << policy::to_string(mode) << ", from " << file << ")";
  if (!workspace.empty()) std::cout << ", workspace " << workspace;
  std::cout << (named ? "; the daemon's named policy: its reloads apply"
                      : "; a policy slot of its own: the daemon's reloads do not apply")
            << "\n";
}

// Through the daemon: its named slot of the policy.
int attach_via_daemon(const scope::AttachRequest& req, const std::string& socket) {
  json request = {{"op", "attach"}, {"cgroup", req.cgroup}, {"policy", req.policy}};
  if (!req.workspace.empty()) {
    // The daemon resolves paths in its own working directory: send it absolute.
    std::error_code ec;
    fs::path ws = fs::absolute(req.workspace, ec);
    request["workspace"] = ec ? req.workspace : ws.lexically_normal().string();
  }
  auto answer = ask(socket, request);
  if (!answer) {
    std::cerr << "agentcage attach: " << answer.error().message << '\n';
    return 1;
  }
  const auto mode = policy::parse_mode(answer->value("mode", std::string("enforce")));
  print_attached(answer->value("cgroup", req.cgroup), answer->value("cgroup_id", uint64_t{0}),
                 answer->value("policy", req.policy), mode ? *mode : policy::Mode::enforce,
                 answer->value("policy_file", std::string("the daemon's policy directory")),
                 request.value("workspace", std::string()), true);
  return 0;
}

// Exit status 0 attached, 1 failed (the policy's located errors, then why).
int attach_direct(const scope::AttachRequest& req) {
  std::vector<std::string> diagnostics;
  auto a = scope::attach(req, diagnostics);
  for (const auto& d : diagnostics) std::cerr << d << '\n';
  if (!a) {
    std::cerr << "agentcage attach: " << a.error().message << '\n';
    return 1;
  }
  print_attached(a->cgroup.string(), a->cgroup_id, a->policy_name, a->mode, a->policy_file, a->workspace, false);
  return 0;
}

int attach_command(const scope::AttachRequest& req, bool direct) {
  if (direct) return attach_direct(req);
  const std::string socket = control::default_control_socket();
  auto daemon = ask_daemon(socket);
  if (!daemon) {
    std::cerr << "agentcage attach: " << daemon.error().message << '\n';
    return 1;
  }
  if (!daemon->running) return attach_direct(req);
  if (const std::string why = direct_only(req, *daemon); !why.empty()) {
    std::cerr << "agentcage attach: note: attaching directly, not through the daemon: " << why << '\n';
    return attach_direct(req);
  }
  return attach_via_daemon(req, socket);
}

// What was denied and audited while the cgroup was attached, in total and
// by hook: the same line whichever way it was detached.
void print_detached(const std::string& cgroup, const std::string& policy, uint64_t denied, uint64_t audited,
                    const std::vector<std::pair<std::string, uint64_t>>& by_hook) {
  std::cout << "detached: " << cgroup << " is no longer confined (was policy " << (policy.empty() ? "?" : policy)
            << ")";
  std::cout << "; while attached: " << denied << " denied, " << audited << " audited";
  std::string sep = " (";
  for (const auto& [hook, n] : by_hook) {
    std::cout << sep << hook << ' ' << n;
    sep = ", ";
  }
  if (sep != " (") std::cout << ')';
  std::cout << "\n";
}

int detach_direct(const std::string& cgroup) {
  auto d = scope::detach(cgroup);
  if (!d) {
    std::cerr << "agentcage detach: " << d.error().message << '\n';
    return 1;
  }
  const scope::Released& r = d->released;
  const bpf::ScopeReport report = r.report.value_or(bpf::ScopeReport{});
  std::vector<std::pair<std::string, uint64_t>> by_hook;
  for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h)
    if (report.denied[h] + report.audited[h] != 0)
      by_hook.emplace_back(bpf::hook_name(h), report.denied[h] + report.audited[h]);
  print_detached(d->cgroup.string(), r.policy_name, report.denied_total(), report.audited_total(), by_hook);
  return 0;
}

// `cgroup` or, when `container` is set, the container of that id.
int detach_via_daemon(const std::string& cgroup, const std::string& container, const std::string& socket) {
  auto answer = ask(socket, container.empty() ? json{{"op", "detach"}, {"cgroup", cgroup}}
                                              : json{{"op", "detach"}, {"container_id", container}});
  if (!answer) {
    std::cerr << "agentcage detach: " << answer.error().message << '\n';
    return 1;
  }
  // The hooks in their closed order, each with what it denied and audited.
  const json denied = answer->value("denied_by_hook", json::object());
  const json audited = answer->value("audited_by_hook", json::object());
  std::vector<std::pair<std::string, uint64_t>> by_hook;
  for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h) {
    const std::string name(bpf::hook_name(h));
    const uint64_t n = denied.value(name, uint64_t{0}) + audited.value(name, uint64_t{0});
    if (n) by_hook.emplace_back(name, n);
  }
  const json policy = answer->value("policy", json());
  print_detached(answer->value("cgroup", cgroup), policy.is_string() ? policy.get<std::string>() : std::string(),
                 answer->value("denied", uint64_t{0}), answer->value("audited", uint64_t{0}), by_hook);
  return 0;
}

// Exit status 0 detached, 1 failed, 2 usage error.
int detach_command(const std::string& cgroup, const std::string& container, bool direct) {
  if (cgroup.empty() == container.empty()) {
    std::cerr << "agentcage detach: give --cgroup or --container\n";
    return 2;
  }
  if (!container.empty() && direct) {
    std::cerr << "agentcage detach: --container goes through the daemon (it confined the container); "
                 "--direct takes --cgroup\n";
    return 2;
  }
  if (direct) return detach_direct(cgroup);
  const std::string socket = control::default_control_socket();
  auto daemon = ask_daemon(socket);
  if (!daemon) {
    std::cerr << "agentcage detach: " << daemon.error().message << '\n';
    return 1;
  }
  if (!container.empty() && !daemon->running) {
    std::cerr << "agentcage detach: --container needs the daemon (" << socket
              << " does not answer); it releases containers whose cgroup is gone when it starts\n";
    return 1;
  }
  return daemon->running ? detach_via_daemon(cgroup, container, socket) : detach_direct(cgroup);
}

}  // namespace

void add_attach(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* attach = app.add_subcommand("attach", "Confine an existing cgroup under a policy");
  attach->footer(with_defaults(
      "Put an existing cgroup v2 -- a systemd service's, an agent runner's -- and everything in and\n"
      "below it under POLICY, enforced in the kernel by the shared BPF LSM programs (loaded and\n"
      "pinned in @PIN_ROOT@ on first use; enforcement continues after this command\n"
      "exits). Processes already in the cgroup are confined from their next operation on; files\n"
      "and connections they opened before stay open. The cgroup cannot be left: its processes\n"
      "cannot move themselves or children out of it. The policy's limits are not applied: the\n"
      "cgroup's owner sets those (systemd: MemoryMax=, TasksMax=, CPUQuota=).\n\n"
      "POLICY is a file path, or a NAME looked up as NAME.yaml in the policy directory\n"
      "(--policy-dir, else $AGENTCAGE_POLICY_DIR, else @POLICY_DIR@).\n\n"
      "--mode audit confines the cgroup without denying anything: every operation the policy\n"
      "would deny is reported (audit log, `agentcage detach`'s counts) instead.\n\n"
      "With the daemon running (its control socket: $AGENTCAGE_CONTROL_SOCKET, else\n"
      "@CONTROL_SOCKET@), a NAME of the daemon's policy directory is attached through\n"
      "it: the cgroup is confined by the daemon's copy of the policy, so every reload of the\n"
      "file (hot reload, SIGHUP, `agentcage reload`) applies to it too, and the daemon must\n"
      "have loaded the file (an invalid one is refused with the daemon's error). A policy FILE,\n"
      "--mode, another --policy-dir, --direct, or no daemon: the cgroup gets a policy slot of\n"
      "its own, which no reload changes (attach it again to change it). Either way the\n"
      "attachment lives in the pinned maps and outlasts this command and daemon restarts; it\n"
      "ends with `agentcage detach` or when the cgroup is removed (a restarted service gets a\n"
      "new cgroup: bind it in the daemon's configuration instead, docs/daemon.md).\n\n"
      "Example: agentcage attach --cgroup system.slice/agent.service --policy python-sandbox \\\n"
      "           --workspace /var/lib/agent/work\n\n"
      "Exit status: 0 attached, 1 failed (nothing changed), 2 usage error."));
  auto request = std::make_shared<scope::AttachRequest>();
  attach
      ->add_option("--cgroup", request->cgroup,
                   "The cgroup: a path under the cgroup v2 mount, or relative to it")
      ->type_name("CGROUP")
      ->required();
  attach->add_option("--policy", request->policy, "Policy NAME or FILE")->type_name("NAME|FILE")->required();
  attach
      ->add_option(
          "--policy-dir", request->policy_dir,
          with_defaults("Where --policy NAME is looked up (default: $AGENTCAGE_POLICY_DIR or @POLICY_DIR@)"))
      ->type_name("DIR");
  attach
      ->add_option("--workspace", request->workspace,
                   "Directory the policy's ${workspace} rules refer to (required if it has any)")
      ->type_name("DIR");
  auto mode = std::make_shared<std::string>();
  attach
      ->add_option("--mode", *mode,
                   "enforce or audit: instead of the policy's mode, for this attachment only (audit: "
                   "nothing is denied, every would-be denial is reported)")
      ->type_name("MODE");
  auto direct = std::make_shared<bool>(false);
  attach->add_flag("--direct", *direct,
                   "Do not go through the daemon: a policy slot of its own, which reloads do not change");
  commands.add(attach, [request, mode, direct] {
    if (!mode->empty()) {
      auto m = policy::parse_mode(*mode);
      if (!m) {
        std::cerr << "agentcage attach: --mode: " << m.error().message << '\n';
        return 2;
      }
      request->mode = *m;
    }
    return attach_command(*request, *direct);
  });

  auto* detach = app.add_subcommand("detach", "Lift the confinement of an attached cgroup");
  detach->footer(
      "Remove the scope `agentcage attach` registered for the cgroup and print what was denied\n"
      "while it was attached. The processes keep running, unconfined. With the daemon running\n"
      "this goes through it (whichever way the cgroup was attached); --direct does it here.\n"
      "--container ID releases a container `agentcage oci-hook` confined, even once its cgroup\n"
      "is gone (through the daemon; docs/containers.md).\n\n"
      "Exit status: 0 detached, 1 failed (e.g. the cgroup was not attached), 2 usage error.");
  auto cgroup = std::make_shared<std::string>();
  detach->add_option("--cgroup", *cgroup, "The cgroup, as given to attach")->type_name("CGROUP");
  auto container = std::make_shared<std::string>();
  detach->add_option("--container", *container, "A container confined by agentcage oci-hook: its id")
      ->type_name("ID");
  auto detach_direct_flag = std::make_shared<bool>(false);
  detach->add_flag("--direct", *detach_direct_flag, "Do not go through the daemon");
  commands.add(detach, [cgroup, container, detach_direct_flag] {
    return detach_command(*cgroup, *container, *detach_direct_flag);
  });
}

}  // namespace agentcage::cli
