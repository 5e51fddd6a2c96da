// SPDX-License-Identifier: Apache-2.0
// agentcage-runc: its decision for each runtime call (shim/decide.h), the
// hooks.d files shipped for podman and CRI-O (packaging/oci) agreeing with
// the hooks it writes, and the built binary in front of a stand-in runtime
// that records how it was run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oci/annotations.h"
#include "shim/decide.h"

namespace agentcage::shim {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = AGENTCAGE_SOURCE_DIR;
const fs::path kData = kSource / "tests/data/oci";
const fs::path kAgentcage = "/opt/ac/bin/agentcage";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

oci::RuntimeArgs args_of(std::vector<std::string> argv) {
  auto r = oci::parse_runtime_args(argv);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : oci::RuntimeArgs{};
}

oci::Bundle bundle_with(std::map<std::string, std::string> annotations) {
  oci::Bundle b;
  b.dir = "/b";
  b.root = "/b/rootfs";
  b.annotations = std::move(annotations);
  return b;
}

TEST(ShimDecide, OtherSubcommandsPassUnchanged) {
  for (const char* sub : {"start", "state", "kill", "delete", "exec", "features", "ps", "update", "pause"}) {
    auto d = decide(args_of({"runc", "--agentcage-policy=p", sub, "id"}), nullptr, kAgentcage);
    ASSERT_TRUE(d) << sub << ": " << d.error().message;
    EXPECT_FALSE(*d) << sub;
  }
  auto version = decide(args_of({"runc", "--version"}), nullptr, kAgentcage);
  ASSERT_TRUE(version);
  EXPECT_FALSE(*version);
}

// A container restored from a checkpoint (containerd 2's CRI restore,
// `docker start --checkpoint`) never execs, and agentcage's scope arms at
// the first exec: one that would be confined is refused, never run
// unconfined; one that would not passes as it did.
TEST(ShimDecide, TheRestoreOfAContainerThatWouldBeConfinedIsRefused) {
  const Result<oci::Bundle> b = bundle_with({});
  auto d = decide(args_of({"runc", "--agentcage-default-policy=deny-all", "restore", "--image-path", "/img",
                           "--bundle", "/b", "id"}),
                  &b, kAgentcage);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, EPERM);
  EXPECT_NE(d.error().message.find("restore of container id refused"), std::string::npos)
      << d.error().message;
  const Result<oci::Bundle> annotated = bundle_with({{"io.agentcage.policy", "python-sandbox"}});
  EXPECT_FALSE(decide(args_of({"runc", "restore", "--bundle", "/b", "id"}), &annotated, kAgentcage));
  auto plain = decide(args_of({"runc", "restore", "--bundle", "/b", "id"}), &b, kAgentcage);
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_FALSE(*plain);
  // Without its bundle it cannot be told: refused.
  EXPECT_FALSE(decide(args_of({"runc", "restore", "id"}), nullptr, kAgentcage));
}

TEST(ShimDecide, UnannotatedPassesUnchanged) {
  const Result<oci::Bundle> b = bundle_with({{"io.podman.annotations.init", "FALSE"}});
  for (const char* sub : {"create", "run"}) {
    auto d = decide(args_of({"runc", sub, "id"}), &b, kAgentcage);
    ASSERT_TRUE(d) << d.error().message;
    EXPECT_FALSE(*d) << sub;
  }
}

TEST(ShimDecide, AnnotatedGetsTheHooks) {
  const Result<oci::Bundle> b = bundle_with({{"io.agentcage.policy", "python-sandbox"}});
  auto d = decide(args_of({"runc", "create", "--bundle", "/b", "id"}), &b, kAgentcage);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_TRUE(*d);
  const oci::HookEdit& e = **d;
  EXPECT_EQ(e.create_runtime.path, kAgentcage.string());
  EXPECT_EQ(e.create_runtime.args, (std::vector<std::string>{"agentcage", "oci-hook", "--stage", "createRuntime"}));
  EXPECT_EQ(e.poststop.path, kAgentcage.string());
  EXPECT_EQ(e.poststop.args, (std::vector<std::string>{"agentcage", "oci-hook", "--stage", "poststop"}));
  EXPECT_EQ(e.create_runtime.timeout, oci::kHookTimeoutSeconds);
  EXPECT_EQ(e.poststop.timeout, oci::kHookTimeoutSeconds);
  EXPECT_FALSE(e.policy);  // the annotation stays as it is
}

TEST(ShimDecide, WhichPolicyWins) {
  const Result<oci::Bundle> annotated = bundle_with({{"io.agentcage.policy", "tenant-choice"}});
  const Result<oci::Bundle> plain = bundle_with({});

  // The operator's --agentcage-policy overrides the annotation.
  auto forced = decide(args_of({"s", "--agentcage-policy=operator", "run", "id"}), &annotated, kAgentcage);
  ASSERT_TRUE(forced && *forced);
  EXPECT_EQ((*forced)->policy, "operator");
  auto forced_plain = decide(args_of({"s", "--agentcage-policy=operator", "run", "id"}), &plain, kAgentcage);
  ASSERT_TRUE(forced_plain && *forced_plain);
  EXPECT_EQ((*forced_plain)->policy, "operator");

  // The default fills in only for a container without the annotation.
  auto defaulted = decide(args_of({"s", "--agentcage-default-policy=base", "create", "id"}), &plain, kAgentcage);
  ASSERT_TRUE(defaulted && *defaulted);
  EXPECT_EQ((*defaulted)->policy, "base");
  auto chosen = decide(args_of({"s", "--agentcage-default-policy=base", "create", "id"}), &annotated, kAgentcage);
  ASSERT_TRUE(chosen && *chosen);
  EXPECT_FALSE((*chosen)->policy);
}

TEST(ShimDecide, SandboxContainersAreNeverConfined) {
  for (auto sandbox : {std::pair{"io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id"},
                       std::pair{"io.kubernetes.cri-o.ContainerType", "io.kubernetes.cri-o.SandboxID"}}) {
    const Result<oci::Bundle> b =
        bundle_with({{"io.agentcage.policy", "p"}, {sandbox.first, "sandbox"}, {sandbox.second, "id"}});
    auto d = decide(args_of({"s", "--agentcage-policy=p", "--agentcage-default-policy=q", "create",
                             "--bundle", "/b", "--pid-file", "/p", "id"}),
                    &b, kAgentcage);
    ASSERT_TRUE(d) << d.error().message;
    EXPECT_FALSE(*d) << sandbox.first;
    // The marker without the container's own id (`docker run --annotation
    // io.kubernetes.cri.container-type=sandbox`): confined as any other.
    const Result<oci::Bundle> marked = bundle_with({{sandbox.first, "sandbox"}, {sandbox.second, "id"}});
    auto m =
        decide(args_of({"s", "--agentcage-default-policy=q", "create", "other-id"}), &marked, kAgentcage);
    ASSERT_TRUE(m && *m) << sandbox.first;
    const Result<oci::Bundle> bare = bundle_with({{sandbox.first, "sandbox"}});
    auto n = decide(args_of({"s", "--agentcage-policy=p", "create", "id"}), &bare, kAgentcage);
    ASSERT_TRUE(n && *n) << sandbox.first;
  }
  // The pod's other containers are.
  const Result<oci::Bundle> b = bundle_with({{"io.agentcage.policy", "p"}, {"io.kubernetes.cri.container-type", "container"}});
  auto d = decide(args_of({"s", "create", "id"}), &b, kAgentcage);
  ASSERT_TRUE(d && *d);
}

TEST(ShimDecide, FailsClosed) {
  const Result<oci::Bundle> empty = bundle_with({{"io.agentcage.policy", ""}});
  auto d = decide(args_of({"s", "create", "id"}), &empty, kAgentcage);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("io.agentcage.policy is empty"), std::string::npos) << d.error().message;
  // Even with a default: an empty annotation is a mistake, not an absence.
  auto with_default = decide(args_of({"s", "--agentcage-default-policy=base", "create", "id"}), &empty, kAgentcage);
  ASSERT_FALSE(with_default);

  const Result<oci::Bundle> unreadable = Error{"config.json: not valid JSON", EINVAL};
  auto bad = decide(args_of({"s", "run", "id"}), &unreadable, kAgentcage);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("cannot read the bundle: config.json: not valid JSON"), std::string::npos)
      << bad.error().message;

  auto none = decide(args_of({"s", "create", "id"}), nullptr, kAgentcage);
  ASSERT_FALSE(none);
}

// The hooks.d files podman and CRI-O read run the same hooks as the shim writes.
TEST(ShimPackaging, HooksDirFilesMatchTheShimsHooks) {
  const oci::HookEdit e = hook_edit("/usr/bin/agentcage");
  for (auto [file, hook, stage] :
       {std::tuple{"50-agentcage-createruntime.json", &e.create_runtime, "createRuntime"},
        std::tuple{"50-agentcage-poststop.json", &e.poststop, "poststop"}}) {
    const json j = json::parse(slurp(kSource / "packaging/oci" / file));
    EXPECT_EQ(j["version"], "1.0.0") << file;
    EXPECT_EQ(j["hook"]["path"], hook->path) << file;
    EXPECT_EQ(j["hook"]["args"], json(hook->args)) << file;
    EXPECT_EQ(j["hook"]["timeout"], *hook->timeout) << file;
    EXPECT_EQ(j["stages"], json::array({stage})) << file;
    ASSERT_EQ(j["when"]["annotations"].size(), 1u) << file;
    const auto first = j["when"]["annotations"].begin();
    const std::string key = first.key();
    const json value = first.value();
    // podman matches both as POSIX extended regular expressions.
    const std::regex k(key, std::regex::extended), v(value.get<std::string>(), std::regex::extended);
    EXPECT_TRUE(std::regex_search(std::string(oci::kPolicyAnnotation), k)) << file;
    EXPECT_FALSE(std::regex_search(std::string("io.agentcage.policyx"), k)) << file;
    EXPECT_FALSE(std::regex_search(std::string("ioXagentcage.policy"), k)) << file;
    EXPECT_FALSE(std::regex_search(std::string("io.agentcage.workspace"), k)) << file;
    EXPECT_TRUE(std::regex_search(std::string("python-sandbox"), v)) << file;
    EXPECT_FALSE(std::regex_search(std::string(""), v)) << file;
  }
}

// ---- the built binary -------------------------------------------------------

class ShimBinary : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agentcage-shim-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The stand-in runtime: records its argv, one word a line.
    runtime_ = dir_ / "runtime";
    std::ofstream(runtime_) << "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > " << (dir_ / "ran").string() << "\n";
    fs::permissions(runtime_, fs::perms::owner_all);
    bundle_ = dir_ / "bundle";
    fs::create_directories(bundle_);
    fs::copy_file(kData / "runc-spec.json", bundle_ / "config.json");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Runs the shim with ARGS in DIR_; returns its exit status, stderr in err_.
  int shim(std::vector<std::string> args) {
    args.insert(args.begin(), AGENTCAGE_SHIM);
    const fs::path err = dir_ / "stderr";
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::chdir(dir_.c_str()) != 0) ::_exit(126);
      std::FILE* f = std::freopen(err.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    err_ = slurp(err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::vector<std::string> ran() {
    std::vector<std::string> out;
    std::ifstream in(dir_ / "ran");
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  void annotate(const std::string& policy) {
    json j = json::parse(slurp(bundle_ / "config.json"));
    j["annotations"]["io.agentcage.policy"] = policy;
    std::ofstream(bundle_ / "config.json", std::ios::trunc) << j.dump();
  }
  fs::path dir_, runtime_, bundle_;
  std::string err_;
};

TEST_F(ShimBinary, AddsTheHooksThenRunsTheRuntimeWithoutItsOwnFlags) {
  annotate("python-sandbox");
  const std::string rt = "--agentcage-runtime=" + runtime_.string();
  ASSERT_EQ(shim({rt, "--root", "/r", "create", "--bundle", bundle_.string(), "c1"}), 0) << err_;
  EXPECT_EQ(ran(), (std::vector<std::string>{runtime_.string(), "--root", "/r", "create", "--bundle", bundle_.string(), "c1"}));
  const json j = json::parse(slurp(bundle_ / "config.json"));
  const std::string hook = (fs::path(AGENTCAGE_SHIM).parent_path() / "agentcage").string();
  EXPECT_EQ(j["hooks"]["createRuntime"][0]["path"], hook);
  EXPECT_EQ(j["hooks"]["poststop"][0]["args"], json::parse(R"(["agentcage","oci-hook","--stage","poststop"])"));
  EXPECT_EQ(j["annotations"]["io.agentcage.policy"], "python-sandbox");
}

TEST_F(ShimBinary, TheBundleDefaultsToTheCurrentDirectory) {
  annotate("p");
  fs::rename(bundle_ / "config.json", dir_ / "config.json");
  ASSERT_EQ(shim({"--agentcage-runtime=" + runtime_.string(), "run", "c1"}), 0) << err_;
  EXPECT_TRUE(json::parse(slurp(dir_ / "config.json")).contains("hooks"));
}

TEST_F(ShimBinary, UnannotatedAndOtherCallsAreUntouched) {
  const std::string before = slurp(bundle_ / "config.json");
  const std::string rt = "--agentcage-runtime=" + runtime_.string();
  ASSERT_EQ(shim({rt, "create", "-b", bundle_.string(), "c1"}), 0) << err_;
  EXPECT_EQ(slurp(bundle_ / "config.json"), before);
  EXPECT_EQ(ran(), (std::vector<std::string>{runtime_.string(), "create", "-b", bundle_.string(), "c1"}));
  ASSERT_EQ(shim({rt, "--agentcage-policy=p", "delete", "--force", "c1"}), 0) << err_;
  EXPECT_EQ(ran(), (std::vector<std::string>{runtime_.string(), "delete", "--force", "c1"}));
  EXPECT_EQ(slurp(bundle_ / "config.json"), before);
}

TEST_F(ShimBinary, RefusesWithoutRunningTheRuntime) {
  const std::string rt = "--agentcage-runtime=" + runtime_.string();
  // A policy given but the bundle unreadable.
  EXPECT_EQ(shim({rt, "--agentcage-policy=p", "create", "--bundle", (dir_ / "nowhere").string(), "c1"}), 1);
  EXPECT_NE(err_.find("agentcage-runc: agentcage-runc: cannot read the bundle"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
  // An annotated bundle with hooks of the wrong type.
  std::ofstream(bundle_ / "config.json", std::ios::trunc)
      << R"({"root":{"path":"rootfs"},"annotations":{"io.agentcage.policy":"p"},"hooks":[]})";
  EXPECT_EQ(shim({rt, "create", "--bundle", bundle_.string(), "c1"}), 1);
  EXPECT_NE(err_.find("\"hooks\" must be an object, not array"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
  // The real runtime is the shim itself, or not there, or relative.
  EXPECT_EQ(shim({std::string("--agentcage-runtime=") + AGENTCAGE_SHIM, "state", "c1"}), 1);
  EXPECT_NE(err_.find("is agentcage-runc itself"), std::string::npos) << err_;
  EXPECT_EQ(shim({"--agentcage-runtime=" + (dir_ / "none").string(), "state", "c1"}), 1);
  EXPECT_NE(err_.find("No such file or directory"), std::string::npos) << err_;
  EXPECT_EQ(shim({"--agentcage-runtime=runc", "state", "c1"}), 1);
  EXPECT_NE(err_.find("must be an absolute path"), std::string::npos) << err_;
  // Its own flags misspelt.
  EXPECT_EQ(shim({"--agentcage-polcy=p", "create", "c1"}), 1);
  EXPECT_NE(err_.find("unknown flag '--agentcage-polcy=p'"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
}

TEST_F(ShimBinary, HelpAndVersion) {
  EXPECT_EQ(shim({"--help"}), 0);
  EXPECT_EQ(shim({"--agentcage-runtime=" + runtime_.string(), "--version"}), 0) << err_;
  EXPECT_EQ(ran(), (std::vector<std::string>{runtime_.string(), "--version"}));
}

}  // namespace
}  // namespace agentcage::shim
