// SPDX-License-Identifier: Apache-2.0
// The shared, pinned program set: every agentcage process adopts one set of
// programs and maps, enforcement outlives the process that loaded it, policy
// slots are shared by content, and concurrent starts load one set only.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "probes.h"
#include "scope/scope.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

const char* const kPinRoot = "/sys/fs/bpf/agentcage-kt";
const char* const kLockPath = "/run/agentcage-kt/bpf.lock";

bpf::SharedOptions options() {
  bpf::SharedOptions o;
  o.pin_root = kPinRoot;
  o.lock_path = kLockPath;
  return o;
}

uint32_t prog_id(int fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

// How many loaded programs carry this name (one per loaded set).
int programs_named(const std::string& name) {
  int count = 0;
  uint32_t id = 0;
  while (bpf_prog_get_next_id(id, &id) == 0) {
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && name == info.name) ++count;
    ::close(fd);
  }
  return count;
}

bpf::CompiledPolicy usr_only() {
  bpf::CompiledPolicy p;
  p.paths.push_back({"/usr", AC_ACCESS_READ, bpf::RuleSpace::absolute});
  return p;
}

// A transient policy's slot, chosen and installed the way runs and attach get
// theirs (scope/slots.h).
Result<uint32_t> acquire(bpf::Enforcer& enf, const std::string& name, const bpf::CompiledPolicy& policy) {
  scope::EnforcerBackend backend(enf);
  auto choice = scope::acquire_slot(backend, scope::TransientPolicy{name, policy, false});
  if (!choice) return choice.error();
  return choice->slot;
}

Status release(bpf::Enforcer& enf, uint32_t slot) {
  scope::EnforcerBackend backend(enf);
  return scope::release_slot(backend, slot);
}

class SharedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    fs::remove_all(kPinRoot);
    auto root = cgroup::find_cgroup2_root();
    ASSERT_TRUE(root.ok()) << root.error().message;
    root_ = *root;
    fs::create_directories(root_ / "agentcage-kt");
    static int n = 0;
    auto cg = cgroup::Cgroup::create(root_, root_ / "agentcage-kt", "shared-" + std::to_string(n++));
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    cg_ = std::move(cg).value();
    outside_ = "/run/agentcage-kt/outside.txt";
    fs::create_directories("/run/agentcage-kt");
    std::ofstream(outside_) << "outside\n";
  }

  void TearDown() override {
    if (cg_.fd() >= 0) {
      EXPECT_TRUE(cg_.remove().ok());
    }
    // Unpinning detaches the shared set once nothing else holds it.
    fs::remove_all(kPinRoot);
  }

  int in_scope(const std::function<int()>& fn) { return kt::run_in_cgroup(cg_.fd(), fn); }

  fs::path root_;
  cgroup::Cgroup cg_;
  std::string outside_;
};

TEST_F(SharedTest, SecondOpenAdoptsAndEnforcementOutlivesTheLoader) {
  auto first = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(fs::exists((*first)->pin_dir() + "/ready"));
  auto second = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ((*first)->pin_dir(), (*second)->pin_dir());

  // Adopted, not loaded again: the same program objects.
  std::set<uint32_t> ids_first, ids_second;
  for (const auto& p : (*first)->programs()) ids_first.insert(prog_id(p.fd));
  for (const auto& p : (*second)->programs()) ids_second.insert(prog_id(p.fd));
  EXPECT_FALSE(ids_first.empty());
  EXPECT_EQ(ids_first, ids_second);

  auto slot = acquire(**second, "usr-only", usr_only());
  ASSERT_TRUE(slot.ok()) << slot.error().message;
  const uint64_t scope_id = cg_.id();
  ASSERT_TRUE((*second)->add_scope(kt::scope_cgroup(cg_), scope_id, *slot).ok());

  // No agentcage object is left in this process: the pins keep enforcing.
  first->reset();
  second->reset();
  EXPECT_EQ(in_scope([&] { return kt::try_open(outside_, O_RDONLY); }), kt::kDenied);
  EXPECT_EQ(in_scope([] { return kt::try_open("/usr/bin/true", O_RDONLY); }), kt::kOk);

  auto third = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(third.ok()) << third.error().message;
  auto scopes = (*third)->scopes();
  ASSERT_TRUE(scopes.ok());
  ASSERT_EQ(scopes->size(), 1u);
  EXPECT_EQ((*scopes)[0].cgroup_id, cg_.id());
  EXPECT_EQ((*scopes)[0].policy_slot, *slot);

  // The scope's own report saw the denial, with the target.
  auto report = (*third)->scope_report(scope_id);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->denied[AC_HOOK_FILE_OPEN], 1u);
  ASSERT_EQ(report->records.size(), 1u);
  EXPECT_EQ(report->records[0].hook, AC_HOOK_FILE_OPEN);
  EXPECT_EQ(report->records[0].decision, AC_DECISION_DENY);
  EXPECT_EQ(std::string(report->records[0].target), outside_);

  ASSERT_TRUE((*third)->remove_scope(kt::scope_cgroup(cg_)).ok());
  ASSERT_TRUE(release(**third, *slot).ok());
  auto remaining = (*third)->scopes();
  ASSERT_TRUE(remaining.ok());
  EXPECT_TRUE(remaining->empty());
  EXPECT_FALSE((*third)->scope_report(scope_id).ok()) << "the report goes with the scope";
  EXPECT_EQ(in_scope([&] { return kt::try_open(outside_, O_RDONLY); }), kt::kOk);

  // Unpinned and closed: the shared programs are gone from the kernel.
  third->reset();
  fs::remove_all(kPinRoot);
  // Program ids are released when the last reference goes, after the
  // trampoline is unlinked: RCU-tasks grace periods, which take seconds on a
  // loaded, emulated machine. Wait up to 30 s.
  int left = programs_named("ac_file_open");
  for (int i = 0; i < 300 && left != 1; ++i) {
    ::usleep(100 * 1000);
    left = programs_named("ac_file_open");
  }
  EXPECT_EQ(left, 1) << "only the private test set remains";
}

// Adopting the set (every run's start) checks that every program is still
// attached without reading the kernel's BTF: the loader marks the programs
// this kernel has no hook for under skipped/. A link removed from the set
// (its program detached) makes every later start fail closed.
TEST_F(SharedTest, AdoptionRefusesASetWithADetachedProgram) {
  auto first = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(first.ok()) << first.error().message;
  const std::string dir = (*first)->pin_dir();
  first->reset();
  std::set<std::string> skipped;
  for (const auto& e : fs::directory_iterator(dir + "/skipped")) skipped.insert(e.path().filename());
  // One of the two inode_setattr forms is always skipped.
  EXPECT_EQ(skipped.count("ac_inode_setattr") + skipped.count("ac_inode_setattr_noidmap"), 1u);
  for (const auto& name : skipped) EXPECT_FALSE(fs::exists(dir + "/links/" + name)) << name;

  auto adopted = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(adopted.ok()) << adopted.error().message;
  adopted->reset();

  ASSERT_TRUE(fs::remove(dir + "/links/ac_file_open"));
  auto refused = bpf::Enforcer::open_shared(options());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("programs are attached"), std::string::npos)
      << refused.error().message;

  // A skipped mark for an attached program is refused as well.
  fs::remove_all(kPinRoot);
  auto again = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(again.ok()) << again.error().message;
  again->reset();
  ASSERT_TRUE(fs::create_directory(dir + "/skipped/ac_file_open"));
  auto marked = bpf::Enforcer::open_shared(options());
  ASSERT_FALSE(marked.ok());
  EXPECT_NE(marked.error().message.find("both attached and marked skipped"), std::string::npos)
      << marked.error().message;
}

// A pin root outside a bpf filesystem is reported by its own code (the
// runner's fix text depends on it), distinct from the LSM and EPERM cases.
TEST_F(SharedTest, PinRootOutsideBpffsHasItsOwnCode) {
  const std::string dir = "/run/agentcage-kt/not-bpffs";
  fs::create_directories(dir);
  bpf::SharedOptions o = options();
  o.pin_root = dir + "/agentcage";
  auto e = bpf::Enforcer::open_shared(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, bpf::kErrNoBpffs) << e.error().message;
  EXPECT_NE(e.error().code, ENOTSUP);
  fs::remove_all(dir);
}

TEST_F(SharedTest, SlotsAreSharedByContentCachedAndBounded) {
  auto e = bpf::Enforcer::open_shared(options());
  ASSERT_TRUE(e.ok()) << e.error().message;
  auto& enf = **e;
  auto a = acquire(enf, "p", usr_only());
  auto b = acquire(enf, "p", usr_only());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b) << "same name and rules share one slot";

  auto other_name = acquire(enf, "q", usr_only());
  bpf::CompiledPolicy changed = usr_only();
  changed.paths.push_back({"/etc", AC_ACCESS_READ, bpf::RuleSpace::absolute});
  auto other_rules = acquire(enf, "p", changed);
  ASSERT_TRUE(other_name.ok() && other_rules.ok());
  EXPECT_NE(*other_name, *a);
  EXPECT_NE(*other_rules, *a);
  EXPECT_NE(*other_rules, *other_name);

  // A slot a scope points at keeps enforcing whatever is released.
  ASSERT_TRUE(enf.add_scope(kt::scope_cgroup(cg_), cg_.id(), *a).ok());
  ASSERT_TRUE(release(enf, *a).ok());
  EXPECT_EQ(in_scope([&] { return kt::try_open(outside_, O_RDONLY); }), kt::kDenied)
      << "still enforced after the release";
  ASSERT_TRUE(enf.remove_scope(kt::scope_cgroup(cg_)).ok());
  for (uint32_t slot : {*a, *other_name, *other_rules}) ASSERT_TRUE(release(enf, slot).ok());

  // Unused transient policies stay cached: the same policy gets its slot back.
  auto again = acquire(enf, "p", usr_only());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
  ASSERT_TRUE(release(enf, *again).ok());

  // ... but only a bounded number of them.
  for (int i = 0; i < 24; ++i) {
    auto s = acquire(enf, "many-" + std::to_string(i), usr_only());
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_TRUE(release(enf, *s).ok());
  }
  auto pols = enf.policies();
  ASSERT_TRUE(pols.ok());
  EXPECT_EQ(pols->size(), scope::kCachedTransient);
  EXPECT_TRUE(std::any_of(pols->begin(), pols->end(), [](const bpf::PolicyInfo& p) {
    return p.name == "many-23";
  })) << "the most recently released one is kept";

  // A named (daemon/test) policy is never dropped by a release.
  ASSERT_TRUE(enf.put_policy(7, "named", usr_only()).ok());
  ASSERT_TRUE(release(enf, 7).ok());
  pols = enf.policies();
  ASSERT_TRUE(pols.ok());
  auto named = std::find_if(pols->begin(), pols->end(), [](const bpf::PolicyInfo& p) { return p.slot == 7; });
  ASSERT_NE(named, pols->end());
  EXPECT_EQ(named->name, "named");
  EXPECT_EQ(named->owner, AC_POLICY_OWNER_NAMED);
  ASSERT_TRUE(enf.remove_policy(7).ok());
}

TEST_F(SharedTest, ConcurrentStartsLoadOneSet) {
  // Several processes open the shared set at once; the lock makes all but
  // one adopt what the first loaded: every one of them sees the same
  // program behind ac_file_open.
  constexpr int kProcs = 4;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pids[kProcs];
  for (int i = 0; i < kProcs; ++i) {
    pids[i] = ::fork();
    if (pids[i] == 0) {
      ::close(fds[0]);
      auto e = bpf::Enforcer::open_shared(options());
      if (!e) ::_exit(1);
      uint32_t id = 0;
      for (const auto& p : (*e)->programs())
        if (p.name == "ac_file_open") id = prog_id(p.fd);
      ::_exit(::write(fds[1], &id, sizeof id) == sizeof id && id != 0 ? 0 : 2);
    }
  }
  ::close(fds[1]);
  for (pid_t pid : pids) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::set<uint32_t> ids;
  uint32_t id = 0;
  while (::read(fds[0], &id, sizeof id) == sizeof id) ids.insert(id);
  ::close(fds[0]);
  EXPECT_EQ(ids.size(), 1u) << "one shared set, adopted by every process";
}

}  // namespace
}  // namespace agentcage
