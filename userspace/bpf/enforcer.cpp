#include "bpf/enforcer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bpf/lsm.h"
#include "util/log.h"

// The generated skeleton is C; keep our warning set for our own code only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wcast-align"
#include "agentcage.skel.h"
#pragma GCC diagnostic pop

namespace agentcage::bpf {
namespace {

Error bpf_error(const std::string& what, int err) {
  // libbpf returns negative errno values.
  return Error::from_errno("bpf: " + what, err < 0 ? -err : err);
}

int cpu_count() {
  int n = libbpf_num_possible_cpus();
  return n > 0 ? n : 1;
}

}  // namespace

Result<ac_path_key> make_path_key(uint32_t rules_id, const PathRule& rule) {
  const std::string& path = rule.path;
  if (rules_id & ~AC_RULES_ID_MASK) return Error{"bpf: rules id out of range", EINVAL};
  std::string text;
  if (rule.space == RuleSpace::abstract_unix) {
    if (path.empty()) return Error{"bpf: empty abstract unix socket name", EINVAL};
    text = path;  // exact bytes; the kernel side compares the length too
  } else {
    if (path.empty() || path.front() != '/')
      return Error{"bpf: path rule is not absolute: \"" + path + "\"", EINVAL};
    text = path == "/" ? "/" : path + "/";
  }
  if (text.size() > AC_PATH_KEY_MAX)
    return Error{"bpf: path rule longer than " + std::to_string(AC_PATH_KEY_MAX - 1) + " bytes: \"" +
                     path + "\"",
                 ENAMETOOLONG};
  ac_path_key key{};
  key.rules_id_be = htonl(rules_id | static_cast<uint32_t>(rule.space));
  std::memcpy(key.path, text.data(), text.size());
  key.prefixlen = static_cast<uint32_t>(32 + 8 * text.size());
  return key;
}

Result<ac_path_key> make_path_key(uint32_t rules_id, const std::string& path) {
  return make_path_key(rules_id, PathRule{path, 0, RuleSpace::absolute});
}

Result<ac_net_key> make_net_key(uint32_t rules_id, const NetRule& rule) {
  if (rule.prefix_len > 128) return Error{"bpf: CIDR prefix longer than 128 bits", EINVAL};
  if (rule.ranges.empty() || rule.ranges.size() > AC_NET_MAX_RANGES)
    return Error{"bpf: a CIDR rule needs 1.." + std::to_string(AC_NET_MAX_RANGES) + " port ranges", EINVAL};
  ac_net_key key{};
  key.rules_id_be = htonl(rules_id & AC_RULES_ID_MASK);
  std::memcpy(key.addr, rule.addr.data(), 16);
  key.prefixlen = 32u + rule.prefix_len;
  return key;
}

void Enforcer::SkelDeleter::operator()(agentcage_bpf* skel) const {
  agentcage_bpf__destroy(skel);  // detaches links, closes maps and programs
}

Result<std::unique_ptr<Enforcer>> Enforcer::load(const LoadOptions& opts) {
  log::route_libbpf();

  std::unique_ptr<Enforcer> self(new Enforcer());
  self->skel_.reset(agentcage_bpf__open());
  if (!self->skel_) return bpf_error("opening the BPF object failed", errno);

  if (int err = bpf_map__set_max_entries(self->skel_->maps.ac_events, opts.ringbuf_bytes))
    return bpf_error("sizing the event ring buffer", err);

  if (int err = agentcage_bpf__load(self->skel_.get())) {
    if (err == -EPERM)
      return Error{
          "bpf: the kernel refused to load the LSM programs (" + std::string(std::strerror(-err)) +
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
  if (int err = agentcage_bpf__attach(self->skel_.get()))
    return bpf_error("attaching the LSM programs", err);

  // Attaching succeeds even when the bpf LSM is not in the active LSM list,
  // but then the programs are never called. Refuse rather than pretend.
  LsmState lsm = read_lsm_state();
  if (!lsm.readable)
    return Error{"bpf: cannot confirm the BPF LSM is active: " + lsm.detail, ENOENT};
  if (!lsm.bpf_active)
    return Error{"bpf: the BPF LSM is not active (active LSMs: " + lsm.list +
                     "); programs would attach but never run. " + lsm_fix_hint(lsm),
                 ENOTSUP};

  // Start from a clean configuration: no scope levels, so nothing is scoped.
  if (Status st = self->write_levels(); !st) return st.error();
  return self;
}

Enforcer::~Enforcer() = default;

int Enforcer::events_fd() const { return bpf_map__fd(skel_->maps.ac_events); }

Status Enforcer::write_levels() {
  ac_config cfg{};
  for (const auto& [level, refs] : level_refs_) {
    if (refs == 0) continue;
    if (cfg.scope_levels == 0) cfg.min_level = level;
    cfg.max_level = level;
    cfg.scope_levels |= 1ULL << level;
  }
  uint32_t zero = 0;
  if (int err = bpf_map__update_elem(skel_->maps.ac_settings, &zero, sizeof zero, &cfg, sizeof cfg,
                                     BPF_ANY))
    return bpf_error("writing scope levels", err);
  return {};
}

void Enforcer::delete_rules(const WrittenRules& rules) {
  for (const auto& key : rules.paths)
    bpf_map__delete_elem(skel_->maps.ac_path_rules, &key, sizeof key, 0);
  for (const auto& key : rules.net) bpf_map__delete_elem(skel_->maps.ac_net_rules, &key, sizeof key, 0);
}

Status Enforcer::put_policy(uint32_t slot, std::span<const PathRule> rules, uint32_t flags) {
  CompiledPolicy p;
  p.paths.assign(rules.begin(), rules.end());
  p.flags = flags;
  return put_policy(slot, p);
}

Status Enforcer::put_policy(uint32_t slot, const CompiledPolicy& policy) {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  if (next_rules_id_ > AC_RULES_ID_MASK) return Error{"bpf: rules ids exhausted; restart agentcage", EOVERFLOW};

  const uint32_t rules_id = next_rules_id_++;
  WrittenRules written;
  auto fail = [&](Error e) {
    delete_rules(written);
    return Status(std::move(e));
  };
  for (const auto& rule : policy.paths) {
    auto key = make_path_key(rules_id, rule);
    if (!key) return fail(key.error());
    ac_path_rule value{rule.access, rule.space == RuleSpace::abstract_unix
                                        ? static_cast<uint32_t>(rule.path.size())
                                        : 0};
    if (int err = bpf_map__update_elem(skel_->maps.ac_path_rules, &*key, sizeof(ac_path_key), &value,
                                       sizeof value, BPF_ANY))
      return fail(bpf_error("writing path rule \"" + rule.path + "\"", err));
    written.paths.push_back(*key);
  }
  for (const auto& rule : policy.net) {
    auto key = make_net_key(rules_id, rule);
    if (!key) return fail(key.error());
    ac_net_rule value{};
    value.count = static_cast<uint32_t>(rule.ranges.size());
    for (size_t i = 0; i < rule.ranges.size(); ++i) value.ranges[i] = rule.ranges[i];
    if (int err = bpf_map__update_elem(skel_->maps.ac_net_rules, &*key, sizeof(ac_net_key), &value,
                                       sizeof value, BPF_ANY))
      return fail(bpf_error("writing network rule", err));
    written.net.push_back(*key);
  }

  // One element update switches every scope on this slot to the new rules.
  ac_policy value{};
  value.rules_id = rules_id;
  value.flags = policy.flags;
  if (int err = bpf_map__update_elem(skel_->maps.ac_policies, &slot, sizeof slot, &value, sizeof value,
                                     BPF_ANY))
    return fail(bpf_error("switching policy slot " + std::to_string(slot), err));

  if (auto old = slot_rules_.find(slot); old != slot_rules_.end()) {
    delete_rules(rule_keys_[old->second]);
    rule_keys_.erase(old->second);
  }
  slot_rules_[slot] = rules_id;
  rule_keys_[rules_id] = std::move(written);
  return {};
}

Status Enforcer::remove_policy(uint32_t slot) {
  int err = bpf_map__delete_elem(skel_->maps.ac_policies, &slot, sizeof slot, 0);
  if (err && err != -ENOENT) return bpf_error("removing policy slot " + std::to_string(slot), err);
  if (auto old = slot_rules_.find(slot); old != slot_rules_.end()) {
    delete_rules(rule_keys_[old->second]);
    rule_keys_.erase(old->second);
    slot_rules_.erase(old);
  }
  return {};
}

Status Enforcer::add_scope(uint64_t cgroup_id, unsigned level, uint64_t scope_id, uint32_t policy_slot,
                           const std::string& workspace) {
  // Level 0 is the root cgroup: scoping it would confine the whole host.
  if (level == 0 || level > AC_MAX_SCOPE_LEVEL)
    return Error{"bpf: a scope must be a non-root cgroup at level 1.." + std::to_string(AC_MAX_SCOPE_LEVEL) +
                     " (got level " + std::to_string(level) + ")",
                 EINVAL};
  if (scopes_.count(cgroup_id))
    return Error{"bpf: cgroup " + std::to_string(cgroup_id) + " is already a scope", EEXIST};

  ScopeEntry entry;
  entry.level = level;
  if (!workspace.empty()) {
    if (workspace == "/") return Error{"bpf: the workspace cannot be /", EINVAL};
    auto key = make_path_key(0, workspace);
    if (!key) return key.error().wrap("workspace");
    entry.workspace_tag = next_workspace_tag_++;
    key->rules_id_be = htonl(entry.workspace_tag);
    entry.workspace_key = *key;
    ac_workspace ws{static_cast<uint32_t>(workspace.size()), 0};
    if (int err = bpf_map__update_elem(skel_->maps.ac_workspaces, &entry.workspace_key, sizeof(ac_path_key),
                                       &ws, sizeof ws, BPF_ANY))
      return bpf_error("registering workspace " + workspace, err);
  }
  auto drop_workspace = [&] {
    if (entry.workspace_tag)
      bpf_map__delete_elem(skel_->maps.ac_workspaces, &entry.workspace_key, sizeof(ac_path_key), 0);
  };

  ac_scope scope{};
  scope.scope_id = scope_id;
  scope.policy_slot = policy_slot;
  scope.level = static_cast<uint16_t>(level);
  scope.workspace_tag = entry.workspace_tag;
  if (int err = bpf_map__update_elem(skel_->maps.ac_scopes, &cgroup_id, sizeof cgroup_id, &scope, sizeof scope,
                                     BPF_NOEXIST)) {
    drop_workspace();
    return bpf_error("registering scope for cgroup " + std::to_string(cgroup_id), err);
  }
  scopes_[cgroup_id] = entry;
  ++level_refs_[level];
  if (Status st = write_levels(); !st) {
    // Without its level bit the scope would silently not apply: undo it.
    bpf_map__delete_elem(skel_->maps.ac_scopes, &cgroup_id, sizeof cgroup_id, 0);
    drop_workspace();
    if (--level_refs_[level] == 0) level_refs_.erase(level);
    scopes_.erase(cgroup_id);
    return st;
  }
  return {};
}

Status Enforcer::remove_scope(uint64_t cgroup_id) {
  int err = bpf_map__delete_elem(skel_->maps.ac_scopes, &cgroup_id, sizeof cgroup_id, 0);
  if (err && err != -ENOENT) return bpf_error("removing scope for cgroup " + std::to_string(cgroup_id), err);
  if (auto it = scopes_.find(cgroup_id); it != scopes_.end()) {
    if (it->second.workspace_tag)
      bpf_map__delete_elem(skel_->maps.ac_workspaces, &it->second.workspace_key, sizeof(ac_path_key), 0);
    if (--level_refs_[it->second.level] == 0) level_refs_.erase(it->second.level);
    scopes_.erase(it);
    return write_levels();
  }
  return {};
}

Result<SlotCounters> Enforcer::counters(uint32_t slot) const {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  SlotCounters out;
  std::vector<ac_counters> percpu(static_cast<size_t>(cpu_count()));
  for (uint32_t hook = 0; hook < AC_HOOK_COUNT; ++hook) {
    uint32_t idx = slot * AC_HOOK_COUNT + hook;
    if (int err = bpf_map__lookup_elem(skel_->maps.ac_decision_counts, &idx, sizeof idx,
                                       percpu.data(), percpu.size() * sizeof(ac_counters), 0))
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
  if (int err = bpf_map__lookup_elem(skel_->maps.ac_stats, &idx, sizeof idx, percpu.data(),
                                     percpu.size() * sizeof(uint64_t), 0))
    return bpf_error("reading statistics", err);
  uint64_t sum = 0;
  for (uint64_t v : percpu) sum += v;
  return sum;
}

// ---- EventReader ------------------------------------------------------------

Result<std::unique_ptr<EventReader>> EventReader::create(int events_fd, Handler handler) {
  std::unique_ptr<EventReader> self(new EventReader());
  self->handler_ = std::move(handler);
  self->rb_ = ring_buffer__new(events_fd, &EventReader::on_record, self.get(), nullptr);
  if (!self->rb_) return bpf_error("creating the event ring buffer reader", errno);
  return self;
}

EventReader::~EventReader() { ring_buffer__free(rb_); }

int EventReader::on_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<EventReader*>(ctx);
  // Check the header before reading the body; never trust the size.
  if (size < sizeof(ac_event_header)) {
    ++self->malformed_;
    return 0;
  }
  ac_event_header hdr;
  std::memcpy(&hdr, data, sizeof hdr);
  if (hdr.type != AC_EVENT_DECISION || hdr.size != sizeof(ac_event_decision) ||
      size < sizeof(ac_event_decision)) {
    ++self->malformed_;
    return 0;
  }
  ac_event_decision ev;
  std::memcpy(&ev, data, sizeof ev);
  // An exception must not unwind through libbpf's C frames.
  try {
    self->handler_(ev);
  } catch (const std::exception& e) {
    log::error(std::string("events: handler failed: ") + e.what());
  } catch (...) {
    log::error("events: handler failed");
  }
  return 0;
}

Result<int> EventReader::poll(int timeout_ms) {
  int n = ring_buffer__poll(rb_, timeout_ms);
  if (n == -EINTR) return 0;
  if (n < 0) return bpf_error("polling events", n);
  return n;
}

}  // namespace agentcage::bpf
