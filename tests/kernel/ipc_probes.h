// SPDX-License-Identifier: Apache-2.0
// Host IPC and keys for kernel tests: the objects the (unscoped) test process
// makes and inspects, and the Python prelude that runs use to try theirs
// (ctypes over libc: the runs' policy allows python3 and no other program).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace agentcage::kt {

// A System V key unlikely to collide with anything else on the VM.
key_t test_ipc_key(int n);

// Objects of the host's IPC namespace with mode 0666 (anyone's, by DAC).
struct HostSysv {
  int msq = -1, shm = -1, sem = -1;
  key_t msq_key = 0, shm_key = 0, sem_key = 0;
  static HostSysv create(int n);  // msq holds one message "host-secret"
  int messages() const;           // messages waiting in msq, -1 if gone
  void remove() const;
};

// Whether a System V object with `key` exists in the caller's namespace.
bool sysv_msq_exists(key_t key);
bool sysv_shm_exists(key_t key);
bool sysv_sem_exists(key_t key);
// Lines (objects) in /proc/sysvipc/{msg,shm,sem}, headers excluded.
int sysvipc_objects();

// POSIX message queue `name` ("/x") of the host: created 0666 with one
// message; exists(); unlink.
bool host_mqueue_create(const std::string& name);
bool host_mqueue_exists(const std::string& name);
void host_mqueue_unlink(const std::string& name);

// Keys (keyctl through syscall: no libkeyutils needed).
long key_add(const char* type, const char* desc, const std::string& payload, int32_t keyring);
long keyctl(int cmd, unsigned long a2 = 0, unsigned long a3 = 0, unsigned long a4 = 0, unsigned long a5 = 0);
// Keys the kernel holds for `uid` (/proc/key-users), 0 when it holds none.
int keys_of_uid(uid_t uid);

// Python: `libc`, `err(rc)` ("ok" or the errno name of the last call),
// `msgbuf()`, `add_key(type, desc, payload, ring)`, `keyctl(cmd, ...)`,
// `mq_open(name, flags)`, the KEY_SPEC_* and IPC constants.
extern const char* const kPyIpc;

}  // namespace agentcage::kt
