// SPDX-License-Identifier: Apache-2.0
#include "bpf/programs.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "bpf/skeleton.h"

namespace agentcage::bpf {
namespace {

struct BtfDeleter {
  void operator()(btf* b) const { btf__free(b); }
};

// Parameters of the kernel's BPF LSM hook function bpf_lsm_<hook>, or -1
// when the kernel has no such hook.
int hook_params(const btf* vmlinux, const std::string& hook) {
  int id = btf__find_by_name_kind(vmlinux, ("bpf_lsm_" + hook).c_str(), BTF_KIND_FUNC);
  if (id < 0) return -1;
  const btf_type* fn = btf__type_by_id(vmlinux, static_cast<__u32>(id));
  const btf_type* proto = fn ? btf__type_by_id(vmlinux, fn->type) : nullptr;
  return proto && btf_is_func_proto(proto) ? btf_vlen(proto) : -1;
}

}  // namespace

Result<std::vector<std::string>> programs_to_skip() {
  std::unique_ptr<btf, BtfDeleter> vmlinux(btf__load_vmlinux_btf());
  if (!vmlinux)
    return Error{"bpf: reading the kernel's BTF (/sys/kernel/btf/vmlinux) to match hooks to this kernel",
                 errno};
  std::vector<std::string> skip;
  // POSIX ACLs have hooks of their own since 6.2; before, they are xattrs
  // and inode_setxattr/inode_getxattr see them.
  for (auto [prog, hook] :
       {std::pair{"ac_inode_get_acl", "inode_get_acl"}, std::pair{"ac_inode_set_acl", "inode_set_acl"},
        std::pair{"ac_inode_remove_acl", "inode_remove_acl"},
        // 32-bit ioctls reach file_ioctl_compat instead of file_ioctl since
        // 6.8 (and where that was backported); before, file_ioctl sees them.
        std::pair{"ac_file_ioctl_compat", "file_ioctl_compat"}})
    if (hook_params(vmlinux.get(), hook) < 0) skip.emplace_back(prog);

  // inode_setattr gained the mount's idmap as its first argument in 6.9.
  int setattr = hook_params(vmlinux.get(), "inode_setattr");
  if (setattr != 2 && setattr != 3)
    return Error{"bpf: this kernel's inode_setattr hook takes " + std::to_string(setattr) +
                     " arguments; agentcage knows the 2- (up to 6.8) and 3-argument (6.9+) forms",
                 ENOTSUP};
  skip.emplace_back(setattr == 3 ? "ac_inode_setattr_noidmap" : "ac_inode_setattr");
  return skip;
}

Status select_programs(agentcage_bpf* skel) {
  auto skip = programs_to_skip();
  if (!skip) return skip.error();
  ::bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel->obj) {
    bool off = std::find(skip->begin(), skip->end(), bpf_program__name(prog)) != skip->end();
    if (int err = bpf_program__set_autoload(prog, !off))
      return Error{std::string("bpf: selecting program ") + bpf_program__name(prog), -err};
  }
  return {};
}

bool program_skipped(const ::bpf_program* prog) { return !bpf_program__autoload(prog); }

}  // namespace agentcage::bpf
