// SPDX-License-Identifier: Apache-2.0
// `include:`: a policy made of its file and the files it includes (policy.h,
// "Includes"): what merges how, where each entry came from, and every way an
// include can be wrong, located.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "bpf/compile.h"
#include "bpf/decide.h"
#include "policy/policy.h"

namespace agentcage::policy {
namespace {

namespace fs = std::filesystem;

class Include : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agentcage-include-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::trunc) << text;
    return p.string();
  }
  static std::string doc(const std::string& name, const std::string& rest) {
    return "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: " + name + "}\n" + rest;
  }
  ParseResult load(const std::string& path) {
    ParseOptions o;
    o.check_exec_exists = false;
    return load_policy_file(path, o);
  }
  static std::string errors(const ParseResult& r) {
    std::string s;
    for (const auto& d : r.errors) s += d.format() + "\n";
    return s;
  }

  fs::path dir_;
};

TEST_F(Include, ListsAddUpSwitchesAllowIfAnyDoesAndNameAndModeStayTheIncludingFiles) {
  const std::string base = write("base.yaml", doc("base",
                                                  "spec:\n"
                                                  "  mode: audit\n"
                                                  "  exec: {allow: [/usr/bin/python3], native_code: allow}\n"
                                                  "  files: {read: [/usr/lib], deny: [\"**/.env\"]}\n"
                                                  "  syscalls: {allow: [io_uring]}\n"));
  const std::string top = write("top.yaml", doc("top",
                                                "include: [base.yaml]\n"
                                                "spec:\n"
                                                "  files: {read: [/etc/hosts], write: [\"${workspace}\"]}\n"
                                                "  network: {allow: [{cidr: 10.0.0.0/8, ports: [443]}]}\n"
                                                "  syscalls: {allow: [io_uring, mount]}\n"));
  const ParseResult r = load(top);
  ASSERT_TRUE(r.ok()) << errors(r);
  const Policy& p = *r.policy;
  EXPECT_EQ(p.name, "top");
  EXPECT_EQ(p.mode, Mode::enforce);  // base's audit is not taken
  ASSERT_EQ(p.exec_allow.size(), 1u);
  EXPECT_EQ(p.native_code, Permit::allow);
  EXPECT_EQ(p.debugging, Permit::deny);
  ASSERT_EQ(p.read.size(), 2u);
  EXPECT_EQ(p.read[0].path, "/etc/hosts");
  EXPECT_EQ(p.read[1].path, "/usr/lib");
  EXPECT_EQ(p.write.size(), 1u);
  EXPECT_EQ(p.deny_names.size(), 1u);
  EXPECT_EQ(p.network_allow.size(), 1u);
  EXPECT_EQ(p.syscalls_allow, (std::vector<std::string>{"io_uring", "mount"}));
  // Where each entry was written.
  ASSERT_EQ(p.includes.size(), 1u);
  EXPECT_EQ(p.includes[0].path, fs::canonical(base).string());
  EXPECT_EQ(p.source_of(p.read[0].pos), top);
  EXPECT_EQ(p.source_of(p.read[1].pos), fs::canonical(base).string());
  EXPECT_EQ(p.read[1].pos.line, 7);
  EXPECT_EQ(p.source_of(p.includes[0].pos), top);
  EXPECT_EQ(p.includes[0].pos.line, 4);

  // The merged policy is what the kernel gets: compiled, it allows what
  // either file allows and denies what either denies.
  auto compiled = bpf::compile(p);
  ASSERT_TRUE(compiled) << compiled.error().message;
  bpf::Request q;
  q.op = bpf::Operation::read;
  q.path = "/usr/lib/os-release";
  EXPECT_TRUE(bpf::decide(*compiled, "/w", q).allowed);
  q.path = "/w/.env";
  EXPECT_FALSE(bpf::decide(*compiled, "/w", q).allowed);
  const bpf::Explanation x =
      bpf::explain(p, *compiled, "/w", bpf::Request{bpf::Operation::read, "/usr/lib/x"});
  EXPECT_EQ(p.source_of(x.pos), fs::canonical(base).string());
}

TEST_F(Include, LimitsTheIncludingFileStatesWinElseTheTightestIncluded) {
  write("a.yaml", doc("a", "spec:\n  limits: {memory: 2Gi, pids: unlimited, timeout: 5m}\n"));
  write("b.yaml", doc("b", "spec:\n  limits: {memory: 1Gi, pids: 64, disk: unlimited}\n"));
  const std::string top =
      write("top.yaml", doc("top", "include: [a.yaml, b.yaml]\nspec:\n  limits: {timeout: 1h}\n"));
  const ParseResult r = load(top);
  ASSERT_TRUE(r.ok()) << errors(r);
  const Limits& l = r.policy->limits;
  EXPECT_EQ(*l.memory_bytes, 1ull << 30);  // the tighter of 2Gi and 1Gi
  EXPECT_EQ(*l.pids, 64u);                 // a value beats unlimited
  EXPECT_FALSE(l.unlimited.pids);
  EXPECT_EQ(l.timeout->count(), 3600 * 1000);  // the including file's own
  EXPECT_FALSE(l.disk_bytes);
  EXPECT_TRUE(l.unlimited.disk);
}

TEST_F(Include, NestedIncludesKeepTheirFilesAndPathsAreRelativeToTheIncludingFile) {
  write("lib/inner.yaml", doc("inner", "spec:\n  files: {read: [/opt/inner]}\n"));
  write("lib/middle.yaml", doc("middle", "include: [inner.yaml]\nspec:\n  files: {read: [/opt/middle]}\n"));
  const std::string top = write("top.yaml", doc("top", "include: [lib/middle.yaml]\n"));
  const ParseResult r = load(top);
  ASSERT_TRUE(r.ok()) << errors(r);
  const Policy& p = *r.policy;
  ASSERT_EQ(p.read.size(), 2u);
  ASSERT_EQ(p.includes.size(), 2u);
  for (const auto& e : p.read) {
    const std::string want = e.path == "/opt/inner" ? "inner.yaml" : "middle.yaml";
    EXPECT_EQ(fs::path(p.source_of(e.pos)).filename(), want) << e.path;
  }
  // inner.yaml was included by middle.yaml, at its line 4.
  EXPECT_EQ(fs::path(p.source_of(p.includes[1].pos)).filename(), "middle.yaml");
}

// a.yaml and b.yaml both include common.yaml: it is merged once, and each
// entry still names the file it is in.
TEST_F(Include, AFileTwoIncludesShareIsMergedOnce) {
  write("common.yaml", doc("common", "spec:\n  files: {read: [/usr/lib], deny: [\"**/.env\"]}\n"));
  write("a.yaml", doc("a", "include: [common.yaml]\nspec:\n  files: {read: [/opt/a]}\n"));
  write("b.yaml", doc("b", "include: [common.yaml]\nspec:\n  files: {read: [/opt/b]}\n"));
  const std::string top = write("top.yaml", doc("top", "include: [a.yaml, b.yaml]\n"));
  const ParseResult r = load(top);
  ASSERT_TRUE(r.ok()) << errors(r);
  const Policy& p = *r.policy;
  ASSERT_EQ(p.includes.size(), 3u);  // a, common, b
  std::vector<std::string> files;
  for (const auto& inc : p.includes) files.push_back(fs::path(inc.path).filename());
  EXPECT_EQ(files, (std::vector<std::string>{"a.yaml", "common.yaml", "b.yaml"}));
  ASSERT_EQ(p.read.size(), 3u);
  EXPECT_EQ(p.deny_names.size(), 1u);
  for (const auto& e : p.read) {
    const std::string want = e.path == "/usr/lib" ? "common.yaml" : e.path == "/opt/a" ? "a.yaml" : "b.yaml";
    EXPECT_EQ(fs::path(p.source_of(e.pos)).filename(), want) << e.path;
  }
  EXPECT_TRUE(bpf::compile(p));
}

TEST_F(Include, EveryWrongIncludeIsLocatedAndRejectsThePolicy) {
  write("broken.yaml", doc("broken", "spec:\n  files: {read: [relative/path]}\n"));
  write("cyc1.yaml", doc("cyc1", "include: [cyc2.yaml]\n"));
  write("cyc2.yaml", doc("cyc2", "include: [./cyc1.yaml]\n"));
  struct Case {
    std::string include, want;
  } cases[] = {
      {"[missing.yaml]", "top.yaml:4:11: include 'missing.yaml': "},
      {"[broken.yaml]", "broken.yaml:5:18: files.read[0]: relative path"},
      {"[broken.yaml]", "top.yaml:4:11: include 'broken.yaml': "},
      {"[cyc1.yaml]", "an include cycle"},
      {"[python-sandbox]", "top.yaml:4:11: include[0]: 'python-sandbox' is not a policy file"},
      {"[a.yaml, a.yaml]", "include[1]: 'a.yaml' is included twice"},
      {"base.yaml", "include must be a list"},
      {"[top.yaml]", "an include cycle"},
  };
  write("a.yaml", doc("a", ""));
  for (const auto& c : cases) {
    const std::string top = write("top.yaml", doc("top", "include: " + c.include + "\n"));
    const ParseResult r = load(top);
    EXPECT_FALSE(r.ok()) << c.include;
    EXPECT_FALSE(r.policy.has_value());
    EXPECT_NE(errors(r).find(c.want), std::string::npos) << c.include << " gave:\n" << errors(r);
  }
  // Too deep: a chain of six files.
  for (int i = 1; i <= 5; ++i)
    write("d" + std::to_string(i) + ".yaml",
          doc("d" + std::to_string(i), "include: [d" + std::to_string(i + 1) + ".yaml]\n"));
  write("d6.yaml", doc("d6", ""));
  const ParseResult deep = load((dir_ / "d1.yaml").string());
  EXPECT_FALSE(deep.ok());
  EXPECT_NE(errors(deep).find("includes nest deeper than 4 files"), std::string::npos) << errors(deep);
}

// A compile error in an included entry is located in the included file.
TEST_F(Include, CompileErrorsNameTheFileTheEntryIsIn) {
  write("base.yaml", doc("base", "spec:\n  exec: {allow: [/usr/bin/true]}\n"));
  const std::string top =
      write("top.yaml", doc("top", "include: [base.yaml]\nspec:\n  files: {write: [/usr/bin]}\n"));
  const ParseResult r = load(top);
  ASSERT_TRUE(r.ok()) << errors(r);
  auto problem = bpf::compile_problem(*r.policy);
  ASSERT_TRUE(problem.has_value());
  EXPECT_TRUE(problem->file == top || problem->file == fs::canonical(dir_ / "base.yaml").string())
      << problem->format();
  EXPECT_NE(problem->message.find("/usr/bin"), std::string::npos) << problem->format();
}

}  // namespace
}  // namespace agentcage::policy
