// SPDX-License-Identifier: Apache-2.0
// Enforcer: policy slots and scopes in the maps. The choice of a slot and the
// order of scope operations belong to scope/ (scope/scope.h); these are the
// map updates it composes.
#include "bpf/enforcer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "bpf/enforcer_internal.h"
#include "util/unique_fd.h"

namespace agentcage::bpf {

namespace {

// The places (ac_listeners keys) where scope `scope_id` has a socket registered.
std::vector<ac_listener_key> listener_keys_of(int listeners_fd, uint64_t scope_id) {
  std::vector<ac_listener_key> out;
  for (const auto& key : detail::all_keys<ac_listener_key>(listeners_fd)) {
    ac_listener l{};
    if (bpf_map_lookup_elem(listeners_fd, &key, &l) == 0 && l.scope_id == scope_id) out.push_back(key);
  }
  return out;
}

}  // namespace

std::vector<MapFill> Enforcer::map_fill() const {
  std::vector<std::pair<const char*, int>> maps = {
      {"ac_scopes", maps_.scopes},         {"ac_policies", maps_.policies},   {"ac_path_rules", maps_.path_rules},
      {"ac_net_rules", maps_.net_rules},   {"ac_workspaces", maps_.workspaces}, {"ac_listeners", maps_.listeners}};
  if (auto pins = pins_map()) maps.emplace_back("ac_pins", *pins);
  std::vector<MapFill> out;
  for (const auto& [name, fd] : maps) {
    bpf_map_info info{};
    uint32_t len = sizeof info;
    if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    out.push_back({name, detail::all_key_bytes(fd, info.key_size, info.value_size).size() / info.key_size,
                   info.max_entries});
  }
  return out;
}

namespace detail {

std::vector<unsigned char> all_key_bytes(int fd, uint32_t key_size, uint32_t value_size) {
  constexpr uint32_t kBatch = 4096;
  std::vector<unsigned char> all, keys(size_t{kBatch} * key_size), values(size_t{kBatch} * value_size);
  // The batch position: a bucket index for a hash map; a key's room (at least 8 bytes) suffices.
  std::vector<unsigned char> in(std::max<uint32_t>(key_size, 8)), out(in.size());
  bpf_map_batch_opts opts{};
  opts.sz = sizeof opts;
  for (bool first = true;; first = false) {
    uint32_t count = kBatch;
    const int err =
        bpf_map_lookup_batch(fd, first ? nullptr : in.data(), out.data(), keys.data(), values.data(), &count, &opts);
    if (err < 0 && err != -ENOENT) break;
    all.insert(all.end(), keys.begin(), keys.begin() + static_cast<long>(size_t{std::min(count, kBatch)} * key_size));
    if (err == -ENOENT) return all;  // the end of the map
    in = out;
  }
  all.clear();
  std::vector<unsigned char> cur(key_size), next(key_size);
  for (const void* prev = nullptr; bpf_map_get_next_key(fd, prev, next.data()) == 0; prev = cur.data()) {
    cur = next;
    all.insert(all.end(), next.begin(), next.end());
  }
  return all;
}

}  // namespace detail

uint32_t Enforcer::ring_buffer_bytes() const {
  bpf_map_info info{};
  uint32_t len = sizeof info;
  if (maps_.events < 0 || bpf_obj_get_info_by_fd(maps_.events, &info, &len) != 0) return 0;
  return info.max_entries;
}

using detail::all_keys;
using detail::bpf_error;
using detail::cpu_count;
using detail::rules_id_of;

void Enforcer::purge_unreferenced() {
  std::vector<uint32_t> live;
  for (uint32_t slot : all_keys<uint32_t>(maps_.policies)) {
    ac_policy p{};
    if (bpf_map_lookup_elem(maps_.policies, &slot, &p) == 0) live.push_back(p.rules_id);
  }
  auto is_live = [&](uint32_t id) { return std::find(live.begin(), live.end(), id) != live.end(); };
  for (const auto& key : all_keys<ac_path_key>(maps_.path_rules))
    if (!is_live(rules_id_of(key.rules_id_be))) bpf_map_delete_elem(maps_.path_rules, &key);
  for (const auto& key : all_keys<ac_net_key>(maps_.net_rules))
    if (!is_live(rules_id_of(key.rules_id_be))) bpf_map_delete_elem(maps_.net_rules, &key);

  std::vector<uint32_t> tags;
  std::vector<uint64_t> scope_ids;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) != 0) continue;
    tags.push_back(scope.workspace_tag);
    scope_ids.push_back(scope.scope_id);
  }
  for (uint32_t tag : binding_tags()) tags.push_back(tag);
  for (const auto& key : all_keys<ac_path_key>(maps_.workspaces))
    if (std::find(tags.begin(), tags.end(), ntohl(key.rules_id_be) & ~AC_WORKSPACE_ANCESTOR) == tags.end())
      bpf_map_delete_elem(maps_.workspaces, &key);
  for (uint64_t id : all_keys<uint64_t>(maps_.scope_reports))
    if (std::find(scope_ids.begin(), scope_ids.end(), id) == scope_ids.end())
      bpf_map_delete_elem(maps_.scope_reports, &id);
  for (uint64_t id : all_keys<uint64_t>(maps_.scope_rings))
    if (std::find(scope_ids.begin(), scope_ids.end(), id) == scope_ids.end())
      bpf_map_delete_elem(maps_.scope_rings, &id);
}

Status Enforcer::put_policy(uint32_t slot, std::span<const PathRule> rules, uint32_t flags) {
  CompiledPolicy p;
  p.paths.assign(rules.begin(), rules.end());
  p.flags = flags;
  return put_policy(slot, p);
}

Status Enforcer::put_policy(uint32_t slot, const CompiledPolicy& policy) {
  return put_policy(slot, std::string(), policy);
}

Status Enforcer::put_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy) {
  return with_lock([&] { return install_policy(slot, name, policy, AC_POLICY_OWNER_NAMED); });
}

Status Enforcer::put_transient_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy) {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  return with_lock([&]() -> Status {
    // A slot's counters belong to the policy in it: a new one counts from 0.
    reset_counters(slot);
    return install_policy(slot, name, policy, AC_POLICY_OWNER_TRANSIENT);
  });
}

Status Enforcer::install_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy,
                                uint32_t owner) {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  if (name.size() >= AC_POLICY_NAME_MAX)
    return Error{"bpf: policy name longer than " + std::to_string(AC_POLICY_NAME_MAX - 1) + " bytes", EINVAL};
  auto rules_id = next_id(&ac_config::next_rules_id, AC_RULES_ID_MASK);
  if (!rules_id) return rules_id.error();

  auto fail = [&](Error e) {
    purge_unreferenced();  // drops what was written under the new id
    return Status(std::move(e));
  };
  // Exact entries carry their key length (abstract names, ancestors).
  auto write_rule = [&](const PathRule& rule) -> Status {
    auto key = make_path_key(*rules_id, rule);
    if (!key) return key.error();
    bool exact = rule.space == RuleSpace::abstract_unix || rule.space == RuleSpace::ancestor;
    ac_path_rule value{rule.access, exact ? static_cast<uint32_t>(path_key_bytes(rule)) : 0};
    if (int err = bpf_map_update_elem(maps_.path_rules, &*key, &value, BPF_ANY))
      return bpf_error("writing path rule \"" + rule.path + "\"", err);
    return {};
  };
  for (const auto& rule : policy.paths)
    if (Status st = write_rule(rule); !st) return fail(st.error());
  for (const auto& rule : ancestor_rules(policy.paths))
    if (Status st = write_rule(rule); !st) return fail(st.error());
  // Name rules, and the suffix lengths the hooks try on each component.
  for (const auto& rule : policy.names) {
    auto key = make_name_key(*rules_id, rule);
    if (!key) return fail(key.error());
    ac_path_rule value{AC_ACCESS_DENY, 0};
    if (int err = bpf_map_update_elem(maps_.path_rules, &*key, &value, BPF_ANY))
      return fail(bpf_error("writing name rule \"" + rule.text + "\"", err));
  }
  if (!policy.names.empty()) {
    auto key = make_name_lengths_key(*rules_id);
    auto lengths = name_lengths(policy.names);
    if (!key) return fail(key.error());
    if (!lengths) return fail(lengths.error());
    if (int err = bpf_map_update_elem(maps_.path_rules, &*key, &*lengths, BPF_ANY))
      return fail(bpf_error("writing the name rules' lengths", err));
  }
  for (const auto& rule : policy.net) {
    auto key = make_net_key(*rules_id, rule);
    if (!key) return fail(key.error());
    ac_net_rule value{};
    value.count = static_cast<uint32_t>(rule.ranges.size());
    for (size_t i = 0; i < rule.ranges.size(); ++i) value.ranges[i] = rule.ranges[i];
    if (int err = bpf_map_update_elem(maps_.net_rules, &*key, &value, BPF_ANY))
      return fail(bpf_error("writing network rule", err));
  }

  // One element update switches every scope on this slot to the new rules;
  // only then are the superseded rules deleted.
  ac_policy value{};
  value.rules_id = *rules_id;
  value.flags = policy.flags;
  value.owner = owner;
  value.digest = policy_digest(name, policy);
  std::memcpy(value.name, name.data(), name.size());
  if (int err = bpf_map_update_elem(maps_.policies, &slot, &value, BPF_ANY))
    return fail(bpf_error("switching policy slot " + std::to_string(slot), err));
  purge_unreferenced();
  return {};
}

Status Enforcer::remove_policy(uint32_t slot) {
  return with_lock([&]() -> Status {
    int err = bpf_map_delete_elem(maps_.policies, &slot);
    if (err && err != -ENOENT) return bpf_error("removing policy slot " + std::to_string(slot), err);
    purge_unreferenced();
    return {};
  });
}

void Enforcer::reset_counters(uint32_t slot) {
  std::vector<ac_counters> zeros(static_cast<size_t>(cpu_count()));
  for (uint32_t hook = 0; hook < AC_HOOK_COUNT; ++hook) {
    uint32_t idx = slot * AC_HOOK_COUNT + hook;
    bpf_map_update_elem(maps_.decision_counts, &idx, zeros.data(), BPF_ANY);
  }
}

namespace detail {

std::string attach_type_name(bpf_attach_type type) {
  const char* name = libbpf_bpf_attach_type_str(type);
  std::string out = "BPF_";
  for (const char* c = name ? name : "unknown"; *c; ++c) out += static_cast<char>(std::toupper(*c));
  return out;
}

// For each of `types`, the nearest cgroup above `cgroup_fd` that holds
// programs of that type: when they were attached without
// BPF_F_ALLOW_MULTI, a program of agentcage's at or below `cgroup_fd`
// leaves them out for the scope (the kernel counts a cgroup's programs
// further up only while none were found below, or where they are in
// multi mode). With BPF_F_ALLOW_OVERRIDE the kernel lets agentcage's be
// attached below and they replace the tool's; with no flag it refuses an
// attach below, but one already there (the run parent's) switches the
// tool's off all the same. (Programs further up than a nearer holder are
// out for the scope whatever agentcage does.) Walks up with ".." while the
// directory is on cgroupfs: not above the root of this cgroup namespace or
// mount. (A walk that cannot go on for another reason is an error: the
// check is not passed by a failure.)
Result<std::optional<Overridden>> overridable_ancestor(int cgroup_fd,
                                                       std::span<const bpf_attach_type> types) {
  std::vector<bpf_attach_type> open(types.begin(), types.end());  // no holder seen yet
  UniqueFd cur(::fcntl(cgroup_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur) return Error::from_errno("bpf: duplicating the scope's cgroup descriptor to look above it");
  for (int depth = 0; !open.empty() && depth <= 64; ++depth) {
    UniqueFd parent(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct statfs fs {};
    if (!parent || ::fstatfs(parent.get(), &fs) != 0)
      return Error::from_errno("bpf: opening the cgroup above the scope's to check its programs");
    if (fs.f_type != CGROUP2_SUPER_MAGIC) break;
    for (auto it = open.begin(); it != open.end();) {
      uint32_t count = 0, flags = 0;
      if (int err = bpf_prog_query(parent.get(), *it, 0, &flags, nullptr, &count))
        return bpf_error(
            "listing the " + attach_type_name(*it) + " programs attached above the scope's cgroup", err);
      if (count == 0) {
        ++it;
        continue;
      }
      if (!(flags & BPF_F_ALLOW_MULTI)) {
        std::error_code ec;
        auto path = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(parent.get()), ec);
        return std::optional<Overridden>(Overridden{
            ec ? "at " + std::to_string(depth + 1) + " level(s) above the scope's" : path.string(), *it});
      }
      it = open.erase(it);  // a holder in multi mode: nothing further up is ours to switch off
    }
    cur = std::move(parent);
  }
  return std::optional<Overridden>();
}

Error overrides(const Overridden& above, const std::string& ours) {
  return Error{
      "bpf: the cgroup " + above.cgroup + " has " + attach_type_name(above.type) +
          " programs attached without BPF_F_ALLOW_MULTI; agentcage's " + ours +
          " would replace them for the scope (the kernel's override rule). Confine a cgroup outside that "
          "subtree, or have that tool attach with BPF_F_ALLOW_MULTI",
      EPERM};
}

}  // namespace detail

// The filter is attached at most once per cgroup (the kernel refuses the
// same program twice; a retry finds it there). With `at_parent` (a run's
// cgroup, below the run parent: bpf::ScopeCgroup) it goes to the parent
// and stays there, so only the first run below it attaches anything. Never
// to the root cgroup (a run parent of "."): every socket on the host would
// run it. And when the parent takes no more programs (the kernel's 64 per
// cgroup, each an older set's filter left there), to the run's own cgroup,
// as for any other scope.
// (Only the cgroup's own list counts: a filter in force there from a cgroup
// further up belongs to that cgroup's scope, which takes it along when it
// goes.)
Status Enforcer::attach_receive_filter(int cgroup_fd, bool at_parent, unsigned level) {
  if (!at_parent || !shared_ || level < 2) return attach_receive_filter_to(cgroup_fd);
  UniqueFd parent(::openat(cgroup_fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent) return Error::from_errno("bpf: opening the run parent above the scope's cgroup");
  Status st = attach_receive_filter_to(parent.get());
  if (!st && st.error().code == E2BIG) return attach_receive_filter_to(cgroup_fd);
  return st;
}

// The override check runs each time, also where the filter is attached
// already: a tool may have attached above it since.
Status Enforcer::attach_receive_filter_to(int cgroup_fd) {
  const bpf_attach_type ingress[] = {BPF_CGROUP_INET_INGRESS};
  auto above = detail::overridable_ancestor(cgroup_fd, ingress);
  if (!above) return above.error();
  if (*above) return detail::overrides(**above, "UDP receive filter");
  auto attached = receive_filter_on(cgroup_fd);
  if (!attached) return attached.error();
  if (*attached) return {};
  if (int err = bpf_prog_attach(receive_filter_, cgroup_fd, BPF_CGROUP_INET_INGRESS, BPF_F_ALLOW_MULTI))
    return bpf_error(
        "attaching the UDP receive filter to the scope's cgroup or the run parent above it "
        "(BPF_CGROUP_INET_INGRESS)" +
            std::string(err == -EPERM ? ": a program attached to it or above it without BPF_F_ALLOW_MULTI "
                                        "admits no other; confine a cgroup outside that subtree"
                                      : ""),
        err);
  return {};
}

Result<bool> Enforcer::receive_filter_on(int cgroup_fd) const {
  if (!receive_filter_id_) {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (int err = bpf_obj_get_info_by_fd(receive_filter_, &info, &len))
      return bpf_error("reading the UDP receive filter's program id", err);
    receive_filter_id_ = info.id;
  }
  uint32_t ids[64] = {};  // BPF_CGROUP_MAX_PROGS
  uint32_t count = 64, flags = 0;
  if (int err = bpf_prog_query(cgroup_fd, BPF_CGROUP_INET_INGRESS, 0, &flags, ids, &count))
    return bpf_error("listing the programs attached to the scope's cgroup (BPF_CGROUP_INET_INGRESS)", err);
  for (uint32_t i = 0; i < count && i < 64; ++i)
    if (ids[i] == receive_filter_id_) return true;
  return false;
}

// Only when the filter is there: on a cgroup not in ALLOW_MULTI mode the
// kernel's detach takes off whatever single program is attached. Only
// where it is attached: one in force from the run parent stays there.
void Enforcer::detach_receive_filter(int cgroup_fd) {
  if (cgroup_fd < 0) return;
  if (auto on = receive_filter_on(cgroup_fd); on && *on)
    bpf_prog_detach2(receive_filter_, cgroup_fd, BPF_CGROUP_INET_INGRESS);
}

namespace {

// The largest pid Linux hands out (PID_MAX_LIMIT on 64-bit).
constexpr uint32_t kPidMaxLimit = 4u << 20;

// Why a pending scope's element is not rewritten: BPF arms it in place, so
// a rewrite racing the exec it waits for could make it pending again.
Error pending_scope(uint64_t cgroup_id, uint32_t arm_tgid, const std::string& what) {
  return Error{"bpf: the scope of cgroup " + std::to_string(cgroup_id) + " is pending (it arms at the exec of pid " +
                   std::to_string(arm_tgid) + ") and cannot be " + what +
                   " before then: retry once that process has exec'd, or remove the scope",
               EBUSY};
}

}  // namespace

Status Enforcer::add_scope(const ScopeCgroup& cgroup, uint64_t scope_id, uint32_t policy_slot,
                           const std::string& workspace, uint16_t flags, uint16_t dns_port,
                           uint32_t arm_tgid) {
  const uint64_t cgroup_id = cgroup.id;
  const unsigned level = cgroup.level;
  // Level 0 is the root cgroup: scoping it would confine the whole host.
  if (level == 0 || level > AC_MAX_SCOPE_LEVEL)
    return Error{"bpf: a scope must be a non-root cgroup at level 1.." + std::to_string(AC_MAX_SCOPE_LEVEL) +
                     " (got level " + std::to_string(level) + ")",
                 EINVAL};
  // (AC_SLOT_NONE: a binding whose policy is not loaded; denies all.)
  if (policy_slot > AC_SLOT_NONE)
    return Error{"bpf: policy slot " + std::to_string(policy_slot) + " out of range", EINVAL};
  // (PID_MAX_LIMIT: no process has a larger pid.)
  if (arm_tgid > kPidMaxLimit)
    return Error{"bpf: " + std::to_string(arm_tgid) + " is not a process id: a pending scope arms at the exec " +
                     "of a process, named by its pid as the host sees it",
                 EINVAL};
  // The descriptor is the cgroup's (a cgroup2 directory's inode number is
  // its id): the filter goes where the scope is.
  struct stat cg_stat {};
  if (cgroup.fd < 0 || ::fstat(cgroup.fd, &cg_stat) != 0 || cg_stat.st_ino != cgroup_id)
    return Error{"bpf: the descriptor given is not that of cgroup " + std::to_string(cgroup_id), EBADF};
  return with_lock([&]() -> Status {
    ac_scope existing{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgroup_id, &existing) == 0)
      return Error{"bpf: cgroup " + std::to_string(cgroup_id) + " is already a scope", EEXIST};
    // The filter before the scope: no socket of the scope is a UDP client
    // without it.
    if (Status st = attach_receive_filter(cgroup.fd, cgroup.filter_at_parent, level); !st) return st;
    const bool dns = flags & AC_SCOPE_F_DNS;
    // (Its pins and its BPF lookups key it by its cgroup's id.)
    if (dns && (dns_port == 0 || scope_id != cgroup_id)) {
      detach_receive_filter(cgroup.fd);
      return Error{
          "bpf: a scope whose DNS is redirected needs its resolver's port and its cgroup's id as its id",
          EINVAL};
    }
    // The DNS programs before the scope, too: the LSM lets the scope's
    // queries to port 53 through only because these send them on.
    if (dns) {
      if (Status st = attach_dns(cgroup.fd); !st) {
        detach_receive_filter(cgroup.fd);
        return st;
      }
    }

    auto fail = [&](Error e) -> Status {
      if (dns) detach_dns(cgroup.fd);
      detach_receive_filter(cgroup.fd);
      return e;
    };
    ac_scope scope{};
    scope.scope_id = scope_id;
    scope.policy_slot = policy_slot;
    scope.level = static_cast<uint16_t>(level);
    scope.flags = flags;
    scope.dns_port = dns ? dns_port : 0;
    scope.arm_tgid = arm_tgid;
    if (!workspace.empty()) {
      auto tag = add_workspace(workspace);
      if (!tag) return fail(tag.error());
      scope.workspace_tag = *tag;
    }
    auto undo = [&] {
      bpf_map_delete_elem(maps_.scopes, &cgroup_id);
      if (scope.workspace_tag) delete_workspace(scope.workspace_tag);
      bpf_map_delete_elem(maps_.scope_reports, &scope_id);
      static_cast<void>(write_levels());
    };
    // The report entry exists before the scope does, so no decision on the
    // scope can miss it.
    auto report = std::make_unique<ac_scope_report>();
    if (int err = bpf_map_update_elem(maps_.scope_reports, &scope_id, report.get(), BPF_ANY)) {
      undo();
      return fail(bpf_error("creating the report of scope " + std::to_string(scope_id), err));
    }
    if (int err = bpf_map_update_elem(maps_.scopes, &cgroup_id, &scope, BPF_NOEXIST)) {
      bpf_map_delete_elem(maps_.scope_reports, &scope_id);
      if (scope.workspace_tag) delete_workspace(scope.workspace_tag);
      return fail(bpf_error("registering scope for cgroup " + std::to_string(cgroup_id), err));
    }
    // Without its level bit the scope would silently not apply: undo it.
    if (Status st = write_levels(); !st) {
      undo();
      return fail(st.error());
    }
    if (!shared_) filtered_.emplace_back(cgroup_id, UniqueFd(::fcntl(cgroup.fd, F_DUPFD_CLOEXEC, 0)));
    return {};
  });
}

Status Enforcer::remove_scope(const ScopeCgroup& cgroup) {
  const uint64_t cgroup_id = cgroup.id;
  bool dns = false;
  auto detach = [&] {
    struct stat cg_stat {};
    if (cgroup.fd >= 0 && ::fstat(cgroup.fd, &cg_stat) == 0 && cg_stat.st_ino == cgroup_id) {
      // (another descriptor: the scope's cgroup is gone, and its programs
      // with it)
      if (dns) detach_dns(cgroup.fd);
      detach_receive_filter(cgroup.fd);
    }
    std::erase_if(filtered_, [&](const auto& f) { return f.first == cgroup_id; });
  };
  return with_lock([&]() -> Status {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgroup_id, &scope) != 0) {
      detach();  // a retry after a removal that failed half way
      return {};
    }
    int err = bpf_map_delete_elem(maps_.scopes, &cgroup_id);
    if (err && err != -ENOENT)
      return bpf_error("removing scope for cgroup " + std::to_string(cgroup_id), err);
    if (Status st = write_levels(); !st) return st;
    // Its report and workspace entry go with it (rules stay: they belong to
    // the policy, which other scopes may use).
    bpf_map_delete_elem(maps_.scope_reports, &scope.scope_id);
    bpf_map_delete_elem(maps_.scope_rings, &scope.scope_id);
    if (scope.workspace_tag) release_workspace(scope.workspace_tag);
    // And the addresses its resolver pinned.
    dns = scope.flags & AC_SCOPE_F_DNS;
    if (dns) delete_pins_of(scope.scope_id);
    // So do the places its sockets were registered at (the sockets died
    // with its processes; the entries would only take room).
    for (const auto& key : listener_keys_of(maps_.listeners, scope.scope_id))
      bpf_map_delete_elem(maps_.listeners, &key);
    // Last, the filter: the scope's sockets are no one's clients any more.
    detach();
    return {};
  });
}

Status Enforcer::complete_scope(const ScopeCgroup& cgroup) {
  struct stat cg_stat {};
  if (cgroup.fd < 0 || ::fstat(cgroup.fd, &cg_stat) != 0 || cg_stat.st_ino != cgroup.id)
    return Error{"bpf: the descriptor given is not that of cgroup " + std::to_string(cgroup.id), EBADF};
  return with_lock([&]() -> Status {
    ac_scope scope{};
    if (int err = bpf_map_lookup_elem(maps_.scopes, &cgroup.id, &scope))
      return bpf_error("reading scope of cgroup " + std::to_string(cgroup.id), err);
    if (!(scope.flags & AC_SCOPE_F_INCOMPLETE)) return {};
    if (scope.arm_tgid) return pending_scope(cgroup.id, scope.arm_tgid, "completed");
    // The filter first: the flag keeps UDP sockets out until it is there.
    if (Status st = attach_receive_filter(cgroup.fd, false, cgroup.level); !st) return st;
    scope.flags &= static_cast<uint16_t>(~AC_SCOPE_F_INCOMPLETE);
    if (int err = bpf_map_update_elem(maps_.scopes, &cgroup.id, &scope, BPF_EXIST))
      return bpf_error("completing scope of cgroup " + std::to_string(cgroup.id), err);
    if (!shared_) filtered_.emplace_back(cgroup.id, UniqueFd(::fcntl(cgroup.fd, F_DUPFD_CLOEXEC, 0)));
    return {};
  });
}

Status Enforcer::set_scope_slot(uint64_t cgroup_id, uint32_t policy_slot) {
  if (policy_slot > AC_SLOT_NONE)
    return Error{"bpf: policy slot " + std::to_string(policy_slot) + " out of range", EINVAL};
  return with_lock([&]() -> Status {
    ac_scope scope{};
    if (int err = bpf_map_lookup_elem(maps_.scopes, &cgroup_id, &scope))
      return bpf_error("reading scope of cgroup " + std::to_string(cgroup_id), err);
    if (scope.policy_slot == policy_slot) return {};
    if (scope.arm_tgid) return pending_scope(cgroup_id, scope.arm_tgid, "moved to another slot");
    scope.policy_slot = policy_slot;
    // One element update: the scope's next decision is on the new slot.
    if (int err = bpf_map_update_elem(maps_.scopes, &cgroup_id, &scope, BPF_EXIST))
      return bpf_error("moving scope of cgroup " + std::to_string(cgroup_id) + " to slot " +
                           std::to_string(policy_slot),
                       err);
    return {};
  });
}

namespace {

// The map key of a binding's path, or why the path cannot be one.
Result<ac_binding_key> binding_key(const std::string& path, unsigned* level) {
  if (path.size() < 2 || path.front() != '/' || path.back() == '/')
    return Error{"bpf: a binding's cgroup path starts with '/' below the cgroup2 root and does not end "
                 "with '/' (got \"" + path + "\")",
                 EINVAL};
  // The kernel reads at most AC_BINDING_PATH_MAX - 1 bytes and a NUL, so a
  // path of that length cannot be told from a longer one cut off there.
  if (path.size() > AC_BINDING_PATH_MAX - 2)
    return Error{"bpf: a binding's cgroup path is at most " + std::to_string(AC_BINDING_PATH_MAX - 2) +
                     " bytes (got " + std::to_string(path.size()) + ")",
                 ENAMETOOLONG};
  unsigned components = 0;
  for (size_t at = 0; at < path.size();) {
    size_t end = path.find('/', at + 1);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + at + 1, end - at - 1);
    if (part.empty() || part == "." || part == "..")
      return Error{"bpf: binding path " + path + " has an empty, '.' or '..' component", EINVAL};
    ++components;
    at = end;
  }
  if (components > AC_MAX_SCOPE_LEVEL)
    return Error{"bpf: binding path " + path + " is deeper than level " + std::to_string(AC_MAX_SCOPE_LEVEL),
                 EINVAL};
  *level = components;
  ac_binding_key key{};
  std::memcpy(key.path, path.data(), path.size());
  return key;
}

}  // namespace

Status Enforcer::put_binding(const std::string& path, uint32_t policy_slot, const std::string& workspace) {
  unsigned level = 0;
  auto key = binding_key(path, &level);
  if (!key) return key.error();
  if (policy_slot > AC_SLOT_NONE)
    return Error{"bpf: policy slot " + std::to_string(policy_slot) + " out of range", EINVAL};
  return with_lock([&]() -> Status {
    ac_binding value{};
    const bool existed = bpf_map_lookup_elem(maps_.bindings, &*key, &value) == 0;
    const uint32_t old_tag = existed ? value.workspace_tag : 0;
    // The same workspace keeps its tag (and the scopes made meanwhile theirs).
    std::string old_workspace;
    if (old_tag) {
      const auto paths = workspace_paths();
      if (auto it = paths.find(old_tag); it != paths.end()) old_workspace = it->second;
    }
    uint32_t tag = old_tag;
    if (workspace != old_workspace || (!workspace.empty() && !old_tag)) {
      tag = 0;
      if (!workspace.empty()) {
        auto made = add_workspace(workspace);
        if (!made) return made.error();
        tag = *made;
      }
    }
    // Unchanged (the daemon's every-second pass): no write.
    if (existed && tag == old_tag && value.policy_slot == policy_slot && value.level == level) return {};
    value.policy_slot = policy_slot;
    value.workspace_tag = tag;
    value.level = static_cast<uint16_t>(level);
    if (int err = bpf_map_update_elem(maps_.bindings, &*key, &value, BPF_ANY)) {
      if (tag != old_tag) delete_workspace(tag);
      return bpf_error("writing the binding of " + path, err);
    }
    // The level before any mkdir there can matter: a scope the kernel
    // registers at an unmarked level would not apply.
    if (Status st = write_levels(); !st) {
      if (existed) {
        value.workspace_tag = old_tag;
        bpf_map_update_elem(maps_.bindings, &*key, &value, BPF_ANY);
      } else {
        bpf_map_delete_elem(maps_.bindings, &*key);
      }
      if (tag != old_tag) delete_workspace(tag);
      return st;
    }
    if (old_tag && old_tag != tag) release_workspace(old_tag);
    return {};
  });
}

Status Enforcer::remove_binding(const std::string& path) {
  unsigned level = 0;
  auto key = binding_key(path, &level);
  if (!key) return key.error();
  return with_lock([&]() -> Status {
    ac_binding value{};
    if (bpf_map_lookup_elem(maps_.bindings, &*key, &value) != 0) return {};
    if (int err = bpf_map_delete_elem(maps_.bindings, &*key); err && err != -ENOENT)
      return bpf_error("removing the binding of " + path, err);
    if (value.workspace_tag) release_workspace(value.workspace_tag);
    return write_levels();
  });
}

Result<std::vector<BindingInfo>> Enforcer::bindings() const {
  std::map<uint32_t, std::string> workspaces = workspace_paths();
  std::vector<BindingInfo> out;
  for (const auto& key : all_keys<ac_binding_key>(maps_.bindings)) {
    ac_binding b{};
    if (bpf_map_lookup_elem(maps_.bindings, &key, &b) != 0) continue;
    const auto ws = b.workspace_tag ? workspaces.find(b.workspace_tag) : workspaces.end();
    out.push_back({std::string(key.path, strnlen(key.path, sizeof key.path)), b.policy_slot, b.level,
                   ws == workspaces.end() ? "" : ws->second, b.confined, b.failed});
  }
  std::sort(out.begin(), out.end(), [](const BindingInfo& a, const BindingInfo& b) { return a.path < b.path; });
  return out;
}

// A workspace's entry and its ancestor entries.
void Enforcer::delete_workspace(uint32_t tag) {
  for (const auto& key : all_keys<ac_path_key>(maps_.workspaces))
    if ((ntohl(key.rules_id_be) & ~AC_WORKSPACE_ANCESTOR) == tag) bpf_map_delete_elem(maps_.workspaces, &key);
}

Result<uint32_t> Enforcer::add_workspace(const std::string& workspace) {
  if (workspace == "/") return Error{"bpf: the workspace cannot be /", EINVAL};
  auto key = make_path_key(0, workspace);
  if (!key) return key.error().wrap("workspace");
  auto tag = next_id(&ac_config::next_workspace_tag, AC_WORKSPACE_ANCESTOR - 1);
  if (!tag) return tag.error();
  key->rules_id_be = htonl(*tag);
  ac_workspace ws{static_cast<uint32_t>(workspace.size()), 0};
  if (int err = bpf_map_update_elem(maps_.workspaces, &*key, &ws, BPF_ANY))
    return bpf_error("registering workspace " + workspace, err);
  // The directories down to the workspace, and the workspace itself, may
  // be stat'ed (exact entries: see AC_WORKSPACE_ANCESTOR).
  auto dirs = ancestors_of(workspace);
  dirs.push_back(workspace);
  for (const auto& dir : dirs) {
    PathRule rule{dir, 0, RuleSpace::absolute};
    auto akey = make_path_key(0, rule);
    if (!akey) {
      delete_workspace(*tag);
      return akey.error().wrap("workspace");
    }
    akey->rules_id_be = htonl(*tag | AC_WORKSPACE_ANCESTOR);
    ac_workspace anc{static_cast<uint32_t>(path_key_bytes(rule)), 0};
    if (int err = bpf_map_update_elem(maps_.workspaces, &*akey, &anc, BPF_ANY)) {
      delete_workspace(*tag);
      return bpf_error("registering the directories above workspace " + workspace, err);
    }
  }
  return *tag;
}

std::vector<uint32_t> Enforcer::binding_tags() const {
  std::vector<uint32_t> tags;
  for (const auto& key : all_keys<ac_binding_key>(maps_.bindings)) {
    ac_binding b{};
    if (bpf_map_lookup_elem(maps_.bindings, &key, &b) == 0 && b.workspace_tag) tags.push_back(b.workspace_tag);
  }
  return tags;
}

// A binding's scopes share its tag with it and with each other.
void Enforcer::release_workspace(uint32_t tag) {
  auto tags = binding_tags();
  if (std::find(tags.begin(), tags.end(), tag) != tags.end()) return;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) == 0 && scope.workspace_tag == tag) return;
  }
  delete_workspace(tag);
}

Result<UniqueFd> Enforcer::record_scope(uint64_t scope_id) {
  const int made = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "ac_scope_ring", 0, 0, AC_SCOPE_RING_BYTES, nullptr);
  if (made < 0)
    return bpf_error("creating the recording ring buffer of scope " + std::to_string(scope_id), made);
  UniqueFd ring(made);
  const int fd = ring.get();
  if (int err = bpf_map_update_elem(maps_.scope_rings, &scope_id, &fd, BPF_NOEXIST))
    return bpf_error("recording scope " + std::to_string(scope_id), err);
  return ring;
}

Result<ScopeReport> Enforcer::scope_report(uint64_t scope_id) const {
  auto raw = std::make_unique<ac_scope_report>();
  if (int err = bpf_map_lookup_elem(maps_.scope_reports, &scope_id, raw.get()))
    return bpf_error("reading the report of scope " + std::to_string(scope_id), err);
  ScopeReport out;
  for (size_t i = 0; i < AC_HOOK_COUNT; ++i) {
    out.denied[i] = raw->denied[i];
    out.audited[i] = raw->audited[i];
  }
  out.records_taken = raw->records_taken;
  out.events_suppressed = raw->events_suppressed;
  out.records_unrecorded = raw->records_unrecorded;
  size_t n = std::min<size_t>(raw->records_taken, AC_REPORT_RECORDS);
  out.records.assign(raw->records, raw->records + n);
  return out;
}

std::map<uint32_t, std::string> Enforcer::workspace_paths() const {
  // The entry under each tag (not an ancestor's): the path with its trailing '/'.
  std::map<uint32_t, std::string> workspaces;
  for (const auto& key : all_keys<ac_path_key>(maps_.workspaces)) {
    const uint32_t tag = ntohl(key.rules_id_be);
    const size_t bytes = key.prefixlen >= 32 ? (key.prefixlen - 32) / 8 : 0;
    if ((tag & AC_WORKSPACE_ANCESTOR) || bytes < 2 || bytes > AC_PATH_KEY_MAX) continue;
    workspaces[tag] = std::string(reinterpret_cast<const char*>(key.path), bytes - 1);
  }
  return workspaces;
}

Result<std::vector<ScopeInfo>> Enforcer::scopes() const {
  std::map<uint32_t, std::string> workspaces = workspace_paths();
  std::vector<ScopeInfo> out;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) != 0) continue;
    const auto ws = scope.workspace_tag ? workspaces.find(scope.workspace_tag) : workspaces.end();
    out.push_back({cgid, scope.scope_id, scope.policy_slot, scope.level, ws == workspaces.end() ? "" : ws->second,
                   scope.flags, scope.arm_tgid});
  }
  return out;
}

Result<size_t> Enforcer::listeners_of(uint64_t scope_id) const {
  return listener_keys_of(maps_.listeners, scope_id).size();
}

Result<std::optional<PolicyInfo>> Enforcer::policy(uint32_t slot) const {
  ac_policy p{};
  if (int err = bpf_map_lookup_elem(maps_.policies, &slot, &p)) {
    if (err == -ENOENT) return std::optional<PolicyInfo>();
    return bpf_error("reading policy slot " + std::to_string(slot), err);
  }
  return std::optional<PolicyInfo>(
      PolicyInfo{slot, std::string(p.name, strnlen(p.name, sizeof p.name)), p.owner, p.flags, p.digest});
}

Result<std::vector<PolicyInfo>> Enforcer::policies() const {
  std::vector<PolicyInfo> out;
  for (uint32_t slot : all_keys<uint32_t>(maps_.policies)) {
    ac_policy p{};
    if (bpf_map_lookup_elem(maps_.policies, &slot, &p) != 0) continue;
    out.push_back({slot, std::string(p.name, strnlen(p.name, sizeof p.name)), p.owner, p.flags, p.digest});
  }
  std::sort(out.begin(), out.end(), [](const PolicyInfo& a, const PolicyInfo& b) { return a.slot < b.slot; });
  return out;
}

}  // namespace agentcage::bpf
