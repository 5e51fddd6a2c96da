// SPDX-License-Identifier: Apache-2.0
// The Enforcer's part in egress by domain name (dns.bpf.h): the DNS programs
// on a scope's cgroup, and the pins its resolver makes.
#include <bpf/bpf.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bpf/enforcer.h"
#include "bpf/enforcer_internal.h"
#include "bpf/skeleton.h"

namespace agentcage::bpf {

using detail::bpf_error;
using detail::kDnsPrograms;

Result<int> Enforcer::dns_program(size_t index) const {
  if (dns_programs_.empty()) dns_programs_.assign(std::size(kDnsPrograms), -1);
  int& fd = dns_programs_[index];
  if (fd >= 0) return fd;
  const char* name = kDnsPrograms[index].name;
  if (skel_) {
    bpf_program* prog = bpf_object__find_program_by_name(skel_->obj, name);
    if (!prog) return Error{"bpf: this build has no program " + std::string(name), ENOENT};
    fd = bpf_program__fd(prog);
  } else {
    const std::string path = pin_dir_ + "/programs/" + name;
    int got = bpf_obj_get(path.c_str());
    if (got < 0) return bpf_error("opening pinned " + path, got);
    owned_fds_.emplace_back(got);
    fd = got;
  }
  return fd;
}

Result<int> Enforcer::pins_map() const {
  if (pins_ >= 0) return pins_;
  if (skel_) {
    pins_ = bpf_map__fd(skel_->maps.ac_pins);
  } else {
    const std::string path = pin_dir_ + "/maps/ac_pins";
    int got = bpf_obj_get(path.c_str());
    if (got < 0) return bpf_error("opening pinned " + path, got);
    owned_fds_.emplace_back(got);
    pins_ = got;
  }
  return pins_;
}

// As for the receive filter: never where they would switch off another
// tool's programs of the same attach types above the scope.
Status Enforcer::attach_dns(int cgroup_fd) {
  auto above = detail::overridable_ancestor(cgroup_fd, detail::kDnsAttachTypes);
  if (!above) return above.error();
  if (*above) return detail::overrides(**above, "DNS programs (the run's queries sent to its resolver)");
  size_t done = 0;
  for (; done < std::size(kDnsPrograms); ++done) {
    auto fd = dns_program(done);
    if (!fd) break;
    if (int err = bpf_prog_attach(*fd, cgroup_fd, kDnsPrograms[done].type, BPF_F_ALLOW_MULTI)) {
      Error e = bpf_error(std::string("attaching ") + kDnsPrograms[done].name +
                              " to the scope's cgroup (DNS answered by the run's resolver)",
                          err);
      while (done-- > 0) bpf_prog_detach2(*dns_program(done), cgroup_fd, kDnsPrograms[done].type);
      return e;
    }
  }
  if (done != std::size(kDnsPrograms)) {
    Error e = dns_program(done).error();
    while (done-- > 0) bpf_prog_detach2(*dns_program(done), cgroup_fd, kDnsPrograms[done].type);
    return e;
  }
  return {};
}

// Only called for a scope that has them (AC_SCOPE_F_DNS): on a cgroup not
// in ALLOW_MULTI mode a detach takes off whatever program is attached.
void Enforcer::detach_dns(int cgroup_fd) {
  if (cgroup_fd < 0) return;
  for (size_t i = 0; i < std::size(kDnsPrograms); ++i)
    if (auto fd = dns_program(i)) bpf_prog_detach2(*fd, cgroup_fd, kDnsPrograms[i].type);
}

Status Enforcer::put_pin(const ac_pin_key& key, uint64_t expires_ns) {
  auto map = pins_map();
  if (!map) return map.error();
  ac_pin pin{expires_ns};
  if (int err = bpf_map_update_elem(*map, &key, &pin, BPF_ANY))
    return bpf_error(err == -E2BIG ? "pinning an address: the pin map is full (" +
                                         std::to_string(AC_MAX_PINS) + " addresses across all runs)"
                                   : std::string("pinning an address"),
                     err);
  return {};
}

void Enforcer::delete_pin(const ac_pin_key& key) {
  if (auto map = pins_map()) bpf_map_delete_elem(*map, &key);
}

namespace {

// The keys of ac_pins that belong to `scope_id`. The map holds every run's
// pins (up to AC_MAX_PINS), and each run's end looks for its own.
std::vector<ac_pin_key> pin_keys_of(int fd, uint64_t scope_id) {
  std::vector<ac_pin_key> mine;
  const std::vector<unsigned char> keys = detail::all_key_bytes(fd, sizeof(ac_pin_key), sizeof(ac_pin));
  for (size_t at = 0; at + sizeof(ac_pin_key) <= keys.size(); at += sizeof(ac_pin_key)) {
    ac_pin_key key;
    std::memcpy(&key, keys.data() + at, sizeof key);
    if (key.scope_id == scope_id) mine.push_back(key);
  }
  return mine;
}

}  // namespace

Result<size_t> Enforcer::pins_of(uint64_t scope_id) const {
  auto map = pins_map();
  if (!map) return map.error();
  return pin_keys_of(*map, scope_id).size();
}

void Enforcer::delete_pins_of(uint64_t scope_id) {
  auto map = pins_map();
  if (!map) return;
  for (const auto& key : pin_keys_of(*map, scope_id)) bpf_map_delete_elem(*map, &key);
}

}  // namespace agentcage::bpf
