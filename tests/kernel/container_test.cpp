// SPDX-License-Identifier: Apache-2.0
// Containers confined from their entrypoint on, end to end: Debian's podman
// with crun (and runc), agentcage's hooks.d files running build/agentcage
// oci-hook, and a real daemon. A container whose annotation names a policy
// is denied other programs, host files bound into it and the network, and
// writes only to its workspace; one without the annotation is untouched; a
// hook that refuses keeps the container from starting; two containers with
// two policies each get their own. No image: --rootfs on a skeleton with the
// host's /usr (tests/vm/podman-env), --network none.
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "container_env.h"
#include "daemon_env.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class Containers : public DaemonEnv, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    DaemonEnv::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(fs::exists("/usr/bin/podman") && fs::exists("/usr/bin/crun") && fs::exists("/usr/sbin/runc"))
        << "podman, crun and runc are needed (Debian packages podman crun runc conmon: scripts/install-deps)";
    scratch_ = dir_ / "podman";
    fs::create_directories(scratch_);
    write_file(dir_ / "policies" / "ctest-a.yaml", container_policy("ctest-a"));
    write_file(dir_ / "policies" / "ctest-b.yaml", container_policy("ctest-b", "/secret"));
    fs::create_directories(dir_ / "secret");
    std::ofstream(dir_ / "secret" / "token") << "s3cr3t\n";
    fs::create_directories(dir_ / "results");
    // The shipped hooks.d files, with this build's binary and a result dir.
    fs::create_directories(dir_ / "hooks");
    for (const char* stage : {"createRuntime", "poststop"}) {
      json hook = {{"version", "1.0.0"},
                   {"hook",
                    {{"path", agentcage_bin()},
                     {"args", {"agentcage", "oci-hook", "--stage", stage, "--result-dir", (dir_ / "results").string()}},
                     {"timeout", 60}}},
                   {"when", {{"annotations", {{"^io\\.agentcage\\.policy$", ".+"}}}}},
                   {"stages", {stage}}};
      std::ofstream(dir_ / "hooks" / (std::string("50-agentcage-") + stage + ".json")) << hook.dump(2);
    }
    start_daemon();
    ASSERT_TRUE(wait_until([&] { return named_slot(status(), "ctest-b").has_value(); }, 60s)) << log();
  }

  void TearDown() override {
    if (!scratch_.empty()) {
      (void)podman({"rm", "--force", "--all"}, "cleanup");
      ::umount2((scratch_ / "store").c_str(), MNT_DETACH);
    }
    DaemonEnv::TearDown();
  }

  struct Ran {
    int status = -1;
    std::string output;
  };

  // podman (tests/vm/podman-env's podman_test) with `runtime`; output is
  // stdout and stderr.
  Ran podman(const std::vector<std::string>& args, const std::string& tag, const std::string& runtime = "crun") {
    std::vector<std::string> argv = {"/bin/bash", "-c", ". \"$0\" \"$1\" && shift && podman_test \"$@\"",
                                     std::string(AGENTCAGE_SOURCE_DIR) + "/tests/vm/podman-env", scratch_.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const fs::path out = dir_ / (tag + ".out");
    Ran r;
    r.status = wait_exit(spawn(argv, out, {"PODMAN_RUNTIME=" + runtime}).pid);
    r.output = slurp(out);
    return r;
  }

  // `podman run` of `command` with the workspace, the secret and the probe
  // bound in, the annotations given, and its id in `cid` (when run).
  Ran run_container(const std::string& tag, const std::vector<std::string>& annotations,
                    const std::vector<std::string>& command, const std::string& runtime = "crun",
                    const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = container_run_options(dir_, tag);
    args.insert(args.end(), {"--hooks-dir", (dir_ / "hooks").string()});
    for (const auto& a : annotations) args.insert(args.end(), {"--annotation", a});
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--rootfs", (scratch_ / "rootfs").string()});
    args.insert(args.end(), command.begin(), command.end());
    return podman(args, tag, runtime);
  }

  std::string cid(const std::string& tag) { return read_cidfile(dir_ / (tag + ".cid")); }

  fs::path scratch_;
};

TEST_P(Containers, AnAnnotatedContainerIsConfinedFromItsEntrypointOn) {
  const std::string runtime = GetParam();
  Ran r = run_container("conf-" + runtime, {"io.agentcage.policy=ctest-a"}, container_attempts(), runtime);
  const std::string id = cid("conf-" + runtime);
  ASSERT_FALSE(id.empty()) << r.output;
  EXPECT_EQ(r.status, 0) << r.output << log();
  // Host files bound in, other paths, the network, other programs: denied.
  EXPECT_TRUE(has(r.output, "read /secret/token: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "write /tmp/x: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "connect 127.0.0.1:9: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "id-exit 126")) << r.output;
  // What the policy allows works: its libraries, its workspace.
  EXPECT_TRUE(has(r.output, "read /usr/lib/os-release: ok")) << r.output;
  EXPECT_TRUE(has(r.output, "write /workspace/out: ok")) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / ("ws-conf-" + runtime) / "out"));
  // The audit log names the container; poststop released it, kept its result.
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string audit = slurp(dir_ / "audit.jsonl");
        return has(audit, "\"container_id\":\"" + id + "\"") && has(audit, "\"target\":\"/secret/token\"");
      },
      30s))
      << slurp(dir_ / "audit.jsonl");
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir_ / "results" / (id + ".json")); }, 30s)) << log();
  const json result = json::parse(slurp(dir_ / "results" / (id + ".json")), nullptr, false);
  ASSERT_TRUE(result.is_object()) << slurp(dir_ / "results" / (id + ".json"));
  EXPECT_EQ(result["container_id"], id);
  EXPECT_EQ(result["policy"], "ctest-a");
  EXPECT_GE(result["denied"].get<uint64_t>(), 4u);
  if (runtime == "crun") {  // once: python3's start over the VM's 9p root is slow
    // The kept result is the documented detach reply (docs/schema/control-reply.schema.json).
    EXPECT_EQ(schema_errors("control-reply", dir_ / "results" / (id + ".json")), "");
  }
  const json st = status();
  for (const auto& c : st.value("containers", json::array())) EXPECT_NE(c["container_id"], id) << st.dump();
}

INSTANTIATE_TEST_SUITE_P(Runtimes, Containers, ::testing::Values("crun", "runc"));

class ContainersCrun : public Containers {};

TEST_P(ContainersCrun, AnUnannotatedContainerIsUntouched) {
  Ran r = run_container("plain", {}, container_attempts());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "read /secret/token: ok")) << r.output;
  EXPECT_TRUE(has(r.output, "write /tmp/x: ok")) << r.output;
  EXPECT_TRUE(has(r.output, "connect 127.0.0.1:9: ECONNREFUSED")) << r.output;
  EXPECT_TRUE(has(r.output, "id-exit 0")) << r.output;
  EXPECT_TRUE(status().value("containers", json::array()).empty());
}

// A pod's sandbox (pause) container is left alone, but only the one its
// runtime made under the sandbox's id: the marker alone is an annotation
// anyone may write (podman before 4.6 copies an image's own annotations into
// config.json, as it copies --annotation here). Before, this container ran
// unconfined, its policy annotation notwithstanding.
TEST_P(ContainersCrun, AContainerThatOnlySaysItIsAPodsSandboxIsConfined) {
  Ran r = run_container("marked",
                        {"io.agentcage.policy=ctest-a", "io.kubernetes.cri.container-type=sandbox",
                         "io.kubernetes.cri.sandbox-id=0123456789abcdef"},
                        container_attempts());
  EXPECT_EQ(r.status, 0) << r.output << log();
  EXPECT_TRUE(has(r.output, "read /secret/token: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "id-exit 126")) << r.output;
  EXPECT_TRUE(has(r.output, "write /workspace/out: ok")) << r.output;
}

TEST_P(ContainersCrun, AHookThatRefusesKeepsTheContainerFromStarting) {
  const std::vector<std::string> mark = {container_probe(), "write", "/workspace/ran"};
  // A policy the daemon has not loaded: the daemon refuses.
  Ran unknown = run_container("unknown", {"io.agentcage.policy=nope"}, mark);
  EXPECT_NE(unknown.status, 0) << unknown.output;
  EXPECT_FALSE(fs::exists(dir_ / "ws-unknown" / "ran")) << unknown.output;
  // A path instead of a name: the hook refuses before asking.
  Ran path = run_container("path", {"io.agentcage.policy=/etc/agentcage/policies/x.yaml"}, mark);
  EXPECT_NE(path.status, 0) << path.output;
  EXPECT_FALSE(fs::exists(dir_ / "ws-path" / "ran")) << path.output;
  // A workspace annotation that is not a mount of the container.
  Ran ws = run_container("ws", {"io.agentcage.policy=ctest-a", "io.agentcage.workspace=/srv"}, mark);
  EXPECT_NE(ws.status, 0) << ws.output;
  EXPECT_FALSE(fs::exists(dir_ / "ws-ws" / "ran")) << ws.output;
  // Nothing is left confined or recorded.
  const json st = status();
  EXPECT_TRUE(st.value("containers", json::array()).empty()) << st.dump();
  // The same container with a policy the daemon loaded starts.
  Ran ok = run_container("ok", {"io.agentcage.policy=ctest-a"}, mark);
  EXPECT_EQ(ok.status, 0) << ok.output << log();
  EXPECT_TRUE(fs::exists(dir_ / "ws-ok" / "ran")) << ok.output;
}

TEST_P(ContainersCrun, TwoContainersWithTwoPoliciesGetTheirOwn) {
  // B (ctest-b may read /secret) waits in the background while A (ctest-a
  // may not) runs; then B goes on.
  const fs::path ws_b = dir_ / "ws-b";
  fs::create_directories(ws_b);
  const std::vector<std::string> b_cmd = {
      "/usr/bin/sh", "-c", container_probe() + " wait /workspace/go read /secret/token > /workspace/result"};
  Proc b;
  {
    std::vector<std::string> argv = {"/bin/bash", "-c", ". \"$0\" \"$1\" && shift && podman_test \"$@\"",
                                     std::string(AGENTCAGE_SOURCE_DIR) + "/tests/vm/podman-env", scratch_.string(),
                                     "run", "--rm", "--name", "ctest-b", "--cidfile", (dir_ / "b.cid").string(),
                                     "--hooks-dir", (dir_ / "hooks").string(), "-v", ws_b.string() + ":/workspace",
                                     "-v", (dir_ / "secret").string() + ":/secret:ro", "-v",
                                     tests_dir().string() + ":" + tests_dir().string() + ":ro", "--annotation",
                                     "io.agentcage.policy=ctest-b", "--rootfs", (scratch_ / "rootfs").string()};
    argv.insert(argv.end(), b_cmd.begin(), b_cmd.end());
    b = spawn(argv, dir_ / "b.out", {"PODMAN_RUNTIME=crun"});
  }
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& c : status().value("containers", json::array()))
          if (c.value("policy", std::string()) == "ctest-b") return true;
        return false;
      },
      60s))
      << slurp(dir_ / "b.out") << log();
  Ran a = run_container("a", {"io.agentcage.policy=ctest-a"}, {container_probe(), "read", "/secret/token"});
  EXPECT_EQ(a.status, 0) << a.output;
  EXPECT_TRUE(has(a.output, "read /secret/token: EACCES")) << a.output;
  std::ofstream(ws_b / "go") << "go\n";
  EXPECT_EQ(wait_exit(b.pid), 0) << slurp(dir_ / "b.out");
  EXPECT_EQ(slurp(ws_b / "result"), "wait /workspace/go: ok\nread /secret/token: ok\n") << slurp(dir_ / "b.out");
  const std::string audit = slurp(dir_ / "audit.jsonl");
  // A's denial is A's: the line names A's container and policy.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(audit, m, std::regex(R"(\{[^\n]*"target":"/secret/token"[^\n]*\})"))) << audit;
  const json line = json::parse(m.str());
  EXPECT_EQ(line["container_id"], cid("a"));
  EXPECT_EQ(line["policy"], "ctest-a");
}

INSTANTIATE_TEST_SUITE_P(Crun, ContainersCrun, ::testing::Values("crun"));

}  // namespace
}  // namespace agentcage::kt
