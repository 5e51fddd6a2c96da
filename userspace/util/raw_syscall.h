// SPDX-License-Identifier: Apache-2.0
// System calls that touch no state of the C library: the result, or -errno
// on failure; errno is never written.
//
// For code that runs in a child sharing its parent's memory (CLONE_VM:
// cgroup::spawn_in_cgroup_sharing_memory) until it execs. There, errno is
// the parent thread's (the same thread-local storage), the library's
// set*id() wrappers signal the parent's threads, and malloc's per-thread
// caches are the parent's: only the kernel may be asked for anything.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace agentcage {

#if defined(__x86_64__)

// Whether the raw calls below bypass the C library (else they are syscall(2)).
inline constexpr bool kRawSyscalls = true;

inline long raw_syscall(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}

#else

inline constexpr bool kRawSyscalls = false;

inline long raw_syscall(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  const long ret = ::syscall(n, a, b, c, d, e, f);
  return ret < 0 ? -errno : ret;
}

#endif

// A pointer or descriptor as a system call argument.
template <typename T>
long sysarg(T* p) {
  return reinterpret_cast<long>(p);
}

}  // namespace agentcage
