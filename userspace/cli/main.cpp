// agentcage command-line entry point.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/daemon.h"
#include "daemon/protocol.h"
#include "daemon/status.h"
#include "doctor/doctor.h"
#include "policy/policy.h"
#include "scope/attach.h"
#include "run/options.h"
#include "run/runner.h"
#include "util/log.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace {

constexpr const char* kDescription =
    "agentcage confines code that AI agents write and run. Each execution gets its own cgroup v2;\n"
    "BPF LSM programs deny, in the kernel, every exec, network and file operation its policy does\n"
    "not allow, for the process and all of its descendants.";

constexpr const char* kDoctorHelp =
    "Check whether this host can enforce agentcage policies: kernel version, BTF, the BPF LSM in\n"
    "the active LSM list, cgroup v2 and its memory/pids/cpu controllers, privileges, bpffs, and\n"
    "finally a trial load + attach of the LSM programs with a real process denied in a scoped\n"
    "cgroup. Every failed check prints the fix.\n\n"
    "Exit status: 0 when enforcement works, 1 when it does not.";

constexpr const char* kRunHelp = R"(Run COMMAND confined by a policy, in a cgroup v2 of its own, and exit with its status.

  agentcage run --policy NAME|FILE [OPTIONS] -- COMMAND [ARGS...]

WHAT HAPPENS
  Before COMMAND exists, agentcage creates the run's cgroup, writes its limits
  and registers it with the BPF LSM programs as a scope under the policy (with
  this run's workspace). COMMAND is then started directly inside the cgroup
  (clone3 CLONE_INTO_CGROUP), so not one instruction runs unconfined; the
  policy applies to it and to every descendant. When COMMAND exits, anything
  it left running (daemons, setsid'd children, processes ignoring SIGTERM) is
  killed; then the scope, the cgroup and (unless kept) the workspace are removed.
  stdin, stdout and stderr are COMMAND's own: agentcage passes them through
  untouched and buffers nothing.

THE SANDBOX
  COMMAND runs as an unprivileged identity: by default a uid of its own for
  this run (1879048192 + n, gid = uid, no supplementary groups, no passwd
  entry), so concurrent runs cannot signal or read each other; --user picks a
  fixed one. It has no capabilities (bounding and ambient sets emptied, uid 0
  gains none on exec), no_new_privs, its own session without a controlling
  terminal, umask 077, no core dumps, and no inherited file descriptors but 0,
  1 and 2. Its environment is only PATH=/usr/local/bin:/usr/bin:/bin,
  HOME=<workspace>, TMPDIR=<workspace>, LANG=C.UTF-8 and each --env: none of
  the caller's variables (API keys, tokens) reach it. Its working directory is
  the workspace.

WORKSPACE
  The one place the policy's ${workspace} rules apply to. Without --workspace
  a fresh directory /var/lib/agentcage/workspaces/<run id> (mode 0700, owned
  by the sandbox identity) is created and removed after the run unless --keep
  is given. A --workspace DIR must exist; agentcage hands the directory itself
  (not its contents) to the sandbox identity for the run (owner + mode 0700)
  and restores its owner and mode afterwards; it is never removed.

LIMITS
  --memory, --pids, --cpu and --timeout override the policy's limits. Memory
  is memory.max with swap off (memory.swap.max 0) and memory.oom.group, so an
  out-of-memory kill ends the whole run (status 137, "oom_killed" in the
  result). The timeout is wall-clock time from the start of COMMAND; on
  expiry the whole cgroup is killed (status 124). Without a limit from either
  place there is none.

EXIT STATUS
  COMMAND's own exit status, or:
  124      timed out (--timeout / limits.timeout)
  125      agentcage could not set up or enforce the run; COMMAND never ran
           (a one-line reason and its fix are printed). This includes invalid
           options, an invalid policy, and a kernel without the BPF LSM.
  126      COMMAND was denied by the policy or is not executable
  127      COMMAND was not found (searched in the sandbox PATH)
  128+N    COMMAND was killed by signal N; 137 includes OOM kills. Also when
           agentcage itself receives SIGINT, SIGTERM or SIGHUP (130, 143, 129):
           it kills the run first.

RESULT
  --result FILE writes a JSON report when the run ends (also when it fails):
  run_id, policy, command, exit_code, exit_status, signal, timed_out,
  oom_killed, wall_time_ms, cpu_time_ms, peak_memory_bytes, workspace and the
  denials (counts by hook and the first records with their target and
  errno). See docs/run.md for every field.

ENVIRONMENT
  AGENTCAGE_POLICY_DIR      where --policy NAME is looked up (NAME.yaml);
                            default /etc/agentcage/policies (--policy-dir wins)
  AGENTCAGE_WORKSPACE_ROOT  parent of generated workspaces;
                            default /var/lib/agentcage/workspaces
  AGENTCAGE_CGROUP_PARENT   run cgroups' parent, relative to the cgroup2 mount;
                            default agentcage/runs (/sys/fs/cgroup/agentcage/runs)
  AGENTCAGE_STATE_DIR       run records and uid leases; default /run/agentcage

FILES
  /run/agentcage/runs/<id>.{lock,json}  a live run's record. A run whose
      agentcage was killed (SIGKILL, crash) is reaped by the next
      `agentcage run`: its processes are killed and its cgroup, scope and
      workspace removed.
  /sys/fs/bpf/agentcage/                the shared, pinned BPF programs and maps

EXAMPLES
  agentcage run --policy python-sandbox --timeout 60s --memory 512Mi \
      --result out.json -- python3 plot.py
  agentcage run --policy ./policies/python-sandbox.yaml --keep -- python3 -c 'print(1)'
)";

// The arguments after the first "--" following "run" are COMMAND (CLI11
// would otherwise parse COMMAND's own options).
std::vector<std::string> split_command(int& argc, char** argv) {
  std::vector<std::string> command;
  bool seen_run = false;
  for (int i = 1; i < argc; ++i) {
    if (!seen_run) {
      seen_run = std::strcmp(argv[i], "run") == 0;
      continue;
    }
    if (std::strcmp(argv[i], "--") == 0) {
      for (int j = i + 1; j < argc; ++j) command.emplace_back(argv[j]);
      argc = i;
      break;
    }
  }
  return command;
}

bool is_run_invocation(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') return std::strcmp(argv[i], "run") == 0;
  return false;
}

int status_command(bool json_out, const std::string& socket_path) {
  using nlohmann::json;
  json status;
  auto answer = agentcage::daemon::call(socket_path, json{{"op", "status"}}, 5000);
  if (answer && answer->value("ok", false) && answer->contains("status")) {
    status = (*answer)["status"];
  } else {
    std::string why = answer ? answer->value("error", std::string("unexpected answer")) : answer.error().message;
    status["daemon"] = {{"running", false}, {"detail", why}};
    // Without the daemon, read the pinned maps directly (root only), but
    // never load programs just to report on them.
    const std::string pin_dir = agentcage::bpf::Enforcer::shared_pin_dir("/sys/fs/bpf/agentcage");
    if (::geteuid() != 0) {
      status["enforcement"] = {{"ready", false}, {"detail", "not root: cannot read the BPF maps without the daemon"}};
    } else if (::access((pin_dir + "/ready").c_str(), F_OK) != 0) {
      status["enforcement"] = {{"ready", false}, {"detail", "no programs are pinned in " + pin_dir + " (nothing loaded)"}};
    } else if (auto e = agentcage::bpf::Enforcer::open_shared()) {
      json k = agentcage::daemon::kernel_status(**e, {});
      for (auto& [key, value] : k.items()) status[key] = value;
    } else {
      status["enforcement"] = {{"ready", false}, {"detail", e.error().message}};
    }
  }
  if (json_out) std::cout << status.dump(2) << "\n";
  else std::cout << agentcage::daemon::format_status_text(status);
  return status.value("enforcement", json::object()).value("ready", false) ? 0 : 1;
}

int events_command(bool follow, const std::string& socket_path) {
  auto fd = agentcage::daemon::connect_control(socket_path, 5000);
  if (!fd) {
    std::cerr << "agentcage events: the daemon is not reachable (" << fd.error().message
              << "); events come only through it (the ring buffer has one consumer): start `agentcage daemon`\n";
    return 1;
  }
  nlohmann::json req{{"op", "events"}, {"follow", follow}};
  if (auto st = agentcage::daemon::write_all(fd->get(), req.dump() + "\n", 5000); !st) {
    std::cerr << "agentcage events: " << st.error().message << "\n";
    return 1;
  }
  std::string buffer;
  auto first = agentcage::daemon::read_line(fd->get(), buffer, 5000);
  if (!first || first->empty()) {
    std::cerr << "agentcage events: no answer from the daemon\n";
    return 1;
  }
  auto head = nlohmann::json::parse(*first, nullptr, false);
  if (!head.is_object() || !head.value("ok", false)) {
    std::cerr << "agentcage events: " << (head.is_object() ? head.value("error", *first) : *first) << "\n";
    return 1;
  }
  for (;;) {
    auto line = agentcage::daemon::read_line(fd->get(), buffer, -1);
    if (!line) {
      std::cerr << "agentcage events: " << line.error().message << "\n";
      return 1;
    }
    if (line->empty()) return 0;  // the daemon closed the stream
    std::cout << *line << "\n" << std::flush;
  }
}

}  // namespace

extern char** environ;

int main(int argc, char** argv) {
  const bool run_invocation = is_run_invocation(argc, argv);
  std::vector<std::string> run_command = split_command(argc, argv);

  CLI::App app{kDescription, "agentcage"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("agentcage ") + AGENTCAGE_VERSION);
  app.footer(
      "Exit status of agentcage itself: 0 success, 1 failure, 2 usage error.\n"
      "Run `agentcage COMMAND --help` for a command's options.");

  int verbosity = 0;
  agentcage::scope::AttachRequest scope_attach_request;
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for libbpf debug output)");

  auto* doctor = app.add_subcommand("doctor", "Check whether this host can enforce policies");
  doctor->footer(kDoctorHelp);
  bool json = false;
  doctor->add_flag("--json", json, "Print the report as JSON");

  auto* policy_cmd = app.add_subcommand("policy", "Work with policy files");
  policy_cmd->require_subcommand(1);
  auto* check = policy_cmd->add_subcommand("check", "Validate policy files without applying them");
  check->footer(
      "Validate each policy FILE (YAML, apiVersion agentcage/v1) without applying it: syntax,\n"
      "unknown keys, types, paths, CIDRs, ports, sizes, durations, and that exec.allow programs\n"
      "exist. Errors are printed as FILE:LINE:COL: message.\n\n"
      "Exit status: 0 when every file is valid, 1 otherwise.");
  std::vector<std::string> policy_files;
  check->add_option("FILE", policy_files, "Policy files to check")->required();

  auto* attach = app.add_subcommand("attach", "Confine an existing cgroup under a policy");
  attach->footer(
      "Put an existing cgroup v2 -- a systemd service's, an agent runner's -- and everything in and\n"
      "below it under POLICY, enforced in the kernel by the shared BPF LSM programs (loaded and\n"
      "pinned in /sys/fs/bpf/agentcage on first use; enforcement continues after this command\n"
      "exits). Processes already in the cgroup are confined from their next operation on; files\n"
      "and connections they opened before stay open. The cgroup cannot be left: its processes\n"
      "cannot move themselves or children out of it. The policy's limits are not applied: the\n"
      "cgroup's owner sets those (systemd: MemoryMax=, TasksMax=, CPUQuota=).\n\n"
      "POLICY is a file path, or a NAME looked up as NAME.yaml in the policy directory\n"
      "(--policy-dir, else $AGENTCAGE_POLICY_DIR, else /etc/agentcage/policies).\n\n"
      "Example: agentcage attach --cgroup system.slice/agent.service --policy python-sandbox \\\n"
      "           --workspace /var/lib/agent/work\n\n"
      "Exit status: 0 attached, 1 failed (nothing changed), 2 usage error.");
  attach->add_option("--cgroup", scope_attach_request.cgroup,
                     "The cgroup: a path under the cgroup v2 mount, or relative to it")
      ->required();
  attach->add_option("--policy", scope_attach_request.policy, "Policy NAME or FILE")->required();
  attach->add_option("--policy-dir", scope_attach_request.policy_dir,
                     "Where --policy NAME is looked up (default: $AGENTCAGE_POLICY_DIR or /etc/agentcage/policies)");
  attach->add_option("--workspace", scope_attach_request.workspace,
                     "Directory the policy's ${workspace} rules refer to (required if it has any)");

  auto* detach = app.add_subcommand("detach", "Lift the confinement of an attached cgroup");
  detach->footer(
      "Remove the scope `agentcage attach` registered for the cgroup and print what was denied\n"
      "while it was attached. The processes keep running, unconfined.\n\n"
      "Exit status: 0 detached, 1 failed (e.g. the cgroup was not attached), 2 usage error.");
  std::string detach_cgroup;
  detach->add_option("--cgroup", detach_cgroup, "The cgroup, as given to attach")->required();
  auto* run = app.add_subcommand("run", "Run a command confined by a policy in a cgroup of its own");
  run->footer(kRunHelp);
  // Without "--", COMMAND starts at the first argument that is not an option.
  run->prefix_command();
  agentcage::run::RunOptions ropts;
  ropts.paths = agentcage::run::paths_from_env(environ);
  std::string timeout, memory, pids, cpus, workspace, result, user, policy_dir;
  run->add_option("--policy", ropts.policy, "Policy NAME (looked up as NAME.yaml in the policy directory) or FILE")
      ->required();
  run->add_option("--workspace", workspace, "Use this existing directory as the workspace (never removed)");
  run->add_flag("--keep", ropts.keep, "Keep the generated workspace after the run");
  run->add_option("--timeout", timeout, "Wall-clock limit, e.g. 30s, 5m, 1h30m (overrides limits.timeout)");
  run->add_option("--memory", memory, "Memory limit, e.g. 512Mi, 2G (overrides limits.memory)");
  run->add_option("--pids", pids, "Maximum number of tasks (overrides limits.pids)");
  run->add_option("--cpu", cpus, "CPU bandwidth in CPUs, e.g. 0.5, 2 (overrides limits.cpu)");
  run->add_option("--env", ropts.env, "Set KEY=VALUE in COMMAND's environment (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--result", result, "Write the result as JSON to FILE");
  run->add_option("--user", user, "Run as NAME, UID or UID:GID instead of a per-run uid");
  run->add_option("--policy-dir", policy_dir, "Where --policy NAME is looked up (default: $AGENTCAGE_POLICY_DIR or /etc/agentcage/policies)");

  auto* daemon_cmd = app.add_subcommand("daemon", "Run the host agent: policy directory, metrics, audit log, control socket");
  daemon_cmd->footer(
      "Run agentcage as a long-running host agent (normally under systemd: packaging/systemd/agentcage.service).\n"
      "It adopts (or loads and pins) the BPF LSM programs, installs every *.yaml of the policy directory as a named\n"
      "policy and hot-reloads it on change (an invalid file is rejected with FILE:LINE:COL and the previous version\n"
      "keeps enforcing), writes every denial as a JSON line to the audit log, serves Prometheus metrics\n"
      "(default http://127.0.0.1:9477/metrics) and the control socket (default /run/agentcage/control.sock) used by\n"
      "`agentcage status`, `agentcage events` and `agentcage run`, and reaps runs whose agentcage died.\n"
      "Enforcement does not depend on it: the programs stay pinned while it is down or restarting.\n\n"
      "FILE is YAML (see docs/daemon.md); without --config the defaults apply.\n"
      "Signals: SIGTERM/SIGINT stop it (enforcement continues), SIGHUP reopens the audit log and rescans policies.\n\n"
      "Exit status: 0 stopped by a signal, 1 could not start.");
  std::string daemon_config;
  daemon_cmd->add_option("--config", daemon_config, "Configuration file (YAML)");

  std::string control_socket = agentcage::daemon::default_control_socket();
  auto* status_cmd = app.add_subcommand("status", "Show what is enforcing: daemon, programs, policies, scopes, counters");
  status_cmd->footer(
      "Asks the daemon (control socket) for its status; without a daemon, reads the pinned BPF maps directly\n"
      "(root) without loading anything.\n\nExit status: 0 when enforcement is ready, 1 otherwise.");
  bool status_json = false;
  status_cmd->add_flag("--json", status_json, "Print JSON");
  status_cmd->add_option("--socket", control_socket, "The daemon's control socket (default $AGENTCAGE_CONTROL_SOCKET or /run/agentcage/control.sock)");

  auto* events_cmd = app.add_subcommand("events", "Print the daemon's recent audit events; --follow streams new ones");
  events_cmd->footer(
      "Prints the daemon's most recent decision events (JSON lines, the audit log's format; see docs/daemon.md)\n"
      "and with --follow keeps streaming new ones. Needs the daemon: it is the ring buffer's only consumer.\n"
      "A line {\"dropped\":N} means N events were not queued for this client because it read too slowly.\n\n"
      "Exit status: 0 at the end of the stream, 1 when the daemon is not reachable.");
  bool events_follow = false;
  events_cmd->add_flag("-f,--follow", events_follow, "Keep streaming new events");
  events_cmd->add_option("--socket", control_socket, "The daemon's control socket");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    if (e.get_exit_code() == 0) return 0;
    // A run's own failures must not look like COMMAND's exit status.
    if (run_invocation) return agentcage::run::kExitSetup;
    return rc == 0 ? 0 : 2;
  }

  agentcage::log::set_level(verbosity >= 2   ? agentcage::log::Level::debug
                            : verbosity == 1 ? agentcage::log::Level::info
                                             : agentcage::log::Level::warn);
  // The doctor reports libbpf's failures itself; only show libbpf chatter on -v.
  if (doctor->parsed() && verbosity == 0) agentcage::log::set_level(agentcage::log::Level::off);
  // run prints its own one-line reason for a refused load.
  if (run->parsed() && verbosity == 0) agentcage::log::set_level(agentcage::log::Level::error);

  if (run->parsed()) {
    auto opt = [](const std::string& v) { return v.empty() ? std::optional<std::string>{} : std::optional(v); };
    ropts.workspace = opt(workspace);
    ropts.timeout = opt(timeout);
    ropts.memory = opt(memory);
    ropts.pids = opt(pids);
    ropts.cpu = opt(cpus);
    ropts.result_file = opt(result);
    ropts.user = opt(user);
    if (!policy_dir.empty()) ropts.paths.policy_dir = policy_dir;
    ropts.command = run_command;
    std::vector<std::string> rest = run->remaining();
    if (!rest.empty() && !ropts.command.empty()) {
      std::cerr << "agentcage: unexpected argument '" << rest.front() << "' before --\n";
      return agentcage::run::kExitSetup;
    }
    if (ropts.command.empty()) ropts.command = rest;
    return agentcage::run::run_main(ropts, std::cerr);
  }

  if (daemon_cmd->parsed()) {
    if (verbosity == 0) agentcage::log::set_level(agentcage::log::Level::info);
    return agentcage::daemon::daemon_command(daemon_config);
  }
  if (status_cmd->parsed()) {
    if (verbosity == 0) agentcage::log::set_level(agentcage::log::Level::error);
    return status_command(status_json, control_socket);
  }
  if (events_cmd->parsed()) return events_command(events_follow, control_socket);

  if (check->parsed()) return agentcage::policy::check_command(policy_files, std::cout, std::cerr);

  if (attach->parsed()) return agentcage::scope::attach_command(scope_attach_request, std::cout, std::cerr);
  if (detach->parsed()) return agentcage::scope::detach_command(detach_cgroup, std::cout, std::cerr);

  if (doctor->parsed()) {
    auto report = agentcage::doctor::run();
    std::cout << (json ? agentcage::doctor::format_json(report) : agentcage::doctor::format_text(report));
    return report.ready() ? 0 : 1;
  }
  return 2;
}
