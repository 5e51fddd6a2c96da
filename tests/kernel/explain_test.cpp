// SPDX-License-Identifier: Apache-2.0
// `agentcage policy explain` answers from bpf::decide, the kernel's decision
// on compiled rules written in C++. This test asks it and the kernel the same
// few hundred random operations (open for read and write, stat, exec, TCP
// connect, UDP sendto) under one policy that has every kind of path and
// network rule, and requires the same answer for each.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bpf/decide.h"
#include "policy/policy.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using namespace kt;

class ExplainTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 27;
  ExplainTest() : PolicyScopeTest(kSlot, "ex") {}
};

// sendto a v4-mapped address over UDP, from a fresh socket.
int udp_send(const std::array<uint8_t, 16>& mapped, uint16_t port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return kOtherError;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  std::memcpy(&a.sin_addr, mapped.data() + 12, 4);
  const int rc = static_cast<int>(::sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a));
  const int r = result(rc < 0 ? -1 : 0);
  ::close(s);
  return r;
}

TEST_F(ExplainTest, ExplainAgreesWithTheKernelOnRandomOperations) {
  const fs::path t = base_ / "tree";
  for (const char* d : {"pub/sub", "pub/private", "pub/.ssh", "bin", "mixed/out", "secret"})
    fs::create_directories(t / d);
  const std::vector<std::string> files = {"pub/a.txt",     "pub/.env",     "pub/k.pem",       "pub/k.pem.txt",
                                          "pub/sub/b.txt", "pub/sub/.env", "pub/private/c",   "pub/.ssh/id",
                                          "mixed/m.txt",   "mixed/out/o",  "mixed/out/.envx", "secret/s.txt"};
  for (const auto& f : files) std::ofstream(t / f) << "data\n";
  for (const char* b : {"bin/tool", "bin/other"}) {
    fs::copy_file("/usr/bin/true", t / b);
    fs::permissions(t / b, fs::perms::owner_all);
  }
  fs::create_directories(ws_ / "locked");
  fs::create_directories(ws_ / "sub");
  for (const char* f : {"w.txt", "locked/l", "x.pem", "sub/.env", "sub/y"}) std::ofstream(ws_ / f) << "w\n";
  fs::create_symlink(t / "pub" / ".env", ws_ / "link-to-env");
  fs::create_symlink(t / "pub" / "a.txt", ws_ / "link-to-a");

  const std::string T = t.string();
  const std::string yaml =
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: ex\nspec:\n"
      "  exec:\n    allow: [/usr/bin/true, " +
      T +
      "/bin/tool]\n"
      "  files:\n"
      "    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache, " +
      T + "/pub, " + T + "/bin, " + T +
      "/mixed]\n"
      "    write: [\"${workspace}\", " +
      T +
      "/mixed/out]\n"
      "    deny: [" +
      T +
      "/pub/private, \"${workspace}/locked\", \"**/.env\", \"**/*.pem\", "
      "\"**/.ssh\"]\n"
      "  network:\n    allow:\n"
      "      - {cidr: 127.0.0.0/8, ports: [1000-1999], protocol: tcp}\n"
      "      - {cidr: 127.0.0.2/32, ports: [5000], protocol: udp}\n"
      "      - {cidr: 10.0.0.0/8, ports: [443]}\n"
      "      - {cidr: 10.1.0.0/16, ports: [80-90], protocol: tcp}\n";
  auto parsed = policy::parse_policy(yaml, "ex.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].format();
  auto compiled = bpf::compile(*parsed.policy);
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  ASSERT_NO_FATAL_FAILURE(apply_yaml(yaml, ws_.string()));
  const std::string workspace = fs::canonical(ws_).string();
  // The scope's workspace reads back from the maps (what a reload checks).
  auto scopes = enforcer()->scopes();
  ASSERT_TRUE(scopes.ok()) << scopes.error().message;
  bool found = false;
  for (const auto& sc : *scopes)
    if (sc.cgroup_id == cg_.id()) {
      found = true;
      EXPECT_EQ(sc.workspace, ws_.string());
    }
  EXPECT_TRUE(found);

  // Everything a path operation may name: the files, their directories, the
  // way down to them, the workspace's, links, and the loader's files.
  std::vector<std::string> paths = {"/",
                                    "/tmp",
                                    base_.string(),
                                    T,
                                    workspace,
                                    "/usr/bin/true",
                                    "/usr/bin/false",
                                    "/etc/ld.so.cache",
                                    "/etc/hostname",
                                    "/usr/lib"};
  for (const auto& f : files) paths.push_back(T + "/" + f);
  for (const char* d : {"pub", "pub/sub", "pub/private", "pub/.ssh", "bin", "bin/tool", "bin/other", "mixed",
                        "mixed/out", "secret"})
    paths.push_back(T + "/" + d);
  for (const char* f :
       {"w.txt", "locked", "locked/l", "x.pem", "sub", "sub/.env", "sub/y", "link-to-env", "link-to-a"})
    paths.push_back(workspace + "/" + f);

  std::seed_seq seed{20261126};
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int checked = 0, allowed = 0;
  std::ostringstream mismatches;
  for (int i = 0; i < 300; ++i) {
    bpf::Request q;
    std::string what;
    int got = kOk;
    const int kind = static_cast<int>(pick(10));
    if (kind < 8) {
      const std::string path = paths[pick(paths.size())];
      const bool dir = fs::is_directory(path);
      q.path = fs::canonical(path).string();  // what the kernel resolves
      const int op = static_cast<int>(pick(dir ? 2 : 4));
      if (op == 0) {
        q.op = bpf::Operation::read;
        what = "open read ";
        got = scoped([path] { return result(::open(path.c_str(), O_RDONLY | O_CLOEXEC) >= 0 ? 0 : -1); });
      } else if (op == 1) {
        q.op = bpf::Operation::stat;
        what = "stat ";
        got = scoped([path] {
          struct stat st {};
          return result(::stat(path.c_str(), &st));
        });
      } else if (op == 2) {
        q.op = bpf::Operation::write;
        what = "open write ";
        got = scoped([path] { return result(::open(path.c_str(), O_WRONLY | O_CLOEXEC) >= 0 ? 0 : -1); });
      } else {
        if ((fs::status(path).permissions() & fs::perms::owner_exec) == fs::perms::none) continue;
        q.op = bpf::Operation::exec;
        what = "exec ";
        got = scoped([path] { return run_program(path); });
      }
      what += path;
    } else {
      static const char* kAddrs[] = {"127.0.0.1", "127.0.0.2", "127.9.9.9",  "10.0.0.1",
                                     "10.1.2.3",  "10.2.0.1",  "192.168.1.1"};
      static const uint16_t kPorts[] = {80, 85, 90, 91, 443, 999, 1000, 1500, 1999, 2000, 5000};
      const char* addr = kAddrs[pick(std::size(kAddrs))];
      const uint16_t port = kPorts[pick(std::size(kPorts))];
      const bool udp = kind == 9;
      auto target =
          bpf::parse_connect_target(std::string(addr) + ":" + std::to_string(port) + (udp ? "/udp" : ""));
      ASSERT_TRUE(target.ok()) << target.error().message;
      q = *target;
      what = std::string(udp ? "sendto udp " : "connect tcp ") + addr + ":" + std::to_string(port);
      got = udp ? scoped([&q] { return udp_send(q.addr, q.port); })
                : scoped([addr, port] { return tcp_connect(AF_INET, addr, port); });
    }
    const bpf::Explanation x = bpf::explain(*parsed.policy, *compiled, workspace, q);
    ++checked;
    allowed += x.decision.allowed;
    const bool kernel_denied = got == kDenied;
    if (kernel_denied == x.decision.allowed)
      mismatches << "  " << what << ": kernel " << (kernel_denied ? "denied" : "allowed") << " (" << got
                 << "), explain " << (x.decision.allowed ? "allows" : "denies") << " [" << x.rule << "; "
                 << x.detail << "]\n";
  }
  EXPECT_EQ(mismatches.str(), "") << "explain and the kernel disagree on these of " << checked
                                  << " operations";
  // The sample is worth something only if it holds both answers in number.
  EXPECT_GT(checked, 200);
  EXPECT_GT(allowed, checked / 5);
  EXPECT_LT(allowed, checked * 4 / 5);
  std::printf("explain agreed with the kernel on %d operations (%d allowed)\n", checked, allowed);
}

}  // namespace
}  // namespace agentcage
