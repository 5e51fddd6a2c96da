// SPDX-License-Identifier: Apache-2.0
// Foundation enforcement, proven with real processes on a real kernel:
// a process in a scoped cgroup, and every descendant of it, cannot exec,
// cannot connect and cannot open files outside its allowed set, while the
// same operations keep working for processes outside the scope.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bpf/event_reader.h"
#include "bpf/record.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

using namespace kt;

class ScopedCgroupTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kSlot = 1;

  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    static std::atomic<uint64_t> next_scope{1000};
    scope_id_ = next_scope++;

    auto root = cgroup::find_cgroup2_root();
    ASSERT_TRUE(root.ok()) << root.error().message;
    root_ = *root;
    fs::path parent = root_ / "agentcage-kt";
    fs::create_directories(parent);
    auto cg = cgroup::Cgroup::create(root_, parent, "scope-" + std::to_string(scope_id_));
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    cg_ = std::move(cg).value();

    char tmpl[] = "/tmp/agentcage-kt-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "allowed" / "sub");
    fs::create_directories(dir_ / "secret");
    std::ofstream(dir_ / "allowed" / "ok.txt") << "ok\n";
    std::ofstream(dir_ / "allowed" / "sub" / "deep.txt") << "deep\n";
    std::ofstream(dir_ / "secret" / "secret.txt") << "secret\n";
    // Near-miss name: a prefix of "allowed" as a string, not as a directory.
    std::ofstream(dir_ / "allowed2.txt") << "no\n";
    fs::create_symlink(dir_ / "secret" / "secret.txt", dir_ / "allowed" / "link-to-secret");

    ASSERT_TRUE(install_policy(0).ok());
    auto st = kt::enforcer()->add_scope(kt::scope_cgroup(cg_), scope_id_, kSlot);
    ASSERT_TRUE(st.ok()) << st.error().message;
    scoped_ = true;
  }

  void TearDown() override {
    if (scoped_) {
      EXPECT_TRUE(kt::enforcer()->remove_scope(kt::scope_cgroup(cg_)).ok());
    }
    if (kt::enforcer()) (void)kt::enforcer()->remove_policy(kSlot);
    EXPECT_TRUE(cg_.remove().ok());
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Status install_policy(uint32_t flags) {
    // /usr is readable so that opening a program for exec passes file_open
    // and the exec tests really exercise the exec hook.
    std::vector<bpf::PathRule> rules{{(dir_ / "allowed").string(), AC_ACCESS_READ}, {"/usr", AC_ACCESS_READ}};
    return kt::enforcer()->put_policy(kSlot, rules, flags);
  }

  // Run fn as a process started inside the scoped cgroup; its exit code.
  int run_scoped(const std::function<int()>& fn) { return run_in(cg_.fd(), fn); }

  static int run_in(int cgroup_fd, const std::function<int()>& fn) { return run_in_cgroup(cgroup_fd, fn); }

  // Run fn in a plain child of the test process (outside every scope).
  static int run_unscoped(const std::function<int()>& fn) { return in_child(false, fn); }

  uint64_t denials(ac_hook hook) {
    auto c = kt::enforcer()->counters(kSlot);
    EXPECT_TRUE(c.ok());
    return c ? c->hooks[hook].decisions[AC_DECISION_DENY] : 0;
  }

  std::string path(const char* rel) const { return (dir_ / rel).string(); }

  // Decision records for this test's scope currently in the ring buffer.
  std::vector<ac_event_decision> drain_events() {
    std::vector<ac_event_decision> out;
    auto reader = bpf::EventReader::create(kt::enforcer()->events_fd(), [&](const ac_event_decision& e) {
      if (e.scope_id == scope_id_) out.push_back(e);
    });
    EXPECT_TRUE(reader.ok());
    if (reader) {
      EXPECT_TRUE((*reader)->poll(0).ok());
    }
    return out;
  }

  fs::path root_;
  cgroup::Cgroup cg_;
  fs::path dir_;
  uint64_t scope_id_ = 0;
  bool scoped_ = false;
};

// ---- exec -------------------------------------------------------------------

TEST_F(ScopedCgroupTest, ExecIsDeniedInTheScope) {
  uint64_t before = denials(AC_HOOK_EXEC);
  EXPECT_EQ(run_scoped([] { return try_exec("/usr/bin/true"); }), kDenied);
  // The program file itself was readable: the exec hook made the denial.
  EXPECT_EQ(denials(AC_HOOK_EXEC), before + 1);
  EXPECT_EQ(run_scoped([] { return try_open("/usr/bin/true", O_RDONLY); }), kOk);
}

TEST_F(ScopedCgroupTest, ExecIsDeniedInAGrandchild) {
  uint64_t before = denials(AC_HOOK_EXEC);
  EXPECT_EQ(run_scoped([] { return in_child(false, [] { return try_exec("/bin/true"); }); }), kDenied);
  EXPECT_EQ(denials(AC_HOOK_EXEC), before + 1);
}

TEST_F(ScopedCgroupTest, ExecIsDeniedInAGrandchildAfterSetsid) {
  // A new session detaches from the terminal and process group, not from the
  // cgroup: the scope still holds.
  uint64_t before = denials(AC_HOOK_EXEC);
  EXPECT_EQ(run_scoped([] {
              return in_child(true, [] { return in_child(true, [] { return try_exec("/bin/true"); }); });
            }),
            kDenied);
  EXPECT_EQ(denials(AC_HOOK_EXEC), before + 1);
}

TEST_F(ScopedCgroupTest, ExecIsDeniedInADescendantCgroup) {
  auto sub = cgroup::Cgroup::create(root_, cg_.path(), "nested");
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  auto subsub = cgroup::Cgroup::create(root_, sub->path(), "deeper");
  ASSERT_TRUE(subsub.ok()) << subsub.error().message;
  uint64_t before = denials(AC_HOOK_EXEC);
  EXPECT_EQ(run_in(sub->fd(), [] { return try_exec("/bin/true"); }), kDenied);
  EXPECT_EQ(run_in(subsub->fd(), [] { return in_child(true, [] { return try_exec("/bin/true"); }); }),
            kDenied);
  EXPECT_EQ(denials(AC_HOOK_EXEC), before + 2);
  EXPECT_TRUE(subsub->remove().ok());
  EXPECT_TRUE(sub->remove().ok());
}

TEST_F(ScopedCgroupTest, ExecOfAScriptIsDenied) {
  std::string script = path("allowed/run.sh");
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  ::chmod(script.c_str(), 0755);
  uint64_t before = denials(AC_HOOK_EXEC);
  EXPECT_EQ(run_scoped([&] { return try_exec(script.c_str()); }), kDenied);
  EXPECT_EQ(denials(AC_HOOK_EXEC), before + 1);
}

// ---- connect ----------------------------------------------------------------

TEST_F(ScopedCgroupTest, TcpConnectIsDenied) {
  auto listener = Listener::tcp();
  ASSERT_TRUE(listener.has_value());
  uint16_t port = listener->port();
  uint64_t before = denials(AC_HOOK_SOCKET_CONNECT);
  EXPECT_EQ(run_scoped([port] { return tcp_connect_loopback(port); }), kDenied);
  EXPECT_EQ(run_scoped([port] { return in_child(true, [port] { return tcp_connect_loopback(port); }); }),
            kDenied);
  EXPECT_EQ(denials(AC_HOOK_SOCKET_CONNECT), before + 2);
}

TEST_F(ScopedCgroupTest, UnixConnectIsDenied) {
  std::string sock = path("allowed/listener.sock");
  auto listener = Listener::unix_at(sock);
  ASSERT_TRUE(listener.has_value());
  EXPECT_EQ(run_scoped([&] { return unix_connect(sock); }), kDenied);
}

// ---- files ------------------------------------------------------------------

TEST_F(ScopedCgroupTest, AllowedFileOpensAndOutsideFileIsDenied) {
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/ok.txt"), O_RDONLY); }), kOk);
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/sub/deep.txt"), O_RDONLY); }), kOk);
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed"), O_RDONLY | O_DIRECTORY); }), kOk);
  EXPECT_EQ(run_scoped([&] { return try_open(path("secret/secret.txt"), O_RDONLY); }), kDenied);
  EXPECT_EQ(run_scoped([] { return try_open("/etc/passwd", O_RDONLY); }), kDenied);
  EXPECT_EQ(run_scoped([&] {
              return in_child(true, [&] { return try_open(path("secret/secret.txt"), O_RDONLY); });
            }),
            kDenied);
}

TEST_F(ScopedCgroupTest, ReadRuleDoesNotAllowWriting) {
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/ok.txt"), O_WRONLY); }), kDenied);
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/ok.txt"), O_RDWR); }), kDenied);
}

TEST_F(ScopedCgroupTest, PrefixMatchesWholeComponentsOnly) {
  // "<dir>/allowed2.txt" starts with the string "<dir>/allowed" but is not inside it.
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed2.txt"), O_RDONLY); }), kDenied);
}

TEST_F(ScopedCgroupTest, SymlinksAndDotDotDoNotBypassFileRules) {
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/link-to-secret"), O_RDONLY); }), kDenied);
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/../secret/secret.txt"), O_RDONLY); }), kDenied);
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/sub/../../secret/secret.txt"), O_RDONLY); }),
            kDenied);
}

// ---- outside the scope --------------------------------------------------------

TEST_F(ScopedCgroupTest, ProcessesOutsideTheScopeAreUntouched) {
  auto listener = Listener::tcp();
  ASSERT_TRUE(listener.has_value());
  uint16_t port = listener->port();
  std::string sock = path("allowed/listener.sock");
  auto ulistener = Listener::unix_at(sock);
  ASSERT_TRUE(ulistener.has_value());

  EXPECT_EQ(run_unscoped([] { return try_exec("/bin/true"); }), kOk);
  EXPECT_EQ(run_unscoped([port] { return tcp_connect_loopback(port); }), kOk);
  EXPECT_EQ(run_unscoped([&] { return unix_connect(sock); }), kOk);
  EXPECT_EQ(run_unscoped([&] { return try_open(path("secret/secret.txt"), O_RDONLY); }), kOk);
  EXPECT_EQ(run_unscoped([] { return try_open("/etc/passwd", O_RDONLY); }), kOk);
  // A sibling cgroup next to the scope is not covered by it.
  auto sibling =
      cgroup::Cgroup::create(root_, cg_.path().parent_path(), "sibling-" + std::to_string(scope_id_));
  ASSERT_TRUE(sibling.ok()) << sibling.error().message;
  EXPECT_EQ(run_in(sibling->fd(), [] { return try_exec("/bin/true"); }), kOk);
  EXPECT_EQ(run_in(sibling->fd(), [&] { return try_open(path("secret/secret.txt"), O_RDONLY); }), kOk);
  EXPECT_TRUE(sibling->remove().ok());
}

TEST_F(ScopedCgroupTest, RemovingTheScopeLiftsEnforcement) {
  EXPECT_EQ(run_scoped([] { return try_exec("/bin/true"); }), kDenied);
  ASSERT_TRUE(kt::enforcer()->remove_scope(kt::scope_cgroup(cg_)).ok());
  scoped_ = false;
  EXPECT_EQ(run_scoped([] { return try_exec("/bin/true"); }), kOk);
}

// ---- fail closed, accounting, audit -------------------------------------------

TEST_F(ScopedCgroupTest, ScopeWithoutPolicyFailsClosed) {
  ASSERT_TRUE(kt::enforcer()->remove_policy(kSlot).ok());
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/ok.txt"), O_RDONLY); }), kDenied);
  auto c = kt::enforcer()->counters(kSlot);
  ASSERT_TRUE(c.ok());
  EXPECT_GE(c->hooks[AC_HOOK_FILE_OPEN].reasons[AC_REASON_NO_POLICY], 1u);
}

// A record names its own decision's destination, also when the scope has no
// policy: never an address left in the per-CPU scratch by an earlier
// decision. Both probes run on CPU 0, so they share that scratch; the socket
// is made outside the scope (without a policy, socket() is denied too).
TEST_F(ScopedCgroupTest, ScopeWithoutPolicyReportsItsOwnDestination) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  auto connect_on_cpu0 = [fd](const char* addr, uint16_t port) {
    return [=] {
      cpu_set_t cpus;
      CPU_ZERO(&cpus);
      CPU_SET(0, &cpus);
      if (::sched_setaffinity(0, sizeof cpus, &cpus) != 0) return kOtherError;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      ::inet_pton(AF_INET, addr, &a.sin_addr);
      return result(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a));
    };
  };
  drain_events();
  EXPECT_EQ(run_scoped(connect_on_cpu0("127.0.0.1", 7)), kDenied);
  ASSERT_TRUE(kt::enforcer()->remove_policy(kSlot).ok());
  EXPECT_EQ(run_scoped(connect_on_cpu0("127.0.0.2", 9)), kDenied);
  ::close(fd);
  std::vector<std::string> targets;
  for (const auto& e : drain_events()) {
    if (e.hook != AC_HOOK_SOCKET_CONNECT) continue;
    targets.push_back(bpf::record_target(e));
    EXPECT_EQ(e.target_kind, AC_TARGET_INET);
    EXPECT_EQ(bpf::record_target(e), e.reason == AC_REASON_NO_POLICY ? "127.0.0.2:9" : "127.0.0.1:7");
  }
  EXPECT_EQ(targets.size(), 2u);
}

TEST_F(ScopedCgroupTest, DecisionsAreCountedAndReported) {
  drain_events();
  auto before = kt::enforcer()->counters(kSlot);
  ASSERT_TRUE(before.ok());
  std::string secret = path("secret/secret.txt");
  pid_t child_pid = 0;
  {
    auto pid = cgroup::spawn_in_cgroup(cg_.fd(), [&] { return try_open(secret, O_RDONLY); });
    ASSERT_TRUE(pid.ok());
    child_pid = *pid;
    auto st = cgroup::wait_for(*pid);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(exit_code(*st), kDenied);
  }
  EXPECT_EQ(run_scoped([&] { return try_open(path("allowed/ok.txt"), O_RDONLY); }), kOk);

  auto after = kt::enforcer()->counters(kSlot);
  ASSERT_TRUE(after.ok());
  const auto& b = before->hooks[AC_HOOK_FILE_OPEN];
  const auto& a = after->hooks[AC_HOOK_FILE_OPEN];
  EXPECT_GE(a.decisions[AC_DECISION_DENY] - b.decisions[AC_DECISION_DENY], 1u);
  EXPECT_GE(a.decisions[AC_DECISION_ALLOW] - b.decisions[AC_DECISION_ALLOW], 1u);
  EXPECT_GE(a.reasons[AC_REASON_DEFAULT_DENY] - b.reasons[AC_REASON_DEFAULT_DENY], 1u);

  auto events = drain_events();
  bool found = false;
  for (const auto& e : events) {
    if (e.hook != AC_HOOK_FILE_OPEN || e.pid != static_cast<uint32_t>(child_pid)) continue;
    found = true;
    EXPECT_EQ(e.decision, AC_DECISION_DENY);
    EXPECT_EQ(e.reason, AC_REASON_DEFAULT_DENY);
    EXPECT_EQ(e.error, -EACCES);
    EXPECT_EQ(e.target_kind, AC_TARGET_PATH);
    EXPECT_EQ(std::string(e.target, e.target_len), secret);
    EXPECT_EQ(e.hdr.cgroup_id, cg_.id());
  }
  EXPECT_TRUE(found) << "no file_open denial event for pid " << child_pid << " among " << events.size();
}

TEST_F(ScopedCgroupTest, ConnectDenialReportsTheAddress) {
  auto listener = Listener::tcp();
  ASSERT_TRUE(listener.has_value());
  uint16_t port = listener->port();
  drain_events();
  EXPECT_EQ(run_scoped([port] { return tcp_connect_loopback(port); }), kDenied);
  bool found = false;
  for (const auto& e : drain_events()) {
    if (e.hook != AC_HOOK_SOCKET_CONNECT) continue;
    found = true;
    EXPECT_EQ(e.target_kind, AC_TARGET_INET);
    EXPECT_EQ(e.family, AF_INET);
    EXPECT_EQ(e.port, port);
    EXPECT_EQ(e.protocol, IPPROTO_TCP);
    const uint8_t loopback[4] = {127, 0, 0, 1};
    EXPECT_EQ(std::memcmp(e.addr, loopback, 4), 0);
  }
  EXPECT_TRUE(found);
}

TEST_F(ScopedCgroupTest, AuditModeAllowsButReports) {
  ASSERT_TRUE(install_policy(AC_POLICY_F_AUDIT).ok());
  drain_events();
  EXPECT_EQ(run_scoped([&] { return try_open(path("secret/secret.txt"), O_RDONLY); }), kOk);
  EXPECT_EQ(run_scoped([] { return try_exec("/bin/true"); }), kOk);
  int audited = 0;
  for (const auto& e : drain_events()) {
    EXPECT_EQ(e.decision, AC_DECISION_AUDIT);
    EXPECT_EQ(e.error, 0);
    ++audited;
  }
  EXPECT_GE(audited, 2);
}

}  // namespace
}  // namespace agentcage
