// SPDX-License-Identifier: Apache-2.0
// The command line as an operator meets it: the built binary (build/agentcage)
// run as a real process, its output and exit status checked. Nothing here
// needs root or a kernel that enforces: usage errors, help and `policy check`
// are answered before agentcage touches the host.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/limits.h"
#include "core/paths.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

struct Output {
  int status = -1;  // exit status, or -1 when the process did not exit normally
  std::string out;
  std::string err;
};

// Runs build/agentcage ARGS (or another PROGRAM) with stdin from /dev/null
// and both output streams captured (read together, so neither pipe can fill
// up and stall it).
Output agentcage(const std::vector<std::string>& args, const std::string& program = AGENTCAGE_BINARY) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return {};
  std::vector<std::string> argv_storage = {program};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return {};
  }
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Output result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_streams = 2;
  while (open_streams > 0) {
    if (::poll(fds, 2, 30000) <= 0) break;  // 30 s: agentcage hangs
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_streams;
      }
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  int wstatus = 0;
  if (open_streams > 0) ::kill(pid, SIGKILL);
  ::waitpid(pid, &wstatus, 0);
  result.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::vector<std::string> kCommands = {"doctor", "policy", "attach", "detach",   "run",    "daemon",
                                            "status", "events", "help",   "version", "oci-hook"};

TEST(Cli, HelpListsEveryCommand) {
  Output help = agentcage({"help"});
  EXPECT_EQ(help.status, 0) << help.err;
  EXPECT_TRUE(help.err.empty()) << help.err;
  EXPECT_TRUE(contains(help.out, "Usage: agentcage [OPTIONS] COMMAND\n")) << help.out;
  EXPECT_TRUE(contains(help.out, "\nCommands:\n")) << help.out;
  for (const std::string& command : kCommands)
    EXPECT_TRUE(contains(help.out, "\n  " + command + " ")) << command << " missing from\n" << help.out;
  EXPECT_FALSE(contains(help.out, "SUBCOMMAND")) << help.out;

  Output dash_help = agentcage({"--help"});
  EXPECT_EQ(dash_help.status, 0);
  EXPECT_EQ(dash_help.out, help.out);
}

TEST(Cli, HelpCommandPrintsWhatDashDashHelpPrints) {
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
           {"run"}, {"policy"}, {"policy", "check"}, {"attach"}, {"status"}, {"help"}}) {
    std::vector<std::string> help_args = {"help"};
    help_args.insert(help_args.end(), command.begin(), command.end());
    std::vector<std::string> dash_args = command;
    dash_args.push_back("--help");
    Output help = agentcage(help_args);
    Output dash = agentcage(dash_args);
    EXPECT_EQ(help.status, 0) << help.err;
    EXPECT_EQ(dash.status, 0) << dash.err;
    EXPECT_EQ(help.out, dash.out) << command.back();
    EXPECT_TRUE(contains(help.out, "Usage: agentcage " + command.front())) << help.out;
  }
  Output run = agentcage({"help", "run"});
  EXPECT_TRUE(contains(run.out, "Usage: agentcage run [OPTIONS] [--] COMMAND [ARGS...]\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "EXIT STATUS")) << run.out;  // the manual follows the options
}

// Help texts take every default location from core/paths.h: none is left as
// a placeholder, and the ones each command documents are the code's own.
// `agentcage daemon` is agentcage-daemon, exec'd from agentcage's own
// directory with the same options: what answers is the daemon itself.
TEST(Cli, DaemonCommandRunsAgentcageDaemonBesideIt) {
  const std::string missing = "/nonexistent/agentcage-cli-test/daemon.yaml";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"daemon", "--config", missing},
                                               std::vector<std::string>{"-v", "daemon", "--config", missing}}) {
    Output out = agentcage(args);
    EXPECT_EQ(out.status, 1) << out.err;
    EXPECT_TRUE(contains(out.err, missing + ": cannot read the configuration")) << out.err;
    EXPECT_TRUE(contains(out.err, "agentcage daemon: " + missing + " is not valid; not started")) << out.err;
  }
  // agentcage-daemon [OPTIONS] is `agentcage daemon [OPTIONS]`.
  const std::string daemon = (fs::path(AGENTCAGE_BINARY).parent_path() / "agentcage-daemon").string();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--config", missing},
                                               std::vector<std::string>{"-vv", "--config", missing}}) {
    Output direct = agentcage(args, daemon);
    EXPECT_EQ(direct.status, 1) << direct.err;
    EXPECT_TRUE(contains(direct.err, missing + ": cannot read the configuration")) << direct.err;
  }
  Output help = agentcage({"--help"}, daemon);
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out, agentcage({"daemon", "--help"}).out);
}

// Without agentcage-daemon beside it, `agentcage daemon` says which program
// is missing and where it belongs, and starts nothing.
TEST(Cli, DaemonCommandWithoutAgentcageDaemonSaysWhatToInstall) {
  const fs::path dir = fs::temp_directory_path() / ("agentcage-cli-alone-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(AGENTCAGE_BINARY, dir / "agentcage", fs::copy_options::overwrite_existing);
  Output out = agentcage({"daemon", "--config", "/nonexistent/daemon.yaml"}, (dir / "agentcage").string());
  std::error_code ec;
  fs::remove_all(dir, ec);
  EXPECT_EQ(out.status, 1) << out.err;
  EXPECT_TRUE(contains(out.err, "agentcage daemon: cannot start " + (dir / "agentcage-daemon").string() +
                                    ": No such file or directory"))
      << out.err;
  EXPECT_TRUE(contains(out.err, "fix: install agentcage-daemon next to agentcage")) << out.err;
  EXPECT_FALSE(contains(out.err, "cannot read the configuration")) << out.err;
}

TEST(Cli, HelpShowsTheDefaultPathsTheCodeUses) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> expected = {
      {{"run"},
       {core::kDefaultPolicyDir, core::kDefaultWorkspaceRoot, core::kDefaultStateDir,
        core::kDefaultCgroupParent, core::kDefaultPinRoot}},
      {{"attach"}, {core::kDefaultPolicyDir, core::kDefaultPinRoot}},
      {{"daemon"}, {core::kDefaultControlSocket}},
      {{"status"}, {core::kDefaultControlSocket}},
  };
  for (const auto& [command, paths] : expected) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    Output help = agentcage(args);
    EXPECT_EQ(help.status, 0) << help.err;
    EXPECT_FALSE(contains(help.out, "@")) << "a placeholder is left in\n" << help.out;
    for (const std::string& path : paths)
      EXPECT_TRUE(contains(help.out, path)) << "'" << path << "' missing from\n" << help.out;
  }
  for (const std::string& command : kCommands) {
    Output help = agentcage({command, "--help"});
    EXPECT_EQ(help.status, 0) << command << ": " << help.err;
    EXPECT_FALSE(contains(help.out, "@")) << "a placeholder is left in\n" << help.out;
  }
}

// The limits a policy without `limits` gets are printed, from the constants
// `run` applies.
TEST(Cli, RunHelpShowsTheLimitDefaults) {
  Output help = agentcage({"run", "--help"});
  EXPECT_EQ(help.status, 0) << help.err;
  for (const std::string& shown :
       {std::string("memory ") + core::kDefaultMemory, std::string("pids ") + core::kDefaultPids,
        std::string("timeout ") + core::kDefaultTimeout, std::string("disk ") + core::kDefaultDisk})
    EXPECT_TRUE(contains(help.out, shown)) << "'" << shown << "' missing from\n" << help.out;
}

// Every option names what it takes; CLI11's TEXT/INT appear nowhere.
TEST(Cli, EveryOptionHasAMetavariable) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> expected = {
      {{"run"},
       {"--policy NAME|FILE REQUIRED", "--workspace DIR ", "--timeout DURATION ", "--memory SIZE ",
        "--pids N ", "--cpu CPUS ", "--env KEY=VALUE ", "--result FILE ", "--user NAME|UID[:GID] ",
        "--policy-dir DIR ", "--mode MODE ", "\n  COMMAND [ARGS...] "}},
      {{"policy", "check"},
       {"Usage: agentcage policy check [OPTIONS] [FILE...]\n", "\n  FILE... ", "--dir DIR "}},
      {{"attach"},
       {"--cgroup CGROUP REQUIRED", "--policy NAME|FILE REQUIRED", "--policy-dir DIR ", "--workspace DIR ",
        "--mode MODE "}},
      {{"detach"}, {"--cgroup CGROUP ", "--container ID "}},
      {{"oci-hook"}, {"--stage STAGE REQUIRED", "--socket PATH ", "--result-dir DIR "}},
      {{"daemon"}, {"--config FILE "}},
      {{"status"}, {"--socket PATH ", "--json "}},
      {{"events"}, {"--socket PATH ", "-f,--follow "}},
      {{"doctor"}, {"--json "}},
      {{"help"}, {"Usage: agentcage help [OPTIONS] [COMMAND...]\n"}},
  };
  for (const auto& [command, metavariables] : expected) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    Output help = agentcage(args);
    EXPECT_EQ(help.status, 0) << help.err;
    for (const std::string& m : metavariables)
      EXPECT_TRUE(contains(help.out, m)) << "'" << m << "' missing from\n" << help.out;
    for (const char* cli11_type : {" TEXT", " INT", " UINT", " FLOAT", "SUBCOMMAND"})
      EXPECT_FALSE(contains(help.out, cli11_type)) << cli11_type << " in\n" << help.out;
  }
}

TEST(Cli, VersionCommandAndFlagAgree) {
  Output version = agentcage({"version"});
  EXPECT_EQ(version.status, 0) << version.err;
  EXPECT_EQ(version.out, std::string("agentcage ") + AGENTCAGE_VERSION + "\n");
  Output flag = agentcage({"--version"});
  EXPECT_EQ(flag.status, 0) << flag.err;
  EXPECT_EQ(flag.out, version.out);
}

TEST(Cli, UnknownCommandSuggestsTheClosestAndExits2) {
  Output typo = agentcage({"rnu", "--policy", "x", "--", "true"});
  EXPECT_EQ(typo.status, 2);
  EXPECT_TRUE(typo.out.empty()) << typo.out;
  EXPECT_EQ(typo.err,
            "agentcage: unknown command 'rnu' (did you mean 'run'?)\n"
            "Usage: agentcage [OPTIONS] COMMAND ...; `agentcage help` lists the commands\n");

  Output far = agentcage({"frobnicate"});
  EXPECT_EQ(far.status, 2);
  EXPECT_TRUE(contains(far.err, "agentcage: unknown command 'frobnicate'\n")) << far.err;

  Output sub = agentcage({"policy", "chek", "x.yaml"});
  EXPECT_EQ(sub.status, 2);
  EXPECT_TRUE(contains(sub.err, "agentcage policy: unknown command 'chek' (did you mean 'check'?)\n"))
      << sub.err;
  EXPECT_TRUE(contains(sub.err, "`agentcage help policy`")) << sub.err;

  Output help = agentcage({"help", "stauts"});
  EXPECT_EQ(help.status, 2);
  EXPECT_TRUE(contains(help.err, "agentcage: unknown command 'stauts' (did you mean 'status'?)\n"))
      << help.err;

  Output option = agentcage({"--verbos", "status"});
  EXPECT_EQ(option.status, 2);
  EXPECT_TRUE(contains(option.err, "agentcage: unknown option '--verbos' (did you mean '--verbose'?)\n"))
      << option.err;
}

TEST(Cli, NoCommandPrintsTheCommandListAndExits2) {
  const std::string list = agentcage({"help"}).out;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{}, {"-v"}, {"-vv"}}) {
    Output none = agentcage(args);
    EXPECT_EQ(none.status, 2);
    EXPECT_TRUE(none.out.empty()) << none.out;
    EXPECT_EQ(none.err, list);
  }
  Output policy = agentcage({"policy"});
  EXPECT_EQ(policy.status, 2);
  EXPECT_EQ(policy.err, agentcage({"help", "policy"}).out);
  EXPECT_FALSE(contains(policy.err, "A subcommand is required")) << policy.err;
}

// run's own failures must never look like COMMAND's exit status: 125.
TEST(Cli, RunUsageErrorsExit125) {
  Output no_policy = agentcage({"run", "--", "true"});
  EXPECT_EQ(no_policy.status, 125) << no_policy.err;
  EXPECT_TRUE(contains(no_policy.err, "--policy is required")) << no_policy.err;

  Output no_value = agentcage({"-v", "run", "--policy", "x", "--memory"});
  EXPECT_EQ(no_value.status, 125) << no_value.err;
  EXPECT_TRUE(contains(no_value.err, "--memory")) << no_value.err;

  Output bad_mode = agentcage({"run", "--policy", "x", "--mode", "Audit", "--", "true"});
  EXPECT_EQ(bad_mode.status, 125) << bad_mode.err;
  EXPECT_TRUE(contains(bad_mode.err, "--mode: invalid mode 'Audit'")) << bad_mode.err;
  EXPECT_TRUE(contains(bad_mode.err, "did you mean 'audit'?")) << bad_mode.err;

  Output no_command = agentcage({"run", "--policy", "x"});
  EXPECT_EQ(no_command.status, 125) << no_command.err;
  EXPECT_TRUE(contains(no_command.err, "no COMMAND given")) << no_command.err;
}

TEST(Cli, OtherUsageErrorsExit2) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"policy", "check"},
                                             {"attach", "--policy", "x"},
                                             {"detach"},
                                             {"detach", "--cgroup", "a", "--container", "b"},
                                             {"detach", "--container", "b", "--direct"},
                                             {"oci-hook"},
                                             {"oci-hook", "--stage", "prestart"},
                                             {"status", "--socket"},
                                             {"doctor", "--bogus"}}) {
    Output usage = agentcage(args);
    EXPECT_EQ(usage.status, 2) << args.front() << ": " << usage.err;
    EXPECT_FALSE(usage.err.empty());
  }
}

TEST(Cli, PolicyCheckAcceptsTheShippedPolicies) {
  size_t checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(AGENTCAGE_SOURCE_DIR) / "policies")) {
    if (entry.path().extension() != ".yaml") continue;
    Output check = agentcage({"policy", "check", entry.path().string()});
    EXPECT_EQ(check.status, 0) << entry.path() << ": " << check.err;
    EXPECT_TRUE(contains(check.out, entry.path().string() + ": ok")) << check.out;
    ++checked;
  }
  EXPECT_GE(checked, 3u);

  Output missing = agentcage({"policy", "check", "/nonexistent/agentcage-policy.yaml"});
  EXPECT_EQ(missing.status, 1) << missing.err;
}

TEST(Cli, PolicyExplainSaysTheDecisionAndTheRule) {
  const std::string policy = std::string(AGENTCAGE_SOURCE_DIR) + "/policies/python-sandbox.yaml";
  Output denied = agentcage({"policy", "explain", policy, "open", "/etc/passwd", "read"});
  EXPECT_EQ(denied.status, 1) << denied.err;
  EXPECT_TRUE(contains(denied.out, "deny: open for read /etc/passwd\n")) << denied.out;
  EXPECT_TRUE(contains(denied.out, "no rule allows it (default deny) [default_deny]")) << denied.out;

  Output exec = agentcage({"policy", "explain", policy, "exec", "/usr/bin/python3"});
  EXPECT_EQ(exec.status, 0) << exec.err;
  EXPECT_TRUE(contains(exec.out, "allow: exec /usr/bin/python3 (the kernel sees /usr/bin/python3."))
      << exec.out;
  EXPECT_TRUE(contains(exec.out, "python-sandbox.yaml:")) << exec.out;
  EXPECT_TRUE(contains(exec.out, ": exec.allow /usr/bin/python3\n")) << exec.out;

  Output lib = agentcage({"policy", "explain", "--json", policy, "open", "/usr/lib", "write"});
  EXPECT_EQ(lib.status, 1) << lib.err;
  EXPECT_TRUE(contains(lib.out, "\"decision\": \"deny\"")) << lib.out;
  EXPECT_TRUE(contains(lib.out, "grant read here, not what this operation needs")) << lib.out;

  Output net = agentcage({"policy", "explain", policy, "connect", "10.0.0.1:443/tcp"});
  EXPECT_EQ(net.status, 1) << net.err;
  Output bad = agentcage({"policy", "explain", policy, "connect", "10.0.0.1"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "expected ADDR:PORT[/tcp|/udp]")) << bad.err;
  Output op = agentcage({"policy", "explain", policy, "delete", "/tmp/x"});
  EXPECT_EQ(op.status, 2);
  EXPECT_TRUE(contains(op.err, "unknown operation 'delete'")) << op.err;
  Output rel = agentcage({"policy", "explain", policy, "open", "etc/passwd"});
  EXPECT_EQ(rel.status, 2);
  EXPECT_TRUE(contains(rel.err, "TARGET must be an absolute path")) << rel.err;
}

// A minimal result document holding a complete recording of `records`.
std::string recorded_result(const std::string& workspace, const std::string& records) {
  return R"({"version":1,"workspace":")" + workspace +
         R"(","policy":"deny-all","run_id":"0123456789abcdef",)" +
         R"("denials":{"reported":true,"records_total":0,"events_suppressed":0,"records":[]},)" +
         R"("recording":{"complete":true,"total":3,"distinct":3,"lost":0,"records":[)" + records + "]}}";
}

std::string path_record(const std::string& hook, const std::string& target, const std::string& access) {
  return R"({"scope_id":1,"policy_slot":3,"hook":")" + hook +
         R"(","decision":"audit","reason":"default_deny","pid":9,"tid":9,"uid":1879048192,"comm":"python3",)" +
         R"("target":")" + target + R"(","target_kind":"path","errno":0,"errno_name":null,"cgroup_id":1,)" +
         R"("access":[")" + access + R"("],"count":1})";
}

// Two runs recorded in different workspaces: one draft, the workspace as
// ${workspace} for both, checked by the same decisions as policy explain.
TEST(Cli, PolicySuggestDraftsOnePolicyFromSeveralRuns) {
  const fs::path dir = fs::temp_directory_path() / ("agentcage-cli-suggest-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  {
    std::ofstream(a) << recorded_result(
        "/var/lib/agentcage/workspaces/aaaa",
        path_record("exec", "/usr/bin/python3.11", "exec") + "," +
            path_record("file_open", "/usr/lib/python3.11/os.py", "read") + "," +
            path_record("file_open", "/var/lib/agentcage/workspaces/aaaa/out.csv", "write"));
    std::ofstream(b) << recorded_result(
        "/var/lib/agentcage/workspaces/bbbb",
        path_record("file_open", "/var/lib/agentcage/workspaces/bbbb/out.csv", "write") + "," +
            path_record("file_open", "/usr/lib/python3.11/abc.py", "read") + "," +
            path_record("file_open", "/etc/hosts", "read"));
  }
  Output d = agentcage({"policy", "suggest", a, b, "--name", "two-runs"});
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_TRUE(contains(d.out, "  name: two-runs\n")) << d.out;
  EXPECT_TRUE(contains(d.out, "      - /usr/bin/python3.11\n")) << d.out;
  EXPECT_TRUE(contains(d.out, "      - /usr/lib/python3.11/os.py\n")) << d.out;
  EXPECT_TRUE(contains(d.out, "      - /usr/lib/python3.11/abc.py\n")) << d.out;
  EXPECT_TRUE(contains(d.out, "      - /etc/hosts\n")) << d.out;
  EXPECT_TRUE(contains(d.out, "      - ${workspace}/out.csv\n")) << d.out;
  EXPECT_FALSE(contains(d.out, "bbbb")) << d.out;
  EXPECT_FALSE(contains(d.err, "warning")) << d.err;

  // -o writes the file; `policy check` loads it.
  const std::string draft = (dir / "draft.yaml").string();
  Output o = agentcage({"policy", "suggest", a, "-o", draft});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "");
  Output check = agentcage({"policy", "check", draft});
  EXPECT_EQ(check.status, 0) << check.out << check.err;

  // A result without a recording: its first records, and a warning.
  const std::string partial = (dir / "partial.json").string();
  std::ofstream(partial) << R"({"version":1,"workspace":"/w","denials":{"reported":true,"records_total":20,)"
                            R"("events_suppressed":0,"records":[)" +
                                path_record("file_open", "/etc/hosts", "read") + "]},\"recording\":null}";
  Output part = agentcage({"policy", "suggest", partial});
  EXPECT_EQ(part.status, 0) << part.err;
  EXPECT_TRUE(contains(part.err, "warning: " + partial)) << part.err;
  EXPECT_TRUE(contains(part.err, "--mode audit --record")) << part.err;
  EXPECT_TRUE(contains(part.out, "# WARNING: incomplete input")) << part.out;

  // Bad input changes nothing and says where.
  const std::string log = (dir / "audit.log").string();
  std::ofstream(log) << path_record("file_open", "/etc/hosts", "read") << "\n{not json\n";
  Output bad = agentcage({"policy", "suggest", log, "-o", (dir / "never.yaml").string()});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, log + ":2:")) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "never.yaml"));
  // -o never writes through a file planted where its temporary file goes.
  const fs::path planted = dir / "planted.yaml.tmp", victim = dir / "victim";
  std::ofstream(victim) << "keep\n";
  fs::create_symlink(victim, planted);
  Output symlinked = agentcage({"policy", "suggest", a, "-o", (dir / "planted.yaml").string()});
  EXPECT_EQ(symlinked.status, 2);
  EXPECT_TRUE(contains(symlinked.err, "planted.yaml.tmp")) << symlinked.err;
  std::ifstream kept(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "keep\n");
  EXPECT_FALSE(fs::exists(dir / "planted.yaml"));
  Output missing = agentcage({"policy", "suggest", (dir / "nope.json").string()});
  EXPECT_EQ(missing.status, 2);
  EXPECT_TRUE(contains(missing.err, "nope.json")) << missing.err;
  fs::remove_all(dir);
}

// Runs whose workspaces differ in length: each observation is decided in its
// own run's workspace. (The second run's paths were rewritten into the
// first's workspace as strings, past what a rule may hold: "the draft does
// not allow 1 observed operation".) An audit log's runs have theirs under
// --workspace-root.
TEST(Cli, PolicySuggestKeepsEachRunsWorkspace) {
  const fs::path dir = fs::temp_directory_path() / ("agentcage-cli-suggest-ws-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  const std::string wa = "/home/me/" + std::string(80, 'w'), wb = "/var/lib/agentcage/workspaces/r2";
  const std::string deep = std::string(150, 'd');
  std::ofstream(a) << recorded_result(wa, path_record("file_open", wa + "/a", "read"));
  std::ofstream(b) << recorded_result(wb, path_record("file_open", wb + "/" + deep + "/x", "read"));
  Output d = agentcage({"policy", "suggest", a, b});
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_TRUE(contains(d.out, "      - ${workspace}/a\n")) << d.out;
  EXPECT_TRUE(contains(d.out, "      - ${workspace}/" + deep + "/x\n")) << d.out;
  EXPECT_EQ(d.err, "");

  const std::string log = (dir / "audit.log").string();
  {
    std::ofstream out(log);
    for (const char* run : {"R1", "R22"})
      out << path_record("file_open", "/srv/ws/" + std::string(run) + "/data.csv", "read")
                 .insert(1, "\"run_id\":\"" + std::string(run) + "\",")
          << "\n";
  }
  Output l = agentcage({"policy", "suggest", log, "--workspace-root", "/srv/ws"});
  ASSERT_EQ(l.status, 0) << l.err;
  EXPECT_TRUE(contains(l.out,
                       "    read:\n      # file_open read by python3 (2×): ${workspace}/data.csv\n"
                       "      - ${workspace}/data.csv\n"))
      << l.out;
  Output bad = agentcage({"policy", "suggest", log, "--workspace-root", "srv/ws"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "--workspace-root must be an absolute directory")) << bad.err;
  fs::remove_all(dir);
}

// A draft larger than a policy file may be: compiled, refused, and then
// dumped whole to stderr (45 MB for the reviewer's log). Now one line says
// so and nothing is written.
TEST(Cli, PolicySuggestRefusesADraftLargerThanAPolicyFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("agentcage-cli-suggest-big-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string log = (dir / "audit.log").string();
  {
    std::ofstream out(log);
    for (int i = 0; i < 3000; ++i)
      out << path_record("file_open", "/srv/app/data/a-rather-long-file-name-" + std::to_string(i) + ".csv",
                         "read")
          << "\n";
  }
  const std::string draft = (dir / "draft.yaml").string();
  Output o = agentcage({"policy", "suggest", log, "--collapse", "0", "-o", draft});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.out, "");
  EXPECT_TRUE(contains(o.err, "bytes, more than a policy file may (262144): collapse more"))
      << o.err.substr(0, 500);
  EXPECT_LT(o.err.size(), 400u);
  EXPECT_FALSE(fs::exists(draft));
  // Collapsed, the same records make a small draft.
  Output c = agentcage({"policy", "suggest", log});
  EXPECT_EQ(c.status, 0) << c.err.substr(0, 500);
  EXPECT_TRUE(contains(c.out, "      - /srv/app/data\n")) << c.out.substr(0, 500);
  fs::remove_all(dir);
}

// What a run chose (a hook's name in a hand-made log, a decision's) reached
// stderr raw.
TEST(Cli, PolicySuggestEscapesWhatItPrints) {
  const fs::path dir =
      fs::temp_directory_path() / ("agentcage-cli-suggest-esc-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string log = (dir / "audit.log").string();
  const std::string rlo = "\xe2\x80\xae", csi = "\xc2\x9b";
  std::ofstream(log) << path_record("ipc" + rlo + csi + "2J", "/srv/x" + rlo, "read") << "\n";
  Output o = agentcage({"policy", "suggest", log});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.err, "note: ipc\\xe2\\x80\\xae\\xc2\\x9b2J by python3 (1×): /srv/x\\xe2\\x80\\xae"))
      << o.err;
  const std::string bad_log = (dir / "bad.log").string();
  std::ofstream(bad_log) << R"({"hook":"x","decision":")" + rlo + csi +
                                R"(2J","target":"","target_kind":"none"})"
                         << "\n";
  Output bad = agentcage({"policy", "suggest", bad_log});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "unknown decision '\\xe2\\x80\\xae\\xc2\\x9b2J'")) << bad.err;
  for (const Output* out : {&o, &bad}) {
    EXPECT_FALSE(contains(out->err, rlo)) << out->err;
    EXPECT_FALSE(contains(out->err, csi)) << out->err;
  }
  EXPECT_FALSE(contains(o.out, csi));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace agentcage
