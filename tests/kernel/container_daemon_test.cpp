// SPDX-License-Identifier: Apache-2.0
// The daemon's side of a container's confinement (what `agentcage oci-hook`
// asks at createRuntime and poststop), driven over the control socket with a
// process that stands in for a runtime's parked init: the scope is pending
// while the "runtime" still works in the cgroup, armed by the init's exec,
// audited with the container id, released by id once the cgroup is gone, and
// swept when no poststop comes.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <string>

#include "daemon_env.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class ContainerDaemon : public DaemonEnv {
 protected:
  void TearDown() override {
    for (const std::string& id : ids_) (void)control({{"op", "detach"}, {"container_id", id}});
    for (pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    for (auto& cg : cgroups_)
      if (cg.fd() >= 0) (void)cg.remove();
    DaemonEnv::TearDown();
  }

  cgroup::Cgroup& make_cgroup(const std::string& tag) {
    auto cg = cgroup::Cgroup::create(root_, root_, "ac-ctr-" + tag + "-" + std::to_string(::getpid()));
    EXPECT_TRUE(cg) << cg.error().message;
    cgroups_.push_back(std::move(*cg));
    return cgroups_.back();
  }

  // A parked "init" in `cg`: it waits for a byte on `go`, then does what a
  // runtime does before the entrypoint (opens a file the policy denies, and
  // reports the errno on `report`), then execs ARGV with stdout/stderr to
  // `out`.
  pid_t park_init(cgroup::Cgroup& cg, int go, int report, const std::vector<std::string>& argv,
                  const fs::path& out) {
    auto pid = cgroup::spawn_in_cgroup(cg.fd(), [&]() -> int {
      char b;
      if (::read(go, &b, 1) != 1) return 90;
      int fd = ::open("/etc/passwd", O_RDONLY | O_CLOEXEC);
      const char err = static_cast<char>(fd < 0 ? errno : 0);
      if (fd >= 0) ::close(fd);
      if (::write(report, &err, 1) != 1) return 91;
      int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, 1);
      ::dup2(o, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      return 92;
    });
    EXPECT_TRUE(pid) << pid.error().message;
    if (!pid) return -1;
    pids_.push_back(*pid);
    return *pid;
  }

  json attach(const cgroup::Cgroup& cg, const std::string& id, pid_t pid, const std::string& workspace = "/workspace") {
    ids_.push_back(id);
    json req = {{"op", "attach"},     {"cgroup", cg.path().string()}, {"policy", "dtest"},
                {"container_id", id}, {"arm_pid", pid},               {"workspace", workspace},
                {"labels", {{"k8s.pod", "agent-7"}}}};
    auto r = control(req);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : json::object();
  }

  std::vector<std::string> ids_;
  std::vector<pid_t> pids_;
  std::deque<cgroup::Cgroup> cgroups_;  // stable references: make_cgroup hands them out
};

bool has_container(const json& st, const std::string& id) {
  for (const auto& c : st.value("containers", json::array()))
    if (c.value("container_id", std::string()) == id) return true;
  return false;
}

bool has_scope(const json& st, uint64_t cgroup_id) {
  for (const auto& s : st.value("scopes", json::array()))
    if (s.value("cgroup_id", uint64_t{0}) == cgroup_id) return true;
  return false;
}

TEST_F(ContainerDaemon, PendingUntilTheInitExecsThenConfinedAuditedAndReleasedById) {
  start_daemon();
  auto& cg = make_cgroup("arm");
  int go[2], report[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const fs::path out = dir_ / "entry.out";
  const pid_t init = park_init(cg, go[0], report[1], {"/usr/bin/cat", "/etc/passwd"}, out);
  ASSERT_GT(init, 0);

  const std::string id = "ctr-arm-" + std::to_string(::getpid());
  json reply = attach(cg, id, init);
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump() << log();
  EXPECT_EQ(reply["container_id"], id);
  EXPECT_EQ(reply["arm_pid"], init);
  json st = status();
  EXPECT_TRUE(has_container(st, id)) << st.dump();
  EXPECT_TRUE(fs::exists("/run/agentcage/containers/" + id + ".json"));

  // The "runtime's" last steps in the cgroup run unconfined (pending) ...
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  char err = -1;
  ASSERT_EQ(::read(report[0], &err, 1), 1);
  EXPECT_EQ(err, 0) << "a pending scope denied the init's open before its exec";
  // ... and the entrypoint is confined from its exec: cat runs (allowed) and
  // cannot read /etc/passwd.
  EXPECT_EQ(wait_exit(init), 1) << slurp(out);
  EXPECT_NE(slurp(out).find("Permission denied"), std::string::npos) << slurp(out);
  // Confined for good: a second process in the cgroup is denied too.
  EXPECT_EQ(open_in(cg, "/etc/passwd"), EACCES);
  EXPECT_EQ(open_in(cg, "/etc/hostname"), 0);

  // The audit line names the container and carries its labels.
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string audit = slurp(dir_ / "audit.jsonl");
        return audit.find("\"container_id\":\"" + id + "\"") != std::string::npos &&
               audit.find("\"k8s.pod\":\"agent-7\"") != std::string::npos;
      },
      60s))
      << slurp(dir_ / "audit.jsonl");

  // poststop: the cgroup is gone first, then the release by id.
  ASSERT_TRUE(cg.remove().ok());
  auto released = control({{"op", "detach"}, {"container_id", id}});
  ASSERT_TRUE(released) << released.error().message;
  ASSERT_TRUE(released->value("ok", false)) << released->dump();
  EXPECT_EQ((*released)["container_id"], id);
  EXPECT_EQ((*released)["policy"], "dtest");
  EXPECT_GE((*released)["denied"].get<uint64_t>(), 2u);
  bool passwd = false;
  for (const auto& r : (*released)["records"]) passwd |= r.value("target", std::string()) == "/etc/passwd";
  EXPECT_TRUE(passwd) << released->dump();
  st = status();
  EXPECT_FALSE(has_container(st, id));
  EXPECT_FALSE(has_scope(st, released->value("cgroup_id", uint64_t{0})));
  EXPECT_FALSE(fs::exists("/run/agentcage/containers/" + id + ".json"));
  auto again = control({{"op", "detach"}, {"container_id", id}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->value("error", std::string()), "container " + id + " is not confined by this daemon");
  EXPECT_EQ(scrape("agentcage_container_operations_total{op=\"confine\",result=\"success\"}"), 1);
  EXPECT_EQ(scrape("agentcage_container_operations_total{op=\"release\",result=\"success\"}"), 1);
  EXPECT_EQ(scrape("agentcage_container_operations_total{op=\"release\",result=\"failure\"}"), 1);
}

TEST_F(ContainerDaemon, WhatTheDaemonRefusesChangesNothing) {
  start_daemon();
  auto& cg = make_cgroup("refuse");
  int go[2], report[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t init = park_init(cg, go[0], report[1], {"/usr/bin/true"}, dir_ / "refuse.out");
  ASSERT_GT(init, 0);
  auto refused = [&](json req, const std::string& why) {
    auto r = control(req);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_FALSE(r->value("ok", true)) << r->dump();
    EXPECT_NE(r->value("error", std::string()).find(why), std::string::npos) << r->dump();
    const json st = status();
    EXPECT_FALSE(has_scope(st, cg.id())) << st.dump();
    EXPECT_FALSE(has_container(st, req.value("container_id", std::string()))) << st.dump();
  };
  const std::string id = "ctr-refuse-" + std::to_string(::getpid());
  const json base = {{"op", "attach"},    {"cgroup", cg.path().string()}, {"policy", "dtest"},
                     {"container_id", id}, {"workspace", "/workspace"}};
  // Not the cgroup's only process: another process there would run unconfined while pending.
  json two = base;
  two["arm_pid"] = ::getpid();
  refused(two, "must be the one process of cgroup");
  // A workspace that is not a normalised path as the container sees it.
  json ws = base;
  ws["arm_pid"] = init;
  ws["workspace"] = "/a/../etc";
  refused(ws, "normalised absolute path");
  // A second attach of the same container id is refused; the first stays.
  json ok = base;
  ok["arm_pid"] = init;
  ids_.push_back(id);
  auto first = control(ok);
  ASSERT_TRUE(first && first->value("ok", false)) << (first ? first->dump() : first.error().message);
  auto& cg2 = make_cgroup("refuse2");
  json dup = base;
  dup["cgroup"] = cg2.path().string();
  auto second = control(dup);
  ASSERT_TRUE(second);
  EXPECT_NE(second->value("error", std::string()).find("is confined already"), std::string::npos) << second->dump();
  EXPECT_FALSE(has_scope(status(), cg2.id()));
  EXPECT_TRUE(has_scope(status(), cg.id()));
  EXPECT_EQ(scrape("agentcage_container_operations_total{op=\"confine\",result=\"failure\"}"), 3);
  EXPECT_EQ(scrape("agentcage_container_operations_total{op=\"confine\",result=\"success\"}"), 1);
  ASSERT_TRUE(wait_until([&] { return scrape("agentcage_containers_active") == 1; }, 10s));
}

TEST_F(ContainerDaemon, AContainerWhoseCgroupVanishedWithoutPoststopIsSwept) {
  start_daemon();
  auto& cg = make_cgroup("sweep");
  int go[2], report[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t init = park_init(cg, go[0], report[1], {"/usr/bin/true"}, dir_ / "sweep.out");
  ASSERT_GT(init, 0);
  const std::string id = "ctr-sweep-" + std::to_string(::getpid());
  json reply = attach(cg, id, init);
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  const uint64_t cgid = reply["cgroup_id"].get<uint64_t>();
  // The "runtime" dies: the init is killed, the cgroup removed, no poststop.
  ::kill(init, SIGKILL);
  ::waitpid(init, nullptr, 0);
  ASSERT_TRUE(cg.remove().ok());
  // Not at once: podman's poststop hook comes after the cgroup went, and its
  // release (with the result) must find the container.
  std::this_thread::sleep_for(8s);
  EXPECT_TRUE(has_container(status(), id)) << log();
  ASSERT_TRUE(wait_until(
      [&] {
        const json st = status();
        return !has_container(st, id) && !has_scope(st, cgid);
      },
      60s))
      << status().dump() << log();
  EXPECT_NE(log().find("container " + id + ": its cgroup is gone without a poststop hook"), std::string::npos)
      << log();
  EXPECT_FALSE(fs::exists("/run/agentcage/containers/" + id + ".json"));
  EXPECT_EQ(scrape("agentcage_container_operations_total{op=\"sweep\",result=\"success\"}"), 1);
}

// A container restarted under its id after a missed poststop (the daemon
// was down, the hook timed out): its previous record names a cgroup that is
// gone, and the new attach releases it and confines the new one at once,
// rather than being refused until the sweep. While the previous container's
// cgroup is there, the id is still refused.
TEST_F(ContainerDaemon, AContainerRestartedUnderItsIdAfterAMissedPoststopIsConfinedAtOnce) {
  start_daemon();
  const std::string id = "ctr-again-" + std::to_string(::getpid());
  auto& first = make_cgroup("again1");
  int go[2], report[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t init = park_init(first, go[0], report[1], {"/usr/bin/true"}, dir_ / "again1.out");
  ASSERT_GT(init, 0);
  json one = attach(first, id, init);
  ASSERT_TRUE(one.value("ok", false)) << one.dump();
  const uint64_t first_id = one["cgroup_id"].get<uint64_t>();
  auto& second = make_cgroup("again2");
  int go2[2], report2[2];
  ASSERT_EQ(::pipe2(go2, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(report2, O_CLOEXEC), 0);
  const pid_t init2 =
      park_init(second, go2[0], report2[1], {"/usr/bin/cat", "/etc/passwd"}, dir_ / "again2.out");
  ASSERT_GT(init2, 0);
  json refused = attach(second, id, init2);
  EXPECT_FALSE(refused.value("ok", true)) << refused.dump();
  EXPECT_NE(refused.value("error", std::string()).find("confined already"), std::string::npos)
      << refused.dump();
  // The first "runtime" dies without its poststop.
  ::kill(init, SIGKILL);
  ::waitpid(init, nullptr, 0);
  ASSERT_TRUE(first.remove().ok());
  json again = attach(second, id, init2);
  ASSERT_TRUE(again.value("ok", false)) << again.dump() << log();
  const json st = status();
  EXPECT_TRUE(has_container(st, id)) << st.dump();
  EXPECT_FALSE(has_scope(st, first_id)) << st.dump();
  EXPECT_TRUE(has_scope(st, again["cgroup_id"].get<uint64_t>())) << st.dump();
  // The new container is confined from its entrypoint's exec on.
  ASSERT_EQ(::write(go2[1], "x", 1), 1);
  char err = -1;
  ASSERT_EQ(::read(report2[0], &err, 1), 1);
  EXPECT_EQ(wait_exit(init2), 1) << slurp(dir_ / "again2.out");
  EXPECT_NE(slurp(dir_ / "again2.out").find("Permission denied"), std::string::npos)
      << slurp(dir_ / "again2.out");
}

}  // namespace
}  // namespace agentcage::kt
