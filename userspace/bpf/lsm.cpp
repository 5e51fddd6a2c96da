// SPDX-License-Identifier: Apache-2.0
#include "bpf/lsm.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace agentcage::bpf {

LsmState parse_lsm_list(std::string_view content) {
  LsmState st;
  st.readable = true;
  while (!content.empty() && (content.back() == '\n' || content.back() == '\0')) content.remove_suffix(1);
  st.list = std::string(content);
  size_t pos = 0;
  while (pos <= content.size()) {
    size_t comma = content.find(',', pos);
    std::string_view name =
        content.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (name == "bpf") st.bpf_active = true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return st;
}

LsmState read_lsm_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    LsmState st;
    int err = errno;
    st.detail = path + " is not readable (" + std::strerror(err) +
                "); securityfs is probably not mounted: mount -t securityfs securityfs "
                "/sys/kernel/security";
    return st;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_lsm_list(ss.str());
}

std::string lsm_fix_hint(const LsmState& state) {
  std::string wanted = state.list.empty() ? "bpf" : state.list + ",bpf";
  return "Add bpf to the kernel's LSM list at boot: append lsm=" + wanted +
         " to the kernel command line (e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then "
         "update-grub and reboot). The kernel must be built with CONFIG_BPF_LSM=y.";
}

core::FailClosedReason unavailable_reason(const LsmState& state) {
  return state.readable && !state.bpf_active ? core::FailClosedReason::lsm_inactive
                                             : core::FailClosedReason::bpf_unavailable;
}

}  // namespace agentcage::bpf
