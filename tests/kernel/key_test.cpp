// SPDX-License-Identifier: Apache-2.0
// Kernel keyrings: a run reads no key it did not make (its caller's session
// keyring, keys of another process with the same uid), keeps nothing in the
// per-uid keyrings that outlive it, and its own session keyring works.
#include <sys/wait.h>
#include <unistd.h>

#include <linux/keyctl.h>

#include <cerrno>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ipc_probes.h"
#include "kernel_env.h"
#include "probes.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

using nlohmann::json;

constexpr uid_t kNobody = 65534;

class Keys : public ::testing::Test {
 protected:
  void SetUp() override { AC_REQUIRE_ENFORCER(); }
};

json run_json(const Ran& r) {
  json j = json::parse(r.out, nullptr, false);
  return j.is_object() ? j : json::object();
}

// Run fn as uid/gid nobody in a child outside every scope; its exit code.
int as_nobody(const std::function<int()>& fn) {
  return in_child(false, [&] {
    if (::setresgid(kNobody, kNobody, kNobody) != 0 || ::setresuid(kNobody, kNobody, kNobody) != 0) return 90;
    return fn();
  });
}

// Whether nobody's user keyring (or persistent keyring) holds `desc`.
bool nobody_has_key(const char* desc) {
  return as_nobody([&] {
           if (keyctl(KEYCTL_SEARCH, static_cast<unsigned long>(KEY_SPEC_USER_KEYRING),
                      reinterpret_cast<unsigned long>("user"), reinterpret_cast<unsigned long>(desc), 0) >= 0)
             return 1;
           long p = keyctl(KEYCTL_GET_PERSISTENT, static_cast<unsigned long>(-1),
                           static_cast<unsigned long>(KEY_SPEC_PROCESS_KEYRING));
           if (p >= 0 &&
               keyctl(KEYCTL_SEARCH, static_cast<unsigned long>(p), reinterpret_cast<unsigned long>("user"),
                      reinterpret_cast<unsigned long>(desc), 0) >= 0)
             return 1;
           return 0;
         }) == 1;
}

// The seccomp filter denies the keyring calls by default; these tests prove
// the LSM's key rules, which must hold where a policy lifts the filter.
SpawnOptions keyctl_allowed() {
  SpawnOptions o;
  o.policy = python_sandbox_with_keyctl();
  return o;
}

TEST_F(Keys, CallersSessionKeyringIsNotTheRuns) {
  // agentcage's caller has a key in its session keyring; the run must not.
  SpawnOptions o;
  o.policy = python_sandbox_with_keyctl();
  o.in_child = [] {
    keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0);
    key_add("user", "ac-caller-secret", "hunter2", KEY_SPEC_SESSION_KEYRING);
  };
  std::ostringstream code;
  code << kPyIpc << "res = {}\n"
       << "k = keyctl(KEYCTL_SEARCH, KEY_SPEC_SESSION, b'user', b'ac-caller-secret', 0)\n"
       << "res['search'] = err(k)\n"
       << "b = ctypes.create_string_buffer(64)\n"
       << "n = keyctl(KEYCTL_READ, k, b, 64) if k > 0 else k\n"
       << "res['read'] = b.raw[:n].decode() if n > 0 else err(n)\n"
       << "print(json.dumps(res))\n";
  Ran r = run(py(code.str()), o);
  ASSERT_EQ(r.code, 0) << r.describe();
  json res = run_json(r);
  EXPECT_EQ(res["search"], "ENOKEY") << r.out;
  EXPECT_EQ(res["read"], "ENOKEY") << r.out;
}

TEST_F(Keys, KeysOfAnotherProcessWithTheSameUidAreUnreadable) {
  // A process (not in any scope) with uid nobody keeps a key in its user
  // keyring: readable by uid alone (user: view, read) to any process of
  // that uid, but not to a run as nobody.
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ASSERT_EQ(as_nobody([&] {
              long k = key_add("user", "ac-nobody-secret", "hunter2", KEY_SPEC_USER_KEYRING);
              if (k < 0) return 91;
              ::write(pipefd[1], &k, sizeof k);
              return 0;
            }),
            0);
  long serial = 0;
  ASSERT_EQ(::read(pipefd[0], &serial, sizeof serial), static_cast<ssize_t>(sizeof serial));
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  std::ostringstream code;
  code << kPyIpc << "res = {}\n"
       << "b = ctypes.create_string_buffer(64)\n"
       << "n = keyctl(KEYCTL_READ, " << serial << ", b, 64)\n"
       << "res['read'] = b.raw[:n].decode() if n > 0 else err(n)\n"
       << "res['user_keyring'] = err(keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER, 0))\n"
       << "res['search'] = err(keyctl(KEYCTL_SEARCH, KEY_SPEC_USER, b'user', b'ac-nobody-secret', 0))\n"
       << "print(json.dumps(res))\n";
  Ran r = run(py(code.str(), {"--user", "nobody"}), keyctl_allowed());
  as_nobody([] {
    return static_cast<int>(keyctl(KEYCTL_CLEAR, static_cast<unsigned long>(KEY_SPEC_USER_KEYRING)));
  });
  ASSERT_EQ(r.code, 0) << r.describe();
  json res = run_json(r);
  // The kernel reports a key lookup the LSM refused as ENOKEY; the denials
  // are the scope's (by uid alone every one of these is allowed).
  EXPECT_EQ(res["read"], "ENOKEY") << r.out;
  EXPECT_EQ(res["user_keyring"], "ENOKEY") << r.out;
  EXPECT_EQ(res["search"], "ENOKEY") << r.out;
  EXPECT_GE(denied(r, "key"), 3u) << r.result.dump(2);
}

TEST_F(Keys, RunKeepsItsKeysInItsSessionAndNothingAfter) {
  std::ostringstream code;
  code << kPyIpc << "res = {}\n"
       << "k = add_key(b'user', b'ac-run-key', b'mine', KEY_SPEC_SESSION)\n"
       << "b = ctypes.create_string_buffer(64)\n"
       << "n = keyctl(KEYCTL_READ, k, b, 64) if k > 0 else k\n"
       << "res['own'] = b.raw[:n].decode() if n > 0 else err(n)\n"
       << "res['user'] = err(add_key(b'user', b'ac-run-key', b'left', KEY_SPEC_USER))\n"
       << "res['user_session'] = err(add_key(b'user', b'ac-run-key', b'left', KEY_SPEC_USER_SESSION))\n"
       << "p = keyctl(KEYCTL_GET_PERSISTENT, -1, KEY_SPEC_SESSION)\n"
       << "res['persistent'] = err(add_key(b'user', b'ac-run-key', b'left', p)) if p > 0 else err(p)\n"
       << "print(json.dumps(res))\n";
  Ran r = run(py(code.str(), {"--user", "nobody"}), keyctl_allowed());
  ASSERT_EQ(r.code, 0) << r.describe();
  json res = run_json(r);
  EXPECT_EQ(res["own"], "mine") << r.out;
  for (const char* ring : {"user", "user_session", "persistent"})
    EXPECT_TRUE(res[ring] == "ENOKEY" || res[ring] == "EACCES") << ring << ": " << r.out;
  EXPECT_GE(denied(r, "key"), 3u) << r.result.dump(2);
  EXPECT_FALSE(nobody_has_key("ac-run-key")) << "a key of the run outlived it";
}

}  // namespace
}  // namespace agentcage::kt
