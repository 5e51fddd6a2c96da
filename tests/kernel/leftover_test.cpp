// SPDX-License-Identifier: Apache-2.0
// Nothing outlives the run: a run that tries to leave one of everything
// behind (a daemonized process with a listening socket, System V and POSIX
// IPC objects, keys, a cgroup, a file outside its workspace) leaves none of
// it on the host once `agentcage run` has returned, nor an entry in the
// pinned maps.
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "ipc_probes.h"
#include "kernel_env.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Whether /proc/net/tcp{,6} has a socket in LISTEN on `port`.
bool listening_on(int port) {
  char hex[8];
  std::snprintf(hex, sizeof hex, ":%04X", port);
  for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(f);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ss(line);
      std::string sl, local, remote, state;
      ss >> sl >> local >> remote >> state;
      if (local.size() > 5 && local.substr(local.size() - 5) == hex && state == "0A") return true;
    }
  }
  return false;
}

class Leftovers : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(fs::exists(agentcage_bin())) << agentcage_bin();
  }
};

TEST_F(Leftovers, NothingOfTheRunExistsAfterIt) {
  const key_t key = test_ipc_key(30);
  const int sysv_before = sysvipc_objects();
  const std::string mq = "/ac-left-" + std::to_string(::getpid());
  const fs::path outside = "/tmp/ac-left-" + std::to_string(::getpid());
  const fs::path cgroup_escape = kRunsCgroup / ("ac-left-" + std::to_string(::getpid()));
  std::ostringstream code;
  code << kPyIpc << "import socket, time\n"
       << "res = {}\n"
       // A daemon: double fork + setsid, ignoring SIGTERM, with a listener.
       << "r, w = os.pipe()\n"
       << "if os.fork() == 0:\n"
       << "    os.setsid()\n"
       << "    if os.fork() == 0:\n"
       << "        import signal\n"
       << "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
       << "        d = {'pid': os.getpid(), 'port': 0}\n"
       << "        try:\n"
       << "            s = socket.socket()\n"
       << "            s.bind(('127.0.0.1', 0))\n"
       << "            s.listen()\n"
       << "            d['port'] = s.getsockname()[1]\n"
       << "        except OSError as e:\n"
       << "            d['listen'] = e.errno\n"
       << "        os.write(w, json.dumps(d).encode())\n"
       << "        while True:\n"
       << "            time.sleep(1)\n"
       << "    os._exit(0)\n"
       << "res.update(json.loads(os.read(r, 256)))\n"
       << "res['msg'] = err(libc.msgget(" << key << ", IPC_CREAT | 0o666))\n"
       << "res['shm'] = err(libc.shmget(" << key << ", 4096, IPC_CREAT | 0o666))\n"
       << "res['sem'] = err(libc.semget(" << key << ", 1, IPC_CREAT | 0o666))\n"
       << "res['mq'] = err(mq_open(b'" << mq << "', os.O_CREAT | os.O_RDWR))\n"
       << "res['key_session'] = err(add_key(b'user', b'ac-left', b'x', KEY_SPEC_SESSION))\n"
       << "res['key_user'] = err(add_key(b'user', b'ac-left', b'x', KEY_SPEC_USER))\n"
       << "for what, fn in (('cgroup', lambda: os.mkdir('" << cgroup_escape.string() << "')),\n"
       << "                 ('file', lambda: open('" << outside.string() << "', 'w'))):\n"
       << "    try:\n"
       << "        fn()\n"
       << "        res[what] = 'ok'\n"
       << "    except OSError as e:\n"
       << "        res[what] = errno.errorcode[e.errno]\n"
       << "print(json.dumps(res), flush=True)\n";
  // Keys too: the seccomp filter would refuse them before they exist.
  SpawnOptions o;
  o.policy = python_sandbox_with_keyctl();
  Ran r = run(py(code.str()), o);
  ASSERT_EQ(r.code, 0) << r.describe();
  json res = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(res.is_object()) << r.describe();
  // What the run could make, it made (inside its own namespace / session).
  EXPECT_EQ(res["msg"], "ok") << r.out;
  EXPECT_EQ(res["mq"], "ok") << r.out;
  EXPECT_EQ(res["key_session"], "ok") << r.out;
  const uid_t uid = r.result["uid"].get<uid_t>();

  // No process, no cgroup, no run record.
  const pid_t daemon = res["pid"].get<pid_t>();
  ASSERT_GT(daemon, 1);
  EXPECT_TRUE(process_gone(daemon)) << "pid " << daemon << " survived the run";
  EXPECT_TRUE(processes_of_dynamic_uids().empty());
  EXPECT_FALSE(fs::exists(r.result["cgroup"].get<std::string>()));
  EXPECT_FALSE(fs::exists(cgroup_escape));
  EXPECT_FALSE(fs::exists(outside));
  // No listening socket (the run's private loopback listener was up).
  ASSERT_NE(res["port"].get<int>(), 0) << r.out;
  EXPECT_FALSE(listening_on(res["port"].get<int>()));
  // No System V object, no message queue.
  EXPECT_FALSE(sysv_msq_exists(key));
  EXPECT_FALSE(sysv_shm_exists(key));
  EXPECT_FALSE(sysv_sem_exists(key));
  EXPECT_EQ(sysvipc_objects(), sysv_before);
  EXPECT_FALSE(host_mqueue_exists(mq));
  // No key: the kernel holds none for the run's uid once the session
  // keyring's last reference is gone (keys are freed by a work item: poll).
  int keys = keys_of_uid(uid);
  for (int i = 0; i < 50 && keys != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    keys = keys_of_uid(uid);
  }
  EXPECT_EQ(keys, 0) << "uid " << uid << " still owns keys";
  // No entry of the run in the pinned maps: scope, report, the places its
  // sockets were registered at.
  auto shared = bpf::Enforcer::open_shared();
  ASSERT_TRUE(shared) << shared.error().message;
  const uint64_t scope_id = r.result["scope_id"].get<uint64_t>();
  auto scopes = (*shared)->scopes();
  ASSERT_TRUE(scopes) << scopes.error().message;
  for (const auto& s : *scopes) EXPECT_NE(s.scope_id, scope_id) << "the run's scope is still registered";
  EXPECT_FALSE((*shared)->scope_report(scope_id)) << "the run's report is still in the map";
  auto listeners = (*shared)->listeners_of(scope_id);
  ASSERT_TRUE(listeners) << listeners.error().message;
  EXPECT_EQ(*listeners, 0u) << "the run's listener is still registered";
}

}  // namespace
}  // namespace agentcage::kt
