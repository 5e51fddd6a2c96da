// SPDX-License-Identifier: Apache-2.0
#include "bpf/compile.h"

#include <netinet/in.h>

#include <gtest/gtest.h>

#include <map>

#include "bpf/keys.h"

namespace agentcage::bpf {
namespace {

policy::PathEntry abs_path(const char* p) { return {p, false, {}}; }
policy::PathEntry ws_path(const char* p) { return {p, true, {}}; }

std::map<std::string, uint32_t> by_path(const CompiledPolicy& c, RuleSpace space) {
  std::map<std::string, uint32_t> m;
  for (const auto& r : c.paths)
    if (r.space == space) m[r.path] = r.access;
  return m;
}

TEST(Compile, EnclosingRulesAreFoldedIntoLongerOnes) {
  policy::Policy p;
  p.name = "t";
  p.write = {abs_path("/a")};
  p.read = {abs_path("/a/b"), abs_path("/usr")};
  auto c = compile(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto m = by_path(*c, RuleSpace::absolute);
  // /a/b is only "read" itself, but lies inside the writable /a.
  EXPECT_EQ(m["/a/b"], AC_ACCESS_READ | AC_ACCESS_WRITE);
  EXPECT_EQ(m["/a"], AC_ACCESS_READ | AC_ACCESS_WRITE);
  EXPECT_EQ(m["/usr"], AC_ACCESS_READ);
}

TEST(Compile, DenyWinsOverEnclosedAndEnclosingAllows) {
  policy::Policy p;
  p.name = "t";
  p.read = {abs_path("/home/user/data"), abs_path("/etc")};
  p.deny = {abs_path("/home"), abs_path("/etc/shadow")};
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  auto m = by_path(*c, RuleSpace::absolute);
  EXPECT_EQ(m["/home/user/data"], AC_ACCESS_DENY) << "an allow inside a deny is void";
  EXPECT_EQ(m["/etc/shadow"], AC_ACCESS_DENY);
  EXPECT_EQ(m["/etc"], AC_ACCESS_READ);
}

TEST(Compile, ComponentBoundariesNotStringPrefixes) {
  policy::Policy p;
  p.name = "t";
  p.write = {abs_path("/usr/lib")};
  p.read = {abs_path("/usr/lib64")};
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(by_path(*c, RuleSpace::absolute)["/usr/lib64"], AC_ACCESS_READ);
}

TEST(Compile, WorkspaceRulesStayRelativeAndSeparate) {
  policy::Policy p;
  p.name = "t";
  p.write = {ws_path("")};
  p.deny = {ws_path("/.git/hooks")};
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  auto m = by_path(*c, RuleSpace::workspace);
  EXPECT_EQ(m["/"], AC_ACCESS_READ | AC_ACCESS_WRITE);
  EXPECT_EQ(m["/.git/hooks"], AC_ACCESS_DENY);
  EXPECT_TRUE(by_path(*c, RuleSpace::absolute).empty());
}

TEST(Compile, ExecRulesUseTheResolvedProgram) {
  policy::Policy p;
  p.name = "t";
  p.exec_allow = {{"/usr/bin/python3", "/usr/bin/python3.11", {}}};
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  auto m = by_path(*c, RuleSpace::absolute);
  EXPECT_EQ(m.count("/usr/bin/python3"), 0u);
  EXPECT_EQ(m["/usr/bin/python3.11"], AC_ACCESS_READ | AC_ACCESS_EXEC);
}

TEST(Compile, RejectsWritableProgram) {
  policy::Policy p;
  p.name = "t";
  p.exec_allow = {{"/opt/tool/bin/x", "/opt/tool/bin/x", {}}};
  p.write = {abs_path("/opt/tool")};
  auto c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("files.write"), std::string::npos) << c.error().message;
}

// A directory of programs the run can write into would run what it wrote.
TEST(Compile, RejectsAWritableDirectoryOfPrograms) {
  policy::Policy p;
  p.name = "t";
  p.source = "p.yaml";
  p.exec_allow = {{"/opt/tools", "/opt/tools", {5, 9}, true}};
  p.write = {{"/opt/tools/cache", false, {9, 9}}};
  auto c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.error().message.find("p.yaml:5:9: policy t: exec.allow /opt/tools holds a files.write rule (9:9: "
                             "/opt/tools/cache); a run could write a program there and run it"),
      std::string::npos)
      << c.error().message;
  p.write = {{"/opt", false, {9, 9}}};
  c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("exec.allow /opt/tools lies under a files.write rule (9:9: /opt)"),
            std::string::npos)
      << c.error().message;
  p.write = {{"/opt/toolsmith", false, {9, 9}}};
  EXPECT_TRUE(compile(p).ok());
}

TEST(Compile, AuditModeSetsTheFlag) {
  policy::Policy p;
  p.name = "t";
  p.mode = policy::Mode::audit;
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->flags, AC_POLICY_F_AUDIT);
  EXPECT_TRUE(c->paths.empty());
  EXPECT_TRUE(c->net.empty());
}

TEST(Compile, NativeCodeAndDebuggingSetFlags) {
  policy::Policy p;
  p.name = "t";
  auto none = compile(p);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->flags, 0u);
  p.native_code = policy::Permit::allow;
  p.debugging = policy::Permit::allow;
  auto both = compile(p);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->flags, AC_POLICY_F_NATIVE_CODE | AC_POLICY_F_DEBUG);
}

policy::NetRule v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t len,
                   std::vector<policy::PortRange> ports, policy::Protocol proto) {
  policy::NetRule r;
  r.kind = policy::NetRule::Kind::cidr;
  r.family = AF_INET;
  r.addr = {a, b, c, d};
  r.prefix_len = len;
  r.ports = std::move(ports);
  r.protocol = proto;
  return r;
}

TEST(Compile, Ipv4BecomesV4MappedAndCoveringRangesMerge) {
  policy::Policy p;
  p.name = "t";
  p.network_allow = {v4(10, 20, 0, 0, 16, {{443, 443}, {8000, 8100}}, policy::Protocol::tcp),
                     v4(10, 20, 1, 5, 32, {{53, 53}}, policy::Protocol::udp)};
  auto c = compile(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->net.size(), 2u);
  const CompiledNetRule& wide = c->net[0];
  EXPECT_EQ(wide.prefix_len, 96 + 16);
  EXPECT_EQ(wide.addr[10], 0xff);
  EXPECT_EQ(wide.addr[11], 0xff);
  EXPECT_EQ(wide.addr[12], 10);
  EXPECT_EQ(wide.addr[13], 20);
  EXPECT_EQ(wide.ranges.size(), 2u);
  const CompiledNetRule& host = c->net[1];
  EXPECT_EQ(host.prefix_len, 128);
  // the /32 also carries the /16's ranges: longest match alone decides
  ASSERT_EQ(host.ranges.size(), 3u);
  EXPECT_EQ(host.ranges[0].first, 53);
  EXPECT_EQ(host.ranges[0].protocols, AC_PROTO_UDP);
  EXPECT_EQ(host.ranges[1].first, 443);
  EXPECT_EQ(host.ranges[1].protocols, AC_PROTO_TCP);
}

TEST(Compile, MissingPortsMeanAllAndAnyProtocol) {
  policy::Policy p;
  p.name = "t";
  p.network_allow = {v4(192, 168, 0, 0, 24, {}, policy::Protocol::any)};
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->net[0].ranges.size(), 1u);
  EXPECT_EQ(c->net[0].ranges[0].first, 1);
  EXPECT_EQ(c->net[0].ranges[0].last, 65535);
  EXPECT_EQ(c->net[0].ranges[0].protocols, AC_PROTO_ANY);
}

TEST(Compile, TooManyRangesIsAnError) {
  policy::Policy p;
  p.name = "t";
  std::vector<policy::PortRange> ports;
  for (uint16_t i = 0; i < AC_NET_MAX_RANGES + 1; ++i)
    ports.push_back({static_cast<uint16_t>(1000 + 2 * i), static_cast<uint16_t>(1000 + 2 * i)});
  p.network_allow = {v4(10, 0, 0, 0, 8, ports, policy::Protocol::tcp)};
  auto c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, E2BIG);
}

policy::NamePattern name_rule(const char* text, int line = 0) {
  return {policy::NamePattern::Kind::name, text, {line, 9}};
}
policy::NamePattern suffix_rule(const char* text, int line = 0) {
  return {policy::NamePattern::Kind::suffix, text, {line, 9}};
}

TEST(Compile, NamePatternsBecomeSortedDistinctNameRulesAndSetTheFlag) {
  policy::Policy p;
  p.name = "t";
  p.read = {abs_path("/home/u/project")};
  p.deny_names = {suffix_rule(".pem"), name_rule(".env"), suffix_rule(".pem"), name_rule("id_rsa")};
  auto c = compile(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->flags & AC_POLICY_F_NAMES, AC_POLICY_F_NAMES);
  const std::vector<NameRule> want = {
      {NameRule::Kind::exact, ".env"}, {NameRule::Kind::exact, "id_rsa"}, {NameRule::Kind::suffix, ".pem"}};
  EXPECT_EQ(c->names, want);
  // Without name patterns: no flag, no lookups in the kernel.
  p.deny_names.clear();
  auto plain = compile(p);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->flags & AC_POLICY_F_NAMES, 0u);
  EXPECT_NE(policy_digest("t", *c), policy_digest("t", *plain));
}

TEST(Compile, MoreSuffixLengthsThanTheKernelTriesIsALocatedError) {
  policy::Policy p;
  p.name = "t";
  p.source = "p.yaml";
  static const char* kExts[] = {".a", ".bb", ".ccc", ".dddd", ".eeeee", ".ffffff", ".ggggggg", ".hhhhhhhh"};
  for (int i = 0; i < AC_NAME_SUFFIX_LENGTHS; ++i) p.deny_names.push_back(suffix_rule(kExts[i], 10 + i));
  p.deny_names.push_back(suffix_rule(".pem", 30));  // a length already in use: fine
  ASSERT_TRUE(compile(p).ok());
  p.deny_names.push_back(suffix_rule(".123456789", 31));
  auto c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, E2BIG);
  EXPECT_EQ(c.error().message.rfind("p.yaml:31:9: ", 0), 0u) << c.error().message;
  EXPECT_NE(c.error().message.find("at most 8"), std::string::npos) << c.error().message;
}

// A rule a name pattern denies whole would do nothing: refused at the rule.
TEST(Compile, RulesThatANamePatternDeniesWholeAreErrors) {
  policy::Policy p;
  p.name = "t";
  p.source = "p.yaml";
  p.deny_names = {name_rule(".ssh", 20), suffix_rule(".key", 21)};
  p.read = {{"/home/u/.ssh/config", false, {7, 9}}};
  auto c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message.rfind("p.yaml:7:9: ", 0), 0u) << c.error().message;
  EXPECT_NE(
      c.error().message.find("files.read /home/u/.ssh/config is denied whole by files.deny '**/.ssh' (20:9)"),
      std::string::npos)
      << c.error().message;
  p.read = {{"/srv/keys/server.key", false, {7, 9}}};
  EXPECT_FALSE(compile(p).ok());
  p.read.clear();
  p.write = {{"/out.key", true, {8, 9}}};
  c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("files.write ${workspace}/out.key"), std::string::npos)
      << c.error().message;
  // A socket the run may connect to, at a path a pattern denies: it never could.
  p.write.clear();
  policy::NetRule sock;
  sock.kind = policy::NetRule::Kind::unix_path;
  sock.unix_name = "/run/keys.key";
  sock.pos = {12, 9};
  p.network_allow = {sock};
  c = compile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("p.yaml:12:9: policy t: network.allow unix /run/keys.key is denied whole"),
            std::string::npos)
      << c.error().message;
  p.network_allow.clear();
  // Names that only contain or start like a pattern are other names.
  p.write = {{"/.sshd/x", true, {8, 9}}, {"/keys.d", false, {9, 9}}, {"/home/u/.ssh-agent", false, {9, 9}}};
  EXPECT_TRUE(compile(p).ok()) << compile(p).error().message;
}

TEST(Compile, UnixRulesGrantConnect) {
  policy::Policy p;
  p.name = "t";
  policy::NetRule path;
  path.kind = policy::NetRule::Kind::unix_path;
  path.unix_name = "/run/llm-proxy.sock";
  policy::NetRule abstract;
  abstract.kind = policy::NetRule::Kind::unix_abstract;
  abstract.unix_name = "llm-proxy";
  p.network_allow = {path, abstract};
  auto c = compile(p);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(by_path(*c, RuleSpace::absolute)["/run/llm-proxy.sock"], AC_ACCESS_CONNECT);
  EXPECT_EQ(by_path(*c, RuleSpace::abstract_unix)["llm-proxy"], AC_ACCESS_CONNECT);
}

}  // namespace
}  // namespace agentcage::bpf

namespace agentcage::bpf {
namespace {

TEST(Compile, ListenRulesLiveInTheirOwnSpace) {
  policy::Policy p;
  p.name = "t";
  p.network_allow = {v4(127, 0, 0, 1, 32, {{443, 443}}, policy::Protocol::tcp)};
  p.network_listen = {v4(127, 0, 0, 1, 32, {{8000, 8000}}, policy::Protocol::tcp)};
  policy::NetRule name;
  name.kind = policy::NetRule::Kind::unix_abstract;
  name.unix_name = "dev";
  p.network_listen.push_back(name);
  name.kind = policy::NetRule::Kind::unix_abstract;
  p.network_allow.push_back(name);
  auto c = compile(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->net.size(), 2u);
  // Same network, separate entries: a listen port is never a destination.
  EXPECT_EQ(c->net[0].space, NetSpace::allow);
  ASSERT_EQ(c->net[0].ranges.size(), 1u);
  EXPECT_EQ(c->net[0].ranges[0].first, 443);
  EXPECT_EQ(c->net[1].space, NetSpace::listen);
  ASSERT_EQ(c->net[1].ranges.size(), 1u);
  EXPECT_EQ(c->net[1].ranges[0].first, 8000);
  // One abstract entry with both bits.
  EXPECT_EQ(by_path(*c, RuleSpace::abstract_unix),
            (std::map<std::string, uint32_t>{{"dev", AC_ACCESS_CONNECT | AC_ACCESS_BIND}}));
}

}  // namespace
}  // namespace agentcage::bpf
