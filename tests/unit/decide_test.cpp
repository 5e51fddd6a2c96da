// SPDX-License-Identifier: Apache-2.0
// bpf::decide, the kernel's lookups on compiled rules in C++, on the cases
// where the kernel's answer is not the obvious one: longest prefix, deny
// folded over allows, workspace-relative rules, directories on the way,
// names, a path too long to match, the longest network entry. (The kernel
// test ExplainTest asks the kernel the same questions.)
#include "bpf/decide.h"

#include <gtest/gtest.h>

#include <string>

#include "bpf/compile.h"
#include "policy/policy.h"

namespace agentcage::bpf {
namespace {

struct Compiled {
  policy::Policy policy;
  CompiledPolicy rules;
};

Compiled compile_spec(const std::string& spec) {
  policy::ParseOptions no_fs;
  no_fs.check_exec_exists = false;
  auto parsed = policy::parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: t}\nspec:\n" + spec, "t.yaml", no_fs);
  EXPECT_TRUE(parsed.ok()) << (parsed.errors.empty() ? "" : parsed.errors[0].format());
  auto rules = compile(*parsed.policy);
  EXPECT_TRUE(rules.ok()) << (rules ? "" : rules.error().message);
  return {*parsed.policy, rules ? *rules : CompiledPolicy{}};
}

Decision on(const Compiled& c, Operation op, const std::string& path, const std::string& ws = "/w/run1") {
  Request q;
  q.op = op;
  q.path = path;
  return decide(c.rules, ws, q);
}

const std::string kSpec =
    "  exec: {allow: [/usr/bin/python3.11]}\n"
    "  files:\n"
    "    read: [/usr/lib, /data]\n"
    "    write: [\"${workspace}\", /data/out]\n"
    "    deny: [/data/out/keep, \"${workspace}/.git/hooks\", \"**/.env\", \"**/*.pem\"]\n";

TEST(Decide, PathRulesAsTheKernelMatchesThem) {
  const Compiled c = compile_spec(kSpec);
  EXPECT_TRUE(on(c, Operation::read, "/usr/lib/x/y.so").allowed);
  EXPECT_FALSE(on(c, Operation::read, "/usr/lib64/y.so").allowed);  // whole components
  EXPECT_FALSE(on(c, Operation::write, "/data/a").allowed);
  EXPECT_EQ(on(c, Operation::write, "/data/a").reason, AC_REASON_DEFAULT_DENY);
  EXPECT_TRUE(on(c, Operation::write, "/data/out/a").allowed);
  EXPECT_EQ(on(c, Operation::read, "/data/out/keep/a").reason, AC_REASON_RULE_DENY);
  EXPECT_TRUE(on(c, Operation::exec, "/usr/bin/python3.11").allowed);
  EXPECT_TRUE(on(c, Operation::read, "/usr/bin/python3.11").allowed);
  EXPECT_FALSE(on(c, Operation::exec, "/usr/lib/x/y.so").allowed);
  // workspace rules are relative to the scope's workspace
  EXPECT_TRUE(on(c, Operation::write, "/w/run1/a/b").allowed);
  EXPECT_EQ(on(c, Operation::write, "/w/run1/.git/hooks/pre-commit").reason, AC_REASON_RULE_DENY);
  EXPECT_FALSE(on(c, Operation::write, "/w/run1/a", "").allowed);
  EXPECT_FALSE(on(c, Operation::write, "/w/run10/a").allowed);
}

TEST(Decide, ADirectoryOfProgramsAllowsWhatIsUnderIt) {
  const Compiled c = compile_spec("  exec: {allow: [/opt/bin]}\n  files: {write: [\"${workspace}\"]}\n");
  EXPECT_TRUE(on(c, Operation::exec, "/opt/bin/tool").allowed);
  EXPECT_TRUE(on(c, Operation::exec, "/opt/bin/sub/tool").allowed);
  EXPECT_FALSE(on(c, Operation::exec, "/opt/binx/tool").allowed);
  EXPECT_FALSE(on(c, Operation::exec, "/w/run1/tool").allowed);
  Request q;
  q.op = Operation::exec;
  q.path = "/opt/bin/tool";
  const Explanation x = explain(c.policy, c.rules, "/w/run1", q);
  EXPECT_EQ(x.rule, "exec.allow /opt/bin");
  EXPECT_EQ(x.detail, "a program under an allowed directory (and readable)");
}

TEST(Decide, DirectoriesOnTheWayMayBeStatedNotRead) {
  const Compiled c = compile_spec(kSpec);
  for (const char* dir : {"/", "/usr", "/usr/bin", "/w", "/w/run1"}) {
    EXPECT_TRUE(on(c, Operation::stat, dir).allowed) << dir;
    EXPECT_TRUE(on(c, Operation::stat, dir).by_ancestor || std::string(dir) == "/w/run1") << dir;
  }
  EXPECT_FALSE(on(c, Operation::read, "/usr").allowed);
  EXPECT_FALSE(on(c, Operation::stat, "/etc").allowed);
  EXPECT_TRUE(on(c, Operation::stat, "/usr/bin/python3.11").allowed);  // exec alone lets stat
  EXPECT_FALSE(on(c, Operation::stat, "/usr/bin/python3").allowed);
}

TEST(Decide, NameRulesDenyAnyComponent) {
  const Compiled c = compile_spec(kSpec);
  const Decision d = on(c, Operation::read, "/data/x/.env");
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.by_name);
  EXPECT_FALSE(on(c, Operation::read, "/data/.env/inside").allowed);
  EXPECT_FALSE(on(c, Operation::stat, "/w/run1/cert.pem").allowed);
  EXPECT_TRUE(on(c, Operation::read, "/data/cert.pem.txt").allowed);
  EXPECT_TRUE(on(c, Operation::read, "/data/.envrc").allowed);
}

TEST(Decide, APathInTheWorkspaceTooLongToMatchIsDenied) {
  const Compiled c = compile_spec(kSpec);
  const std::string longer = "/w/run1/" + std::string(AC_PATH_KEY_MAX, 'a');
  EXPECT_EQ(on(c, Operation::read, longer).reason, AC_REASON_PATH_TOO_LONG);
  // outside the workspace a cut key still matches exactly
  EXPECT_TRUE(on(c, Operation::read, "/data/" + std::string(AC_PATH_KEY_MAX, 'a')).allowed);
}

TEST(Decide, TheLongestNetworkEntryDecides) {
  const Compiled c = compile_spec(
      "  network:\n    allow:\n"
      "      - {cidr: 10.0.0.0/8, ports: [443]}\n"
      "      - {cidr: 10.1.0.0/16, ports: [80], protocol: tcp}\n");
  auto ask = [&](const char* target) {
    auto q = parse_connect_target(target);
    EXPECT_TRUE(q.ok()) << target;
    return decide(c.rules, "", *q).allowed;
  };
  EXPECT_TRUE(ask("10.2.3.4:443"));
  EXPECT_TRUE(ask("10.2.3.4:443/udp"));
  EXPECT_TRUE(ask("10.1.3.4:80"));
  EXPECT_FALSE(ask("10.1.3.4:80/udp"));
  EXPECT_TRUE(ask("10.1.3.4:443"));  // the /16 carries the /8's ports (merged)
  EXPECT_FALSE(ask("11.0.0.1:443"));
  EXPECT_FALSE(ask("[::1]:443"));
}

TEST(Decide, ExplainNamesTheEntryThatDecides) {
  const Compiled c = compile_spec(kSpec);
  Request q;
  q.op = Operation::read;
  q.path = "/data/x/.env";
  Explanation x = explain(c.policy, c.rules, "/w/run1", q);
  EXPECT_EQ(x.rule, "files.deny '**/.env'");
  EXPECT_EQ(x.pos.line, 9);
  q.path = "/data/out/keep/z";
  x = explain(c.policy, c.rules, "/w/run1", q);
  EXPECT_EQ(x.rule, "files.deny /data/out/keep");
  q.op = Operation::write;
  q.path = "/data/out/z";
  x = explain(c.policy, c.rules, "/w/run1", q);
  EXPECT_EQ(x.rule, "files.write /data/out");
  EXPECT_EQ(x.pos.line, 8);
  q.path = "/w/run1/z";
  EXPECT_EQ(explain(c.policy, c.rules, "/w/run1", q).rule, "files.write ${workspace}");
  q.op = Operation::read;
  q.path = "/etc/passwd";
  x = explain(c.policy, c.rules, "/w/run1", q);
  EXPECT_EQ(x.rule, "");
  EXPECT_EQ(x.decision.reason, AC_REASON_DEFAULT_DENY);
}

TEST(Decide, ConnectTargetsAreParsedStrictly) {
  EXPECT_TRUE(parse_connect_target("127.0.0.1:8080").ok());
  EXPECT_TRUE(parse_connect_target("[2001:db8::1]:443/udp").ok());
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:80/icmp", "host:80",
                          "2001:db8::1:443", "127.0.0.1:8a"})
    EXPECT_FALSE(parse_connect_target(bad).ok()) << bad;
}

}  // namespace
}  // namespace agentcage::bpf
