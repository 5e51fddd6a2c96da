// SPDX-License-Identifier: Apache-2.0
// Bindings (`attach:` in the daemon's configuration) end to end, with the
// real daemon binary, emulating what systemd does when it starts a unit:
// mkdir the unit's cgroup, then clone3(CLONE_INTO_CGROUP) its process into it
// at once. The process's very first operation must already be confined,
// even with the daemon frozen (SIGSTOP): the kernel confines the cgroup in
// the mkdir itself. Then a restart of the unit (rmdir, mkdir: a new cgroup),
// a restart of the daemon, a cgroup that existed (with a process) before its
// binding, a binding whose policy is missing, and an unbound sibling.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "daemon_env.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The first thing a process started in `cg` does: exec `program` (it may
// run only what the policy allows). The errno of a refused exec, else the
// program's exit status + 1000.
int first_exec_in(const cgroup::Cgroup& cg, const std::string& program) {
  const int status = run_in_cgroup(cg.fd(), [&]() -> int {
    char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>("/etc/hostname"), nullptr};
    ::execv(program.c_str(), argv);
    return errno;
  });
  return status > 0 && status < 100 ? status : 1000 + status;
}

// A UDP socket made by a process in `cg`: 0 or the errno.
int udp_socket_in(const cgroup::Cgroup& cg) {
  return run_in_cgroup(cg.fd(), []() -> int {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
  });
}

std::optional<bpf::ScopeInfo> scope_of(uint64_t cgroup_id) {
  auto e = bpf::Enforcer::open_shared();
  if (!e) return std::nullopt;
  auto scopes = (*e)->scopes();
  if (!scopes) return std::nullopt;
  for (const auto& s : *scopes)
    if (s.cgroup_id == cgroup_id) return s;
  return std::nullopt;
}

json binding_status(const std::string& name) {
  for (const auto& b : status().value("bindings", json::array()))
    if (b.value("binding", "") == name) return b;
  return json::object();
}

class Binding : public DaemonEnv {
 protected:
  void SetUp() override {
    DaemonEnv::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    parent_ = "ac-bind-" + std::to_string(::getpid());
    ASSERT_TRUE(fs::create_directory(root_ / parent_));
    fs::create_directories(dir_ / "ws");
    // The unit bound to dtest, one that existed before the daemon (below),
    // one whose policy is missing.
    std::ofstream(dir_ / "daemon.yaml", std::ios::app)
        << "attach:\n"
        << "  - {cgroup: " << unit() << ", policy: dtest, workspace: " << (dir_ / "ws").string() << "}\n"
        << "  - {cgroup: " << early() << ", policy: dtest, workspace: " << (dir_ / "ws").string() << "}\n"
        << "  - {cgroup: " << orphan() << ", policy: nosuchpolicy, workspace: " << (dir_ / "ws").string() << "}\n";
  }

  void TearDown() override {
    DaemonEnv::TearDown();
    if (parent_.empty()) return;  // skipped
    // Bindings outlive the daemon by design: take them out of the shared set.
    if (auto e = bpf::Enforcer::open_shared())
      for (const auto& path : {unit(), early(), orphan()}) (void)(*e)->remove_binding("/" + path);
    for (const char* name : {"unit", "early", "orphan", "sibling"}) {
      fs::path p = root_ / parent_ / name;
      if (fs::exists(p)) (void)cgroup::remove_tree(p);
    }
    std::error_code ec;
    fs::remove(root_ / parent_, ec);
    if (auto e = bpf::Enforcer::open_shared())
      if (auto scopes = (*e)->scopes())
        for (const auto& s : *scopes)
          if (s.flags & AC_SCOPE_F_BOUND) (void)(*e)->remove_scope({-1, s.cgroup_id, 0});
  }

  std::string unit() const { return parent_ + "/unit"; }
  std::string early() const { return parent_ + "/early"; }
  std::string orphan() const { return parent_ + "/orphan"; }

  std::string parent_;
};

TEST_F(Binding, ABoundCgroupIsConfinedFromItsFirstInstructionAcrossRestarts) {
  // A process running in the early cgroup before the daemon binds it.
  auto early_cg = cgroup::Cgroup::create(root_, root_ / parent_, "early");
  ASSERT_TRUE(early_cg) << early_cg.error().message;
  auto sleeper = cgroup::spawn_in_cgroup(early_cg->fd(), []() -> int {
    ::pause();
    return 0;
  });
  ASSERT_TRUE(sleeper);
  ASSERT_EQ(open_in(*early_cg, "/etc/passwd"), 0) << "not confined before the binding";

  start_daemon();
  ASSERT_TRUE(wait_until([&] { return binding_status(unit()).value("state", "") == "absent"; }, 30s))
      << status().dump() << log();

  // The early cgroup: confined now, LATE, and said so.
  EXPECT_EQ(binding_status(early()).value("state", ""), "confined") << status().dump();
  EXPECT_EQ(open_in(*early_cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(*early_cg, "/etc/hostname"), 0);
  EXPECT_NE(log().find("binding " + early() + " "), std::string::npos) << log();
  EXPECT_NE(log().find("confined LATE: processes were already running in it unconfined"), std::string::npos)
      << log();
  EXPECT_EQ(scrape("agentcage_binding_late_total{binding=\"" + early() + "\"}"), 1);
  EXPECT_EQ(scrape("agentcage_binding_unconfined{binding=\"" + early() + "\"}"), 0);

  // systemd starts the unit with the daemon frozen: only the kernel is there.
  ASSERT_EQ(::kill(daemon_.pid, SIGSTOP), 0);
  auto unit_cg = cgroup::Cgroup::create(root_, root_ / parent_, "unit");
  ASSERT_TRUE(unit_cg) << unit_cg.error().message;
  EXPECT_EQ(open_in(*unit_cg, "/etc/passwd"), EACCES) << "the first operation ran unconfined";
  EXPECT_EQ(first_exec_in(*unit_cg, "/usr/bin/id"), EACCES) << "a program the policy does not name ran";
  EXPECT_EQ(open_in(*unit_cg, "/etc/hostname"), 0) << "the policy's allowed operation failed";
  EXPECT_EQ(first_exec_in(*unit_cg, "/usr/bin/cat"), 1000) << "the policy's allowed program did not run";
  // Until the daemon attaches the receive filter, no UDP socket.
  EXPECT_EQ(udp_socket_in(*unit_cg), EACCES);
  auto first = scope_of(unit_cg->id());
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->flags & AC_SCOPE_F_BOUND);
  EXPECT_TRUE(first->flags & AC_SCOPE_F_INCOMPLETE);
  EXPECT_EQ(first->workspace, (dir_ / "ws").string());
  // An unbound sibling is left alone.
  auto sibling = cgroup::Cgroup::create(root_, root_ / parent_, "sibling");
  ASSERT_TRUE(sibling) << sibling.error().message;
  EXPECT_EQ(open_in(*sibling, "/etc/passwd"), 0);
  EXPECT_FALSE(scope_of(sibling->id()));
  ASSERT_EQ(::kill(daemon_.pid, SIGCONT), 0);

  // The daemon completes the scope: UDP sockets are made again.
  ASSERT_TRUE(wait_until([&] { return udp_socket_in(*unit_cg) == 0; }, 30s)) << log();
  EXPECT_FALSE(scope_of(unit_cg->id())->flags & AC_SCOPE_F_INCOMPLETE);
  EXPECT_EQ(binding_status(unit()).value("state", ""), "confined");
  EXPECT_GE(scrape("agentcage_binding_confined_total{binding=\"" + unit() + "\"}"), 1);

  // A restart of the unit: its cgroup goes and a new one comes.
  const uint64_t old_id = unit_cg->id();
  ASSERT_TRUE(unit_cg->remove().ok());
  auto again = cgroup::Cgroup::create(root_, root_ / parent_, "unit");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_NE(again->id(), old_id);
  EXPECT_EQ(open_in(*again, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(*again, "/etc/hostname"), 0);
  // The old cgroup's scope goes with it.
  EXPECT_TRUE(wait_until([&] { return !scope_of(old_id).has_value(); }, 30s)) << log();

  // A restarted daemon keeps it as it is.
  stop_daemon(SIGTERM);
  EXPECT_EQ(open_in(*again, "/etc/passwd"), EACCES) << "a stopped daemon lifted the binding";
  start_daemon();
  ASSERT_TRUE(wait_until([&] { return binding_status(unit()).value("state", "") == "confined"; }, 30s))
      << status().dump();
  EXPECT_EQ(binding_status(unit()).value("cgroup_id", uint64_t{0}), again->id());
  EXPECT_EQ(open_in(*again, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(*again, "/etc/hostname"), 0);
  EXPECT_EQ(udp_socket_in(*again), 0);
  // A unit made after the restart is confined as before.
  ASSERT_TRUE(again->remove().ok());
  auto third = cgroup::Cgroup::create(root_, root_ / parent_, "unit");
  ASSERT_TRUE(third);
  EXPECT_EQ(open_in(*third, "/etc/passwd"), EACCES);

  ::kill(*sleeper, SIGKILL);
  (void)cgroup::wait_for(*sleeper);
}

TEST_F(Binding, ABindingWhosePolicyIsMissingDeniesEverything) {
  start_daemon();
  ASSERT_TRUE(wait_until([&] { return binding_status(orphan()).value("state", "") == "absent"; }, 30s))
      << status().dump();
  EXPECT_FALSE(binding_status(orphan()).value("policy_applies", true));
  EXPECT_NE(log().find("policy nosuchpolicy is not loaded"), std::string::npos) << log();
  auto cg = cgroup::Cgroup::create(root_, root_ / parent_, "orphan");
  ASSERT_TRUE(cg) << cg.error().message;
  EXPECT_EQ(open_in(*cg, "/etc/hostname"), EACCES) << "a binding without its policy left it open";
  EXPECT_EQ(first_exec_in(*cg, "/usr/bin/cat"), EACCES);
  auto scope = scope_of(cg->id());
  ASSERT_TRUE(scope);
  EXPECT_EQ(scope->policy_slot, uint32_t{AC_SLOT_NONE});

  // The policy appears: the bound cgroup gets it (hot reload).
  write_file(dir_ / "policies" / "nosuchpolicy.yaml",
             std::string(dtest_policy(false)).replace(dtest_policy(false).find("name: dtest"), 11,
                                                      "name: nosuchpolicy"));
  EXPECT_TRUE(wait_until([&] { return open_in(*cg, "/etc/hostname") == 0; }, 30s)) << log();
  EXPECT_EQ(open_in(*cg, "/etc/passwd"), EACCES);
  // Deleted again: fails closed again.
  fs::remove(dir_ / "policies" / "nosuchpolicy.yaml");
  EXPECT_TRUE(wait_until([&] { return open_in(*cg, "/etc/hostname") == EACCES; }, 30s)) << log();
  if (auto e = bpf::Enforcer::open_shared())
    if (auto pols = (*e)->policies())
      for (const auto& p : *pols)
        if (p.name == "nosuchpolicy") (void)(*e)->remove_policy(p.slot);
}

}  // namespace
}  // namespace agentcage::kt
