// SPDX-License-Identifier: Apache-2.0
// Host IPC: System V message queues, shared memory and semaphores, and POSIX
// message queues of the host are out of a run's reach, a run's own work
// inside it and are gone when it ends (its IPC namespace of its own), and a
// scope without one (an attached cgroup) may use none at all.
#include <fcntl.h>
#include <mqueue.h>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cgroup/cgroup.h"
#include "ipc_probes.h"
#include "kernel_env.h"
#include "probes.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- runs ---------------------------------------------------------------------

class IpcRun : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists(agentcage_bin())) << agentcage_bin();
  }
};

json run_json(const Ran& r) {
  json j = json::parse(r.out, nullptr, false);
  return j.is_object() ? j : json::object();
}

TEST_F(IpcRun, HostSystemVObjectsAreUnreachable) {
  HostSysv host = HostSysv::create(1);
  ASSERT_GE(host.msq, 0);
  ASSERT_GE(host.shm, 0);
  ASSERT_GE(host.sem, 0);
  ASSERT_EQ(host.messages(), 1);
  // By key and by id: every way to name the host's objects.
  std::ostringstream code;
  code << kPyIpc << "msq, shm, sem = " << host.msq << ", " << host.shm << ", " << host.sem << "\n"
       << "res = {}\n"
       << "res['msgget'] = err(libc.msgget(" << host.msq_key << ", 0))\n"
       << "b = msgbuf()\n"
       << "res['msgrcv'] = err(libc.msgrcv(msq, b, 64, 0, IPC_NOWAIT))\n"
       << "res['msgsnd'] = err(libc.msgsnd(msq, msgbuf(b'x'), 1, IPC_NOWAIT))\n"
       << "res['msgctl_rmid'] = err(libc.msgctl(msq, IPC_RMID, None))\n"
       << "res['shmget'] = err(libc.shmget(" << host.shm_key << ", 0, 0))\n"
       << "res['shmat'] = err(libc.shmat(shm, None, 0))\n"
       << "res['semget'] = err(libc.semget(" << host.sem_key << ", 0, 0))\n"
       << "res['semctl'] = err(libc.semctl(sem, 0, GETVAL))\n"
       << "print(json.dumps(res))\n";
  Ran r = run(py(code.str()));
  const int left = host.messages();
  host.remove();
  ASSERT_EQ(r.code, 0) << r.describe();
  json res = run_json(r);
  ASSERT_EQ(res.size(), 8u) << r.out;
  for (const auto& [op, outcome] : res.items())
    EXPECT_NE(outcome, "ok") << op << " reached the host's object";
  EXPECT_EQ(left, 1) << "the host's message queue was touched";
}

TEST_F(IpcRun, OwnObjectsWorkInsideAndAreGoneAfter) {
  const key_t key = test_ipc_key(10);
  const int before = sysvipc_objects();
  const std::string mq = "/ac-own-" + std::to_string(::getpid());
  std::ostringstream code;
  code << kPyIpc << "res = {}\n"
       << "q = libc.msgget(0, IPC_CREAT | 0o600)\n"
       << "res['msgsnd'] = err(libc.msgsnd(q, msgbuf(b'hello'), 5, 0))\n"
       << "b = msgbuf()\n"
       << "n = libc.msgrcv(q, b, 64, 0, IPC_NOWAIT)\n"
       << "res['msgrcv'] = b.raw[8:8 + n].decode() if n > 0 else err(n)\n"
       // Keyed objects left behind on purpose: the namespace takes them.
       << "res['msgget_key'] = err(libc.msgget(" << key << ", IPC_CREAT | 0o600))\n"
       << "s = libc.shmget(" << key << ", 4096, IPC_CREAT | 0o600)\n"
       << "p = libc.shmat(s, None, 0)\n"
       << "res['shmat'] = err(p)\n"
       << "if res['shmat'] == 'ok':\n"
       << "    ctypes.memmove(p, b'shm-ok', 6)\n"
       << "    res['shm'] = ctypes.string_at(p, 6).decode()\n"
       << "m = libc.semget(" << key << ", 1, IPC_CREAT | 0o600)\n"
       << "op = (ctypes.c_short * 3)(0, 1, 0)\n"
       << "res['semop'] = err(libc.semop(m, op, 1))\n"
       << "res['semval'] = libc.semctl(m, 0, GETVAL)\n"
       << "d = mq_open(b'" << mq << "', os.O_CREAT | os.O_RDWR)\n"
       << "res['mq_open'] = err(d)\n"
       << "res['mq_send'] = err(libc.mq_send(d, b'mq-ok', 5, 0))\n"
       << "mb = ctypes.create_string_buffer(8192)\n"
       << "n = libc.mq_receive(d, mb, 8192, None)\n"
       << "res['mq_receive'] = mb.raw[:n].decode() if n > 0 else err(n)\n"
       << "res['mq_send_left'] = err(libc.mq_send(d, b'left', 4, 0))\n"
       << "print(json.dumps(res))\n";
  Ran r = run(py(code.str()));
  ASSERT_EQ(r.code, 0) << r.describe();
  json res = run_json(r);
  EXPECT_EQ(res["msgsnd"], "ok") << r.out;
  EXPECT_EQ(res["msgrcv"], "hello") << r.out;
  EXPECT_EQ(res["msgget_key"], "ok") << r.out;
  EXPECT_EQ(res["shm"], "shm-ok") << r.out;
  EXPECT_EQ(res["semop"], "ok") << r.out;
  EXPECT_EQ(res["semval"], 1) << r.out;
  EXPECT_EQ(res["mq_open"], "ok") << r.out;
  EXPECT_EQ(res["mq_receive"], "mq-ok") << r.out;
  EXPECT_EQ(res["mq_send_left"], "ok") << r.out;
  EXPECT_EQ(denied(r, "ipc"), 0u) << r.result.dump(2);
  // Nothing of it is in the host's namespace, during or after the run.
  EXPECT_FALSE(sysv_msq_exists(key));
  EXPECT_FALSE(sysv_shm_exists(key));
  EXPECT_FALSE(sysv_sem_exists(key));
  EXPECT_EQ(sysvipc_objects(), before);
  EXPECT_FALSE(host_mqueue_exists(mq));
}

// /dev/mqueue (any mount of the host's mqueue file system) reaches the host's
// queues by path, past the run's own namespace: denied even when the policy
// lets the run read and write there.
TEST_F(IpcRun, HostMessageQueuesAreUnreachableByNameAndByPath) {
  const std::string name = "/ac-host-" + std::to_string(::getpid());
  ASSERT_TRUE(host_mqueue_create(name)) << std::strerror(errno);
  char tmpl[] = "/tmp/ac-mqueue-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path mnt = tmpl;
  ASSERT_EQ(::mount("mqueue", mnt.c_str(), "mqueue", 0, nullptr), 0) << std::strerror(errno);
  // python-sandbox plus the mount, readable and writable.
  std::string policy = slurp(kPythonSandbox);
  policy.replace(policy.find("name: python-sandbox"), 20, "name: ipc-mqueue-test");
  policy.replace(policy.find("    read:\n"), 10, "    read:\n      - " + mnt.string() + "\n");
  policy.replace(policy.find("    write:\n"), 11, "    write:\n      - " + mnt.string() + "\n");
  const fs::path policy_file = mnt.string() + ".yaml";
  std::ofstream(policy_file) << policy;

  std::ostringstream code;
  code << kPyIpc << "res = {}\n"
       << "res['mq_open'] = err(mq_open(b'" << name << "', os.O_RDWR))\n"
       << "for what, fn in (('open', lambda: os.open('" << mnt.string() << name << "', os.O_RDWR)),\n"
       << "                 ('listdir', lambda: os.listdir('" << mnt.string() << "')),\n"
       << "                 ('create', lambda: os.open('" << mnt.string()
       << "/planted', os.O_CREAT | os.O_RDWR, 0o666))):\n"
       << "    try:\n"
       << "        fn()\n"
       << "        res[what] = 'ok'\n"
       << "    except OSError as e:\n"
       << "        res[what] = errno.errorcode[e.errno]\n"
       << "print(json.dumps(res))\n";
  SpawnOptions o;
  o.policy = policy_file.string();
  Ran r = run(py(code.str()), o);
  const bool planted = fs::exists(mnt / "planted");
  const bool still_there = host_mqueue_exists(name);
  host_mqueue_unlink(name);
  host_mqueue_unlink("/planted");
  ::umount2(mnt.c_str(), MNT_DETACH);
  fs::remove(mnt);
  fs::remove(policy_file);

  ASSERT_EQ(r.code, 0) << r.describe();
  json res = run_json(r);
  EXPECT_EQ(res["mq_open"], "ENOENT") << "the run's namespace has no such queue: " << r.out;
  EXPECT_EQ(res["open"], "EACCES") << r.out;
  EXPECT_EQ(res["listdir"], "EACCES") << r.out;
  EXPECT_EQ(res["create"], "EACCES") << r.out;
  EXPECT_FALSE(planted);
  EXPECT_TRUE(still_there);
  EXPECT_GE(denied(r, "ipc"), 3u) << r.result.dump(2);
}

// ---- a scope without an IPC namespace of its own (attach) ----------------------

class IpcScope : public ::testing::Test {
 protected:
  static constexpr uint32_t kSlot = 12;

  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    auto root = cgroup::find_cgroup2_root();
    ASSERT_TRUE(root.ok()) << root.error().message;
    fs::path parent = *root / "agentcage-kt";
    fs::create_directories(parent);
    auto cg = cgroup::Cgroup::create(*root, parent, "ipc-" + std::to_string(::getpid()));
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    cg_ = std::move(cg).value();
    std::vector<bpf::PathRule> rules{{"/usr", AC_ACCESS_READ}};
    ASSERT_TRUE(kt::enforcer()->put_policy(kSlot, rules, 0).ok());
  }

  void confine(uint16_t flags) {
    auto st = kt::enforcer()->add_scope(kt::scope_cgroup(cg_), 6000 + static_cast<uint64_t>(::getpid()),
                                        kSlot, {}, flags);
    ASSERT_TRUE(st.ok()) << st.error().message;
    scoped_ = true;
  }

  void TearDown() override {
    if (scoped_) {
      EXPECT_TRUE(kt::enforcer()->remove_scope(kt::scope_cgroup(cg_)).ok());
    }
    if (kt::enforcer()) (void)kt::enforcer()->remove_policy(kSlot);
    if (cg_.fd() >= 0) {
      EXPECT_TRUE(cg_.remove().ok());
    }
  }

  uint64_t ipc_denials() {
    auto c = kt::enforcer()->counters(kSlot);
    return c ? c->hooks[AC_HOOK_IPC].decisions[AC_DECISION_DENY] : 0;
  }

  // Run each probe as root inside the scope: DAC would let root do all of it,
  // so every EACCES is the scope's. Returns "" or what was not denied.
  std::string all_denied(const std::vector<std::pair<std::string, std::function<int()>>>& probes) {
    std::string out;
    for (const auto& [name, fn] : probes) {
      int code = run_in_cgroup(cg_.fd(), fn);
      if (code != kDenied) out += name + "=" + std::to_string(code) + " ";
    }
    return out;
  }

  cgroup::Cgroup cg_;
  bool scoped_ = false;
};

TEST_F(IpcScope, AttachedScopeMayUseNoSystemVIpcNorMessageQueue) {
  confine(0);
  HostSysv host = HostSysv::create(20);
  ASSERT_GE(host.msq, 0);
  const std::string queue = "/ac-att-" + std::to_string(::getpid());
  const std::string fresh = "/ac-att-new-" + std::to_string(::getpid());
  ASSERT_TRUE(host_mqueue_create(queue));
  std::string missed = all_denied({
      {"msgget_create", [] { return result(::msgget(IPC_PRIVATE, IPC_CREAT | 0600) >= 0 ? 0 : -1); }},
      {"shmget_create", [] { return result(::shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600) >= 0 ? 0 : -1); }},
      {"semget_create", [] { return result(::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600) >= 0 ? 0 : -1); }},
      {"msgget_host", [&] { return result(::msgget(host.msq_key, 0) >= 0 ? 0 : -1); }},
      {"msgctl_stat",
       [&] {
         msqid_ds ds{};
         return result(::msgctl(host.msq, IPC_STAT, &ds));
       }},
      {"msgctl_rmid", [&] { return result(::msgctl(host.msq, IPC_RMID, nullptr)); }},
      {"shmat",
       [&] { return result(::shmat(host.shm, nullptr, 0) == reinterpret_cast<void*>(-1) ? -1 : 0); }},
      {"shmctl_rmid", [&] { return result(::shmctl(host.shm, IPC_RMID, nullptr)); }},
      {"semctl_rmid", [&] { return result(::semctl(host.sem, 0, IPC_RMID)); }},
      {"mq_open_host",
       [&] { return result(::mq_open(queue.c_str(), O_RDWR) == static_cast<mqd_t>(-1) ? -1 : 0); }},
      {"mq_open_create",
       [&] {
         return result(
             ::mq_open(fresh.c_str(), O_CREAT | O_RDWR, 0600, nullptr) == static_cast<mqd_t>(-1) ? -1 : 0);
       }},
      {"mq_unlink_host", [&] { return result(::mq_unlink(queue.c_str())); }},
  });
  const int left = host.messages();
  const bool queue_left = host_mqueue_exists(queue), fresh_made = host_mqueue_exists(fresh);
  host.remove();
  host_mqueue_unlink(queue);
  host_mqueue_unlink(fresh);
  EXPECT_EQ(missed, "");
  EXPECT_EQ(left, 1) << "the host's queue was removed or read";
  EXPECT_TRUE(queue_left);
  EXPECT_FALSE(fresh_made) << "mq_open(O_CREAT) left a queue in the host's namespace";
  EXPECT_GE(ipc_denials(), 12u);
  // The same operations outside the scope work: the denials are the scope's.
  EXPECT_EQ(in_child(false, [] { return result(::msgget(IPC_PRIVATE, IPC_CREAT | 0600) >= 0 ? 0 : -1); }),
            kOk);
}

// The flag alone does not open the host's namespace: a task of an
// own-IPC scope that is (wrongly) in the initial namespace is denied; in a
// namespace of its own it may create and use objects.
TEST_F(IpcScope, OwnIpcScopeIsAllowedOnlyOutsideTheInitialNamespace) {
  confine(AC_SCOPE_F_OWN_IPC);
  EXPECT_EQ(
      run_in_cgroup(cg_.fd(), [] { return result(::msgget(IPC_PRIVATE, IPC_CREAT | 0600) >= 0 ? 0 : -1); }),
      kDenied);
  const std::string q = "/ac-ns-" + std::to_string(::getpid());
  EXPECT_EQ(run_in_cgroup(cg_.fd(),
                          [&] {
                            if (::unshare(CLONE_NEWIPC) != 0) return kOtherError;
                            int id = ::msgget(IPC_PRIVATE, IPC_CREAT | 0600);
                            if (id < 0) return classify(errno);
                            mqd_t d = ::mq_open(q.c_str(), O_CREAT | O_RDWR, 0600, nullptr);
                            if (d == static_cast<mqd_t>(-1)) return classify(errno) + 10;
                            return ::mq_send(d, "x", 1, 0) == 0 ? kOk : kOtherError;
                          }),
            kOk);
  EXPECT_FALSE(host_mqueue_exists(q));
}

}  // namespace
}  // namespace agentcage::kt
