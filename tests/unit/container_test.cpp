// SPDX-License-Identifier: Apache-2.0
// The OCI hook's decisions (container/hook.h) on a real bundle directory and
// a stand-in /proc, with the daemon replaced by a function; and the daemon's
// container records (daemon/containers.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/temp_dir.h"
#include "container/hook.h"
#include "oci/annotations.h"
#include "daemon/containers.h"
#include "util/file.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::TempDir;

constexpr int kPid = 4242;
const std::string kId = "3f9a0c1d2e";

// A bundle as podman or runc leave it: config.json and a root file system
// directory, with the mounts the test asks for.
struct Fixture {
  TempDir tmp{"ac-container-test"};
  fs::path bundle, rootfs, proc;
  std::vector<json> mounts;
  std::vector<std::string> sent;  // requests the "daemon" got
  json answer = {{"ok", true}};

  Fixture() {
    bundle = tmp.path() / "bundle";
    rootfs = bundle / "rootfs";
    proc = tmp.path() / "proc";
    fs::create_directories(rootfs / "workspace");
    fs::create_directories(rootfs / "data");
    fs::create_directories(proc / std::to_string(kPid));
    // The init is parked before pivot_root: its /proc/PID/root is the
    // runtime's root, where the bundle's rootfs lies at its host path.
    fs::create_directory_symlink("/", proc / std::to_string(kPid) / "root");
    set_cgroup("0::/machine.slice/libpod-" + kId + ".scope\n");
    mounts = {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
              {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", {"nosuid"}}}};
  }
  void set_cgroup(const std::string& text) const {
    std::ofstream(proc / std::to_string(kPid) / "cgroup") << text;
  }
  void bind(const std::string& source, const std::string& dest) {
    mounts.push_back({{"destination", dest}, {"type", "bind"}, {"source", source}, {"options", {"rbind", "rw"}}});
  }
  void write_config() const {
    json config = {{"ociVersion", "1.0.2-dev"},
                   {"process", {{"args", {"/usr/bin/python3", "main.py"}}, {"cwd", "/"}, {"user", {{"uid", 0}, {"gid", 0}}}}},
                   {"root", {{"path", "rootfs"}, {"readonly", false}}},
                   {"hostname", "c"},
                   {"mounts", mounts},
                   {"linux", {{"cgroupsPath", "machine.slice:libpod:" + kId}, {"namespaces", json::array()}}}};
    std::ofstream(bundle / "config.json") << config.dump(2);
  }
  oci::State state(std::map<std::string, std::string> annotations) const {
    oci::State s;
    s.oci_version = "1.0.2-dev";
    s.id = kId;
    s.status = "creating";
    s.pid = kPid;
    s.bundle = bundle;
    s.annotations = std::move(annotations);
    return s;
  }
  container::HookEnv env() {
    container::HookEnv e;
    e.proc = proc.string();
    e.own_cgroup = "system.slice/podman.service";
    e.ask_daemon = [this](const json& req) -> Result<json> {
      sent.push_back(req.dump());
      return answer;
    };
    return e;
  }
};

std::string error_of(const Result<json>& r) { return r ? std::string("(no error)") : r.error().message; }

TEST(OciHook, AnUnannotatedContainerIsLeftAlone) {
  Fixture f;
  f.write_config();
  auto env = f.env();
  auto req = container::attach_request(f.state({{"org.opencontainers.image.title", "x"}}), env);
  ASSERT_TRUE(req.ok()) << req.error().message;
  EXPECT_TRUE(req->is_null());
  auto out = container::run_hook(container::Stage::create_runtime, f.state({}), env);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->acted);
  auto post = container::run_hook(container::Stage::poststop, f.state({}), env);
  ASSERT_TRUE(post.ok());
  EXPECT_FALSE(post->acted);
  EXPECT_TRUE(f.sent.empty());  // the daemon was never asked
}

TEST(OciHook, KubernetesSandboxContainersAreLeftAlone) {
  Fixture f;
  f.write_config();
  for (const auto& [key, id_key] : std::map<std::string, std::string>{
           {"io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id"},
           {"io.kubernetes.cri-o.ContainerType", "io.kubernetes.cri-o.SandboxID"}}) {
    auto req = container::attach_request(
        f.state({{"io.agentcage.policy", "python-sandbox"}, {key, "sandbox"}, {id_key, kId}}), f.env());
    ASSERT_TRUE(req.ok()) << req.error().message;
    EXPECT_TRUE(req->is_null()) << key;
    // A container that only says it is one (an image's annotations, which
    // podman before 4.6 copies into config.json) is confined all the same.
    auto marked = container::attach_request(
        f.state({{"io.agentcage.policy", "python-sandbox"}, {key, "sandbox"}, {id_key, "another-id"}}),
        f.env());
    ASSERT_TRUE(marked.ok()) << marked.error().message;
    EXPECT_FALSE(marked->is_null()) << key;
    auto bare = container::attach_request(
        f.state({{"io.agentcage.policy", "python-sandbox"}, {key, "sandbox"}}), f.env());
    ASSERT_TRUE(bare.ok()) << bare.error().message;
    EXPECT_FALSE(bare->is_null()) << key;
  }
}

TEST(OciHook, AnAnnotatedContainerIsConfinedArmedAtItsInitsExec) {
  Fixture f;
  f.bind(f.tmp.path() / "host-ws", "/workspace");
  f.write_config();
  auto env = f.env();
  auto out = container::run_hook(container::Stage::create_runtime,
                                 f.state({{"io.agentcage.policy", "python-sandbox"},
                                          {"io.kubernetes.pod.name", "agent-7"},
                                          {"io.kubernetes.pod.namespace", "Bad Namespace\n"}}),
                                 env);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(out->acted);
  ASSERT_EQ(f.sent.size(), 1u);
  const json sent = json::parse(f.sent[0]);
  EXPECT_EQ(sent, json::parse(R"({"op":"attach","cgroup":"machine.slice/libpod-3f9a0c1d2e.scope",
      "policy":"python-sandbox","container_id":"3f9a0c1d2e","arm_pid":4242,"workspace":"/workspace",
      "labels":{"k8s.pod":"agent-7"}})"));
}

TEST(OciHook, TheWorkspaceAnnotationNamesABindMountReachedWithoutALink) {
  Fixture f;
  f.bind(f.tmp.path() / "host-data", "/data");
  f.write_config();
  auto req = container::attach_request(
      f.state({{"io.agentcage.policy", "p"}, {"io.agentcage.workspace", "/data"}}), f.env());
  ASSERT_TRUE(req.ok()) << req.error().message;
  EXPECT_EQ((*req)["workspace"], "/data");

  // Not a mount of the container: the image's own tree is never a workspace.
  auto no_mount = container::attach_request(
      f.state({{"io.agentcage.policy", "p"}, {"io.agentcage.workspace", "/workspace"}}), f.env());
  EXPECT_NE(error_of(no_mount).find("has no bind mount there"), std::string::npos) << error_of(no_mount);
  // Not a normalised absolute path.
  for (const char* bad : {"data", "/data/", "/data/../etc", "/", "//data"}) {
    auto r = container::attach_request(f.state({{"io.agentcage.policy", "p"}, {"io.agentcage.workspace", bad}}),
                                       f.env());
    EXPECT_NE(error_of(r).find("not a normalised absolute path"), std::string::npos) << bad << ": " << error_of(r);
  }
  // A symbolic link in the image where the mount goes.
  fs::remove(f.rootfs / "data");
  fs::create_directory_symlink("/workspace", f.rootfs / "data");
  auto linked = container::attach_request(
      f.state({{"io.agentcage.policy", "p"}, {"io.agentcage.workspace", "/data"}}), f.env());
  EXPECT_NE(error_of(linked).find("without a symbolic link"), std::string::npos) << error_of(linked);
}

TEST(OciHook, WithoutAWorkspaceMountNoneIsSent) {
  Fixture f;
  f.write_config();
  auto req = container::attach_request(f.state({{"io.agentcage.policy", "p"}}), f.env());
  ASSERT_TRUE(req.ok()) << req.error().message;
  EXPECT_FALSE(req->contains("workspace"));
}

TEST(OciHook, WhatMustKeepTheContainerFromStarting) {
  Fixture f;
  f.write_config();
  auto env = f.env();
  auto ask = [&](const oci::State& s) { return error_of(container::attach_request(s, env)); };
  // A path, never a file, from an annotation.
  EXPECT_NE(ask(f.state({{"io.agentcage.policy", "/etc/agentcage/policies/p.yaml"}})).find("not a policy name"),
            std::string::npos);
  EXPECT_NE(ask(f.state({{"io.agentcage.policy", "../p"}})).find("never a file"), std::string::npos);
  // The annotation is the container author's text: quoted, never a second line in a log.
  const std::string forged = ask(f.state({{"io.agentcage.policy", "p\nagentcage: info: all is well"}}));
  EXPECT_EQ(forged.find('\n'), std::string::npos) << forged;
  EXPECT_NE(forged.find("not a policy name"), std::string::npos) << forged;
  oci::State no_pid = f.state({{"io.agentcage.policy", "p"}});
  no_pid.pid = 0;
  EXPECT_NE(ask(no_pid).find("names no process"), std::string::npos);
  oci::State bad_id = f.state({{"io.agentcage.policy", "p"}});
  bad_id.id = "../../x";
  EXPECT_NE(ask(bad_id).find("container id '../../x' is not valid"), std::string::npos) << ask(bad_id);
  f.set_cgroup("0::/\n");
  EXPECT_NE(ask(f.state({{"io.agentcage.policy", "p"}})).find("root cgroup"), std::string::npos);
  f.set_cgroup("0::/system.slice/podman.service\n");
  EXPECT_NE(ask(f.state({{"io.agentcage.policy", "p"}})).find("hook's own cgroup"), std::string::npos);
  f.set_cgroup("1:name=systemd:/x\n");
  EXPECT_NE(ask(f.state({{"io.agentcage.policy", "p"}})).find("no cgroup v2"), std::string::npos);
  f.set_cgroup("0::/machine.slice/c.scope\n");
  fs::remove(f.bundle / "config.json");
  EXPECT_NE(ask(f.state({{"io.agentcage.policy", "p"}})).find("is not started"), std::string::npos);
  // The daemon refuses, or cannot be asked: the hook fails with its words.
  f.write_config();
  f.answer = {{"ok", false}, {"error", "no policy named 'p' is loaded by the daemon"}};
  auto refused = container::run_hook(container::Stage::create_runtime, f.state({{"io.agentcage.policy", "p"}}), env);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("the agentcage daemon refused: no policy named 'p'"), std::string::npos);
  env.ask_daemon = [](const json&) -> Result<json> { return Error{"connect: No such file or directory", ENOENT}; };
  auto down = container::run_hook(container::Stage::create_runtime, f.state({{"io.agentcage.policy", "p"}}), env);
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.error().message.find("cannot be asked"), std::string::npos);
}

TEST(OciHook, PoststopReleasesByIdAndKeepsTheResult) {
  Fixture f;
  f.write_config();
  const fs::path results = f.tmp.path() / "results";
  fs::create_directory(results);
  f.answer = {{"ok", true}, {"container_id", kId}, {"denied", 2}, {"records", json::array()}};
  auto env = f.env();
  env.result_dir = results.string();
  oci::State s = f.state({{"io.agentcage.policy", "p"}});
  s.pid = 0;  // gone by poststop
  s.status = "stopped";
  auto out = container::run_hook(container::Stage::poststop, s, env);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(out->acted);
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(json::parse(f.sent[0]), json::parse(R"({"op":"detach","container_id":"3f9a0c1d2e"})"));
  auto kept = read_regular_file((results / (kId + ".json")).string(), 1 << 20);
  ASSERT_TRUE(kept.ok()) << kept.error().message;
  EXPECT_EQ(json::parse(*kept), f.answer);
  struct stat st {};
  ASSERT_EQ(::stat((results / (kId + ".json")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(ContainerIndex, RecordsSurviveARestartAndBadFilesAreNamed) {
  TempDir state("ac-containers-test");
  daemon::ContainerScope c;
  c.id = kId;
  c.cgroup_id = 777;
  c.cgroup = "/sys/fs/cgroup/machine.slice/c.scope";
  c.policy = "python-sandbox";
  c.slot = 5;
  c.workspace = "/workspace";
  c.labels = {{"k8s.pod", "agent-7"}};
  c.attached_ns = 1700000000123456789;
  {
    daemon::ContainerIndex idx(state.path().string());
    EXPECT_TRUE(idx.load().empty());  // no directory yet: nothing, no warning
    ASSERT_TRUE(idx.add(c).ok());
    EXPECT_EQ(idx.id_of_scope(777), kId);
    EXPECT_EQ(idx.id_of_scope(778), "");
  }
  struct stat st {};
  ASSERT_EQ(::stat((state.path() / "containers" / (kId + ".json")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  state.write("containers/broken.json", "{\"container_id\": 3}");
  state.write("containers/other.json", daemon::to_record_json(c));  // a name that is not its id
  daemon::ContainerIndex again(state.path().string());
  auto warnings = again.load();
  ASSERT_EQ(warnings.size(), 2u);
  std::string all = warnings[0] + "\n" + warnings[1];
  EXPECT_NE(all.find("broken.json: container record: \"container_id\" must be a string"), std::string::npos) << all;
  EXPECT_NE(all.find("other.json: its container_id is " + kId), std::string::npos) << all;
  const daemon::ContainerScope* back = again.find(kId);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(daemon::to_record_json(*back), daemon::to_record_json(c));
  EXPECT_EQ(again.id_of_scope(777), kId);
  ASSERT_TRUE(again.remove(kId).ok());
  EXPECT_EQ(again.find(kId), nullptr);
  EXPECT_EQ(again.id_of_scope(777), "");
  EXPECT_FALSE(fs::exists(state.path() / "containers" / (kId + ".json")));
  EXPECT_TRUE(again.remove(kId).ok());  // twice is not an error
}

TEST(ContainerIndex, RecordsAreParsedStrictly) {
  daemon::ContainerScope c;
  c.id = "abc";
  c.cgroup_id = 9;
  c.cgroup = "/x";
  c.policy = "p";
  json good = json::parse(daemon::to_record_json(c));
  ASSERT_TRUE(daemon::parse_record_json(good.dump()).ok());
  for (const char* key : {"container_id", "cgroup_id", "cgroup", "policy", "slot", "workspace", "labels", "attached_ns"}) {
    json j = good;
    j.erase(key);
    EXPECT_FALSE(daemon::parse_record_json(j.dump()).ok()) << key;
  }
  json zero = good;
  zero["cgroup_id"] = 0;
  EXPECT_FALSE(daemon::parse_record_json(zero.dump()).ok());
  json bad_id = good;
  bad_id["container_id"] = "../x";
  EXPECT_FALSE(daemon::parse_record_json(bad_id.dump()).ok());
  EXPECT_FALSE(daemon::parse_record_json("not json").ok());
}

}  // namespace
}  // namespace agentcage
