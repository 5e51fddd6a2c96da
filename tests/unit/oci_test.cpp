// SPDX-License-Identifier: Apache-2.0
// oci/: the state a runtime hands a hook, a bundle's config.json, the
// annotations and container ids, the hooks the shim adds, and runtime command
// lines; read from the real files podman, crun and runc produced
// (tests/data/oci/README.md), copied to a temporary bundle to be rewritten.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "in_child.h"
#include "../common/temp_dir.h"
#include "oci/annotations.h"
#include "oci/bundle.h"
#include "oci/hooks.h"
#include "oci/runtime_args.h"
#include "oci/state.h"

namespace agentcage::oci {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = fs::path(AGENTCAGE_SOURCE_DIR) / "tests/data/oci";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// ---- state ------------------------------------------------------------------

TEST(OciState, CrunAtCreateRuntime) {
  auto s = parse_state(slurp(kData / "podman-crun/createRuntime/state.json"));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->oci_version, "1.0");
  EXPECT_EQ(s->id, "007dbf474cfa5f8849b1c8b0f4210ec66df1e40e3d9af6777ef3dd4f7d1bcc1f");
  EXPECT_EQ(s->status, "created");  // crun's word at createRuntime, not "creating"
  EXPECT_EQ(s->pid, 231);
  EXPECT_EQ(s->bundle.string(), "/src/agentcage/tests/data/oci/.scratch/store/root/vfs-containers/" + s->id + "/userdata");
  EXPECT_EQ(s->annotations.at("io.agentcage.spike"), "yes");
  EXPECT_EQ(s->annotations.at("io.agentcage.workspace"), "/workspace");
  EXPECT_EQ(s->annotations.size(), 10u);
}

TEST(OciState, RuncAtCreateRuntime) {
  auto s = parse_state(slurp(kData / "podman-runc/createRuntime/state.json"));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->oci_version, "1.0.2-dev");
  EXPECT_EQ(s->status, "creating");
  EXPECT_EQ(s->pid, 393);
  EXPECT_EQ(s->id, "4fd8479554fcc1d9edcb829a00822fce30168fc90d8726e47afdd96dfa2eb874");
}

TEST(OciState, PoststopHasNoPid) {
  for (const char* runtime : {"podman-crun", "podman-runc"}) {
    auto s = parse_state(slurp(kData / runtime / "poststop/state.json"));
    ASSERT_TRUE(s) << runtime << ": " << s.error().message;
    EXPECT_EQ(s->pid, 0) << runtime;
    EXPECT_EQ(s->status, "stopped") << runtime;
    EXPECT_EQ(s->annotations.at("io.agentcage.spike"), "yes") << runtime;
    EXPECT_FALSE(s->annotations.contains("io.container.manager")) << runtime;
  }
}

TEST(OciState, MinimalStateAndNullAnnotations) {
  auto s = parse_state(R"({"id":"c1","bundle":"/b","annotations":null})");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->id, "c1");
  EXPECT_EQ(s->pid, 0);
  EXPECT_TRUE(s->annotations.empty());
}

TEST(OciState, RefusesWhatIsNotAState) {
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"({"bundle":"/b"})", "\"id\" is missing"},
      {R"({"id":"","bundle":"/b"})", "\"id\" is empty"},
      {R"({"id":"c"})", "\"bundle\" is missing"},
      {R"({"id":"c","bundle":"b/rel"})", "\"bundle\" must be an absolute path"},
      {R"({"id":"c","bundle":""})", "\"bundle\" must be an absolute path"},
      {R"({"id":"c","bundle":"/b","pid":-1})", "\"pid\" -1 is not a process id"},
      {R"({"id":"c","bundle":"/b","pid":4294967296})", "\"pid\" 4294967296 is not a process id"},
      {R"({"id":"c","bundle":"/b","pid":"12"})", "\"pid\" must be an integer, not string"},
      {R"({"id":"c","bundle":"/b","pid":1.5})", "\"pid\" must be an integer, not number"},
      {R"({"id":7,"bundle":"/b"})", "\"id\" must be a string, not number"},
      {R"({"id":"c","bundle":["/b"]})", "\"bundle\" must be a string, not array"},
      {R"({"id":"c","bundle":"/b","status":1})", "\"status\" must be a string, not number"},
      {R"({"id":"c","bundle":"/b","ociVersion":null})", "\"ociVersion\" must be a string, not null"},
      {R"({"id":"c","bundle":"/b","annotations":[]})", "\"annotations\" must be an object of strings"},
      {R"({"id":"c","bundle":"/b","annotations":{"a":1}})", "annotation 'a' must be a string, not number"},
      {R"({"id":"c\u0000d","bundle":"/b"})", "\"id\" contains a NUL byte"},
      {R"({"id":"c","id":"d","bundle":"/b"})", "the key 'id' appears twice"},
      {R"({"id":"c","bundle":"/b","annotations":{"io.agentcage.policy":"a","io.agentcage.policy":"b"}})",
       "the key 'io.agentcage.policy' appears twice"},
      {R"(["id"])", "must be a JSON object, not array"},
      {R"({"id":"c",)", "not valid JSON"},
      {"", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto s = parse_state(c.json);
    ASSERT_FALSE(s) << c.json;
    EXPECT_NE(s.error().message.find(c.says), std::string::npos) << c.json << " -> " << s.error().message;
    EXPECT_EQ(s.error().message.rfind("container state: ", 0), 0u) << s.error().message;
    EXPECT_EQ(s.error().code, EINVAL);
  }
}

TEST(OciState, RefusesAnOversizedState) {
  std::string big = R"({"id":"c","bundle":"/b","annotations":{"x":")" + std::string(kMaxStateBytes, 'a') + "\"}}";
  auto s = parse_state(big);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("larger than"), std::string::npos) << s.error().message;
}

// ---- bundle -----------------------------------------------------------------

// A temporary directory, removed with what it holds.
class TempDir : public ::testing::Test {
 protected:
  // A bundle at dir_/NAME holding a copy of DATA's config.json.
  fs::path bundle_from(const fs::path& data, const std::string& name = "bundle") {
    fs::path b = dir_ / name;
    fs::create_directories(b);
    fs::copy_file(data, b / "config.json");
    return b;
  }
  testing::TempDir tmp_{"agentcage-oci-test"};
  const fs::path dir_ = tmp_.path();
};

using OciBundle = TempDir;

TEST_F(OciBundle, PodmanBundle) {
  const fs::path b = bundle_from(kData / "podman-crun/createRuntime/config.json");
  auto r = read_bundle(b);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->dir, b);
  EXPECT_EQ(r->root, "/src/agentcage/tests/data/oci/.scratch/rootfs");  // absolute in podman's bundles
  EXPECT_FALSE(r->root_readonly);
  EXPECT_EQ(r->cgroups_path, "/libpod_parent/libpod-007dbf474cfa5f8849b1c8b0f4210ec66df1e40e3d9af6777ef3dd4f7d1bcc1f");
  EXPECT_EQ(r->args, (std::vector<std::string>{"/usr/bin/sh", "-c", "echo entrypoint ran; cat /proc/self/cgroup"}));
  EXPECT_EQ(r->annotations.at("io.agentcage.workspace"), "/workspace");
  ASSERT_EQ(r->mounts.size(), 12u);
  EXPECT_EQ(r->mounts[2].destination, "/proc");
  EXPECT_EQ(r->mounts[2].type, "proc");
  EXPECT_EQ(r->mounts[2].options, (std::vector<std::string>{"nosuid", "noexec", "nodev"}));

  const Mount* ws = bind_mount_at(*r, "/workspace");
  ASSERT_NE(ws, nullptr);
  EXPECT_EQ(ws->source, "/src/agentcage/tests/data/oci/.scratch/marks");
  for (const char* same : {"/workspace/", "//workspace", "/workspace/.", "/x/../workspace", "workspace"})
    EXPECT_EQ(bind_mount_at(*r, same), ws) << same;
  const Mount* shm = bind_mount_at(*r, "/dev/shm");  // type "bind", options "bind"
  ASSERT_NE(shm, nullptr);
  EXPECT_EQ(shm->destination, "/dev/shm");
  EXPECT_EQ(bind_mount_at(*r, "/proc"), nullptr);  // mounted, but not a bind
  EXPECT_EQ(bind_mount_at(*r, "/work"), nullptr);
  EXPECT_EQ(bind_mount_at(*r, "/workspace/sub"), nullptr);
}

TEST_F(OciBundle, RuncSpecRootIsRelativeToTheBundle) {
  for (const char* spec : {"runc-spec.json", "crun-spec.json"}) {
    const fs::path b = bundle_from(kData / spec, spec);
    auto r = read_bundle(b);
    ASSERT_TRUE(r) << spec << ": " << r.error().message;
    EXPECT_EQ(r->root, b / "rootfs") << spec;
    EXPECT_TRUE(r->root_readonly) << spec;
    EXPECT_EQ(r->args, std::vector<std::string>{"sh"}) << spec;
    EXPECT_EQ(r->cgroups_path, "") << spec;
    EXPECT_TRUE(r->annotations.empty()) << spec;
  }
}

TEST_F(OciBundle, ARelativeDirectoryIsMadeAbsolute) {
  const fs::path b = bundle_from(kData / "runc-spec.json");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  auto r = read_bundle("bundle/./");
  fs::current_path(cwd);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->root, b / "rootfs");
}

TEST_F(OciBundle, ALaterMountHidesABind) {
  auto r = parse_bundle(R"({"root":{"path":"/r"},"mounts":[
      {"destination":"/ws","type":"bind","source":"/srv/ws","options":["rbind"]},
      {"destination":"/ws/","type":"tmpfs","source":"tmpfs"}]})",
                        "/b");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(bind_mount_at(*r, "/ws"), nullptr);
  auto bound_by_option = parse_bundle(
      R"({"root":{"path":"/r"},"mounts":[{"destination":"/ws","type":"none","source":"/srv","options":["rbind","ro"]}]})",
      "/b");
  ASSERT_TRUE(bound_by_option);
  ASSERT_NE(bind_mount_at(*bound_by_option, "/ws"), nullptr);
}

TEST_F(OciBundle, FileErrors) {
  // No config.json.
  fs::create_directories(dir_ / "empty");
  auto missing = read_bundle(dir_ / "empty");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT) << missing.error().message;
  EXPECT_NE(missing.error().message.find((dir_ / "empty/config.json").string()), std::string::npos);

  // A symbolic link at the last component is not followed.
  fs::create_directories(dir_ / "link");
  fs::create_symlink(kData / "runc-spec.json", dir_ / "link/config.json");
  auto link = read_bundle(dir_ / "link");
  ASSERT_FALSE(link);
  EXPECT_EQ(link.error().code, ELOOP) << link.error().message;

  // Not a regular file.
  fs::create_directories(dir_ / "dir/config.json");
  auto directory = read_bundle(dir_ / "dir");
  ASSERT_FALSE(directory);
  EXPECT_NE(directory.error().message.find("not a regular file"), std::string::npos) << directory.error().message;

  // Too large.
  fs::create_directories(dir_ / "big");
  spit(dir_ / "big/config.json", std::string(kMaxConfigBytes + 1, ' '));
  auto big = read_bundle(dir_ / "big");
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, EFBIG) << big.error().message;

  EXPECT_FALSE(read_bundle(""));
}

TEST(OciBundleParse, RefusesWrongTypes) {
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"({})", "\"root\" is missing"},
      {R"({"root":"/r"})", "\"root\" must be an object, not string"},
      {R"({"root":{}})", "root.path is missing or empty"},
      {R"({"root":{"path":""}})", "root.path is missing or empty"},
      {R"({"root":{"path":1}})", "root.path must be a string, not number"},
      {R"({"root":{"path":"r","readonly":"yes"}})", "root.readonly must be true or false, not string"},
      {R"({"root":{"path":"r"},"annotations":[]})", "\"annotations\" must be an object, not array"},
      {R"({"root":{"path":"r"},"annotations":{"io.agentcage.policy":true}})",
       "annotation 'io.agentcage.policy' must be a string, not boolean"},
      {R"({"root":{"path":"r"},"mounts":{}})", "\"mounts\" must be an array, not object"},
      {R"({"root":{"path":"r"},"mounts":["/x"]})", "mounts[0] must be an object, not string"},
      {R"({"root":{"path":"r"},"mounts":[{"type":"bind"}]})", "mounts[0].destination is missing or empty"},
      {R"({"root":{"path":"r"},"mounts":[{"destination":"/a"},{"destination":2}]})",
       "mounts[1].destination must be a string, not number"},
      {R"({"root":{"path":"r"},"mounts":[{"destination":"/a","options":["ro",1]}]})",
       "mounts[0].options[1] must be a string, not number"},
      {R"({"root":{"path":"r"},"mounts":[{"destination":"/a","source":{}}]})",
       "mounts[0].source must be a string, not object"},
      {R"({"root":{"path":"r"},"process":[]})", "\"process\" must be an object, not array"},
      {R"({"root":{"path":"r"},"process":{"args":"sh"}})", "process.args must be an array of strings, not string"},
      {R"({"root":{"path":"r"},"linux":{"cgroupsPath":5}})", "linux.cgroupsPath must be a string, not number"},
      {R"({"root":{"path":"r"},"root":{"path":"s"}})", "the key 'root' appears twice"},
      {R"([])", "must be a JSON object, not array"},
      {R"({"root":)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto r = parse_bundle(c.json, "/b");
    ASSERT_FALSE(r) << c.json;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.json << " -> " << r.error().message;
    EXPECT_EQ(r.error().message.rfind("config.json: ", 0), 0u) << r.error().message;
  }
}

// The JSON parser quotes the bytes it read last; from a file someone else
// wrote they may be a terminal escape or not UTF-8 at all. The error shows
// them escaped (found by tests/fuzz/oci_fuzzer.cpp).
TEST(OciJson, AParseErrorShowsTheBytesItReadEscaped) {
  // 0x9b: a C1 CSI to some terminals, and no UTF-8 on its own.
  const std::string config = "{\"root\": \x9b" "2J}";
  auto r = parse_bundle(config, "/b");
  ASSERT_FALSE(r);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("\\x9b"), std::string::npos) << m;
  for (char c : m) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) << m;
}

// ---- annotations and ids ----------------------------------------------------

TEST(OciAnnotations, SandboxContainers) {
  // What containerd and CRI-O write on a pod's sandbox: the marker, and the
  // sandbox id that is the container's own.
  EXPECT_TRUE(is_sandbox_container(
      {{"io.kubernetes.cri.container-type", "sandbox"}, {"io.kubernetes.cri.sandbox-id", "3f9a"}}, "3f9a"));
  EXPECT_TRUE(is_sandbox_container(
      {{"io.kubernetes.cri-o.ContainerType", "sandbox"}, {"io.kubernetes.cri-o.SandboxID", "3f9a"}}, "3f9a"));
  // The marker alone (an image's own annotation under podman < 4.6, a
  // `docker run --annotation`), or a sandbox id that is another container's
  // (a workload container of the pod names its pod's), is no sandbox.
  EXPECT_FALSE(is_sandbox_container({{"io.kubernetes.cri.container-type", "sandbox"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container({{"io.kubernetes.cri-o.ContainerType", "sandbox"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container(
      {{"io.kubernetes.cri.container-type", "sandbox"}, {"io.kubernetes.cri.sandbox-id", "other"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container(
      {{"io.kubernetes.cri.container-type", "sandbox"}, {"io.kubernetes.cri-o.SandboxID", "3f9a"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container(
      {{"io.kubernetes.cri.container-type", "sandbox"}, {"io.kubernetes.cri.sandbox-id", ""}}, ""));
  EXPECT_FALSE(is_sandbox_container(
      {{"io.kubernetes.cri.container-type", "container"}, {"io.kubernetes.cri.sandbox-id", "3f9a"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container(
      {{"io.kubernetes.cri.container-type", "Sandbox"}, {"io.kubernetes.cri.sandbox-id", "3f9a"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container({{"io.agentcage.policy", "sandbox"}}, "3f9a"));
  EXPECT_FALSE(is_sandbox_container({}, "3f9a"));
  EXPECT_EQ(kPolicyAnnotation, "io.agentcage.policy");
  EXPECT_EQ(kWorkspaceAnnotation, "io.agentcage.workspace");
}

TEST(OciAnnotations, ContainerIds) {
  for (const std::string& id : {std::string("007dbf474cfa5f8849b1c8b0f4210ec66df1e40e3d9af6777ef3dd4f7d1bcc1f"), std::string("a"),
                               std::string("my_container.v2-1"), std::string("A9"), std::string(128, 'x')})
    EXPECT_TRUE(check_container_id(id)) << id;
  for (const std::string& id : {std::string(), std::string(129, 'x'), std::string(".hidden"), std::string("-x"),
                               std::string("a/b"), std::string("a b"), std::string("a\nb"), std::string("\xc3\xa4"),
                               std::string("..")}) {
    Status st = check_container_id(id);
    ASSERT_FALSE(st) << id;
    EXPECT_NE(st.error().message.find("is not valid (1 to 128 bytes"), std::string::npos) << st.error().message;
  }
}

// ---- hooks ------------------------------------------------------------------

HookEdit test_edit() {
  return HookEdit{Hook{"/usr/bin/agentcage", {"agentcage", "oci-hook", "--stage", "createRuntime"}, 30},
                  Hook{"/usr/bin/agentcage", {"agentcage", "oci-hook", "--stage", "poststop"}, 30}, std::nullopt};
}

// The config with agentcage's hooks taken out again (and empty stages and
// hooks removed), to compare with the original.
json without_added(json j, const HookEdit& e) {
  for (auto [stage, hook] : {std::pair{"createRuntime", &e.create_runtime}, std::pair{"poststop", &e.poststop}}) {
    json& s = j["hooks"][stage];
    json kept = json::array();
    for (const json& h : s)
      if (!(h["path"] == hook->path && h["args"] == json(hook->args))) kept.push_back(h);
    if (kept.empty())
      j["hooks"].erase(stage);
    else
      s = kept;
  }
  if (j["hooks"].empty()) j.erase("hooks");
  return j;
}

TEST(OciHooks, AddsBothStagesAndKeepsEverythingElse) {
  for (const char* file : {"podman-crun/createRuntime/config.json", "podman-runc/createRuntime/config.json",
                           "runc-spec.json", "crun-spec.json"}) {
    const std::string original = slurp(kData / file);
    auto edited = edit_config(original, test_edit());
    ASSERT_TRUE(edited) << file << ": " << edited.error().message;
    ASSERT_TRUE(*edited) << file;
    const json out = json::parse(**edited);
    EXPECT_EQ(without_added(out, test_edit()), json::parse(original)) << file;
    ASSERT_EQ(out["hooks"]["poststop"].size(), 1u) << file;
    EXPECT_EQ(out["hooks"]["poststop"][0],
              json::parse(R"({"path":"/usr/bin/agentcage","args":["agentcage","oci-hook","--stage","poststop"],"timeout":30})"));
    EXPECT_EQ(out["hooks"]["createRuntime"].back()["args"][3], "createRuntime") << file;
  }
  // The podman bundle's own createRuntime hook stays, first.
  auto podman = edit_config(slurp(kData / "podman-crun/createRuntime/config.json"), test_edit());
  ASSERT_TRUE(podman && *podman);
  const json hooks = json::parse(**podman)["hooks"]["createRuntime"];
  ASSERT_EQ(hooks.size(), 2u);
  EXPECT_EQ(hooks[0]["path"], "/src/agentcage/tests/data/oci/.scratch/hook");
  EXPECT_EQ(hooks[0]["timeout"], 60);
}

TEST(OciHooks, KeyOrderIsKept) {
  const std::string original = slurp(kData / "runc-spec.json");
  auto edited = edit_config(original, test_edit());
  ASSERT_TRUE(edited && *edited);
  std::vector<std::string> before, after;
  const auto original_json = nlohmann::ordered_json::parse(original);
  const auto edited_json = nlohmann::ordered_json::parse(**edited);
  for (const auto& [k, v] : original_json.items()) before.push_back(k);
  for (const auto& [k, v] : edited_json.items()) after.push_back(k);
  before.push_back("hooks");
  EXPECT_EQ(after, before);
}

TEST(OciHooks, Idempotent) {
  auto once = edit_config(slurp(kData / "runc-spec.json"), test_edit());
  ASSERT_TRUE(once && *once);
  auto twice = edit_config(**once, test_edit());
  ASSERT_TRUE(twice) << twice.error().message;
  EXPECT_FALSE(*twice);

  // Same path, other arguments: another hook, added.
  HookEdit other = test_edit();
  other.poststop.args.push_back("--extra");
  auto third = edit_config(**once, other);
  ASSERT_TRUE(third && *third);
  EXPECT_EQ(json::parse(**third)["hooks"]["poststop"].size(), 2u);
  EXPECT_EQ(json::parse(**third)["hooks"]["createRuntime"].size(), 1u);
}

TEST(OciHooks, SetsThePolicyAnnotation) {
  HookEdit e = test_edit();
  e.policy = "python-sandbox";
  auto added = edit_config(slurp(kData / "runc-spec.json"), e);  // no annotations at all
  ASSERT_TRUE(added && *added);
  EXPECT_EQ(json::parse(**added)["annotations"]["io.agentcage.policy"], "python-sandbox");

  const std::string annotated =
      R"({"root":{"path":"r"},"annotations":{"io.agentcage.policy":"other","keep":"me"}})";
  auto replaced = edit_config(annotated, e);
  ASSERT_TRUE(replaced && *replaced);
  EXPECT_EQ(json::parse(**replaced)["annotations"], json::parse(R"({"io.agentcage.policy":"python-sandbox","keep":"me"})"));
  // Hooks there and the policy the same: nothing to do.
  auto again = edit_config(**replaced, e);
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  // Hooks there, another policy: the annotation alone changes.
  e.policy = "third";
  auto changed = edit_config(**replaced, e);
  ASSERT_TRUE(changed && *changed);
  EXPECT_EQ(json::parse(**changed)["annotations"]["io.agentcage.policy"], "third");
}

TEST(OciHooks, RefusesWrongTypes) {
  HookEdit with_policy = test_edit();
  with_policy.policy = "p";
  struct Case {
    std::string json;
    const HookEdit& edit;
    const char* says;
  };
  const HookEdit plain = test_edit();
  const Case cases[] = {
      {R"({"root":{"path":"r"},"hooks":[]})", plain, "\"hooks\" must be an object, not array"},
      {R"({"root":{"path":"r"},"hooks":{"createRuntime":{}}})", plain, "hooks.createRuntime must be an array, not object"},
      {R"({"root":{"path":"r"},"hooks":{"poststop":"x"}})", plain, "hooks.poststop must be an array, not string"},
      {R"({"root":{"path":"r"},"annotations":"x"})", with_policy, "\"annotations\" must be an object, not string"},
      {R"({"hooks":{},"hooks":{}})", plain, "the key 'hooks' appears twice"},
      {R"([1])", plain, "must be a JSON object, not array"},
      {R"({)", plain, "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto r = edit_config(c.json, c.edit);
    ASSERT_FALSE(r) << c.json;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.json << " -> " << r.error().message;
  }
  HookEdit relative = test_edit();
  relative.poststop.path = "agentcage";
  auto r = edit_config(R"({"root":{"path":"r"}})", relative);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("hook path must be absolute"), std::string::npos) << r.error().message;
}

using OciHookFile = TempDir;

TEST_F(OciHookFile, RewritesAtomicallyKeepingTheMode) {
  const fs::path b = bundle_from(kData / "podman-runc/createRuntime/config.json");
  ASSERT_EQ(::chmod((b / "config.json").c_str(), 0640), 0);
  auto changed = add_hooks(b, test_edit());
  ASSERT_TRUE(changed) << changed.error().message;
  EXPECT_TRUE(*changed);
  struct stat st {};
  ASSERT_EQ(::stat((b / "config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_FALSE(fs::exists(b / "config.json.tmp"));
  const std::string after = slurp(b / "config.json");
  EXPECT_EQ(json::parse(after)["hooks"]["poststop"][0]["args"][3], "poststop");
  auto read = read_bundle(b);  // still a bundle
  ASSERT_TRUE(read) << read.error().message;

  auto again = add_hooks(b, test_edit());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(*again);
  EXPECT_EQ(slurp(b / "config.json"), after);
}

TEST_F(OciHookFile, AnErrorChangesNothing) {
  const fs::path b = dir_ / "bad";
  fs::create_directories(b);
  const std::string text = R"({"root":{"path":"rootfs"},"hooks":{"poststop":{}}})";
  spit(b / "config.json", text);
  auto r = add_hooks(b, test_edit());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find((b / "config.json").string()), std::string::npos) << r.error().message;
  EXPECT_EQ(slurp(b / "config.json"), text);
  EXPECT_FALSE(fs::exists(b / "config.json.tmp"));

  // A config.json.tmp already there (whoever put it): refused, not written through.
  const fs::path c = bundle_from(kData / "runc-spec.json", "planted");
  fs::create_symlink(dir_ / "elsewhere", c / "config.json.tmp");
  auto planted = add_hooks(c, test_edit());
  ASSERT_FALSE(planted);
  EXPECT_EQ(planted.error().code, EEXIST) << planted.error().message;
  EXPECT_EQ(slurp(c / "config.json"), slurp(kData / "runc-spec.json"));
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere"));

  // config.json a symbolic link: not followed, not replaced.
  const fs::path l = dir_ / "link";
  fs::create_directories(l);
  fs::create_symlink(kData / "runc-spec.json", l / "config.json");
  auto link = add_hooks(l, test_edit());
  ASSERT_FALSE(link);
  EXPECT_EQ(link.error().code, ELOOP) << link.error().message;
  EXPECT_TRUE(fs::is_symlink(l / "config.json"));
  EXPECT_FALSE(fs::exists(l / "config.json.tmp"));
}

TEST_F(OciHookFile, AFailedWriteLeavesNoTemporaryFile) {
  // The write of config.json.tmp fails (EFBIG: a file size limit below the
  // new config's size, which holds for root too): the old file stays and the
  // temporary one is removed.
  const fs::path b = bundle_from(kData / "runc-spec.json", "limited");
  const std::string before = slurp(b / "config.json");
  test::in_child([&]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit {64, 64};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed";
    auto r = add_hooks(b, test_edit());
    if (r) return "the rewrite succeeded beyond the file size limit";
    if (r.error().code != EFBIG) return "unexpected error: " + r.error().message;
    if (r.error().message.find("cannot write " + (b / "config.json.tmp").string()) == std::string::npos)
      return "the error does not name the file: " + r.error().message;
    return "";
  });
  EXPECT_EQ(slurp(b / "config.json"), before);
  EXPECT_FALSE(fs::exists(b / "config.json.tmp"));
}

// ---- runtime command lines --------------------------------------------------

std::vector<std::string> words(std::initializer_list<const char*> w) { return {w.begin(), w.end()}; }

TEST(OciRuntimeArgs, FindsTheSubcommandAndTheBundle) {
  struct Case {
    std::vector<std::string> argv;
    const char* subcommand;
    const char* bundle;
  };
  const Case cases[] = {
      // containerd's runc.v2 shim
      {words({"runc", "--root", "/run/containerd/runc/k8s.io", "--log", "/x/log.json", "--log-format", "json",
              "create", "--bundle", "/b", "--pid-file", "/x/init.pid", "id1"}),
       "create", "/b"},
      // podman with crun (tests/data/oci/podman-crun/createRuntime/init-cmdline)
      {words({"/usr/bin/crun", "--log-format=json", "--log", "/x/oci-log", "create", "--bundle", "/b", "--pid-file",
              "/x/pidfile", "id2"}),
       "create", "/b"},
      {words({"runc", "create", "-b", "/b", "id"}), "create", "/b"},
      {words({"runc", "create", "--bundle=/b", "id"}), "create", "/b"},
      {words({"runc", "create", "-bundle", "/b", "id"}), "create", "/b"},
      {words({"runc", "create", "-b=/b", "id"}), "create", "/b"},
      {words({"runc", "run", "-d", "--bundle", "/b", "id"}), "run", "/b"},
      {words({"runc", "run", "id"}), "run", ""},
      {words({"runc", "create", "id"}), "create", ""},
      // "create" as a value is not the subcommand, nor the bundle's flag's value a subcommand
      {words({"runc", "--root", "create", "create", "--bundle", "run", "id"}), "create", "run"},
      {words({"runc", "--log=create", "run", "--bundle", "create", "create"}), "run", "create"},
      {words({"runc", "create", "--pid-file", "-b", "id"}), "create", ""},
      {words({"runc", "create", "--console-socket", "/s", "--bundle", "relative/b", "id"}), "create", "relative/b"},
      {words({"runc", "-root", "/r", "--debug", "--systemd-cgroup", "--rootless", "false", "create", "id"}), "create", ""},
      {words({"runc", "--debug=false", "--criu", "/c", "create", "id"}), "create", ""},
      {words({"crun", "--cgroup-manager", "systemd", "--log-level", "debug", "create", "id"}), "create", ""},
      // a bundle flag after "--" is the id's business
      {words({"runc", "create", "--", "--bundle"}), "create", ""},
      // other subcommands: no bundle looked for
      {words({"runc", "--root", "/r", "start", "id"}), "start", ""},
      {words({"runc", "state", "id"}), "state", ""},
      {words({"runc", "delete", "--force", "id"}), "delete", ""},
      {words({"runc", "kill", "id", "9"}), "kill", ""},
      {words({"runc", "exec", "--process", "/p.json", "id"}), "exec", ""},
      {words({"runc", "features"}), "features", ""},
      {words({"runc", "--version"}), "", ""},
      {words({"runc", "-v"}), "", ""},
      {words({"runc"}), "", ""},
  };
  for (const Case& c : cases) {
    auto r = parse_runtime_args(c.argv);
    ASSERT_TRUE(r) << c.argv.back() << ": " << r.error().message;
    std::string line;
    for (const auto& w : c.argv) line += w + " ";
    EXPECT_EQ(r->subcommand, c.subcommand) << line;
    EXPECT_EQ(r->bundle.string(), c.bundle) << line;
    EXPECT_EQ(r->runtime_argv, c.argv) << line;  // nothing of the shim's to strip
    EXPECT_FALSE(r->real_runtime || r->policy || r->default_policy) << line;
  }
}

TEST(OciRuntimeArgs, FindsTheContainerId) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {words({"runc", "--root", "/r", "create", "--bundle", "/b", "--pid-file", "/x/init.pid", "id1"}),
       "id1"},
      {words({"runc", "create", "--pid-file", "-b", "id"}), "id"},
      {words({"runc", "run", "-d", "--no-pivot", "--bundle=/b", "id"}), "id"},
      {words({"runc", "create", "--", "--bundle"}), "--bundle"},
      {words({"runc", "restore", "--image-path", "/img", "--work-path", "/w", "--manage-cgroups-mode", "soft",
              "--bundle", "/b", "--detach", "id9"}),
       "id9"},
      {words({"runc", "create", "--bundle", "/b"}), ""},
      {words({"runc", "create", "--bundle", "/b", "--pidfd-socket", "/run/s", "ID"}), "ID"},  // runc 1.2
      {words({"runc", "start", "id"}), ""},  // no bundle, no id looked for
  };
  for (const auto& [argv, id] : cases) {
    auto r = parse_runtime_args(argv);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->container_id, id) << argv.back();
  }
  auto restore = parse_runtime_args(words({"runc", "restore", "--bundle", "/b", "id"}));
  ASSERT_TRUE(restore);
  EXPECT_EQ(restore->bundle, "/b");
}

TEST(OciRuntimeArgs, StripsTheShimsOwnFlags) {
  const auto argv = words({"agentcage-runc", "--agentcage-runtime=/usr/bin/crun", "--root", "/r",
                           "--agentcage-policy=python-sandbox", "--agentcage-default-policy=base", "create",
                           "--bundle", "/b", "id"});
  auto r = parse_runtime_args(argv);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->runtime_argv, words({"agentcage-runc", "--root", "/r", "create", "--bundle", "/b", "id"}));
  EXPECT_EQ(r->real_runtime, "/usr/bin/crun");
  EXPECT_EQ(r->policy, "python-sandbox");
  EXPECT_EQ(r->default_policy, "base");
  EXPECT_EQ(r->subcommand, "create");
  EXPECT_EQ(r->bundle, "/b");

  // dockerd 20.10's script for a runtime with runtimeArgs, as containerd's
  // runc.v2 shim runs it (seen in the VM: docs/containers.md, "Docker").
  const std::string task = "/e/containerd/daemon/io.containerd.runtime.v2.task/moby/c1";
  auto docker = parse_runtime_args(
      std::vector<std::string>({"/usr/bin/agentcage-runc", "--agentcage-policy=ctest-a", "--agentcage-runtime=/usr/sbin/runc", "--root",
             "/e/runtime-runc/moby", "--log", task + "/log.json", "--log-format", "json", "create", "--bundle", task,
             "--pid-file", task + "/init.pid", "c1"}));
  ASSERT_TRUE(docker) << docker.error().message;
  EXPECT_EQ(docker->runtime_argv,
            std::vector<std::string>({"/usr/bin/agentcage-runc", "--root", "/e/runtime-runc/moby", "--log", task + "/log.json",
                   "--log-format", "json", "create", "--bundle", task, "--pid-file", task + "/init.pid", "c1"}));
  EXPECT_EQ(docker->real_runtime, "/usr/sbin/runc");
  EXPECT_EQ(docker->policy, "ctest-a");
  EXPECT_FALSE(docker->default_policy);
  EXPECT_EQ(docker->subcommand, "create");
  EXPECT_EQ(docker->bundle, task);

  // After the subcommand a word is the runtime's, whatever it looks like.
  auto late = parse_runtime_args(words({"runc", "create", "--agentcage-policy=x", "id"}));
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_FALSE(late->policy);
  EXPECT_EQ(late->runtime_argv, words({"runc", "create", "--agentcage-policy=x", "id"}));
}

TEST(OciRuntimeArgs, Refusals) {
  struct Case {
    std::vector<std::string> argv;
    const char* says;
  };
  const Case cases[] = {
      {{}, "empty command line"},
      {words({"s", "--agentcage-policy", "p", "create", "id"}), "needs a value: --agentcage-policy=VALUE"},
      {words({"s", "--agentcage-policy=", "create", "id"}), "needs a value"},
      {words({"s", "--agentcage-polcy=p", "create", "id"}), "unknown flag '--agentcage-polcy=p'"},
      {words({"s", "--agentcage-policy=a", "--agentcage-policy=b", "create", "id"}), "given twice"},
      {words({"s", "--frobnicate", "create", "id"}), "unknown global flag '--frobnicate'"},
      {words({"s", "--root"}), "'--root' needs a value"},
      {words({"s", "create", "--bundle"}), "'--bundle' needs a value"},
      {words({"s", "create", "--bundle="}), "needs a directory"},
      {words({"s", "create", "-b", "/a", "--bundle", "/b", "id"}), "the bundle is given twice"},
      {words({"s", "create", "--config", "/c.json", "id"}), "a config file other than the bundle's"},
      {words({"s", "create", "-f", "/c.json", "id"}), "a config file other than the bundle's"},
      {words({"s", "run", "--config=/c.json", "id"}), "a config file other than the bundle's"},
      {words({"s", "--root", "/r", "", "--agentcage-policy=p", "create"}), "an empty word where the subcommand goes"},
  };
  for (const Case& c : cases) {
    auto r = parse_runtime_args(c.argv);
    ASSERT_FALSE(r) << (c.argv.empty() ? "" : c.argv[1]);
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("runtime arguments: ", 0), 0u) << r.error().message;
  }
  EXPECT_TRUE(creates_container("create"));
  EXPECT_TRUE(creates_container("run"));
  EXPECT_FALSE(creates_container("start"));
  EXPECT_FALSE(creates_container(""));
}

}  // namespace
}  // namespace agentcage::oci
