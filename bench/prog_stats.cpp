// SPDX-License-Identifier: Apache-2.0
// BPF program run-time statistics: turning them on, and reading them for the
// agentcage programs the kernel has loaded (the LSM programs and the UDP
// client filter attached to the scopes' cgroups).
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "bench.h"

namespace agentcage::bench {

namespace {

constexpr const char* kSysctl = "/proc/sys/kernel/bpf_stats_enabled";

struct BtfDeleter {
  void operator()(btf* b) const { btf__free(b); }
};

// "bpf_lsm_file_open" -> "file_open", from the kernel BTF type the program
// is attached to; empty when unknown.
std::string hook_name(uint32_t attach_btf_id) {
  static std::unique_ptr<btf, BtfDeleter> vmlinux(btf__load_vmlinux_btf());
  if (!vmlinux || attach_btf_id == 0) return {};
  const btf_type* t = btf__type_by_id(vmlinux.get(), attach_btf_id);
  if (!t) return {};
  const char* name = btf__name_by_offset(vmlinux.get(), t->name_off);
  if (!name) return {};
  std::string s = name;
  constexpr std::string_view prefix = "bpf_lsm_";
  if (s.rfind(prefix, 0) == 0) s.erase(0, prefix.size());
  return s;
}

}  // namespace

Result<std::unique_ptr<StatsEnabled>> StatsEnabled::enable() {
  std::unique_ptr<StatsEnabled> s(new StatsEnabled());
  int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (fd >= 0) {
    s->fd_ = fd;
    return s;
  }
  int enable_err = errno;
  // Older kernels or a refused command: the sysctl does the same.
  std::ifstream in(kSysctl);
  std::string old;
  if (!(in >> old))
    return Error{std::string("bpf_stats unavailable: BPF_ENABLE_STATS failed (") + std::strerror(enable_err) +
                     ") and " + kSysctl + " is not readable",
                 enable_err};
  if (auto st = cgroup::write_file(kSysctl, "1"); !st.ok())
    return Error{std::string("bpf_stats unavailable: BPF_ENABLE_STATS failed (") + std::strerror(enable_err) +
                     ") and writing 1 to " + kSysctl + " failed: " + st.error().message,
                 st.error().code};
  s->old_sysctl_ = old;
  return s;
}

StatsEnabled::~StatsEnabled() {
  if (fd_ >= 0) ::close(fd_);
  if (!old_sysctl_.empty()) (void)cgroup::write_file(kSysctl, old_sysctl_);
}

Result<std::map<uint32_t, ProgStat>> agentcage_programs() {
  std::map<uint32_t, ProgStat> out;
  uint32_t id = 0;
  for (;;) {
    if (bpf_prog_get_next_id(id, &id) != 0) {
      if (errno == ENOENT) break;
      return Error::from_errno("bench: bpf_prog_get_next_id");
    }
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // unloaded in between
      return Error::from_errno("bench: bpf_prog_get_fd_by_id(" + std::to_string(id) + ")");
    }
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    int rc = bpf_obj_get_info_by_fd(fd, &info, &len);
    int err = errno;
    ::close(fd);
    if (rc != 0)
      return Error::from_errno("bench: bpf_obj_get_info_by_fd(prog " + std::to_string(id) + ")", err);
    if (std::strncmp(info.name, "ac_", 3) != 0) continue;
    ProgStat s;
    if (info.type == BPF_PROG_TYPE_CGROUP_SKB)
      s.hook = "cgroup_skb_ingress";  // the UDP client filter, on each scope's cgroup
    else if (info.type == BPF_PROG_TYPE_LSM)
      s.hook = hook_name(info.attach_btf_id);
    else
      continue;
    if (s.hook.empty()) s.hook = std::string(info.name, strnlen(info.name, sizeof info.name));
    s.run_time_ns = info.run_time_ns;
    s.run_cnt = info.run_cnt;
    out.emplace(id, s);
  }
  return out;
}

}  // namespace agentcage::bench
