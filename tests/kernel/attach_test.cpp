// SPDX-License-Identifier: Apache-2.0
// `agentcage attach` / `detach` through the real binary: an already running
// process in an existing cgroup is confined from its next operation on and
// released by detach; bad requests change nothing.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

fs::path agentcage_binary() {
  return fs::canonical("/proc/self/exe").parent_path().parent_path() / "agentcage";
}

struct Cmd {
  int status = -1;
  std::string output;  // stdout + stderr
};

Cmd run(const std::string& args) {
  Cmd c;
  std::string cmd = agentcage_binary().string() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return c;
  std::array<char, 512> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) c.output.append(buf.data(), n);
  int st = ::pclose(p);
  c.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return c;
}

// A process living in the cgroup before attach; on each byte it receives it
// tries to open `target` and answers 0 (opened), 1 (EACCES) or 2.
class Resident {
 public:
  Resident(int cgroup_fd, const std::string& target) {
    if (::pipe2(to_, O_CLOEXEC) != 0 || ::pipe2(from_, O_CLOEXEC) != 0) return;
    int in = to_[0], out = from_[1], parent_in = to_[1], parent_out = from_[0];
    auto pid = cgroup::spawn_in_cgroup(cgroup_fd, [=]() {
      // Keep only our ends, so closing the parent's end means EOF here.
      ::close(parent_in);
      ::close(parent_out);
      char cmd;
      while (::read(in, &cmd, 1) == 1) {
        int fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
        char answer = fd >= 0 ? 0 : errno == EACCES ? 1 : 2;
        if (fd >= 0) ::close(fd);
        if (::write(out, &answer, 1) != 1) return 3;
      }
      return 0;
    });
    if (pid) pid_ = *pid;
  }
  ~Resident() {
    ::close(to_[1]);
    if (pid_ > 0) static_cast<void>(cgroup::wait_for(pid_));
    ::close(to_[0]);
    ::close(from_[0]);
    ::close(from_[1]);
  }
  int probe() {
    char cmd = 'x', answer = -1;
    if (::write(to_[1], &cmd, 1) != 1 || ::read(from_[0], &answer, 1) != 1) return -1;
    return answer;
  }
  bool running() const { return pid_ > 0; }

 private:
  int to_[2] = {-1, -1};
  int from_[2] = {-1, -1};
  pid_t pid_ = -1;
};

class AttachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    auto root = cgroup::find_cgroup2_root();
    ASSERT_TRUE(root.ok()) << root.error().message;
    root_ = *root;
    fs::create_directories(root_ / "agentcage-kt");
    auto cg = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "service");
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    cg_ = std::move(cg).value();
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/secret.txt") << "secret\n";
    policy_ = dir_ + "/usr-only.yaml";
    std::ofstream(policy_) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: usr-only}\n"
                              "spec:\n  files:\n    read: [/usr]\n";
    bad_policy_ = dir_ + "/bad.yaml";
    std::ofstream(bad_policy_) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: bad}\n"
                                  "spec:\n  files:\n    raed: [/usr]\n";
  }
  void TearDown() override {
    run("detach --cgroup " + cg_.path().string());
    if (cg_.fd() >= 0) {
      EXPECT_TRUE(cg_.remove().ok());
    }
    fs::remove_all(dir_);
  }

  size_t scope_count() {
    auto e = bpf::Enforcer::open_shared();
    if (!e) return SIZE_MAX;
    auto s = (*e)->scopes();
    return s ? s->size() : SIZE_MAX;
  }

  fs::path root_;
  cgroup::Cgroup cg_;
  std::string dir_ = "/run/agentcage-kt-attach";
  std::string policy_, bad_policy_;
};

TEST_F(AttachTest, ConfinesARunningProcessUntilDetached) {
  Resident resident(cg_.fd(), dir_ + "/secret.txt");
  ASSERT_TRUE(resident.running());
  EXPECT_EQ(resident.probe(), 0) << "not confined before attach";

  // A path relative to the cgroup root, as an operator would type it.
  auto rel = cg_.path().lexically_relative(root_).string();
  Cmd a = run("attach --cgroup " + rel + " --policy " + policy_);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("usr-only"), std::string::npos) << a.output;
  EXPECT_EQ(resident.probe(), 1) << "the running process is confined after attach";
  EXPECT_EQ(resident.probe(), 1);

  Cmd again = run("attach --cgroup " + rel + " --policy " + policy_);
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.output.find("already confined"), std::string::npos) << again.output;

  Cmd d = run("detach --cgroup " + cg_.path().string());
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("2 denied"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("file_open 2"), std::string::npos) << d.output;
  EXPECT_EQ(resident.probe(), 0) << "released by detach";

  Cmd d2 = run("detach --cgroup " + cg_.path().string());
  EXPECT_EQ(d2.status, 1);
  EXPECT_NE(d2.output.find("not confined"), std::string::npos) << d2.output;
}

// attach --mode audit: confined (the scope exists, decisions are counted)
// but nothing denied; detach reports what would have been.
TEST_F(AttachTest, ModeAuditConfinesWithoutDenying) {
  Resident resident(cg_.fd(), dir_ + "/secret.txt");
  ASSERT_TRUE(resident.running());
  Cmd a = run("attach --cgroup " + cg_.path().string() + " --policy " + policy_ + " --mode audit");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("usr-only (audit,"), std::string::npos) << a.output;
  EXPECT_EQ(resident.probe(), 0) << "audit mode denies nothing";
  Cmd d = run("detach --cgroup " + cg_.path().string());
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("0 denied, 1 audited"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("file_open 1"), std::string::npos) << d.output;

  Cmd bad = run("attach --cgroup " + cg_.path().string() + " --policy " + policy_ + " --mode Audit");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("did you mean 'audit'?"), std::string::npos) << bad.output;
  EXPECT_EQ(resident.probe(), 0) << "a refused attach changes nothing";
}

TEST_F(AttachTest, BadRequestsChangeNothing) {
  Resident resident(cg_.fd(), dir_ + "/secret.txt");
  ASSERT_TRUE(resident.running());
  const size_t before = scope_count();
  ASSERT_NE(before, SIZE_MAX);

  Cmd bad = run("attach --cgroup " + cg_.path().string() + " --policy " + bad_policy_);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("bad.yaml:6:5:"), std::string::npos) << bad.output;

  Cmd root = run("attach --cgroup " + root_.string() + " --policy " + policy_);
  EXPECT_EQ(root.status, 1);
  EXPECT_NE(root.output.find("root cgroup"), std::string::npos) << root.output;

  Cmd outside = run("attach --cgroup /usr --policy " + policy_);
  EXPECT_EQ(outside.status, 1);
  EXPECT_NE(outside.output.find("not inside the cgroup v2 hierarchy"), std::string::npos) << outside.output;

  Cmd missing = run("attach --cgroup " + cg_.path().string() + " --policy no-such-policy");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("no policy named"), std::string::npos) << missing.output;

  Cmd usage = run("attach --policy " + policy_);
  EXPECT_EQ(usage.status, 2) << usage.output;

  EXPECT_EQ(scope_count(), before);
  EXPECT_EQ(resident.probe(), 0) << "still unconfined";
}

// Scopes do not nest: the kernel applies a task's outermost scope, so a
// scope above a confined cgroup would replace its policy (here: an empty,
// looser-looking one that is not), and one below an attached cgroup would be
// ignored. Both attaches are refused and the confined process keeps its
// policy; a sibling is fine.
TEST_F(AttachTest, ScopesDoNotNest) {
  auto child = cgroup::Cgroup::create(root_, cg_.path(), "worker");
  ASSERT_TRUE(child.ok()) << child.error().message;
  auto sibling = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "sibling");
  ASSERT_TRUE(sibling.ok()) << sibling.error().message;
  const std::string open_all = dir_ + "/open-all.yaml";
  std::ofstream(open_all) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: open-all}\n"
                             "spec:\n  files:\n    read: [/]\n";
  Resident resident(child->fd(), dir_ + "/secret.txt");
  ASSERT_TRUE(resident.running());

  Cmd inner = run("attach --cgroup " + child->path().string() + " --policy " + policy_);
  ASSERT_EQ(inner.status, 0) << inner.output;
  EXPECT_EQ(resident.probe(), 1) << "confined by usr-only";
  const size_t confined = scope_count();

  Cmd outer = run("attach --cgroup " + cg_.path().string() + " --policy " + open_all);
  EXPECT_EQ(outer.status, 1) << outer.output;
  EXPECT_NE(outer.output.find(cg_.path().string() + " contains " + child->path().string() +
                              ", which agentcage confines (policy usr-only)"),
            std::string::npos)
      << outer.output;
  EXPECT_EQ(resident.probe(), 1) << "an attach above it replaced the confined cgroup's policy";
  EXPECT_EQ(scope_count(), confined);

  Cmd side = run("attach --cgroup " + sibling->path().string() + " --policy " + open_all);
  EXPECT_EQ(side.status, 0) << side.output;
  EXPECT_EQ(run("detach --cgroup " + sibling->path().string()).status, 0);

  // The other way round: the parent confined first, then the child.
  ASSERT_EQ(run("detach --cgroup " + child->path().string()).status, 0);
  ASSERT_EQ(run("attach --cgroup " + cg_.path().string() + " --policy " + policy_).status, 0);
  Cmd below = run("attach --cgroup " + child->path().string() + " --policy " + open_all);
  EXPECT_EQ(below.status, 1) << below.output;
  EXPECT_NE(below.output.find(child->path().string() + " is inside " + cg_.path().string() +
                              ", which agentcage confines (policy usr-only)"),
            std::string::npos)
      << below.output;
  EXPECT_EQ(resident.probe(), 1) << "still under the parent's usr-only";
}

}  // namespace
}  // namespace agentcage
