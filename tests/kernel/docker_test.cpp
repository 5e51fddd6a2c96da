// SPDX-License-Identifier: Apache-2.0
// Docker's containers confined through the runtime shim, end to end: Debian's
// dockerd 20.10 with its own containerd 1.6 and runc, the runtime
// `agentcage-ctest-a` configured in daemon.json as build/agentcage-runc with
// `runtimeArgs` naming the policy (Docker 20.10 has no --annotation), and a
// real agentcage daemon. A container run with that runtime is denied other
// programs, a host file bound into it and the network, writes its workspace,
// and its audit lines carry its id; one run with the plain runc is untouched;
// one whose runtime names a policy the daemon does not have does not start.
//
// One dockerd serves the whole suite (its start takes about 20 s in the VM):
// no network (--bridge=none, no iptables), vfs storage, data and exec roots on
// a tmpfs of its own, the cgroupfs driver (no systemd in the VM). No registry:
// the image is a skeleton root imported from a tar, with the host's /usr bound
// read-only into each container. The VM's kernel has AppArmor and the host no
// apparmor_parser, so the containers run with apparmor=unconfined.
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "container_env.h"
#include "daemon_env.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kDockerd = "/usr/sbin/dockerd";
constexpr const char* kDocker = "/usr/bin/docker";  // Debian's client, not another one in the PATH
constexpr const char* kImage = "ac-test";

fs::path shim_bin() { return fs::path(agentcage_bin()).parent_path() / "agentcage-runc"; }

class Docker : public DaemonEnv {
 protected:
  // The suite's dockerd; setup_error_ says why it is not there.
  static inline fs::path scratch_;
  static inline pid_t dockerd_ = -1;
  static inline std::string setup_error_;

  struct Ran {
    int status = -1;
    std::string output;
  };

  // /usr/bin/docker against the suite's dockerd; output is stdout and stderr.
  static Ran docker(const std::vector<std::string>& args, const fs::path& out) {
    std::vector<std::string> argv = {kDocker, "--host", "unix://" + (scratch_ / "docker.sock").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::error_code ec;
    fs::remove(out, ec);
    Ran r;
    r.status = wait_exit(spawn(argv, out, {"DOCKER_CONFIG=" + (scratch_ / "client").string()}).pid);
    r.output = slurp(out);
    return r;
  }

  static std::string dockerd_log() { return "dockerd's log:\n" + slurp(scratch_ / "dockerd.log"); }

  static void SetUpTestSuite() {
    for (const char* bin :
         {kDockerd, kDocker, "/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc"})
      if (!fs::exists(bin)) {
        setup_error_ = std::string(bin) +
                       " is missing: Docker's daemon is needed (Debian packages docker.io containerd runc: "
                       "scripts/install-deps)";
        return;
      }
    if (!fs::exists(shim_bin())) {
      setup_error_ = shim_bin().string() + " is missing: build the target agentcage-runc";
      return;
    }
    char tmpl[] = "/tmp/ac-docker-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr || ::mount("ac-docker", tmpl, "tmpfs", 0, "mode=0711") != 0) {
      setup_error_ = std::string("cannot make a tmpfs for dockerd at ") + tmpl + ": " + std::strerror(errno);
      return;
    }
    scratch_ = tmpl;
    // The image: a merged-/usr skeleton, /usr bound in at run time.
    const fs::path rootfs = scratch_ / "rootfs";
    for (const char* d : {"usr", "etc", "proc", "sys", "dev", "tmp", "run", "var/tmp", "root", "workspace"})
      fs::create_directories(rootfs / d);
    for (const char* d : {"bin", "sbin", "lib", "lib64"})
      if (fs::exists(fs::path("/") / d)) fs::create_directory_symlink(fs::path("usr") / d, rootfs / d);
    // One runtime per policy: agentcage-runc with the policy in runtimeArgs.
    const json config = {
        {"runtimes",
         {{"agentcage-ctest-a",
           {{"path", shim_bin().string()},
            {"runtimeArgs", {"--agentcage-policy=ctest-a", "--agentcage-runtime=/usr/sbin/runc"}}}},
          {"agentcage-nope",
           {{"path", shim_bin().string()},
            {"runtimeArgs", {"--agentcage-policy=nope", "--agentcage-runtime=/usr/sbin/runc"}}}}}}};
    std::ofstream(scratch_ / "daemon.json") << config.dump(2);
    dockerd_ =
        spawn({kDockerd, "--config-file", (scratch_ / "daemon.json").string(), "--data-root",
               (scratch_ / "data").string(), "--exec-root", (scratch_ / "exec").string(), "--pidfile",
               (scratch_ / "dockerd.pid").string(), "--host", "unix://" + (scratch_ / "docker.sock").string(),
               "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false",
               "--ip-masq=false", "--storage-driver=vfs", "--exec-opt", "native.cgroupdriver=cgroupfs"},
              scratch_ / "dockerd.log")
            .pid;
    Ran version;
    const bool up = wait_until(
        [&] {
          version = docker({"version"}, scratch_ / "version.out");
          return version.status == 0;
        },
        120s);
    if (!up) {
      setup_error_ = "dockerd did not answer within 120 s: " + version.output + "\n" + dockerd_log();
      return;
    }
    // `docker import FILE REPOSITORY`: the image from a tar of the skeleton.
    Proc tar = spawn({"/usr/bin/tar", "-C", rootfs.string(), "-cf", (scratch_ / "rootfs.tar").string(), "."},
                     scratch_ / "tar.out");
    if (wait_exit(tar.pid) != 0) {
      setup_error_ = "tar of the image root failed: " + slurp(scratch_ / "tar.out");
      return;
    }
    Ran imported = docker({"import", (scratch_ / "rootfs.tar").string(), kImage}, scratch_ / "import.out");
    if (imported.status != 0)
      setup_error_ = "docker import failed: " + imported.output + "\n" + dockerd_log();
  }

  // dockerd stopped (it stops its containerd), whatever it left behind
  // killed by pid (only processes naming this suite's directory), every
  // mount under the directory undone.
  static void TearDownTestSuite() {
    if (dockerd_ > 0) {
      ::kill(dockerd_, SIGTERM);
      int status = 0;
      if (!wait_until([&] { return ::waitpid(dockerd_, &status, WNOHANG) == dockerd_; }, 30s)) {
        ::kill(dockerd_, SIGKILL);
        wait_exit(dockerd_);
      }
      dockerd_ = -1;
    }
    if (scratch_.empty()) return;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      std::string cmdline = slurp(e.path() / "cmdline");
      if (has(cmdline, scratch_.string())) ::kill(std::stoi(name), SIGKILL);
    }
    std::vector<std::string> mounts;
    std::istringstream info(slurp("/proc/self/mountinfo"));
    for (std::string line; std::getline(info, line);) {
      std::istringstream fields(line);
      std::string id, parent, dev, root, point;
      fields >> id >> parent >> dev >> root >> point;
      if (point == scratch_.string() || point.rfind(scratch_.string() + "/", 0) == 0) mounts.push_back(point);
    }
    std::sort(mounts.begin(), mounts.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (const auto& m : mounts) ::umount2(m.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(scratch_, ec);
    scratch_.clear();
  }

  void SetUp() override {
    DaemonEnv::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    write_file(dir_ / "policies" / "ctest-a.yaml", container_policy("ctest-a"));
    fs::create_directories(dir_ / "secret");
    std::ofstream(dir_ / "secret" / "token") << "s3cr3t\n";
    start_daemon();
    ASSERT_TRUE(wait_until([&] { return named_slot(status(), "ctest-a").has_value(); }, 60s)) << log();
  }

  void TearDown() override {
    // Containers left by a failed test go before the agentcage daemon, so
    // their poststop hook still reaches it.
    if (dockerd_ > 0) {
      Ran ps = docker({"ps", "--all", "--quiet"}, dir_ / "ps.out");
      std::istringstream ids(ps.output);
      for (std::string id; ids >> id;) (void)docker({"rm", "--force", id}, dir_ / "rm.out");
    }
    DaemonEnv::TearDown();
  }

  // `docker run` of container_attempts() with the workspace, the secret and
  // the probe bound in, under `runtime` ("" for Docker's default, runc).
  Ran run_container(const std::string& tag, const std::string& runtime) {
    std::vector<std::string> args = container_run_options(dir_, tag);
    args.insert(args.end(),
                {"--network", "none", "--security-opt", "apparmor=unconfined", "-v", "/usr:/usr:ro"});
    if (!runtime.empty()) args.insert(args.end(), {"--runtime", runtime});
    args.push_back(kImage);
    const std::vector<std::string> command = container_attempts();
    args.insert(args.end(), command.begin(), command.end());
    return docker(args, dir_ / (tag + ".out"));
  }
};

TEST_F(Docker, ARuntimePerPolicyConfinesItsContainersFromTheEntrypointOn) {
  Ran r = run_container("confined", "agentcage-ctest-a");
  const std::string id = read_cidfile(dir_ / "confined.cid");
  ASSERT_FALSE(id.empty()) << r.output << dockerd_log();
  EXPECT_EQ(r.status, 0) << r.output << log() << dockerd_log();
  // A host file bound in, other paths, the network, other programs: denied.
  EXPECT_TRUE(has(r.output, "read /secret/token: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "write /tmp/x: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "connect 127.0.0.1:9: EACCES")) << r.output;
  EXPECT_TRUE(has(r.output, "id-exit 126")) << r.output;
  // What the policy allows works: its libraries, its workspace.
  EXPECT_TRUE(has(r.output, "read /usr/lib/os-release: ok")) << r.output;
  EXPECT_TRUE(has(r.output, "write /workspace/out: ok")) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "ws-confined" / "out"));
  // The audit line of the denied read names the container and the policy.
  json line = wait_for_audit_line(dir_ / "audit.jsonl",
                                  [](const json& j) { return j.value("target", "") == "/secret/token"; });
  ASSERT_TRUE(line.is_object()) << slurp(dir_ / "audit.jsonl");
  EXPECT_EQ(line["container_id"], id) << line.dump();
  EXPECT_EQ(line["policy"], "ctest-a") << line.dump();
  EXPECT_EQ(line["decision"], "deny") << line.dump();
  // runc ran the poststop hook at `docker run --rm`'s delete: released.
  ASSERT_TRUE(wait_until([&] { return has(log(), "released container " + id); }, 30s)) << log();
  EXPECT_TRUE(status().value("containers", json::array()).empty()) << status().dump();
}

TEST_F(Docker, ThePlainRuntimeLeavesAContainerUntouched) {
  Ran r = run_container("plain", "");
  const std::string id = read_cidfile(dir_ / "plain.cid");
  ASSERT_FALSE(id.empty()) << r.output << dockerd_log();
  EXPECT_EQ(r.status, 0) << r.output << dockerd_log();
  EXPECT_TRUE(has(r.output, "read /secret/token: ok")) << r.output;
  EXPECT_TRUE(has(r.output, "write /tmp/x: ok")) << r.output;
  EXPECT_TRUE(has(r.output, "connect 127.0.0.1:9: ECONNREFUSED")) << r.output;
  EXPECT_TRUE(has(r.output, "id-exit 0")) << r.output;
  EXPECT_FALSE(has(slurp(dir_ / "audit.jsonl"), id));
  EXPECT_FALSE(has(log(), id)) << log();
  EXPECT_TRUE(status().value("containers", json::array()).empty()) << status().dump();
}

TEST_F(Docker, AContainerWhoseHookFailsDoesNotStart) {
  // agentcage-nope names a policy the daemon has not loaded: the daemon
  // refuses, the hook fails, runc does not start the entrypoint.
  Ran r = run_container("refused", "agentcage-nope");
  EXPECT_EQ(r.status, 125) << r.output;
  EXPECT_TRUE(has(r.output, "agentcage oci-hook: container ")) << r.output;
  EXPECT_FALSE(has(r.output, "write /workspace/out")) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "ws-refused" / "out"));
  EXPECT_TRUE(status().value("containers", json::array()).empty()) << status().dump();
}

}  // namespace
}  // namespace agentcage::kt
