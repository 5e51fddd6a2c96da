// SPDX-License-Identifier: Apache-2.0
// No input pushed into a terminal from a scope, by a 64-bit or a 32-bit
// ioctl: since 6.8 (and where it was backported) a 32-bit TIOCSTI reaches
// file_ioctl_compat instead of file_ioctl. An attached workload has no
// seccomp filter to refuse 32-bit system calls, so the LSM has to see both.
// The scope here is attached (no run, no filter); other terminal ioctls keep
// working beside each denial.
#include <fcntl.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "kernel_env.h"
#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

using namespace kt;

#if defined(__x86_64__)
// ioctl through the 32-bit system call entry (int 0x80, i386 number 54);
// `arg` must be an address below 4 GiB. The raw result (-errno on failure).
long ioctl32(int fd, unsigned cmd, uint32_t arg) {
  long ret;
  asm volatile("int $0x80"
               : "=a"(ret)
               : "a"(54L), "b"(static_cast<long>(fd)), "c"(static_cast<long>(cmd)),
                 "d"(static_cast<long>(arg))
               : "memory", "r8", "r9", "r10", "r11");
  return ret;
}
#endif

// A terminal's probe: TCGETS then TIOCSTI of one character, 64-bit
// (compat == false) or 32-bit. kOk: TCGETS worked, TIOCSTI was refused with
// EACCES and nothing reached the terminal's input. 10 + step otherwise.
int push_input(bool compat) {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return 10;
  termios t{};
  if (::tcgetattr(slave, &t) != 0) return 11;
  ::cfmakeraw(&t);
  if (::tcsetattr(slave, TCSANOW, &t) != 0) return 12;
  int sti = 0;
  if (!compat) {
    if (::ioctl(slave, TCGETS, &t) != 0) return 13;
    sti = ::ioctl(slave, TIOCSTI, "x") == 0 ? 0 : -errno;
  } else {
#if defined(__x86_64__)
    void* low = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (low == MAP_FAILED) return 14;
    const auto addr = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(low));
    if (long r = ioctl32(slave, TCGETS, addr); r != 0) return r == -ENOSYS ? 15 : 16;
    std::memcpy(low, "x", 2);
    sti = static_cast<int>(ioctl32(slave, TIOCSTI, addr));
#else
    return 17;
#endif
  }
  if (sti != -EACCES) return sti == 0 ? 20 : 21;
  ::fcntl(slave, F_SETFL, O_NONBLOCK);
  char c;
  return ::read(slave, &c, 1) < 0 && errno == EAGAIN ? kOk : 22;
}

class TtyTest : public PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = 25;
  TtyTest() : PolicyScopeTest(kSlot, "tty") {}
};

TEST_F(TtyTest, NoInputPushedByA64Or32BitIoctl) {
  apply_yaml(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: kt-tty\nspec:\n"
      "  files:\n    read: [/dev]\n    write: [/dev/pts, /dev/ptmx]\n",
      ws_.string());
  const uint64_t before = denied(AC_HOOK_TTY);
  EXPECT_EQ(scoped([] { return push_input(false); }), kOk) << "64-bit";
  EXPECT_EQ(denied(AC_HOOK_TTY) - before, 1u);
  // 15: the kernel has no 32-bit entry (ia32 emulation off): no such door.
  EXPECT_EQ(scoped([] { return push_input(true); }), kOk) << "32-bit (int 0x80)";
  EXPECT_EQ(denied(AC_HOOK_TTY) - before, 2u);
  // Outside the scope the same calls push the character (as root): the
  // denials above are agentcage's.
  EXPECT_EQ(in_child(false, [] { return push_input(true); }), 20);
}

}  // namespace
}  // namespace agentcage
