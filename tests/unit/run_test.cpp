// SPDX-License-Identifier: Apache-2.0
// `agentcage run`'s pure logic: options, limits, environment, exec search,
// exit statuses, the result JSON and the run record.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "bpf/compile.h"
#include "control/protocol.h"
#include "core/limits.h"
#include "in_child.h"
#include "policy/locate.h"
#include "policy/values.h"
#include "run/artifacts.h"
#include "run/options.h"
#include "run/policy_cache.h"
#include "run/result.h"
#include "run/result_sink.h"
#include "run/seccomp.h"
#include "run/state.h"
#include "run/stdio.h"
#include "run/steps.h"
#include "run/workspace.h"

namespace agentcage::run {
namespace {

TEST(RunOptions, PolicyNamesResolveInThePolicyDirFilesAsGiven) {
  EXPECT_EQ(*policy::resolve_policy("python-sandbox", "/etc/agentcage/policies"),
            "/etc/agentcage/policies/python-sandbox.yaml");
  EXPECT_EQ(*policy::resolve_policy("x", "/p/"), "/p/x.yaml");
  EXPECT_EQ(*policy::resolve_policy("policies/python-sandbox.yaml", "/p"), "policies/python-sandbox.yaml");
  EXPECT_EQ(*policy::resolve_policy("local.yml", "/p"), "local.yml");
  EXPECT_EQ(*policy::resolve_policy("/abs/p", "/p"), "/abs/p");
  EXPECT_FALSE(policy::resolve_policy("", "/p"));
  EXPECT_FALSE(policy::resolve_policy(".hidden", "/p"));
  EXPECT_FALSE(policy::resolve_policy("a b", "/p"));
}

TEST(RunOptions, PathsFromEnvironment) {
  const char* env[] = {"AGENTCAGE_POLICY_DIR=/pol",
                       "AGENTCAGE_WORKSPACE_ROOT=/ws",
                       "AGENTCAGE_CGROUP_PARENT=x/y",
                       "AGENTCAGE_STATE_DIR=/st",
                       "AGENTCAGE_OTHER=1",
                       "PATH=/bin",
                       nullptr};
  Paths p = paths_from_env(env);
  EXPECT_EQ(p.policy_dir, "/pol");
  EXPECT_EQ(p.workspace_root, "/ws");
  EXPECT_EQ(p.cgroup_parent, "x/y");
  EXPECT_EQ(p.state_dir, "/st");
  Paths d = paths_from_env(nullptr);
  EXPECT_EQ(d.cgroup_parent, "agentcage/runs");
  EXPECT_EQ(d.workspace_root, "/var/lib/agentcage/workspaces");
}

TEST(RunOptions, CommandLineLimitsOverrideThePolicy) {
  policy::Limits pol;
  pol.memory_bytes = 1 << 20;
  pol.pids = 10;
  pol.timeout = std::chrono::seconds(60);
  RunOptions o;
  o.memory = "2Mi";
  o.cpu = "0.5";
  auto l = effective_limits(pol, o);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(*l->memory_bytes, 2u << 20);
  EXPECT_EQ(*l->pids, 10u);
  EXPECT_DOUBLE_EQ(*l->cpus, 0.5);
  EXPECT_EQ(*l->timeout, std::chrono::seconds(60));
  o.timeout = "1m30s";
  EXPECT_EQ(*effective_limits(pol, o)->timeout, std::chrono::seconds(90));

  RunOptions bad;
  bad.pids = "0";
  auto e = effective_limits(pol, bad);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("--pids '0'"), std::string::npos) << e.error().message;
  bad = {};
  bad.memory = "lots";
  EXPECT_FALSE(effective_limits(pol, bad));
  bad = {};
  bad.timeout = "5 s";
  EXPECT_FALSE(effective_limits(pol, bad));
}

// A policy without limits still gets core/limits.h's defaults; `unlimited`
// (policy or option) removes one; an option overrides a default.
TEST(RunOptions, LimitlessPolicyGetsTheDefaults) {
  auto l = effective_limits(policy::Limits{}, RunOptions{});
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->memory_bytes, *policy::parse_size(core::kDefaultMemory));
  EXPECT_EQ(l->pids, *policy::parse_pids(core::kDefaultPids));
  EXPECT_EQ(l->timeout, *policy::parse_duration(core::kDefaultTimeout));
  EXPECT_EQ(l->disk_bytes, *policy::parse_size(core::kDefaultDisk));
  EXPECT_FALSE(l->cpus);
  // Conservative: a run gets bounds, not the host.
  EXPECT_LE(*l->memory_bytes, 4ull << 30);
  EXPECT_LE(*l->pids, 1024u);
  EXPECT_LE(*l->timeout, std::chrono::hours(1));
  EXPECT_LE(*l->disk_bytes, 4ull << 30);

  policy::Limits pol;
  pol.unlimited.memory = true;
  pol.unlimited.disk = true;
  RunOptions o;
  o.pids = "unlimited";
  o.timeout = "5s";
  l = effective_limits(pol, o);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_FALSE(l->memory_bytes);
  EXPECT_FALSE(l->disk_bytes);
  EXPECT_FALSE(l->pids);
  EXPECT_EQ(*l->timeout, std::chrono::seconds(5));
  EXPECT_FALSE(l->unlimited.memory) << "the effective limits state no `unlimited`";

  o = {};
  o.disk = "16Mi";
  o.memory = "unlimited";
  pol = {};
  pol.memory_bytes = 1 << 20;
  l = effective_limits(pol, o);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(*l->disk_bytes, 16u << 20);
  EXPECT_FALSE(l->memory_bytes);

  o = {};
  o.disk = "0";
  auto e = effective_limits(pol, o);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("--disk '0'"), std::string::npos) << e.error().message;
}

// A regular file or block device never reaches the run (run/stdio.h).
TEST(RunStdio, OnlyFilesAreRelayedOrReopened) {
  EXPECT_EQ(stdio_way(0, S_IFREG | 0644), StdioWay::read_only);
  EXPECT_EQ(stdio_way(1, S_IFREG | 0644), StdioWay::relay);
  EXPECT_EQ(stdio_way(2, S_IFBLK | 0660), StdioWay::relay);
  EXPECT_EQ(stdio_way(0, S_IFBLK | 0660), StdioWay::read_only);
  for (int fd = 0; fd <= 2; ++fd)
    for (mode_t type : {S_IFIFO, S_IFCHR, S_IFSOCK}) EXPECT_EQ(stdio_way(fd, type | 0600), StdioWay::pass);
}

// What the relay writes to the caller's files stops at its limit (both
// streams together), and the pipe is closed so the writer learns it (EPIPE).
// In a child: it points its own 1 and 2 at a temporary file.
TEST(RunStdio, RelayedOutputStopsAtTheLimit) {
  char path[] = "/tmp/agentcage-relay-XXXXXX";
  int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ::unlink(path);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_IGN);
    if (::dup2(file, 1) < 0 || ::dup2(file, 2) < 0) ::_exit(10);
    auto relay = StdioRelay::prepare(100, ::getuid(), ::getgid());
    if (!relay) ::_exit(11);
    const int w = relay->child_fds()[1];
    if (w < 0 || relay->child_fds()[2] != w) ::_exit(12);  // 2>&1: one pipe
    const std::string data(60, 'a');
    auto size = [&] { return ::lseek(file, 0, SEEK_END); };
    if (::write(w, data.data(), 60) != 60) ::_exit(13);
    relay->drain();
    if (relay->truncated() || size() != 60) ::_exit(14);
    if (::write(w, data.data(), 60) != 60) ::_exit(15);
    relay->drain();
    if (!relay->truncated() || size() != 100 || relay->problems().size() != 1) ::_exit(16);
    errno = 0;
    if (::write(w, "b", 1) != -1 || errno != EPIPE) ::_exit(17);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(file);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "step that failed (see the test)";
}

TEST(RunOptions, EnvAssignments) {
  auto kv = parse_env_assignment("A_1=x=y");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "A_1");
  EXPECT_EQ(kv->second, "x=y");
  EXPECT_EQ(parse_env_assignment("EMPTY=")->second, "");
  EXPECT_FALSE(parse_env_assignment("NOVALUE"));
  EXPECT_FALSE(parse_env_assignment("=x"));
  EXPECT_FALSE(parse_env_assignment("1A=x"));
  EXPECT_FALSE(parse_env_assignment("A-B=x"));
}

TEST(RunOptions, SandboxEnvironmentIsScrubbed) {
  auto env = sandbox_environment("/ws/r1", {});
  ASSERT_TRUE(env);
  EXPECT_EQ(*env, (std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/ws/r1",
                                            "TMPDIR=/ws/r1", "LANG=C.UTF-8"}));
  auto extra = sandbox_environment("/ws", {"MPLBACKEND=Agg", "LANG=en_US.UTF-8", "MPLBACKEND=pdf"});
  ASSERT_TRUE(extra);
  EXPECT_EQ(*extra, (std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/ws", "TMPDIR=/ws",
                                              "LANG=en_US.UTF-8", "MPLBACKEND=pdf"}));
  EXPECT_FALSE(sandbox_environment("/ws", {"bad"}));
}

TEST(RunOptions, ExecCandidatesAndErrors) {
  EXPECT_EQ(exec_candidates("python3", "/usr/local/bin:/usr/bin"),
            (std::vector<std::string>{"/usr/local/bin/python3", "/usr/bin/python3"}));
  EXPECT_EQ(exec_candidates("./x", "/bin"), (std::vector<std::string>{"./x"}));
  EXPECT_EQ(exec_candidates("/bin/sh", "/usr/bin"), (std::vector<std::string>{"/bin/sh"}));
  EXPECT_EQ(exec_candidates("x", ":/bin"), (std::vector<std::string>{"x", "/bin/x"}));
  EXPECT_TRUE(exec_candidates("", "/bin").empty());

  EXPECT_EQ(combine_exec_errors({ENOENT, ENOENT}), ENOENT);
  EXPECT_EQ(combine_exec_errors({EACCES, ENOENT}), EACCES);
  EXPECT_EQ(combine_exec_errors({ENOENT, ENOEXEC, EACCES}), ENOEXEC);
  EXPECT_EQ(combine_exec_errors({}), ENOENT);
  EXPECT_EQ(exit_code_for_exec_errno(ENOENT), 127);
  EXPECT_EQ(exit_code_for_exec_errno(ENOTDIR), 127);
  EXPECT_EQ(exit_code_for_exec_errno(EACCES), 126);
  EXPECT_EQ(exit_code_for_exec_errno(EPERM), 126);
  EXPECT_EQ(exit_code_for_exec_errno(ENOEXEC), 126);
}

int exited(int code) { return (code & 0xff) << 8; }
int signaled(int sig) { return sig & 0x7f; }

TEST(RunOptions, ExitStatusMapping) {
  ASSERT_TRUE(WIFEXITED(exited(3)));
  ASSERT_TRUE(WIFSIGNALED(signaled(SIGKILL)));
  EXPECT_EQ(exit_code({exited(0), false, 0}), 0);
  EXPECT_EQ(exit_code({exited(3), false, 0}), 3);
  EXPECT_EQ(exit_code({signaled(SIGKILL), false, 0}), 137);
  EXPECT_EQ(exit_code({signaled(SIGSEGV), false, 0}), 139);
  // The timeout wins over the SIGKILL that implemented it.
  EXPECT_EQ(exit_code({signaled(SIGKILL), true, 0}), 124);
  EXPECT_EQ(exit_code({signaled(SIGKILL), false, SIGTERM}), 143);
  EXPECT_EQ(exit_code({exited(0), false, SIGINT}), 130);
  EXPECT_EQ(*exited_code(exited(7)), 7);
  EXPECT_FALSE(killed_by(exited(7)));
  EXPECT_EQ(*killed_by(signaled(SIGUSR1)), SIGUSR1);
}

TEST(RunOptions, UserSpecs) {
  auto n = parse_user_spec("nobody");
  ASSERT_TRUE(n);
  EXPECT_EQ(*n->name, "nobody");
  auto u = parse_user_spec("1234");
  ASSERT_TRUE(u);
  EXPECT_EQ(*u->uid, 1234u);
  EXPECT_EQ(*u->gid, 1234u);
  auto ug = parse_user_spec("1234:99");
  ASSERT_TRUE(ug);
  EXPECT_EQ(*ug->gid, 99u);
  EXPECT_FALSE(parse_user_spec(""));
  EXPECT_FALSE(parse_user_spec("1234:x"));
  EXPECT_FALSE(parse_user_spec("a:b"));
  EXPECT_FALSE(parse_user_spec("4294967295"));
  EXPECT_EQ(format_run_id(0xabcULL), "0000000000000abc");
}

ac_event_decision path_record(uint8_t hook, const char* path) {
  ac_event_decision r{};
  r.hook = hook;
  r.decision = AC_DECISION_DENY;
  r.reason = AC_REASON_DEFAULT_DENY;
  r.error = -EACCES;
  r.pid = 42;
  r.tid = 43;
  r.uid = 1000;
  std::strcpy(r.comm, "python3");
  r.target_kind = AC_TARGET_PATH;
  r.target_len = static_cast<uint16_t>(std::strlen(path));
  std::memcpy(r.target, path, r.target_len);
  return r;
}

TEST(RunResult, JsonShape) {
  RunResult r;
  r.run_id = "0123456789abcdef";
  r.policy_name = "python-sandbox";
  r.policy_file = "policies/python-sandbox.yaml";
  r.command = {"python3", "-c", "1"};
  r.workspace = "/var/lib/agentcage/workspaces/0123456789abcdef";
  r.exit_code = 137;
  r.started = true;
  r.signal = SIGKILL;
  r.oom_killed = true;
  r.oom_kills = 1;
  r.memory_max_bytes = 64u << 20;
  r.wall_time_us = 1500;
  r.cpu_total_us = 2500;
  r.peak_memory_bytes = 1000;
  r.peak_memory_source = "memory.peak";
  r.report.emplace();
  r.report->denied[AC_HOOK_FILE_OPEN] = 3;
  r.report->denied[AC_HOOK_EXEC] = 1;
  r.report->records_taken = 4;
  r.report->events_suppressed = 2;
  r.report->records = {path_record(AC_HOOK_FILE_OPEN, "/etc/passwd")};
  auto j = to_json(r);
  for (const char* key : {"run_id",
                          "scope_id",
                          "policy",
                          "policy_file",
                          "command",
                          "workspace",
                          "workspace_kept",
                          "workspace_error",
                          "cgroup",
                          "uid",
                          "gid",
                          "limits",
                          "exit_code",
                          "started",
                          "exit_status",
                          "signal",
                          "signal_number",
                          "timed_out",
                          "oom_killed",
                          "oom_kills",
                          "output_truncated",
                          "interrupted_by",
                          "error",
                          "error_errno",
                          "wall_time_ms",
                          "cpu_time_ms",
                          "peak_memory_bytes",
                          "peak_memory_source",
                          "denials"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["exit_code"], 137);
  EXPECT_TRUE(j["exit_status"].is_null());
  EXPECT_EQ(j["signal"], "SIGKILL");
  EXPECT_EQ(j["signal_number"], 9);
  EXPECT_TRUE(j["oom_killed"].get<bool>());
  EXPECT_EQ(j["limits"]["memory_bytes"], 64u << 20);
  EXPECT_TRUE(j["limits"]["pids"].is_null());
  EXPECT_TRUE(j["limits"].contains("disk_bytes"));
  EXPECT_DOUBLE_EQ(j["wall_time_ms"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["cpu_time_ms"]["total"].get<double>(), 2.5);
  EXPECT_TRUE(j["cpu_time_ms"]["user"].is_null());
  const auto& d = j["denials"];
  EXPECT_EQ(d["total"], 4);
  EXPECT_EQ(d["by_hook"], nlohmann::json({{"file_open", 3}, {"exec", 1}}));
  EXPECT_EQ(d["records_total"], 4);
  EXPECT_EQ(d["events_suppressed"], 2);
  ASSERT_EQ(d["records"].size(), 1u);
  // The decision record's one shape (bpf/record.h), as in the audit log:
  // errno a number with errno_name beside it.
  EXPECT_EQ(d["records"][0], nlohmann::json({{"scope_id", 0},
                                             {"policy_slot", 0},
                                             {"hook", "file_open"},
                                             {"decision", "deny"},
                                             {"reason", "default_deny"},
                                             {"pid", 42},
                                             {"tid", 43},
                                             {"uid", 1000},
                                             {"comm", "python3"},
                                             {"target", "/etc/passwd"},
                                             {"target_kind", "path"},
                                             {"errno", 13},
                                             {"errno_name", "EACCES"},
                                             {"cgroup_id", 0}}));
}

// Denied system calls (counted by agentcage's seccomp supervisor) join the
// LSM's denials: in the totals, as by_hook "syscall", by name, as records of
// the one shape, and in the stderr summary.
TEST(RunResult, DeniedSystemCallsAreDenials) {
  RunResult r;
  r.policy_name = "python-sandbox";
  r.scope_id = 77;
  r.policy_slot = 3;
  r.report.emplace();
  r.report->denied[AC_HOOK_FILE_OPEN] = 1;
  r.report->records_taken = 1;
  r.report->records = {path_record(AC_HOOK_FILE_OPEN, "/etc/passwd")};
  EXPECT_TRUE(to_json(r)["denials"]["syscalls"].is_null()) << "no filter, no count";
  r.syscalls.emplace();
  r.syscalls->total = 5;
  r.syscalls->by_name = {{"keyctl", 4}, {"x32:getpid", 1}};
  r.syscalls->records_taken = 5;
  r.syscalls->records = {SyscallDenial{"keyctl", 42, 43, 1000, "py\xff"}};
  auto j = to_json(r);
  const auto& d = j["denials"];
  EXPECT_EQ(d["total"], 6);
  EXPECT_EQ(d["by_hook"], nlohmann::json({{"file_open", 1}, {"syscall", 5}}));
  EXPECT_EQ(d["syscalls"], nlohmann::json({{"total", 5}, {"by_name", {{"keyctl", 4}, {"x32:getpid", 1}}}}));
  EXPECT_EQ(d["records_total"], 6);
  ASSERT_EQ(d["records"].size(), 2u);
  EXPECT_EQ(d["records"][1], nlohmann::json({{"scope_id", 77},
                                             {"policy_slot", 3},
                                             {"hook", "syscall"},
                                             {"decision", "deny"},
                                             {"reason", "default_deny"},
                                             {"pid", 42},
                                             {"tid", 43},
                                             {"uid", 1000},
                                             {"comm", "py\xEF\xBF\xBD"},
                                             {"target", "keyctl"},
                                             {"target_kind", "syscall"},
                                             {"errno", 1},
                                             {"errno_name", "EPERM"},
                                             {"cgroup_id", 77}}));
  EXPECT_EQ(denial_summary(r),
            "agentcage: policy python-sandbox denied 6 operation(s): file_open /etc/passwd, syscall keyctl, "
            "...\n");
  // Only denied calls: still a summary.
  r.report.reset();
  EXPECT_EQ(denial_summary(r),
            "agentcage: policy python-sandbox denied 5 operation(s): syscall keyctl, ...\n");
  EXPECT_EQ(run::run_end_notice(r).syscalls_denied, 5u);
}

TEST(RunResult, RunEndNotice) {
  run::RunResult res;
  res.run_id = "0123456789abcdef";
  res.policy_name = "p";
  res.exit_code = 125;
  res.wall_time_us = 1500000;
  res.fail_closed_reason = core::FailClosedReason::scope;
  control::RunEnd end = run::run_end_notice(res);
  EXPECT_EQ(end.run_id, "0123456789abcdef");
  EXPECT_EQ(end.policy, "p");
  EXPECT_EQ(end.outcome, core::RunOutcome::setup_failed);
  EXPECT_EQ(end.exit_code, 125);
  EXPECT_DOUBLE_EQ(end.duration_seconds, 1.5);
  EXPECT_EQ(end.fail_closed, core::FailClosedReason::scope);
  // Only a 125 is a refusal to run: another status carries no reason.
  res.exit_code = 124;
  res.timed_out = true;
  res.signal = SIGKILL;
  end = run::run_end_notice(res);
  EXPECT_EQ(end.outcome, core::RunOutcome::timeout);
  EXPECT_FALSE(end.fail_closed);
  EXPECT_EQ(end.dns_refused.total, 0u);
}

// The daemon gets the most refused names (ties by name) and every refusal's count.
TEST(RunResult, RunEndNoticeCarriesTheMostRefusedNames) {
  run::RunResult res;
  res.run_id = "0123456789abcdef";
  res.dns.emplace();
  for (size_t i = 0; i < control::kMaxRefusedNames + 10; ++i) {
    const uint64_t n = i == 70 ? 50 : 1;
    res.dns->refused_by_name["n" + std::to_string(100 + i) + ".test"] = n;
    res.dns->refused_total += n;
  }
  res.dns->refused_total += 7;  // names past the result's own cap
  control::RunEnd end = run::run_end_notice(res);
  EXPECT_EQ(end.dns_refused.total, control::kMaxRefusedNames + 9 + 50 + 7);
  ASSERT_EQ(end.dns_refused.by_name.size(), control::kMaxRefusedNames);
  EXPECT_EQ(end.dns_refused.by_name.at("n170.test"), 50u);  // the most refused, though last by name
  EXPECT_TRUE(end.dns_refused.by_name.count("n100.test"));
  EXPECT_FALSE(end.dns_refused.by_name.count("n173.test"));
  // What the notice says parses back whole on the daemon's side.
  control::Request r;
  r.op = control::Op::run_end;
  r.run_id = end.run_id;
  r.policy = "p";
  r.dns_refused = end.dns_refused;
  auto back = control::parse_request(control::to_json(r).dump());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->dns_refused.total, end.dns_refused.total);
  EXPECT_EQ(back->dns_refused.by_name, end.dns_refused.by_name);
}

TEST(RunRecord, JsonRoundTrip) {
  RunRecord r;
  r.run_id = "abc";
  r.owner_pid = 77;
  r.started_unix_ms = 123;
  r.cgroup = "/sys/fs/cgroup/agentcage/runs/abc";
  r.cgroup_id = 9;
  r.policy_slot = 3;
  r.workspace = "/w";
  r.remove_workspace = true;
  r.restore_uid = 1000;
  r.restore_gid = 1000;
  r.restore_mode = 0755;
  r.workspace_dev = 66;
  r.workspace_ino = 1ull << 40;
  r.sandbox_uid = 0x70000001;
  r.spare = true;
  auto back = record_from_json(to_json(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->cgroup, r.cgroup);
  EXPECT_EQ(back->cgroup_id, 9u);
  EXPECT_EQ(*back->policy_slot, 3u);
  EXPECT_EQ(*back->restore_mode, 0755u);
  EXPECT_EQ(*back->workspace_dev, 66u);
  EXPECT_EQ(*back->workspace_ino, 1ull << 40);
  EXPECT_EQ(*back->sandbox_uid, 0x70000001u);
  EXPECT_TRUE(back->spare);
  RunRecord bare;
  bare.run_id = "x";
  auto b = record_from_json(to_json(bare));
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->policy_slot);
  EXPECT_FALSE(b->sandbox_uid);
  EXPECT_FALSE(b->spare);
  EXPECT_FALSE(to_json(bare).contains("spare"));
  EXPECT_FALSE(record_from_json(nlohmann::json::object()));
}

// A caller's workspace is reached only by a path without a symbolic link,
// and, with its device and inode, only when it is the same directory.
TEST(CallersWorkspace, OpensOnlyTheDirectoryTheRunHad) {
  char tmpl[] = "/tmp/agentcage-callers-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path t = tmpl;
  std::filesystem::create_directories(t / "a/ws");
  std::filesystem::create_directories(t / "b/ws");
  struct stat st {};
  ASSERT_EQ(::stat((t / "a/ws").c_str(), &st), 0);
  const uint64_t dev = st.st_dev, ino = st.st_ino;
  auto fd = open_callers_workspace((t / "a/ws").string(), dev, ino);
  ASSERT_TRUE(fd) << fd.error().message;
  // The owner of a directory on the way swaps it for a link.
  std::filesystem::rename(t / "a", t / "a.real");
  std::filesystem::create_directory_symlink(t / "b", t / "a");
  auto linked = open_callers_workspace((t / "a/ws").string(), dev, ino);
  ASSERT_FALSE(linked);
  EXPECT_EQ(linked.error().code, ELOOP) << linked.error().message;
  // ... or for another directory.
  std::filesystem::remove(t / "a");
  std::filesystem::create_directories(t / "a/ws");
  auto other = open_callers_workspace((t / "a/ws").string(), dev, ino);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, ESTALE) << other.error().message;
  // The descriptor from the start still is the run's directory.
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_ino), ino);
  std::error_code ec;
  std::filesystem::remove_all(t, ec);
}

// ---- where the result goes (--result FILE|-, --result-fd N) ----------------

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/ac-sink-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// ---- dynamic uids (run/state.h) ----------------------------------------------

// A run whose agentcage was SIGKILLed leaves its uid's lock free, but
// processes of it may still run as that uid until the reaper kills its
// cgroup: the uid is not leased to another run before.
TEST(UidLease, AUidIsNotLeasedAgainWhileItsLastRunIsUnreaped) {
  TempDir d;
  const uid_t uid = 0x70000005;
  std::string first_lock;
  {
    auto first = RunLease::create(d.path, "00000000000000aa");
    ASSERT_TRUE(first) << first.error().message;
    RunRecord record;
    record.run_id = "00000000000000aa";
    ASSERT_TRUE(first->write(record));
    auto lease = UidLease::acquire(d.path, uid, 1, 0, "00000000000000aa");
    ASSERT_TRUE(lease) << lease.error().message;
    EXPECT_EQ(lease->uid(), uid);
    // While held, nobody else gets it.
    auto again = UidLease::acquire(d.path, uid, 1, 0, "00000000000000bb");
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, EAGAIN);
    // The first run's agentcage dies here: both locks go with it (the
    // descriptors close, nothing is finished); its lock file stays for
    // the reaper, with its record.
  }
  auto unreaped = UidLease::acquire(d.path, uid, 1, 0, "00000000000000bb");
  ASSERT_FALSE(unreaped);
  EXPECT_EQ(unreaped.error().code, EAGAIN);
  EXPECT_NE(unreaped.error().message.find("not yet reaped"), std::string::npos) << unreaped.error().message;
  // The reaper takes the stale run and forgets it: the uid is free again.
  auto stale = find_stale_runs(d.path);
  ASSERT_TRUE(stale) << stale.error().message;
  ASSERT_EQ(stale->size(), 1u);
  ASSERT_TRUE((*stale)[0].record);
  (*stale)[0].forget();
  auto second = UidLease::acquire(d.path, uid, 1, 0, "00000000000000bb");
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(read_all(d.path + "/uids/" + std::to_string(uid) + ".lock"), "00000000000000bb");
  // A run that finished normally leaves nothing that holds its uid.
  {
    auto run = RunLease::create(d.path, "00000000000000cc");
    ASSERT_TRUE(run);
    auto other = UidLease::acquire(d.path, uid + 1, 1, 0, "00000000000000cc");
    ASSERT_TRUE(other) << other.error().message;
    run->finish();
  }
  EXPECT_TRUE(UidLease::acquire(d.path, uid + 1, 1, 0, "00000000000000dd"));
  // A lock file that names something other than a run id is not trusted.
  { std::ofstream(d.path + "/uids/" + std::to_string(uid + 2) + ".lock") << "../../etc/passwd"; }
  EXPECT_FALSE(UidLease::acquire(d.path, uid + 2, 1, 0, "00000000000000ee"));
  EXPECT_FALSE(UidLease::acquire(d.path, uid + 3, 1, 0, "../x"));
}

TEST(ResultSink, FileIsReplacedAtomicallyAndNothingElseIsLeft) {
  TempDir d;
  const std::string file = d.path + "/out.json";
  std::ofstream(file) << "old";
  auto sink = run::ResultSink::to_file(file);
  ASSERT_TRUE(sink) << sink.error().message;
  // Until the end the caller's file is untouched; the document goes to a
  // temporary file beside it.
  EXPECT_EQ(read_all(file), "old");
  ASSERT_EQ(d.entries().size(), 2u);
  ASSERT_TRUE(sink->write("{\"new\":1}\n"));
  EXPECT_EQ(read_all(file), "{\"new\":1}\n");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out.json"});
}

TEST(ResultSink, UnwrittenSinkLeavesNoTemporaryFile) {
  TempDir d;
  {
    auto sink = run::ResultSink::to_file(d.path + "/out.json");
    ASSERT_TRUE(sink);
  }
  EXPECT_TRUE(d.entries().empty());
}

// A symbolic link the caller chose is never replaced: refused before the
// run starts, with the fix.
TEST(ResultSink, SymlinkAndNonRegularFilesAreRefused) {
  TempDir d;
  const std::string target = d.path + "/real.json", link = d.path + "/link.json";
  std::ofstream(target) << "keep";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  auto sink = run::ResultSink::to_file(link);
  ASSERT_FALSE(sink);
  EXPECT_NE(sink.error().message.find("symbolic link"), std::string::npos) << sink.error().message;
  EXPECT_NE(sink.error().message.find("realpath"), std::string::npos) << sink.error().message;
  ASSERT_EQ(::symlink("/nonexistent/x", (d.path + "/dangling").c_str()), 0);
  EXPECT_FALSE(run::ResultSink::to_file(d.path + "/dangling"));
  EXPECT_FALSE(run::ResultSink::to_file(d.path));  // a directory
  ASSERT_EQ(::mkfifo((d.path + "/fifo").c_str(), 0600), 0);
  auto fifo = run::ResultSink::to_file(d.path + "/fifo");
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().message.find("--result-fd"), std::string::npos);
  EXPECT_FALSE(run::ResultSink::to_file(""));
  EXPECT_FALSE(run::ResultSink::to_file(d.path + "/missing-dir/out.json"));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(read_all(target), "keep");
  EXPECT_EQ(d.entries(), (std::vector<std::string>{"dangling", "fifo", "link.json", "real.json"}));
}

TEST(ResultSink, DescriptorGetsTheDocumentThenEndOfFile) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  auto sink = run::ResultSink::to_fd(p[1]);
  ASSERT_TRUE(sink) << sink.error().message;
  EXPECT_EQ(::fcntl(p[1], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);  // COMMAND does not inherit it
  ASSERT_TRUE(sink->write("{\"x\":2}\n"));
  std::string got;
  char buf[64];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(n, 0);  // the write end was closed
  EXPECT_EQ(got, "{\"x\":2}\n");
  ::close(p[0]);
}

TEST(ResultSink, BadDescriptorsAreRefusedAndAClosedReaderIsAnError) {
  EXPECT_FALSE(run::ResultSink::to_fd(-1));
  EXPECT_FALSE(run::ResultSink::to_fd(987));
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  auto ro = run::ResultSink::to_fd(p[0]);  // the read end
  ASSERT_FALSE(ro);
  EXPECT_NE(ro.error().message.find("read-only"), std::string::npos);
  ::close(p[0]);
  // The reader is gone: an error, not a SIGPIPE that kills agentcage.
  auto sink = run::ResultSink::to_fd(p[1]);
  ASSERT_TRUE(sink);
  Status st = sink->write("{}\n");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, EPIPE);
}

// ---- a kept workspace is handed back without set-id bits -------------------

mode_t mode_of(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

TEST(Artifacts, SetIdBitsAreClearedWithoutFollowingLinks) {
  TempDir ws, outside;
  const std::string w = ws.path;
  ASSERT_EQ(::mkdir((w + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((w + "/sub/deeper").c_str(), 0700), 0);
  std::ofstream(w + "/suid") << "x";
  std::ofstream(w + "/sub/deeper/sgid") << "x";
  std::ofstream(w + "/plain") << "x";
  std::ofstream(outside.path + "/host-suid") << "x";
  ASSERT_EQ(::chmod((w + "/suid").c_str(), 04755), 0);
  ASSERT_EQ(::chmod((w + "/sub/deeper/sgid").c_str(), 02711), 0);
  ASSERT_EQ(::chmod((w + "/sub").c_str(), 02775), 0);
  ASSERT_EQ(::chmod(w.c_str(), 06700), 0);
  ASSERT_EQ(::chmod((w + "/plain").c_str(), 0640), 0);
  ASSERT_EQ(::chmod((outside.path + "/host-suid").c_str(), 04755), 0);
  // Links out of the workspace (to a file and to a directory) are not followed.
  ASSERT_EQ(::symlink((outside.path + "/host-suid").c_str(), (w + "/link").c_str()), 0);
  ASSERT_EQ(::symlink(outside.path.c_str(), (w + "/sub/dirlink").c_str()), 0);
  ASSERT_EQ(::mkfifo((w + "/fifo").c_str(), 0600), 0);

  UniqueFd wfd(::open(w.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(wfd);
  ASSERT_TRUE(run::hand_back_tree_at(wfd.get(), w, std::nullopt));
  EXPECT_EQ(mode_of(w), 0700u);
  EXPECT_EQ(mode_of(w + "/suid"), 0755u);
  EXPECT_EQ(mode_of(w + "/sub"), 0775u);
  EXPECT_EQ(mode_of(w + "/sub/deeper/sgid"), 0711u);
  EXPECT_EQ(mode_of(w + "/plain"), 0640u);
  EXPECT_EQ(mode_of(outside.path + "/host-suid"), 04755u);
  EXPECT_TRUE(std::filesystem::is_symlink(w + "/link"));
}

// A tree thousands of levels deep (a run can make one in a workspace on
// the host's disk) is removed with a few descriptors: a removal that holds
// one per level stops at the limit of open files and leaves it all there.
TEST(Artifacts, ATreeDeeperThanTheOpenFileLimitIsRemoved) {
  TempDir d;
  const std::string top = d.path + "/ws";
  ASSERT_EQ(::mkdir(top.c_str(), 0700), 0);
  UniqueFd at(::open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int i = 0; i < 1500; ++i) {
    ASSERT_EQ(::mkdirat(at.get(), "d", 0700), 0) << i;
    if (i % 100 == 0) {
      std::ofstream(std::string("/proc/self/fd/") + std::to_string(at.get()) + "/f") << "x";
      ASSERT_EQ(::symlinkat("/etc/passwd", at.get(), "l"), 0);
      ASSERT_EQ(::mkdirat(at.get(), "empty", 0700), 0);
    }
    at = UniqueFd(::openat(at.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(at) << i;
  }
  at.reset();
  test::in_child([&]() -> std::string {
    struct rlimit few {
      64, 64
    };
    if (::setrlimit(RLIMIT_NOFILE, &few) != 0) return "setrlimit failed";
    std::error_code ec;
    std::filesystem::remove_all(top, ec);
    if (!ec) return "a recursive removal managed 1500 levels with 64 descriptors: the test proves nothing";
    if (Status st = remove_tree(top); !st) return st.error().message;
    return std::filesystem::exists(top) ? "the tree is still there" : "";
  });
  EXPECT_FALSE(std::filesystem::exists(top));
  struct stat st {};
  EXPECT_EQ(::stat("/etc/passwd", &st), 0);
  // Gone already, and a file or link in the directory's place.
  EXPECT_TRUE(remove_tree(top));
  ASSERT_EQ(::symlink("/etc/passwd", top.c_str()), 0);
  EXPECT_TRUE(remove_tree(top));
  EXPECT_NE(::lstat(top.c_str(), &st), 0);
  EXPECT_EQ(::stat("/etc/passwd", &st), 0);
}

TEST(Artifacts, TooDeepATreeIsRefusedNotSkipped) {
  TempDir ws;
  std::string p = ws.path;
  for (int i = 0; i <= run::kMaxArtifactDepth + 1; ++i) {
    p += "/d";
    ASSERT_EQ(::mkdir(p.c_str(), 0755), 0) << i;
  }
  UniqueFd fd(::open(ws.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  Status st = run::hand_back_tree_at(fd.get(), ws.path, std::nullopt);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("directory levels"), std::string::npos) << st.error().message;
}

// ---- policies prepared ahead (run/policy_cache.h) ---------------------------

std::string policy_text(const std::string& name, const std::string& syscalls) {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: " + name +
         "\nspec:\n  mode: enforce\n  exec:\n    allow: [/usr/bin/true]\n  files:\n    read: [/usr/lib]\n"
         "  syscalls:\n    allow: [" +
         syscalls + "]\n";
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// check_request on `path`: the policy's name, whether its filter came
// prepared, and the step's outcome.
struct Checked {
  bool ok = false;
  std::string name;
  bool prepared_filter = false;
  size_t filter_size = 0;
};
Checked check(const std::string& path) {
  RunOptions opts;
  opts.policy = path;
  opts.command = {"/usr/bin/true"};
  RunResult res;
  std::ostringstream err;
  Run run(opts, res, err);
  Checked c;
  c.ok = static_cast<bool>(check_request(run));
  if (run.policy) c.name = run.policy->name;
  c.prepared_filter = run.seccomp_filter.has_value();
  if (run.seccomp_filter) c.filter_size = run.seccomp_filter->size();
  return c;
}

TEST(PolicyCache, APreparedPolicyIsWhatParsingCompilingAndBuildingGive) {
  TempDir dir;
  const std::string path = dir.path + "/p.yaml";
  const std::string text = policy_text("prepared-a", "io_uring");
  write_text(path, text);
  ASSERT_TRUE(prepare_policy(path));
  const PreparedPolicy* p = prepared_policy(path, text);
  ASSERT_NE(p, nullptr);
  auto parsed = policy::parse_policy(text, path);
  ASSERT_TRUE(parsed.ok());
  auto compiled = bpf::compile(*parsed.policy);
  ASSERT_TRUE(compiled);
  auto filter = build_seccomp_filter(parsed.policy->syscalls_allow);
  ASSERT_TRUE(filter);
  EXPECT_EQ(p->policy.name, "prepared-a");
  EXPECT_EQ(p->policy.source, path);
  EXPECT_EQ(p->compiled.paths.size(), compiled->paths.size());
  EXPECT_EQ(p->compiled.flags, compiled->flags);
  ASSERT_EQ(p->seccomp_filter.size(), filter->size());
  EXPECT_EQ(std::memcmp(p->seccomp_filter.data(), filter->data(), filter->size() * sizeof(sock_filter)), 0);

  // check_request takes it whole, filter included.
  const Checked c = check(path);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.name, "prepared-a");
  EXPECT_TRUE(c.prepared_filter);
  EXPECT_EQ(c.filter_size, filter->size());
}

TEST(PolicyCache, AChangedFileIsParsedAfreshNeverServedStale) {
  TempDir dir;
  const std::string path = dir.path + "/p.yaml";
  const std::string a = policy_text("version-a", "io_uring");
  const std::string b = policy_text("version-b", "io_uring, mount");
  write_text(path, a);
  ASSERT_TRUE(prepare_policy(path));
  EXPECT_NE(prepared_policy(path, a), nullptr);
  EXPECT_EQ(prepared_policy(path, b), nullptr);
  EXPECT_EQ(prepared_policy(dir.path + "/other.yaml", a), nullptr);

  // The file changes after it was prepared: the run reads version b.
  write_text(path, b);
  Checked c = check(path);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.name, "version-b");
  EXPECT_FALSE(c.prepared_filter);

  // Back to the prepared bytes: the entry serves again.
  write_text(path, a);
  c = check(path);
  EXPECT_EQ(c.name, "version-a");
  EXPECT_TRUE(c.prepared_filter);

  // An invalid file changed after preparing is refused, not served.
  write_text(path, "kind: Policy\nspec: [\n");
  c = check(path);
  EXPECT_FALSE(c.ok);
  // A removed file too.
  std::filesystem::remove(path);
  EXPECT_FALSE(check(path).ok);
}

// A policy is its file and the files it includes: a change to an included
// file is a change to the policy.
TEST(PolicyCache, AChangedIncludedFileIsParsedAfreshToo) {
  TempDir dir;
  const std::string base = dir.path + "/base.yaml", top = dir.path + "/top.yaml";
  write_text(base, policy_text("base", "io_uring"));
  const std::string top_text =
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: top}\ninclude: [base.yaml]\n";
  write_text(top, top_text);
  ASSERT_TRUE(prepare_policy(top));
  const PreparedPolicy* p = prepared_policy(top, top_text);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->policy.syscalls_allow, std::vector<std::string>{"io_uring"});
  EXPECT_TRUE(check(top).prepared_filter);

  write_text(base, policy_text("base", "io_uring, mount"));
  EXPECT_EQ(prepared_policy(top, top_text), nullptr);
  Checked c = check(top);
  EXPECT_TRUE(c.ok);
  EXPECT_FALSE(c.prepared_filter);

  std::filesystem::remove(base);
  EXPECT_EQ(prepared_policy(top, top_text), nullptr);
  EXPECT_FALSE(check(top).ok);
}

TEST(PolicyCache, WhatCannotBePreparedLeavesNoEntry) {
  TempDir dir;
  const std::string path = dir.path + "/bad.yaml";
  const std::string bad =
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: bad\nspec:\n  mode: sideways\n";
  write_text(path, bad);
  EXPECT_FALSE(prepare_policy(path));
  EXPECT_EQ(prepared_policy(path, bad), nullptr);
  EXPECT_FALSE(prepare_policy(dir.path + "/missing.yaml"));
  EXPECT_FALSE(prepare_policy(dir.path));  // a directory

  // A valid file prepared, then made invalid and prepared again: the old
  // entry is gone, not kept beside the error.
  const std::string good = policy_text("was-good", "io_uring");
  write_text(path, good);
  ASSERT_TRUE(prepare_policy(path));
  write_text(path, bad);
  EXPECT_FALSE(prepare_policy(path));
  EXPECT_EQ(prepared_policy(path, good), nullptr);
}

TEST(PolicyCache, TheCacheIsBounded) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> files;
  for (size_t i = 0; i <= kMaxPreparedPolicies; ++i) {
    const std::string path = dir.path + "/p" + std::to_string(i) + ".yaml";
    const std::string text = policy_text("bounded-" + std::to_string(i), "io_uring");
    write_text(path, text);
    ASSERT_TRUE(prepare_policy(path));
    files.emplace_back(path, text);
  }
  size_t held = 0;
  for (const auto& [path, text] : files) held += prepared_policy(path, text) != nullptr;
  EXPECT_LE(held, kMaxPreparedPolicies);
  EXPECT_NE(prepared_policy(files.back().first, files.back().second), nullptr);
}

}  // namespace
}  // namespace agentcage::run
