// SPDX-License-Identifier: Apache-2.0
// YAML policies compiled into the maps and enforced on a real kernel: each
// rule kind, allowed and denied, and the bypasses the design closes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "bpf/compile.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "policy/policy.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

using namespace kt;

class PolicyTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 2;
  PolicyTest() : PolicyScopeTest(kSlot, "pt") {}

  void SetUp() override {
    PolicyScopeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(ws_ / ".git" / "hooks");
    fs::create_directories(base_ / "outside");
    std::ofstream(base_ / "outside" / "data.txt") << "data\n";
  }

  // Install `yaml` (a whole policy document), then scope the cgroup with it.
  void apply(const std::string& yaml) { apply_yaml(yaml, ws_.string()); }
};

constexpr const char* kRuntime = "    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache]\n";

std::string policy_yaml(const std::string& spec) {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt\nspec:\n" + spec;
}

TEST_F(PolicyTest, WorkspaceIsWritableAndNothingElse) {
  ASSERT_NO_FATAL_FAILURE(
      apply(policy_yaml("  files:\n    write: [\"${workspace}\"]\n    deny: [\"${workspace}/.git/hooks\"]\n" +
                        std::string("    read: [") + base_.string() + "/outside]\n")));
  EXPECT_EQ(
      scoped([&] { return result(::open(ws("new.txt").c_str(), O_CREAT | O_WRONLY, 0600) >= 0 ? 0 : -1); }),
      kOk);
  EXPECT_EQ(scoped([&] { return result(::mkdir(ws("dir").c_str(), 0700)); }), kOk);
  EXPECT_EQ(scoped([&] { return result(::rename(ws("new.txt").c_str(), ws("dir/moved.txt").c_str())); }),
            kOk);
  EXPECT_EQ(scoped([&] { return result(::unlink(ws("dir/moved.txt").c_str())); }), kOk);
  // read-only rule: readable, not writable, not creatable
  EXPECT_EQ(scoped([&] { return result(::open(base("outside/data.txt").c_str(), O_RDONLY) >= 0 ? 0 : -1); }),
            kOk);
  EXPECT_EQ(scoped([&] { return result(::open(base("outside/data.txt").c_str(), O_WRONLY) >= 0 ? 0 : -1); }),
            kDenied);
  EXPECT_EQ(scoped([&] {
              return result(::open(base("outside/x").c_str(), O_CREAT | O_WRONLY, 0600) >= 0 ? 0 : -1);
            }),
            kDenied);
  EXPECT_EQ(scoped([&] { return result(::unlink(base("outside/data.txt").c_str())); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::truncate(base("outside/data.txt").c_str(), 0)); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::chmod(base("outside/data.txt").c_str(), 0777)); }), kDenied);
  // moving data out of the workspace, or a read-only file in, is a write on both names
  std::ofstream(ws_ / "w.txt") << "w\n";
  EXPECT_EQ(scoped([&] { return result(::rename(ws("w.txt").c_str(), base("outside/w.txt").c_str())); }),
            kDenied);
  EXPECT_EQ(scoped([&] { return result(::link(base("outside/data.txt").c_str(), ws("hard").c_str())); }),
            kDenied);
  // deny wins inside the writable workspace
  EXPECT_EQ(
      scoped([&] {
        return result(::open(ws(".git/hooks/pre-commit").c_str(), O_CREAT | O_WRONLY, 0700) >= 0 ? 0 : -1);
      }),
      kDenied);
  EXPECT_EQ(fs::exists(base_ / "outside" / "data.txt"), true);
  EXPECT_EQ(fs::file_size(base_ / "outside" / "data.txt"), 5u);
}

// files.deny's name patterns deny a secret anywhere by its name: every
// component of the path the kernel resolved is looked at, so a file under a
// denied directory, a symlink to a denied name and a second name the run
// would make (link, rename) are denied too; other names are untouched.
TEST_F(PolicyTest, NamePatternsDenySecretsAnywhereByName) {
  const fs::path project = base_ / "outside" / "project";
  fs::create_directories(project / "sub" / "deep");
  fs::create_directories(project / ".ssh");
  for (const char* f : {".env", "sub/deep/.env", "cert.pem", "cert.pem.bak", ".envrc", "app.py",
                        ".ssh/id_rsa", "dist.tar.gz", "dist.gz", "my.env"})
    std::ofstream(project / f) << "secret\n";
  std::ofstream(ws_ / ".env") << "in the workspace\n";
  std::ofstream(ws_ / "notes.txt") << "notes\n";
  fs::create_symlink(project / ".env", ws_ / "innocent-link");
  fs::create_hard_link(project / ".env", base_ / "outside" / "host-made-hard-link");
  ASSERT_NO_FATAL_FAILURE(
      apply(policy_yaml("  files:\n    read: [" + base_.string() +
                        "/outside]\n    write: [\"${workspace}\"]\n"
                        "    deny: [\"**/.env\", \"**/*.pem\", \"**/.ssh\", \"**/*.tar.gz\"]\n")));
  auto open_ro = [&](const fs::path& p) {
    return scoped([p] { return result(::open(p.c_str(), O_RDONLY) >= 0 ? 0 : -1); });
  };
  // the legitimate case: other names, names that only look alike
  for (const char* f : {"app.py", "cert.pem.bak", ".envrc", "dist.gz", "my.env"})
    EXPECT_EQ(open_ro(project / f), kOk) << f;
  EXPECT_EQ(open_ro(ws_ / "notes.txt"), kOk);
  // denied by name at any depth, a directory's name covering what is under it
  for (const char* f : {".env", "sub/deep/.env", "cert.pem", ".ssh/id_rsa", "dist.tar.gz"})
    EXPECT_EQ(open_ro(project / f), kDenied) << f;
  EXPECT_EQ(open_ro(ws_ / ".env"), kDenied);
  // metadata too, and the way there stays open
  struct stat st {};
  EXPECT_EQ(scoped([&] { return result(::stat((project / ".env").c_str(), &st)); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::stat((project / ".ssh").c_str(), &st)); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::stat((project / "app.py").c_str(), &st)); }), kOk);
  // a symlink ends at the real file, whose name is denied
  EXPECT_EQ(open_ro(ws_ / "innocent-link"), kDenied);
  // no new secret in the workspace, and no second name for one
  EXPECT_EQ(
      scoped([&] { return result(::open(ws("new.pem").c_str(), O_CREAT | O_WRONLY, 0600) >= 0 ? 0 : -1); }),
      kDenied);
  EXPECT_EQ(scoped([&] { return result(::mkdir(ws(".ssh").c_str(), 0700)); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::rename(ws(".env").c_str(), ws("plain").c_str())); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::link(ws(".env").c_str(), ws("plain").c_str())); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::rename(ws("notes.txt").c_str(), ws("x.pem").c_str())); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::unlink(ws(".env").c_str())); }), kDenied);
  EXPECT_FALSE(fs::exists(ws_ / "new.pem"));
  EXPECT_TRUE(fs::exists(ws_ / ".env"));
  EXPECT_TRUE(fs::exists(ws_ / "notes.txt"));
  // the documented limit: a hard link the host made under another name is
  // another name (the run cannot make one: link() above)
  EXPECT_EQ(open_ro(base_ / "outside" / "host-made-hard-link"), kOk);
}

TEST_F(PolicyTest, OnlyAllowedProgramsRunByIdentity) {
  ASSERT_NO_FATAL_FAILURE(apply(policy_yaml("  exec:\n    allow: [/usr/bin/true]\n  files:\n" +
                                            std::string(kRuntime) + "    write: [\"${workspace}\"]\n")));
  EXPECT_EQ(scoped([] { return run_program("/usr/bin/true"); }), kOk);
  EXPECT_EQ(scoped([] { return run_program("/usr/bin/false"); }), kDenied);
  // a copy of an allowed program is not the allowed program
  fs::copy_file("/usr/bin/true", ws_ / "true");
  fs::permissions(ws_ / "true", fs::perms::owner_all);
  EXPECT_EQ(scoped([&] { return run_program(ws("true")); }), kDenied);
  // a symlink to a denied program does not make it allowed; one to an allowed program works
  fs::create_symlink("/usr/bin/false", ws_ / "link-false");
  fs::create_symlink("/usr/bin/true", ws_ / "link-true");
  EXPECT_EQ(scoped([&] { return run_program(ws("link-false")); }), kDenied);
  EXPECT_EQ(scoped([&] { return run_program(ws("link-true")); }), kOk);
}

// exec.allow of a directory: every program installed under it runs (and
// what they start from there), never a program the run wrote or copied,
// nor one outside the directory.
TEST_F(PolicyTest, ADirectoryOfProgramsRunsItsProgramsAndNothingTheRunWrote) {
  ASSERT_NO_FATAL_FAILURE(apply(policy_yaml("  exec:\n    allow: [/usr/bin]\n  files:\n" +
                                            std::string(kRuntime) + "    write: [\"${workspace}\"]\n")));
  EXPECT_EQ(scoped([] { return run_program("/usr/bin/true"); }), kOk);
  EXPECT_EQ(scoped([] { return run_program(std::vector<std::string>{"/usr/bin/env", "true"}); }), kOk);
  // a program outside the directory
  const std::string outside =
      fs::exists("/usr/sbin/ldconfig") ? "/usr/sbin/ldconfig" : "/usr/lib/klibc/bin/true";
  ASSERT_TRUE(fs::exists(outside)) << "no program outside /usr/bin to try";
  EXPECT_EQ(scoped([&] { return run_program(outside); }), kDenied);
  // a copy of an allowed program, and a script, written into the workspace
  fs::copy_file("/usr/bin/true", ws_ / "true");
  fs::permissions(ws_ / "true", fs::perms::owner_all);
  std::ofstream(ws_ / "script.sh") << "#!/usr/bin/sh\nexit 0\n";
  fs::permissions(ws_ / "script.sh", fs::perms::owner_all);
  EXPECT_EQ(scoped([&] { return run_program(ws("true")); }), kDenied);
  EXPECT_EQ(scoped([&] { return run_program(ws("script.sh")); }), kDenied);
  // the workspace's own copy, reached through a symlink placed in /usr/bin's stead
  fs::create_symlink(ws_ / "true", ws_ / "looks-like-usr-bin");
  EXPECT_EQ(scoped([&] { return run_program(ws("looks-like-usr-bin")); }), kDenied);
}

TEST_F(PolicyTest, ExecutableMappingsOfWritableFilesAreDenied) {
  ASSERT_NO_FATAL_FAILURE(
      apply(policy_yaml(std::string("  files:\n") + kRuntime + "    write: [\"${workspace}\"]\n")));
  std::ofstream(ws_ / "code.bin") << std::string(4096, '\xc3');
  EXPECT_EQ(scoped([&] {
              int fd = ::open(ws("code.bin").c_str(), O_RDONLY);
              if (fd < 0) return kOtherError;
              void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
              return p == MAP_FAILED ? classify(errno) : kOk;
            }),
            kDenied);
  EXPECT_EQ(scoped([&] {
              int fd = ::open(ws("code.bin").c_str(), O_RDONLY);
              void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
              if (p == MAP_FAILED) return kOtherError;
              return result(::mprotect(p, 4096, PROT_READ | PROT_EXEC));
            }),
            kDenied);
  // a library under a read-only rule maps fine
  EXPECT_EQ(scoped([] {
              int fd = ::open("/etc/ld.so.cache", O_RDONLY);
              if (fd < 0) return kOtherError;
              void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
              return p == MAP_FAILED ? classify(errno) : kOk;
            }),
            kOk);
}

TEST_F(PolicyTest, NetworkAllowlistByAddressPortAndProtocol) {
  uint16_t port4 = 0, port6 = 0;
  int l4 = listen_tcp(AF_INET, &port4);
  int l6 = listen_tcp(AF_INET6, &port6);
  ASSERT_NO_FATAL_FAILURE(
      apply(policy_yaml("  network:\n    allow:\n      - {cidr: 127.0.0.1/32, ports: [" +
                        std::to_string(port4) + "], protocol: tcp}\n      - {cidr: ::1/128, ports: [" +
                        std::to_string(port6) + "], protocol: tcp}\n")));
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET, "127.0.0.1", port4); }), kOk);
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET, "127.0.0.2", port4); }), kDenied);
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET, "127.0.0.1", port6); }), kDenied);
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET6, "::1", port6); }), kOk);
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET6, "::1", port4); }), kDenied);
  // IPv4-mapped IPv6 is the IPv4 address: same rule, same answer
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET6, "::ffff:127.0.0.1", port4); }), kOk);
  EXPECT_EQ(scoped([&] { return tcp_connect(AF_INET6, "::ffff:127.0.0.1", port6); }), kDenied);
  // the tcp rule does not allow udp to the same port; sendto without connect is checked
  EXPECT_EQ(scoped([&] { return udp_sendto(port4); }), kDenied);
  // raw and packet sockets
  EXPECT_EQ(scoped([] { return ::socket(AF_INET, SOCK_RAW, IPPROTO_ICMP) >= 0 ? kOk : classify(errno); }),
            kDenied);
  EXPECT_EQ(scoped([] { return ::socket(AF_PACKET, SOCK_RAW, 0) >= 0 ? kOk : classify(errno); }), kDenied);
  ::close(l4);
  ::close(l6);
}

TEST_F(PolicyTest, UnixSocketsByIdentity) {
  std::string allowed = base("allowed.sock"), other = base("other.sock");
  auto bind_unix = [](const std::string& p) {
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
    ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(s, 8);
    return s;
  };
  int s1 = bind_unix(allowed), s2 = bind_unix(other);
  fs::create_symlink(other, ws_ / "alias.sock");
  ASSERT_NO_FATAL_FAILURE(apply(policy_yaml("  network:\n    allow:\n      - {unix: " + allowed + "}\n")));
  EXPECT_EQ(scoped([&] { return unix_connect(allowed); }), kOk);
  EXPECT_EQ(scoped([&] { return unix_connect(other); }), kDenied);
  EXPECT_EQ(scoped([&] { return unix_connect(ws("alias.sock")); }), kDenied);
  ::close(s1);
  ::close(s2);
}

TEST_F(PolicyTest, ScopeCannotBeLeft) {
  ASSERT_NO_FATAL_FAILURE(apply(policy_yaml("  files:\n    read: [/sys]\n")));
  // clone3 into the root cgroup through an O_PATH fd (file_open never sees it)
  std::string root = root_.string();
  EXPECT_EQ(scoped([&] {
              int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY);
              if (fd < 0) return kOtherError;
              clone_args args{};
              args.flags = CLONE_INTO_CGROUP;
              args.exit_signal = SIGCHLD;
              args.cgroup = static_cast<uint64_t>(fd);
              long pid = ::syscall(SYS_clone3, &args, sizeof args);
              if (pid == 0) ::_exit(0);
              if (pid > 0) {
                ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
                return kOk;
              }
              return classify(errno);
            }),
            kDenied);
  // cgroupfs stays closed even under a read rule that covers it
  std::string procs = (root_ / "cgroup.procs").string();
  EXPECT_EQ(scoped([&] { return result(::open(procs.c_str(), O_WRONLY) >= 0 ? 0 : -1); }), kDenied);
  EXPECT_EQ(scoped([&] { return result(::open(root.c_str(), O_RDONLY | O_DIRECTORY) >= 0 ? 0 : -1); }),
            kDenied);
  // no new user namespace (capabilities inside it would allow mounts, chroot)
  EXPECT_EQ(scoped([] { return result(::unshare(CLONE_NEWUSER)); }), kDenied);
}

TEST_F(PolicyTest, PolicySwapTakesEffectAtomically) {
  ASSERT_NO_FATAL_FAILURE(
      apply(policy_yaml(std::string("  files:\n    read: [") + base_.string() + "/outside]\n")));
  EXPECT_EQ(scoped([&] { return result(::open(base("outside/data.txt").c_str(), O_RDONLY) >= 0 ? 0 : -1); }),
            kOk);
  ASSERT_NO_FATAL_FAILURE(apply(policy_yaml("  files:\n    read: [/usr]\n")));
  EXPECT_EQ(scoped([&] { return result(::open(base("outside/data.txt").c_str(), O_RDONLY) >= 0 ? 0 : -1); }),
            kDenied);
}

}  // namespace
}  // namespace agentcage
