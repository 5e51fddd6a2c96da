// SPDX-License-Identifier: Apache-2.0
// `agentcage run`: its options, its manual, and how COMMAND [ARGS...] is
// kept away from CLI11.
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/help.h"
#include "control/client.h"
#include "core/labels.h"
#include "policy/values.h"
#include "run/options.h"
#include "run/remote.h"
#include "run/runner.h"
#include "util/log.h"

extern char** environ;

namespace agentcage::cli {
namespace {

constexpr const char* kRunHelp =
    R"(Run COMMAND confined by a policy, in a cgroup v2 of its own, and exit with its status.

  agentcage run --policy NAME|FILE [OPTIONS] -- COMMAND [ARGS...]

WHAT HAPPENS
  Before COMMAND exists, agentcage creates the run's cgroup, writes its limits
  and registers it with the BPF LSM programs as a scope under the policy (with
  this run's workspace). COMMAND is then started directly inside the cgroup
  (clone3 CLONE_INTO_CGROUP), so not one instruction runs unconfined; the
  policy applies to it and to every descendant. When COMMAND exits, anything
  it left running (daemons, setsid'd children, processes ignoring SIGTERM) is
  killed; then the scope, the cgroup and (unless kept) the workspace are removed.
  stdin, stdout and stderr: pipes, sockets, terminals and other character
  devices are passed to COMMAND as they are (isatty answers as usual). A
  regular file (or block device) never is, so the run cannot rewrite,
  truncate or punch holes in it: stdout/stderr are relayed through a pipe
  (agentcage appends what COMMAND writes; 2>&1 stays one ordered stream) and
  stdin is reopened read-only. On a terminal COMMAND has no controlling
  terminal and cannot push input into it (TIOCSTI is denied).

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

AUDIT MODE
  --mode audit runs COMMAND under the policy's rules without denying
  anything: each operation the policy would deny is allowed and reported as
  audited (the result's denials.audited_total and audited_by_hook, the audit
  log with "decision": "audit"), the first step from recording a workload to
  enforcing a policy for it. The seccomp filter still applies. --mode enforce
  enforces a policy written with mode: audit. Only this run is affected; the
  result's "mode" says which mode it ran under.
  --record keeps every decision record of the run in the result's
  "recording" (each distinct operation once, with its count), not only the
  first 8 of denials.records or what the audit log's budget lets through;
  `agentcage policy suggest RESULT` turns it into a policy:
    agentcage run --mode audit --record --result rec.json --policy base -- CMD
    agentcage policy suggest rec.json > mine.yaml

WORKSPACE
  The one place the policy's ${workspace} rules apply to. Without --workspace
  a fresh directory @WORKSPACE_ROOT@/<run id> (mode 0700, owned
  by the sandbox identity) is created and removed after the run unless --keep
  is given. A --workspace DIR must exist; agentcage hands the directory itself
  (not its contents) to the sandbox identity for the run (owner + mode 0700)
  and restores its owner and mode afterwards; it is never removed.
  --io-dir DIR instead copies DIR into the fresh workspace before COMMAND
  and the workspace back into DIR after it: DIR is opened with the
  permissions of its owner (or --io-owner UID:GID) by a path without
  symbolic links and must be that owner's and writable; only that owner's
  entries are copied in, and what comes back belongs to it (files replace
  files of the same name; set-id bits, devices, FIFOs and sockets never).

WITHOUT ROOT
  As root, agentcage run runs COMMAND itself. Any other user's run goes
  through the agentcage daemon (its control socket, $AGENTCAGE_CONTROL_SOCKET,
  default @CONTROL_SOCKET@), which the user may use when it is in the
  daemon's control_group: same options, output, result and exit statuses,
  with these differences. --policy is a NAME of the daemon's policy
  directory (no files, no --policy-dir); --user, --keep, --io-dir, --mode,
  --record are root's. --workspace DIR is the caller's own directory (owned and
  writable by the caller, by a path without symbolic links) and works as
  --io-dir: copied into the run's workspace and back, never written by the
  run directly. Limits are capped by the daemon (run_max_memory, ...): a
  request over a cap is refused (125), a policy's larger limit lowered to
  it; so is a run over max_runs or max_runs_per_client. If this process
  dies or the daemon stops, the run is ended (cgroup killed, nothing left).

LIMITS
  --memory, --pids, --cpu, --timeout and --disk override the policy's limits;
  a limit neither states gets its default: memory @MEMORY@, pids @PIDS@,
  timeout @TIMEOUT@, disk @DISK@ (cpu: none). `unlimited`, on the command line
  or in the policy, means no limit. Memory is memory.max with swap off
  (memory.swap.max 0) and memory.oom.group, so an out-of-memory kill ends the
  whole run (status 137, "oom_killed" in the result). The timeout is
  wall-clock time from the start of COMMAND; on expiry the whole cgroup is
  killed (status 124). Disk is the size of the workspace: a generated
  workspace is a tmpfs of its own of that size (nosuid, nodev), so a run
  that fills it gets ENOSPC and the host's disks are untouched; its pages
  count toward the memory limit too. A kept workspace (--keep) is copied
  onto the host's disk after the run (at most the disk limit), without
  set-id bits, device files, FIFOs or sockets. A --workspace DIR must be on
  a file system no larger than the disk limit (statfs: a tmpfs or an XFS
  project quota), or the run is refused: mount one there, or pass --disk
  unlimited to let the run fill DIR's file system. Output relayed to
  regular files (stdout/stderr redirected to a file) is bounded by the disk
  limit too, both streams together: past it nothing more is written and
  COMMAND's next write fails with EPIPE ("output_truncated" in the result).

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
  errno). See docs/run.md for every field. FILE is written to a temporary
  file beside it and renamed into place, so a reader never sees half of it;
  a FILE that is a symbolic link or not a regular file is refused (125).
  --result - writes the report to stdout after COMMAND's own output;
  --result-fd N writes it to descriptor N, inherited from the caller (a pipe
  an agent framework reads: `--result-fd 3 3>&1 1>cmd.log`), and closes it.
  COMMAND never inherits N. Text the run chose (file names, its process
  name) is valid UTF-8 in the report (ill-formed bytes become U+FFFD) and
  escaped in the one-line denial summary on stderr.

ENVIRONMENT
  AGENTCAGE_POLICY_DIR      where --policy NAME is looked up (NAME.yaml);
                            default @POLICY_DIR@ (--policy-dir wins)
  AGENTCAGE_WORKSPACE_ROOT  parent of generated workspaces;
                            default @WORKSPACE_ROOT@
  AGENTCAGE_CGROUP_PARENT   run cgroups' parent, relative to the cgroup2 mount;
                            default @CGROUP_PARENT@ (under /sys/fs/cgroup);
                            nothing above a cgroup on the way that systemd
                            marked delegated (trusted.delegate) is written
  AGENTCAGE_STATE_DIR       run records and uid leases; default @STATE_DIR@
  AGENTCAGE_RESOLV_CONF     the upstream DNS servers (nameserver lines) a run's
                            resolver forwards the names its policy allows to
                            (domain rules); default @RESOLV_CONF@
  AGENTCAGE_CONTROL_SOCKET  the daemon's socket, for a run without root;
                            default @CONTROL_SOCKET@

FILES
  @STATE_DIR@/runs/<id>.{lock,json}
      A live run's record. A run whose agentcage was killed (SIGKILL, crash)
      is reaped by the next `agentcage run`: its processes are killed and its
      cgroup, scope and workspace removed.
  @PIN_ROOT@/
      The shared, pinned BPF programs and maps.

EXAMPLES
  agentcage run --policy python-sandbox --timeout 60s --memory 512Mi \
      --result out.json -- python3 plot.py
  agentcage run --policy ./policies/python-sandbox.yaml --keep -- python3 -c 'print(1)'
)";

// The options as typed; run_main gets them as RunOptions.
struct RunArgs {
  run::RunOptions options;
  std::string workspace, timeout, memory, pids, cpus, disk, result, user, policy_dir, io_dir, io_owner, mode;
  std::vector<std::string> labels;
};

int run_action(RunArgs& args, const CLI::App& run, const Globals& globals) {
  // run prints its own one-line reason for a refused load.
  if (globals.verbosity == 0) log::set_level(log::Level::error);
  run::RunOptions& ropts = args.options;
  // From the environment of the parse (a command line built ahead may be
  // another process's: cli/command.h).
  ropts.paths = run::paths_from_env(environ);
  auto opt = [](const std::string& v) { return v.empty() ? std::optional<std::string>{} : std::optional(v); };
  ropts.workspace = opt(args.workspace);
  ropts.timeout = opt(args.timeout);
  ropts.memory = opt(args.memory);
  ropts.pids = opt(args.pids);
  ropts.cpu = opt(args.cpus);
  ropts.disk = opt(args.disk);
  ropts.result_file = opt(args.result);
  ropts.user = opt(args.user);
  ropts.io_dir = opt(args.io_dir);
  ropts.io_owner = opt(args.io_owner);
  for (const auto& text : args.labels) {
    auto label = core::parse_label(text);
    Status added = label ? core::add_label(ropts.labels, label->first, label->second) : Status(label.error());
    if (!added) {
      std::cerr << "agentcage: --label: " << added.error().message << " (KEY: " << core::kLabelKeyRule
                << ")\n";
      return run::kExitSetup;
    }
  }
  if (!args.mode.empty()) {
    auto mode = policy::parse_mode(args.mode);
    if (!mode) {
      std::cerr << "agentcage: --mode: " << mode.error().message << "\n";
      return run::kExitSetup;
    }
    ropts.mode = *mode;
  }
  if (!args.policy_dir.empty()) ropts.paths.policy_dir = args.policy_dir;
  ropts.command = globals.run_command;
  std::vector<std::string> rest = run.remaining();
  if (!rest.empty() && !ropts.command.empty()) {
    std::cerr << "agentcage: unexpected argument '" << rest.front() << "' before --\n";
    return run::kExitSetup;
  }
  if (ropts.command.empty()) ropts.command = rest;
  if (::geteuid() != 0) {
    if (std::string why = run::remote_refusal(ropts, !args.policy_dir.empty()); !why.empty()) {
      std::cerr << "agentcage: " << why << "\n";
      return run::kExitSetup;
    }
    return run::run_via_daemon(ropts, control::default_control_socket(), std::cerr);
  }
  return run::run_main(ropts, std::cerr);
}

}  // namespace

bool is_run_invocation(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') return std::strcmp(argv[i], "run") == 0;
  return false;
}

std::vector<std::string> take_run_command(int& argc, char** argv) {
  std::vector<std::string> command;
  if (!is_run_invocation(argc, argv)) return command;
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

void add_run(CLI::App& app, const Globals& globals, Commands& commands) {
  auto* run = app.add_subcommand("run", "Run a command confined by a policy in a cgroup of its own");
  run->footer(with_defaults(kRunHelp));
  auto formatter = std::make_shared<Formatter>();
  formatter->operands("[--] COMMAND [ARGS...]", "COMMAND [ARGS...]",
                      "The program to run (searched in the sandbox PATH) and its arguments");
  run->formatter(formatter);
  // Without "--", COMMAND starts at the first argument that is not an option.
  run->prefix_command();

  auto args = std::make_shared<RunArgs>();
  run->add_option("--policy", args->options.policy,
                  "Policy NAME (looked up as NAME.yaml in the policy directory) or FILE")
      ->type_name("NAME|FILE")
      ->required();
  run->add_option("--workspace", args->workspace,
                  "Use this existing directory as the workspace (never removed)")
      ->type_name("DIR");
  run->add_flag("--keep", args->options.keep, "Keep the generated workspace after the run");
  run->add_option("--timeout", args->timeout,
                  with_defaults("Wall-clock limit, e.g. 30s, 5m, 1h30m, or unlimited (overrides "
                                "limits.timeout; default @TIMEOUT@)"))
      ->type_name("DURATION");
  run->add_option("--memory", args->memory,
                  with_defaults("Memory limit, e.g. 512Mi, 2G, or unlimited (overrides limits.memory; "
                                "default @MEMORY@)"))
      ->type_name("SIZE");
  run->add_option(
         "--pids", args->pids,
         with_defaults("Maximum number of tasks, or unlimited (overrides limits.pids; default @PIDS@)"))
      ->type_name("N");
  run->add_option("--cpu", args->cpus,
                  "CPU bandwidth in CPUs, e.g. 0.5, 2 (overrides limits.cpu; default none)")
      ->type_name("CPUS");
  run->add_option("--disk", args->disk,
                  with_defaults("Size of the workspace file system, or unlimited (overrides limits.disk; "
                                "default @DISK@)"))
      ->type_name("SIZE");
  // One KEY=VALUE per --env (no " ..." in the help: the flag repeats, not its value).
  run->add_option("--env", args->options.env, "Set KEY=VALUE in COMMAND's environment (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE")
      ->option_text("KEY=VALUE");
  run->add_option("--result", args->result,
                  "Write the result as JSON to FILE (replaced atomically; - for stdout)")
      ->type_name("FILE");
  run->add_option("--result-fd", args->options.result_fd,
                  "Write the result as JSON to inherited descriptor N (e.g. a pipe), then close it")
      ->type_name("N");
  run->add_option("--user", args->user, "Run as NAME, UID or UID:GID instead of a per-run uid")
      ->type_name("NAME|UID[:GID]");
  run->add_option("--mode", args->mode,
                  "enforce or audit: the policy's mode for this run only (audit: nothing is denied, every "
                  "would-be denial is reported)")
      ->type_name("MODE");
  run->add_flag("--record", args->options.record,
                "Keep every decision record of the run in the result's \"recording\" (for policy suggest)");
  run->add_option(
         "--label", args->labels,
         "Attach KEY=VALUE to the run: in the result and the audit log, never in metrics (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE")
      ->option_text("KEY=VALUE");
  run->add_option("--io-dir", args->io_dir,
                  "Copy DIR into the fresh workspace before COMMAND and the workspace back into DIR after it")
      ->type_name("DIR");
  run->add_option(
         "--io-owner", args->io_owner,
         "Whose --io-dir it is (opened with its permissions; copies belong to it; default: DIR's owner)")
      ->type_name("UID:GID");
  run->add_option(
         "--policy-dir", args->policy_dir,
         with_defaults("Where --policy NAME is looked up (default: $AGENTCAGE_POLICY_DIR or @POLICY_DIR@)"))
      ->type_name("DIR");
  commands.add(run, [args, run, &globals] { return run_action(*args, *run, globals); });
}

}  // namespace agentcage::cli
