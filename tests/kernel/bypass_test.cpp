// SPDX-License-Identifier: Apache-2.0
// The bypass classes of the policy issue, one test each, on a real kernel:
// every way around a rule that the design claims to close is tried from a
// scoped process and must be denied, next to a positive control that must
// keep working (so a test cannot pass because everything is broken), with
// the denial's hook and reason checked in the slot's counters.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bpf/compile.h"
#include "bpf/record.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "policy/policy.h"
#include "policy_fixture.h"
#include "probes.h"
#include "uring.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

std::string policy_yaml(const std::string& spec) {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-bypass\nspec:\n" + spec;
}

std::string read_text(const std::string& file) {
  std::ifstream in(file);
  std::string s;
  std::getline(in, s);
  return s;
}

// A sysctl set for the duration of a test (the VM is thrown away, but the
// tests may also run on a real host).
class SysctlOverride {
 public:
  SysctlOverride(std::string file, const std::string& value)
      : file_(std::move(file)), old_(read_text(file_)) {
    std::ofstream(file_) << value << "\n";
  }
  ~SysctlOverride() {
    if (!old_.empty()) std::ofstream(file_) << old_ << "\n";
  }
  SysctlOverride(const SysctlOverride&) = delete;
  SysctlOverride& operator=(const SysctlOverride&) = delete;

 private:
  std::string file_, old_;
};

// ---- io_uring without liburing: one SQE on a fresh ring ----------------------

// Exit code of a scoped probe whose io_uring could not be set up; the test
// then fails and says so (never passes because io_uring was unavailable).
constexpr int kUringUnavailable = 60;

// A uring result as a probe code: >= 0 ok, -EACCES denied.
int uring_code(int setup_err, int res) {
  if (setup_err) return kUringUnavailable;
  return res >= 0 ? kOk : classify(-res);
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int uring_connect(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  sockaddr_in a = loopback(port);
  io_uring_sqe sqe{};
  sqe.opcode = IORING_OP_CONNECT;
  sqe.fd = s;
  sqe.addr = reinterpret_cast<uint64_t>(&a);
  sqe.off = sizeof a;  // addrlen
  int res = 0;
  int err = uring_one(sqe, 0, &res);
  ::close(s);
  return uring_code(err, res);
}

int uring_sendmsg_udp(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  sockaddr_in a = loopback(port);
  char byte = 'u';
  int res = 0;
  int err = uring_sendmsg(s, &a, sizeof a, &byte, 1, &res);
  ::close(s);
  return uring_code(err, res);
}

int uring_openat(const std::string& path, unsigned setup_flags) {
  io_uring_sqe sqe{};
  sqe.opcode = IORING_OP_OPENAT;
  sqe.fd = AT_FDCWD;
  sqe.addr = reinterpret_cast<uint64_t>(path.c_str());
  sqe.open_flags = O_RDONLY | O_CLOEXEC;
  int res = 0;
  int err = uring_one(sqe, setup_flags, &res);
  if (!err && res >= 0) ::close(res);
  return uring_code(err, res);
}

// A bound UDP socket on loopback: *port gets its port.
int udp_bound(uint16_t* port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  return s;
}

// Bytes waiting on a non-blocking datagram socket (0 when none).
ssize_t pending_datagram(int s) {
  char buf[16];
  ssize_t n = ::recv(s, buf, sizeof buf, MSG_DONTWAIT);
  return n < 0 ? 0 : n;
}

// Accept one pending connection without blocking: the fd, or -1.
int accept_now(int listener) {
  ::fcntl(listener, F_SETFL, ::fcntl(listener, F_GETFL) | O_NONBLOCK);
  return ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
}

// ---- the fixture ---------------------------------------------------------------

class BypassTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 3;
  BypassTest() : PolicyScopeTest(kSlot, "bp") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(base_ / "allowed");
    std::ofstream(base_ / "allowed" / "ok.txt") << "ok\n";
    std::ofstream(base_ / "secret.txt") << "secret\n";
  }

  // Install a policy `spec`, then scope the cgroup.
  void apply(const std::string& spec) { apply_yaml(policy_yaml(spec), ws_.string()); }
};

// ---- 1. io_uring -------------------------------------------------------------------

// Operations submitted through io_uring run in the kernel on the submitter's
// behalf (inline, from io-wq workers or the SQPOLL thread), not through the
// connect/sendmsg/openat system calls. They must meet the same LSM hooks.
// kernel.io_uring_disabled (6.6+): 2 turns io_uring off for everyone, 1
// leaves it to CAP_SYS_ADMIN (the tests run as root). Enable it for the
// test when it is 2.
std::unique_ptr<SysctlOverride> enable_io_uring() {
  if (read_text("/proc/sys/kernel/io_uring_disabled") != "2") return nullptr;
  return std::make_unique<SysctlOverride>("/proc/sys/kernel/io_uring_disabled", "0");
}

void require_io_uring() {
  std::string disabled = read_text("/proc/sys/kernel/io_uring_disabled");  // 6.6+
  int code = in_child(false, [] { return uring_openat("/proc/self/status", 0); });
  ASSERT_EQ(code, kOk) << "io_uring does not work even outside the scope (kernel.io_uring_disabled="
                       << (disabled.empty() ? "n/a" : disabled) << "), so these tests cannot show anything";
}

TEST_F(BypassTest, IoUringConnectAndSendmsgAreDecidedLikeTheSyscalls) {
  auto enabled = enable_io_uring();
  ASSERT_NO_FATAL_FAILURE(require_io_uring());
  uint16_t allowed_port = 0, denied_port = 0, udp_ok_port = 0, udp_no_port = 0;
  int l_ok = listen_tcp(AF_INET, &allowed_port), l_no = listen_tcp(AF_INET, &denied_port);
  int u_ok = udp_bound(&udp_ok_port), u_no = udp_bound(&udp_no_port);
  ASSERT_TRUE(l_ok >= 0 && l_no >= 0 && u_ok >= 0 && u_no >= 0);
  ASSERT_NO_FATAL_FAILURE(apply("  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" +
                                std::to_string(allowed_port) +
                                "], protocol: tcp}\n      - {cidr: 127.0.0.1/32, ports: [" +
                                std::to_string(udp_ok_port) + "], protocol: udp}\n"));
  // The denied destinations work for an unscoped process: the denial below is the policy's.
  EXPECT_EQ(in_child(false, [&] { return uring_connect(denied_port); }), kOk);
  int c = accept_now(l_no);
  ASSERT_GE(c, 0);
  ::close(c);

  uint64_t connect_before = denied(AC_HOOK_SOCKET_CONNECT), send_before = denied(AC_HOOK_SOCKET_SEND);
  int code = scoped([&] { return uring_connect(denied_port); });
  EXPECT_EQ(code, kDenied) << (code == kUringUnavailable ? "io_uring setup failed inside the scope" : "");
  EXPECT_EQ(denied(AC_HOOK_SOCKET_CONNECT), connect_before + 1);
  EXPECT_LT(accept_now(l_no), 0) << "a denied io_uring connect reached the listener";
  EXPECT_EQ(scoped([&] { return uring_connect(allowed_port); }), kOk);
  c = accept_now(l_ok);
  EXPECT_GE(c, 0) << "the allowed io_uring connect did not reach the listener";
  if (c >= 0) ::close(c);

  EXPECT_EQ(scoped([&] { return uring_sendmsg_udp(udp_no_port); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_SEND), send_before + 1);
  EXPECT_EQ(pending_datagram(u_no), 0) << "a denied io_uring sendmsg was delivered";
  EXPECT_EQ(scoped([&] { return uring_sendmsg_udp(udp_ok_port); }), kOk);
  EXPECT_EQ(pending_datagram(u_ok), 1);
  for (int fd : {l_ok, l_no, u_ok, u_no}) ::close(fd);
}

TEST_F(BypassTest, IoUringOpenatIsDecidedLikeOpen) {
  auto enabled = enable_io_uring();
  ASSERT_NO_FATAL_FAILURE(require_io_uring());
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  std::string ok = base("allowed/ok.txt"), secret = base("secret.txt");
  uint64_t before = denied(AC_HOOK_FILE_OPEN);
  // Inline/io-wq submission, and the SQPOLL kernel thread doing the open.
  for (unsigned flags : {0u, static_cast<unsigned>(IORING_SETUP_SQPOLL)}) {
    SCOPED_TRACE(flags ? "SQPOLL" : "plain ring");
    int code = scoped([&] { return uring_openat(secret, flags); });
    EXPECT_EQ(code, kDenied) << (code == kUringUnavailable ? "io_uring setup failed inside the scope" : "");
    EXPECT_EQ(scoped([&] { return uring_openat(ok, flags); }), kOk);
  }
  EXPECT_EQ(denied(AC_HOOK_FILE_OPEN), before + 2);
}

// ---- 2. TCP fast open ------------------------------------------------------------

// sendto(MSG_FASTOPEN) connects inside sendmsg: there is no connect() call
// for socket_connect to see, so socket_sendmsg must check the address of a
// stream socket too. TCP_FASTOPEN_CONNECT defers the SYN to the first write,
// but the connect() call itself still names the destination.
TEST_F(BypassTest, TcpFastOpenIsDecidedByDestination) {
  SysctlOverride enable("/proc/sys/net/ipv4/tcp_fastopen", "3");  // client and server
  uint16_t allowed_port = 0, denied_port = 0;
  int l_ok = listen_tcp(AF_INET, &allowed_port), l_no = listen_tcp(AF_INET, &denied_port);
  ASSERT_TRUE(l_ok >= 0 && l_no >= 0);
  ASSERT_NO_FATAL_FAILURE(apply("  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" +
                                std::to_string(allowed_port) + "], protocol: tcp}\n"));
  auto sendto_fastopen = [](uint16_t port) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return kOtherError;
    sockaddr_in a = loopback(port);
    ssize_t n = ::sendto(s, "f", 1, MSG_FASTOPEN, reinterpret_cast<sockaddr*>(&a), sizeof a);
    int r = n == 1 ? kOk : classify(errno);
    ::close(s);
    return r;
  };
  auto fastopen_connect = [](uint16_t port) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s < 0 || ::setsockopt(s, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof one) != 0)
      return kOtherError;
    sockaddr_in a = loopback(port);
    int r = result(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a));
    if (r == kOk && ::write(s, "c", 1) != 1) r = kOtherError;
    ::close(s);
    return r;
  };
  // Unscoped, both reach the "denied" listener.
  EXPECT_EQ(in_child(false, [&] { return sendto_fastopen(denied_port); }), kOk);
  EXPECT_EQ(in_child(false, [&] { return fastopen_connect(denied_port); }), kOk);
  for (int i = 0; i < 2; ++i) {
    int c = accept_now(l_no);
    EXPECT_GE(c, 0);
    if (c >= 0) ::close(c);
  }

  uint64_t send_before = denied(AC_HOOK_SOCKET_SEND), connect_before = denied(AC_HOOK_SOCKET_CONNECT);
  EXPECT_EQ(scoped([&] { return sendto_fastopen(denied_port); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_SEND), send_before + 1);
  EXPECT_EQ(scoped([&] { return fastopen_connect(denied_port); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_SOCKET_CONNECT), connect_before + 1);
  EXPECT_LT(accept_now(l_no), 0) << "a denied fast-open connection reached the listener";

  EXPECT_EQ(scoped([&] { return sendto_fastopen(allowed_port); }), kOk);
  EXPECT_EQ(scoped([&] { return fastopen_connect(allowed_port); }), kOk);
  for (const char* what : {"sendto(MSG_FASTOPEN)", "TCP_FASTOPEN_CONNECT"}) {
    int c = accept_now(l_ok);
    EXPECT_GE(c, 0) << "the allowed " << what << " connection did not arrive";
    if (c >= 0) ::close(c);
  }
  ::close(l_ok);
  ::close(l_no);
}

// ---- 3. memfd, execveat, fexecve ---------------------------------------------------

// exec is decided by the file being executed. A byte-identical copy of an
// allowed program in a memfd is a different file; executing it by fd or by
// /proc/self/fd is denied, while execveat of the allowed program itself (by
// directory fd or O_PATH fd) works. Files are readable everywhere here, so
// file_open cannot be what denies: the exec hook does.
TEST_F(BypassTest, MemfdAndExecveatAreDecidedByIdentity) {
  ASSERT_NO_FATAL_FAILURE(apply("  exec:\n    allow: [/usr/bin/true]\n  files:\n    read: [/]\n"));
  char* const argv[] = {const_cast<char*>("true"), nullptr};
  char* const envp[] = {nullptr};
  // A memfd holding a copy of /usr/bin/true; -1 on failure.
  auto memfd_copy = [] {
    int fd = ::memfd_create("agentcage-true", 0);
    int in = ::open("/usr/bin/true", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || in < 0) return -1;
    char buf[8192];
    ssize_t n;
    while ((n = ::read(in, buf, sizeof buf)) > 0)
      if (::write(fd, buf, static_cast<size_t>(n)) != n) return -1;
    ::close(in);
    return n == 0 ? fd : -1;
  };
  // The memfd copy itself is a working program outside the scope.
  EXPECT_EQ(in_child(false,
                     [&] {
                       int fd = memfd_copy();
                       return fd < 0 ? kOtherError : run_exec([&] {
                         ::syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
                       });
                     }),
            kOk);

  uint64_t before = denied(AC_HOOK_EXEC), default_before = reason(AC_HOOK_EXEC, AC_REASON_DEFAULT_DENY);
  EXPECT_EQ(scoped([&] {
              int fd = memfd_copy();
              return fd < 0 ? kOtherError
                            : run_exec([&] { ::syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH); });
            }),
            kDenied);
  EXPECT_EQ(scoped([&] {
              int fd = memfd_copy();
              return fd < 0 ? kOtherError : run_exec([&] { ::fexecve(fd, argv, envp); });
            }),
            kDenied);
  EXPECT_EQ(scoped([&] {
              int fd = memfd_copy();
              std::string proc = "/proc/self/fd/" + std::to_string(fd);
              return fd < 0 ? kOtherError : run_exec([&] { ::execve(proc.c_str(), argv, envp); });
            }),
            kDenied);
  EXPECT_EQ(denied(AC_HOOK_EXEC), before + 3);
  EXPECT_EQ(reason(AC_HOOK_EXEC, AC_REASON_DEFAULT_DENY), default_before + 3);

  // execveat relative to a directory fd: the allowed program runs, a denied one does not.
  EXPECT_EQ(scoped([&] {
              int dir = ::open("/usr/bin", O_PATH | O_DIRECTORY | O_CLOEXEC);
              return dir < 0 ? kOtherError
                             : run_exec([&] { ::syscall(SYS_execveat, dir, "true", argv, envp, 0); });
            }),
            kOk);
  EXPECT_EQ(scoped([&] {
              int dir = ::open("/usr/bin", O_PATH | O_DIRECTORY | O_CLOEXEC);
              return dir < 0 ? kOtherError
                             : run_exec([&] { ::syscall(SYS_execveat, dir, "false", argv, envp, 0); });
            }),
            kDenied);
  // The allowed program by O_PATH fd (what fexecve of the real file does).
  EXPECT_EQ(scoped([&] {
              int fd = ::open("/usr/bin/true", O_PATH);
              return fd < 0 ? kOtherError
                            : run_exec([&] { ::syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH); });
            }),
            kOk);
  EXPECT_EQ(denied(AC_HOOK_EXEC), before + 4);
}

// ---- 4. the dynamic loader ---------------------------------------------------------

// "ld.so PROGRAM" maps PROGRAM itself instead of exec'ing it, so the exec
// hook only ever sees the loader. Every file involved is readable here; only
// exec.allow decides. The allowed program still starts normally (the kernel
// maps its interpreter, which needs no exec permission of its own).
TEST_F(BypassTest, DynamicLoaderCannotRunPrograms) {
  const std::string loader = "/lib64/ld-linux-x86-64.so.2";
  ASSERT_TRUE(fs::exists(loader)) << loader << " missing: this test is written for x86-64 glibc";
  ASSERT_NO_FATAL_FAILURE(
      apply("  exec:\n    allow: [/usr/bin/true]\n  files:\n"
            "    read: [/usr/lib, /usr/lib64, /usr/bin, /etc/ld.so.cache]\n"));
  // Outside the scope the loader runs programs fine.
  EXPECT_EQ(in_child(false, [&] { return run_program({loader, "/usr/bin/true"}); }), kOk);
  uint64_t before = denied(AC_HOOK_EXEC);
  EXPECT_EQ(scoped([] { return run_program("/usr/bin/true"); }), kOk);
  EXPECT_EQ(scoped([] { return run_program("/usr/bin/false"); }), kDenied);
  EXPECT_EQ(scoped([&] { return run_program({loader, "/usr/bin/false"}); }), kDenied);
  // Not even for an allowed program: the loader is not in exec.allow.
  EXPECT_EQ(scoped([&] { return run_program({loader, "/usr/bin/true"}); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_EXEC), before + 3);
}

// ---- 5. abstract unix sockets --------------------------------------------------------

// Abstract names have no file, so path rules cannot see them: they are
// matched as exact names (not prefixes) among the policy's abstract rules.
TEST_F(BypassTest, AbstractUnixSocketsByExactName) {
  std::string tag = "agentcage-kt-" + std::to_string(::getpid()) + "-";
  std::string ok = tag + "ok", dgram_ok = tag + "dgram-ok";
  auto l_ok = Listener::unix_abstract(ok, SOCK_STREAM);
  auto l_other = Listener::unix_abstract(tag + "other", SOCK_STREAM);
  auto l_longer = Listener::unix_abstract(ok + "x", SOCK_STREAM);    // the allowed name is a prefix of it
  auto l_shorter = Listener::unix_abstract(tag + "o", SOCK_STREAM);  // a prefix of the allowed name
  auto d_ok = Listener::unix_abstract(dgram_ok, SOCK_DGRAM);
  auto d_other = Listener::unix_abstract(tag + "dgram-other", SOCK_DGRAM);
  ASSERT_TRUE(l_ok && l_other && l_longer && l_shorter && d_ok && d_other);
  ASSERT_NO_FATAL_FAILURE(
      apply("  network:\n    allow:\n      - unix: \"@" + ok + "\"\n      - unix: \"@" + dgram_ok + "\"\n"));
  // Outside the scope every one of them is reachable.
  EXPECT_EQ(in_child(false, [&] { return unix_connect_abstract(tag + "other"); }), kOk);
  EXPECT_EQ(in_child(false, [&] { return unix_sendto_abstract(tag + "dgram-other"); }), kOk);

  uint64_t before = denied(AC_HOOK_UNIX_CONNECT);
  uint64_t default_before = reason(AC_HOOK_UNIX_CONNECT, AC_REASON_DEFAULT_DENY);
  EXPECT_EQ(scoped([&] { return unix_connect_abstract(ok); }), kOk);
  EXPECT_EQ(scoped([&] { return unix_connect_abstract(tag + "other"); }), kDenied);
  EXPECT_EQ(scoped([&] { return unix_connect_abstract(ok + "x"); }), kDenied);
  EXPECT_EQ(scoped([&] { return unix_connect_abstract(tag + "o"); }), kDenied);
  EXPECT_EQ(scoped([&] { return unix_sendto_abstract(dgram_ok); }), kOk);
  EXPECT_EQ(scoped([&] { return unix_sendto_abstract(tag + "dgram-other"); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_UNIX_CONNECT), before + 4);
  EXPECT_EQ(reason(AC_HOOK_UNIX_CONNECT, AC_REASON_DEFAULT_DENY), default_before + 4);

  // The records tell an abstract name from a socket bound at a path, even one
  // that reads the same: by target_kind, and by the '@' of the decoded target.
  const std::string fs_path = base("fs.sock");
  auto l_fs = Listener::unix_at(fs_path);
  auto l_fs_named = Listener::unix_abstract(fs_path, SOCK_STREAM);
  ASSERT_TRUE(l_fs && l_fs_named);
  EXPECT_EQ(scoped([&] { return unix_connect(fs_path); }), kDenied);
  EXPECT_EQ(scoped([&] { return unix_connect_abstract(fs_path); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_UNIX_CONNECT), before + 6);

  auto report = enforcer()->scope_report(cg_.id());
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_LE(report->records_taken, static_cast<uint32_t>(AC_REPORT_RECORDS)) << "a record was not kept";
  std::map<std::string, const ac_event_decision*> by_target;
  for (const auto& r : report->records) {
    if (r.hook != AC_HOOK_UNIX_CONNECT) continue;
    EXPECT_EQ(r.family, AF_UNIX);
    EXPECT_EQ(r.port, 0) << "port is the inet port only";
    by_target[bpf::record_target(r)] = &r;
  }
  const std::pair<std::string, uint8_t> expected[] = {{"@" + tag + "other", AC_TARGET_UNIX_ABSTRACT},
                                                      {"@" + ok + "x", AC_TARGET_UNIX_ABSTRACT},
                                                      {"@" + tag + "o", AC_TARGET_UNIX_ABSTRACT},
                                                      {"@" + tag + "dgram-other", AC_TARGET_UNIX_ABSTRACT},
                                                      {fs_path, AC_TARGET_UNIX},
                                                      {"@" + fs_path, AC_TARGET_UNIX_ABSTRACT}};
  for (const auto& [target, kind] : expected) {
    auto it = by_target.find(target);
    ASSERT_NE(it, by_target.end()) << "no unix_connect record with target " << target;
    const ac_event_decision& r = *it->second;
    EXPECT_EQ(r.target_kind, kind) << target;
    EXPECT_EQ(r.decision, AC_DECISION_DENY);
    EXPECT_EQ(r.reason, AC_REASON_DEFAULT_DENY);
    const auto j = bpf::record_json(r);
    EXPECT_EQ(j["target"], target);
    EXPECT_EQ(j["target_kind"], kind == AC_TARGET_UNIX ? "unix" : "unix_abstract") << target;
    EXPECT_EQ(j["errno"], EACCES);
  }
}

// ---- 6. long and deep paths ------------------------------------------------------------

size_t components(const fs::path& p) {
  size_t n = 0;
  for (const auto& c : p.relative_path())
    if (!c.empty()) ++n;
  return n;
}

// Deeper than AC_PATH_MAX_DEPTH components: the walk cannot see the whole
// path, so it is denied (reason PATH_TOO_DEEP) even under an allowed prefix.
// Exactly AC_PATH_MAX_DEPTH components still resolves.
TEST_F(BypassTest, PathsDeeperThanTheWalkAreDenied) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  fs::path dir = base_ / "allowed";
  // Directories until a file directly inside has AC_PATH_MAX_DEPTH components.
  while (components(dir) + 1 < AC_PATH_MAX_DEPTH) dir /= "d";
  fs::create_directories(dir / "d");
  std::ofstream(dir / "f") << "64\n";
  std::ofstream(dir / "d" / "f") << "65\n";
  std::string at_limit = (dir / "f").string(), too_deep = (dir / "d" / "f").string();
  ASSERT_EQ(components(at_limit), static_cast<size_t>(AC_PATH_MAX_DEPTH));
  ASSERT_LT(too_deep.size() + 1, static_cast<size_t>(AC_PATH_KEY_MAX))
      << "keep this test about depth, not length";

  uint64_t deep_before = reason(AC_HOOK_FILE_OPEN, AC_REASON_PATH_TOO_DEEP);
  EXPECT_EQ(scoped([&] { return try_open(at_limit, O_RDONLY); }), kOk);
  EXPECT_EQ(scoped([&] { return try_open(too_deep, O_RDONLY); }), kDenied);
  // Reached relative to a deep working directory: the same file, the same answer.
  EXPECT_EQ(scoped([&] { return ::chdir(dir.c_str()) == 0 ? try_open("d/f", O_RDONLY) : kOtherError; }),
            kDenied);
  EXPECT_EQ(reason(AC_HOOK_FILE_OPEN, AC_REASON_PATH_TOO_DEEP), deep_before + 2);
}

// Longer than the AC_PATH_KEY_MAX bytes of an LPM key. Every absolute rule
// fits in those bytes, so whether a rule is a prefix of the path is decided
// by its first AC_PATH_KEY_MAX bytes: a long path under an allowed prefix is
// allowed, under a deny prefix or outside every rule denied. Inside the
// workspace the path is matched again without the workspace prefix, and a
// workspace rule may be longer than what is left of the key: such paths are
// denied (PATH_TOO_LONG), never matched on a truncated key, so a long
// workspace deny rule cannot be skipped.
TEST_F(BypassTest, LongPathsNeverMatchByTruncation) {
  const std::string a(120, 'a'), b(120, 'b');
  // A workspace deny rule that fits a key on its own but not after the workspace path.
  std::string deep_rel = "/" + std::string(110, 'x') + "/" + std::string(110, 'y') + "/deny";
  ASSERT_LE(deep_rel.size() + 1, static_cast<size_t>(AC_PATH_KEY_MAX));
  ASSERT_GT(ws_.string().size() + deep_rel.size() + 1, static_cast<size_t>(AC_PATH_KEY_MAX));
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") +
                                "]\n    write: [\"${workspace}\"]\n" + "    deny: [" +
                                base("allowed/denied") + ", \"${workspace}" + deep_rel + "\"]\n"));
  for (const char* top : {"allowed", "allowed/denied", "outside"}) {
    fs::create_directories(base_ / top / a / b);
    std::ofstream(base_ / top / a / b / "f.txt") << "long\n";
  }
  fs::create_directories(ws_.string() + deep_rel);
  std::string in_allowed = base("allowed/" + a + "/" + b + "/f.txt");
  std::string in_denied = base("allowed/denied/" + a + "/" + b + "/f.txt");
  std::string outside = base("outside/" + a + "/" + b + "/f.txt");
  ASSERT_GT(in_allowed.size(), static_cast<size_t>(AC_PATH_KEY_MAX));

  auto before = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(scoped([&] { return try_open(in_allowed, O_RDONLY); }), kOk);
  EXPECT_EQ(scoped([&] { return try_open(in_denied, O_RDONLY); }), kDenied);
  EXPECT_EQ(scoped([&] { return try_open(outside, O_RDONLY); }), kDenied);
  auto after = hook(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(after.reasons[AC_REASON_RULE_DENY], before.reasons[AC_REASON_RULE_DENY] + 1);
  EXPECT_EQ(after.reasons[AC_REASON_DEFAULT_DENY], before.reasons[AC_REASON_DEFAULT_DENY] + 1);

  // The workspace: short paths as usual, the long deny rule holds, and a
  // long path is not resolved by a truncated workspace-relative key.
  std::string denied_file = ws_.string() + deep_rel + "/f.txt";
  std::string sibling =
      ws_.string() + "/" + std::string(110, 'x') + "/" + std::string(110, 'y') + "/other.txt";
  ASSERT_GT(sibling.size(), static_cast<size_t>(AC_PATH_KEY_MAX));
  auto create = [](const std::string& p) {
    int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return classify(errno);
    ::close(fd);
    return kOk;
  };
  before = hook(AC_HOOK_FILE_CHANGE);
  EXPECT_EQ(scoped([&] { return create(ws("short.txt")); }), kOk);
  EXPECT_EQ(scoped([&] { return create(denied_file); }), kDenied);
  EXPECT_FALSE(fs::exists(denied_file));
  EXPECT_EQ(scoped([&] { return create(sibling); }), kDenied);
  after = hook(AC_HOOK_FILE_CHANGE);
  EXPECT_EQ(after.reasons[AC_REASON_PATH_TOO_LONG], before.reasons[AC_REASON_PATH_TOO_LONG] + 2);
  EXPECT_EQ(after.reasons[AC_REASON_PATH_TOO_DEEP], before.reasons[AC_REASON_PATH_TOO_DEEP]);
}

// Paths whose text runs past the key or whose components run past the
// dentry ring must not wrap around in them: <a long prefix>/usr/bin/true
// would otherwise resolve to /usr/bin/true and run as the allowed program
// (on 6.1 the depth bound was dead code: see ac_walk_state in path.bpf.h).
// The prefix is built so that "/usr" starts exactly at byte 256 of the
// path, where an unbounded copy masked to the key would wrap. A scoped
// process cannot build it inside its workspace either: the rename that
// would make the prefix long is a too-long workspace path.
TEST_F(BypassTest, LongPathsCannotWrapIntoAnAllowedPath) {
  ASSERT_NO_FATAL_FAILURE(
      apply("  exec:\n    allow: [/usr/bin/true]\n  files:\n"
            "    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache]\n    write: [\"${workspace}\"]\n"));
  // <outside>/<pad1>/<pad2> is exactly 256 bytes.
  auto padded = [](const fs::path& top) {
    std::string p1(200, 'p');
    size_t used = top.string().size() + 1 + p1.size() + 1;
    return top / p1 / std::string(256 - used, 'q');
  };
  fs::path outside = padded(base_ / "outside");
  ASSERT_EQ(outside.string().size(), 256u);
  fs::create_directories(outside / "usr" / "bin");
  std::string fake = (outside / "usr" / "bin" / "true").string();
  fs::copy_file("/usr/bin/true", fake);
  fs::permissions(fake, fs::perms::owner_all);
  EXPECT_EQ(in_child(false, [&] { return run_program(fake); }), kOk);  // it is a working program

  uint64_t before = denied(AC_HOOK_EXEC);
  EXPECT_EQ(scoped([&] { return try_open(fake, O_RDONLY); }), kDenied);
  EXPECT_EQ(scoped([&] { return run_program(fake); }), kDenied);
  // Deep instead of long: 70 one-letter components ending in usr/bin/true.
  fs::path deep = base_ / "outside";
  for (int k = 0; k < 70; ++k) deep /= "z";
  fs::create_directories(deep / "usr" / "bin");
  std::string deep_fake = (deep / "usr" / "bin" / "true").string();
  fs::copy_file("/usr/bin/true", deep_fake);
  fs::permissions(deep_fake, fs::perms::owner_all);
  EXPECT_EQ(scoped([&] { return run_program(deep_fake); }), kDenied);
  EXPECT_GE(denied(AC_HOOK_EXEC) + denied(AC_HOOK_FILE_OPEN), before + 2);

  // The same built by the scoped process in its workspace.
  fs::path ws_long = padded(ws_);
  std::string staged = ws("x"), target = ws_long.string();
  EXPECT_EQ(scoped([&] {
              std::error_code ec;
              fs::create_directories(staged + "/usr/bin", ec);
              if (ec) return kOtherError;
              fs::copy_file("/usr/bin/true", staged + "/usr/bin/true", ec);
              if (ec || ::chmod((staged + "/usr/bin/true").c_str(), 0700) != 0) return kOtherError;
              if (::mkdir(ws_long.parent_path().c_str(), 0700) != 0) return kOtherError;
              return result(::rename(staged.c_str(), target.c_str()));
            }),
            kDenied);
  EXPECT_FALSE(fs::exists(target));
}

// ---- 7. /proc/self/root, /proc/self/fd, hard links --------------------------------------

// A file is matched by the dentry reached, whatever the name: the magic
// links in /proc lead to the same file and the same decision. O_PATH opens
// are not file opens (no data access), but turning one into a real open
// through /proc/self/fd is. An fd handed in from outside the scope does not
// let the scope re-open the file either.
TEST_F(BypassTest, ProcSelfRootAndFdReopenAreDecidedByTheFile) {
  ASSERT_NO_FATAL_FAILURE(apply("  files:\n    read: [" + base("allowed") + "]\n"));
  std::string ok = base("allowed/ok.txt"), secret = base("secret.txt");
  uint64_t before = denied(AC_HOOK_FILE_OPEN);
  EXPECT_EQ(scoped([&] { return try_open("/proc/self/root" + ok, O_RDONLY); }), kOk);
  EXPECT_EQ(scoped([&] { return try_open("/proc/self/root" + secret, O_RDONLY); }), kDenied);
  // Another process's root link is not even followed (hook proc).
  const uint64_t proc_before = denied(AC_HOOK_PROC);
  EXPECT_EQ(scoped([&] { return try_open("/proc/1/root" + ok, O_RDONLY); }), kDenied);
  EXPECT_EQ(denied(AC_HOOK_PROC) - proc_before, 1u);
  // O_PATH handle, then a real open through /proc/self/fd.
  EXPECT_EQ(scoped([&] {
              int fd = ::open(secret.c_str(), O_PATH | O_CLOEXEC);
              if (fd < 0) return kOtherError;  // O_PATH itself is not a data access
              return try_open("/proc/self/fd/" + std::to_string(fd), O_RDONLY);
            }),
            kDenied);
  // A read-only fd of an allowed file cannot be re-opened for writing.
  EXPECT_EQ(scoped([&] {
              int fd = ::open(ok.c_str(), O_RDONLY | O_CLOEXEC);
              if (fd < 0) return kOtherError;
              std::string proc = "/proc/self/fd/" + std::to_string(fd);
              int ro = try_open(proc, O_RDONLY);
              int rw = try_open(proc, O_RDWR);
              return ro == kOk ? rw : kOtherError;
            }),
            kDenied);
  // An fd of the secret inherited from the (unscoped) parent.
  int inherited = ::open(secret.c_str(), O_RDONLY);  // no O_CLOEXEC: the scoped child gets it
  ASSERT_GE(inherited, 0);
  std::string proc = "/proc/self/fd/" + std::to_string(inherited);
  EXPECT_EQ(scoped([&] { return try_open(proc, O_RDONLY); }), kDenied);
  ::close(inherited);
  EXPECT_EQ(denied(AC_HOOK_FILE_OPEN), before + 4);
}

// A hard link is a new name for the same file. Creating one for a file the
// scope may not write, inside the writable workspace, would let the run
// reach the file through a workspace name: every way to create one is a
// write of the linked file and denied.
TEST_F(BypassTest, HardLinksOfDeniedFilesIntoTheWorkspaceAreDenied) {
  ASSERT_NO_FATAL_FAILURE(
      apply("  files:\n    read: [" + base("allowed") + "]\n    write: [\"${workspace}\"]\n"));
  std::string secret = base("secret.txt"), ok = base("allowed/ok.txt");
  // Outside the scope, root can link by O_PATH fd (AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH).
  EXPECT_EQ(in_child(false,
                     [&] {
                       int fd = ::open(secret.c_str(), O_PATH | O_CLOEXEC);
                       int r = result(::linkat(fd, "", AT_FDCWD, ws("control").c_str(), AT_EMPTY_PATH));
                       ::unlink(ws("control").c_str());
                       return r;
                     }),
            kOk);
  uint64_t before = denied(AC_HOOK_FILE_CHANGE);
  EXPECT_EQ(scoped([&] { return result(::link(secret.c_str(), ws("l1").c_str())); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::link(ok.c_str(), ws("l2").c_str())); }), kDenied);  // read-only file
  EXPECT_EQ(scoped([&] {
              int fd = ::open(secret.c_str(), O_PATH | O_CLOEXEC);
              if (fd < 0) return kOtherError;
              return result(::linkat(fd, "", AT_FDCWD, ws("l3").c_str(), AT_EMPTY_PATH));
            }),
            kDenied);
  EXPECT_EQ(scoped([&] {
              int fd = ::open(secret.c_str(), O_PATH | O_CLOEXEC);
              if (fd < 0) return kOtherError;
              std::string proc = "/proc/self/fd/" + std::to_string(fd);
              return result(::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, ws("l4").c_str(), AT_SYMLINK_FOLLOW));
            }),
            kDenied);
  EXPECT_EQ(denied(AC_HOOK_FILE_CHANGE), before + 4);
  for (const char* l : {"l1", "l2", "l3", "l4"}) EXPECT_FALSE(fs::exists(ws_ / l)) << l;
  // Links inside the workspace are ordinary workspace writes.
  std::ofstream(ws_ / "mine.txt") << "mine\n";
  EXPECT_EQ(scoped([&] { return result(::link(ws("mine.txt").c_str(), ws("mine-too.txt").c_str())); }), kOk);
}

}  // namespace
}  // namespace agentcage
