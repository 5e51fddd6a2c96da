// SPDX-License-Identifier: Apache-2.0
#include "run/seccomp.h"

#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "policy/syscalls.h"
#include "util/unique_fd.h"

namespace agentcage::run {

namespace {

struct CtxRelease {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxRelease>;

Error seccomp_error(const std::string& what, int rc) {
  return Error{"seccomp: " + what + ": " + std::strerror(-rc)};
}

// personality(2) stays allowed for PER_LINUX (0), PER_LINUX32 (0x8),
// UNAME26 (0x20000), their combination, and the query 0xffffffff: what
// Docker's profile allows. Every other value is denied with single-argument
// masked rules (libseccomp takes one comparison per argument and rule):
// a value below 2^31 with a flag other than those two set; a value with bit
// 31 set and any lower bit clear (so 0xffffffff itself is not matched).
// The kernel reads the argument as an unsigned int: only the low 32 bits
// are compared.
// SCMP_A0(SCMP_CMP_MASKED_EQ, mask, value), without the macro's C99
// compound literal (not C++).
scmp_arg_cmp a0_masked_eq(uint64_t mask, uint64_t value) {
  scmp_arg_cmp cmp{};
  cmp.arg = 0;
  cmp.op = SCMP_CMP_MASKED_EQ;
  cmp.datum_a = mask;
  cmp.datum_b = value;
  return cmp;
}

// What a denied call meets: a notification to agentcage, which answers
// EPERM and counts it (run/seccomp_notify.h).
constexpr uint32_t kDeny = SCMP_ACT_NOTIFY;

int deny_personality(void* ctx, int nr) {
  constexpr uint64_t kAllowedBits = 0x20008, kTop = 1ull << 31;
  const auto deny = kDeny;
  for (int bit = 0; bit < 31; ++bit) {
    const uint64_t b = 1ull << bit;
    int rc = 0;
    if (!(b & kAllowedBits)) rc = seccomp_rule_add(ctx, deny, nr, 1, a0_masked_eq(b | kTop, b));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, nr, 1, a0_masked_eq(b | kTop, kTop));
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace

Result<std::vector<sock_filter>> build_seccomp_filter(std::span<const std::string> allowed) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Error{"seccomp: seccomp_init failed"};
  // Other ABIs (i386 via int 0x80; x32, which libseccomp checks for in an
  // x86_64 filter) would reach the same kernel code under other numbers.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, kDeny))
    return seccomp_error("setting the action for other ABIs", rc);
  // The child sets no_new_privs itself and installs the program directly.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0)) return seccomp_error("attributes", rc);

  for (const auto& group : policy::syscall_groups()) {
    if (std::find(allowed.begin(), allowed.end(), group.name) != allowed.end()) continue;
    for (std::string_view name : group.syscalls) {
      const int nr = seccomp_syscall_resolve_name(std::string(name).c_str());
      if (nr == __NR_SCMP_ERROR || nr < 0) continue;  // not a call of this architecture
      int rc =
          group.by_argument ? deny_personality(ctx.get(), nr) : seccomp_rule_add(ctx.get(), kDeny, nr, 0);
      if (rc != 0) return seccomp_error("denying " + std::string(name), rc);
    }
  }

  // libseccomp 2.5 exports to a descriptor only.
  UniqueFd mem(::memfd_create("agentcage-seccomp", MFD_CLOEXEC));
  if (!mem) return Error{"seccomp: memfd_create: " + std::string(std::strerror(errno))};
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get())) return seccomp_error("exporting the filter", rc);
  const off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0)
    return Error{"seccomp: the exported filter has an unexpected size"};
  std::vector<sock_filter> code(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), code.data(), static_cast<size_t>(size), 0) != size)
    return Error{"seccomp: reading the exported filter: " + std::string(std::strerror(errno))};
  return code;
}

}  // namespace agentcage::run
