// SPDX-License-Identifier: Apache-2.0
// Enforcer: loading the skeleton, the settings entry (scope levels, id
// counters) and the decision counters.
#include "bpf/enforcer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "bpf/enforcer_internal.h"
#include "bpf/lsm.h"
#include "bpf/programs.h"
#include "bpf/skeleton.h"
#include "util/log.h"

namespace agentcage::bpf {

using detail::all_keys;
using detail::bpf_error;
using detail::cpu_count;
using detail::per_scope_program;

void Enforcer::SkelDeleter::operator()(agentcage_bpf* skel) const {
  agentcage_bpf__destroy(skel);  // closes links (pinned ones stay attached), maps and programs
}

Result<std::unique_ptr<Enforcer>> Enforcer::load_skeleton(const LoadOptions& opts) {
  log::route_libbpf();

  std::unique_ptr<Enforcer> self(new Enforcer());
  self->skel_.reset(agentcage_bpf__open());
  if (!self->skel_) return bpf_error("opening the BPF object failed", errno);

  if (int err = bpf_map__set_max_entries(self->skel_->maps.ac_events, opts.ringbuf_bytes))
    return bpf_error("sizing the event ring buffer", err);
  if (Status st = select_programs(self->skel_.get()); !st) return st.error();

  if (int err = agentcage_bpf__load(self->skel_.get())) {
    if (err == -EPERM)
      return Error{"bpf: the kernel refused to load the LSM programs (" + std::string(std::strerror(-err)) +
                       "). Loading BPF LSM programs needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN), "
                       "a kernel built with CONFIG_BPF_LSM=y and no lockdown or sandbox forbidding it; "
                       "some virtualised kernels refuse LSM programs outright.",
                   -err};
    if (err == -EACCES || err == -EINVAL)
      return bpf_error(
          "the kernel's verifier rejected an LSM program (run with -vv for the verifier log; "
          "this is a bug in agentcage or an unsupported kernel)",
          err);
    return bpf_error("loading the LSM programs into the kernel (run with -vv for libbpf's log)", err);
  }
  // The receive filter is attached to each scope's cgroup (add_scope), not
  // to a hook.
  bpf_program* each = nullptr;
  bpf_object__for_each_program(each, self->skel_->obj) {
    if (per_scope_program(bpf_program__name(each))) bpf_program__set_autoattach(each, false);
  }
  if (int err = agentcage_bpf__attach(self->skel_.get())) return bpf_error("attaching the LSM programs", err);
  self->receive_filter_ = bpf_program__fd(self->skel_->progs.ac_udp_client_filter);

  auto& m = self->skel_->maps;
  self->maps_ = {
      bpf_map__fd(m.ac_scopes),          bpf_map__fd(m.ac_policies),   bpf_map__fd(m.ac_settings),
      bpf_map__fd(m.ac_path_rules),      bpf_map__fd(m.ac_workspaces), bpf_map__fd(m.ac_net_rules),
      bpf_map__fd(m.ac_decision_counts), bpf_map__fd(m.ac_stats),      bpf_map__fd(m.ac_events),
      bpf_map__fd(m.ac_scope_reports),   bpf_map__fd(m.ac_listeners),  bpf_map__fd(m.ac_scope_rings),
      bpf_map__fd(m.ac_bindings)};
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, self->skel_->obj) {
    if (program_skipped(prog)) continue;
    self->programs_.push_back(
        {bpf_program__name(prog), bpf_program__fd(prog), per_scope_program(bpf_program__name(prog))});
  }
  return self;
}

Status Enforcer::check_lsm_active() const {
  // Attaching succeeds even when the bpf LSM is not in the active LSM list,
  // but then the programs are never called. Refuse rather than pretend.
  LsmState lsm = read_lsm_state();
  if (!lsm.readable) return Error{"bpf: cannot confirm the BPF LSM is active: " + lsm.detail, ENOENT};
  if (!lsm.bpf_active)
    return Error{"bpf: the BPF LSM is not active (active LSMs: " + lsm.list +
                     "); programs would attach but never run. " + lsm_fix_hint(lsm),
                 ENOTSUP};
  return {};
}

Result<std::unique_ptr<Enforcer>> Enforcer::load(const LoadOptions& opts) {
  auto self = load_skeleton(opts);
  if (!self) return self.error();
  if (Status st = (*self)->check_lsm_active(); !st) return st.error();
  // Start from a clean configuration: no scope levels, so nothing is scoped.
  ac_config cfg{};
  cfg.next_rules_id = 1;
  cfg.next_workspace_tag = 1;
  if (Status st = (*self)->write_config(cfg); !st) return st.error();
  return std::move(*self);
}

Enforcer::~Enforcer() {
  for (const auto& [id, fd] : filtered_) detach_receive_filter(fd.get());
}

int Enforcer::events_fd() const { return maps_.events; }

Result<ac_config> Enforcer::read_config() const {
  uint32_t zero = 0;
  ac_config cfg{};
  if (int err = bpf_map_lookup_elem(maps_.settings, &zero, &cfg)) return bpf_error("reading settings", err);
  return cfg;
}

Status Enforcer::write_config(const ac_config& cfg) {
  uint32_t zero = 0;
  if (int err = bpf_map_update_elem(maps_.settings, &zero, &cfg, BPF_ANY))
    return bpf_error("writing settings", err);
  return {};
}

Status Enforcer::write_levels() {
  auto cfg = read_config();
  if (!cfg) return cfg.error();
  cfg->scope_levels = 0;
  cfg->min_level = cfg->max_level = 0;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) != 0) continue;
    cfg->scope_levels |= 1ULL << scope.level;
  }
  // A binding's level too: the kernel registers scopes there at any mkdir,
  // without writing the settings.
  for (const auto& key : all_keys<ac_binding_key>(maps_.bindings)) {
    ac_binding b{};
    if (bpf_map_lookup_elem(maps_.bindings, &key, &b) == 0 && b.level <= AC_MAX_SCOPE_LEVEL)
      cfg->scope_levels |= 1ULL << b.level;
  }
  if (cfg->scope_levels) {
    cfg->min_level = static_cast<uint32_t>(__builtin_ctzll(cfg->scope_levels));
    cfg->max_level = static_cast<uint32_t>(63 - __builtin_clzll(cfg->scope_levels));
  }
  return write_config(*cfg);
}

Result<uint32_t> Enforcer::next_id(uint32_t ac_config::*field, uint32_t limit) {
  auto cfg = read_config();
  if (!cfg) return cfg.error();
  uint32_t id = (*cfg).*field;
  if (id == 0) id = 1;
  if (id > limit)
    return Error{"bpf: ids exhausted; unload the pinned programs (remove " +
                     (pin_dir_.empty() ? std::string("them") : pin_dir_) + ") to start afresh",
                 EOVERFLOW};
  (*cfg).*field = id + 1;
  if (Status st = write_config(*cfg); !st) return st.error();
  return id;
}

Result<SlotCounters> Enforcer::counters(uint32_t slot) const {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  SlotCounters out;
  std::vector<ac_counters> percpu(static_cast<size_t>(cpu_count()));
  for (uint32_t hook = 0; hook < AC_HOOK_COUNT; ++hook) {
    uint32_t idx = slot * AC_HOOK_COUNT + hook;
    if (int err = bpf_map_lookup_elem(maps_.decision_counts, &idx, percpu.data()))
      return bpf_error("reading decision counters", err);
    for (const auto& c : percpu) {
      for (int d = 0; d < AC_DECISION_COUNT; ++d) out.hooks[hook].decisions[d] += c.decisions[d];
      for (int r = 0; r < AC_REASON_COUNT; ++r) out.hooks[hook].reasons[r] += c.reasons[r];
    }
  }
  return out;
}

Result<uint64_t> Enforcer::stat(ac_stat which) const {
  std::vector<uint64_t> percpu(static_cast<size_t>(cpu_count()));
  uint32_t idx = which;
  if (int err = bpf_map_lookup_elem(maps_.stats, &idx, percpu.data()))
    return bpf_error("reading statistics", err);
  uint64_t sum = 0;
  for (uint64_t v : percpu) sum += v;
  return sum;
}

}  // namespace agentcage::bpf
