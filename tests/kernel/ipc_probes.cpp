// SPDX-License-Identifier: Apache-2.0
#include "ipc_probes.h"

#include <fcntl.h>
#include <mqueue.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace agentcage::kt {

key_t test_ipc_key(int n) { return static_cast<key_t>(0x41430000 + ((::getpid() & 0xff) << 8) + n); }

namespace {
struct Msg {
  long mtype;
  char mtext[64];
};
}  // namespace

HostSysv HostSysv::create(int n) {
  HostSysv h;
  h.msq_key = test_ipc_key(n);
  h.shm_key = test_ipc_key(n + 1);
  h.sem_key = test_ipc_key(n + 2);
  h.msq = ::msgget(h.msq_key, IPC_CREAT | 0666);
  h.shm = ::shmget(h.shm_key, 4096, IPC_CREAT | 0666);
  h.sem = ::semget(h.sem_key, 1, IPC_CREAT | 0666);
  if (h.msq >= 0) {
    Msg m{1, "host-secret"};
    ::msgsnd(h.msq, &m, std::strlen(m.mtext), IPC_NOWAIT);
  }
  if (h.shm >= 0) {
    void* p = ::shmat(h.shm, nullptr, 0);
    if (p != reinterpret_cast<void*>(-1)) {
      std::memcpy(p, "host-secret", 12);
      ::shmdt(p);
    }
  }
  return h;
}

int HostSysv::messages() const {
  msqid_ds ds{};
  if (::msgctl(msq, IPC_STAT, &ds) != 0) return -1;
  return static_cast<int>(ds.msg_qnum);
}

void HostSysv::remove() const {
  if (msq >= 0) ::msgctl(msq, IPC_RMID, nullptr);
  if (shm >= 0) ::shmctl(shm, IPC_RMID, nullptr);
  if (sem >= 0) ::semctl(sem, 0, IPC_RMID);
}

bool sysv_msq_exists(key_t key) { return ::msgget(key, 0) >= 0; }
bool sysv_shm_exists(key_t key) { return ::shmget(key, 0, 0) >= 0; }
bool sysv_sem_exists(key_t key) { return ::semget(key, 0, 0) >= 0; }

int sysvipc_objects() {
  int n = 0;
  for (const char* f : {"/proc/sysvipc/msg", "/proc/sysvipc/shm", "/proc/sysvipc/sem"}) {
    std::ifstream in(f);
    std::string line;
    bool header = true;
    while (std::getline(in, line)) {
      if (!header && !line.empty()) ++n;
      header = false;
    }
  }
  return n;
}

bool host_mqueue_create(const std::string& name) {
  const mode_t old = ::umask(0);
  mqd_t q = ::mq_open(name.c_str(), O_CREAT | O_RDWR, 0666, nullptr);
  ::umask(old);
  if (q == static_cast<mqd_t>(-1)) return false;
  bool ok = ::mq_send(q, "host-secret", 11, 0) == 0;
  ::mq_close(q);
  return ok;
}

bool host_mqueue_exists(const std::string& name) {
  mqd_t q = ::mq_open(name.c_str(), O_RDONLY);
  if (q == static_cast<mqd_t>(-1)) return false;
  ::mq_close(q);
  return true;
}

void host_mqueue_unlink(const std::string& name) { ::mq_unlink(name.c_str()); }

long key_add(const char* type, const char* desc, const std::string& payload, int32_t keyring) {
  return ::syscall(SYS_add_key, type, desc, payload.data(), payload.size(), keyring);
}

long keyctl(int cmd, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5) {
  return ::syscall(SYS_keyctl, cmd, a2, a3, a4, a5);
}

int keys_of_uid(uid_t uid) {
  // "<uid>: <usage> <nkeys>/<nikeys> <qnkeys>/<maxkeys> <qnbytes>/<maxbytes>"
  std::ifstream in("/proc/key-users");
  std::string line;
  const std::string prefix = std::to_string(uid) + ":";
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string who, usage, keys;
    ss >> who >> usage >> keys;
    if (who == prefix) return std::stoi(keys.substr(0, keys.find('/')));
  }
  return 0;
}

const char* const kPyIpc = R"PY(
import ctypes, errno, json, os, sys
libc = ctypes.CDLL('libc.so.6', use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.msgrcv.restype = ctypes.c_ssize_t
libc.mq_receive.restype = ctypes.c_ssize_t
libc.syscall.restype = ctypes.c_long
IPC_CREAT, IPC_NOWAIT, IPC_RMID, GETVAL = 0o1000, 0o4000, 0, 12
KEY_SPEC_SESSION, KEY_SPEC_USER, KEY_SPEC_USER_SESSION = -3, -4, -5
KEYCTL_GET_KEYRING_ID, KEYCTL_SEARCH, KEYCTL_READ, KEYCTL_GET_PERSISTENT = 0, 10, 11, 22
def err(rc):
    if rc is not None and rc != -1 and rc != ctypes.c_void_p(-1).value:
        return 'ok'
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def msgbuf(text=b''):
    return ctypes.create_string_buffer(b'\1\0\0\0\0\0\0\0' + text, 8 + 64)
def add_key(typ, desc, payload, ring):
    return libc.syscall(248, typ, desc, payload, ctypes.c_size_t(len(payload)), ctypes.c_int(ring))
def keyctl(cmd, *args):
    return libc.syscall(250, ctypes.c_int(cmd), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
def mq_open(name, flags):
    return libc.mq_open(name, ctypes.c_int(flags), ctypes.c_int(0o600), None)
)PY";

}  // namespace agentcage::kt
