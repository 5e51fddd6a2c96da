// SPDX-License-Identifier: Apache-2.0
// The loaded BPF LSM programs and their maps: one owner, RAII.
//
// Enforcer::load() opens, loads and attaches the skeleton and fails with a
// precise Error when the kernel refuses. Everything a scope needs is then a
// map update: register a cgroup as a scope, install a policy into a slot.
//
// Source files: enforcer.cpp (loading, settings, counters), enforcer_shared.cpp
// (the pinned shared set and its cross-process lock), enforcer_maps.cpp
// (policy and scope map operations); keys.h (map keys, policy digest) and
// event_reader.h (the ring buffer) are separate.
#pragma once

#include <agentcage/abi.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bpf/compiled.h"
#include "bpf/keys.h"
#include "bpf/scope_report.h"
#include "core/paths.h"
#include "util/result.h"
#include "util/unique_fd.h"

struct agentcage_bpf;  // generated skeleton (agentcage.skel.h)

namespace agentcage::bpf {

struct LoadOptions {
  uint32_t ringbuf_bytes = 1u << 20;  // power of two, >= page size
};

// Where the shared (pinned) program set lives. Every agentcage process on the
// host -- runs, attach/detach, the daemon -- adopts the same programs and maps,
// so one set of programs serves every scope and enforcement outlives the
// process that loaded it. Each build pins under its own subdirectory (named by
// a digest of its BPF object), so an upgrade never mixes layouts.
// The error codes load() and open_shared() use for a host that cannot
// enforce, so callers tell the cases apart by code, never by message text:
//   EPERM        the kernel refuses to load BPF LSM programs
//   ENOTSUP      the BPF LSM is not in the active LSM list
//   kErrNoBpffs  the pin root's parent is not a mounted bpf filesystem
inline constexpr int kErrNoBpffs = EMEDIUMTYPE;  // "wrong medium type": not bpffs

struct SharedOptions {
  std::string pin_root = core::kDefaultPinRoot;
  // Serialises map updates between agentcage processes (flock).
  std::string lock_path = core::kDefaultBpfLockPath;
  LoadOptions load;
};

// How full one of the program set's maps is.
struct MapFill {
  std::string map;  // its name in the BPF object ("ac_scopes")
  uint64_t entries = 0;
  uint64_t capacity = 0;  // max_entries
};

struct ScopeInfo {
  uint64_t cgroup_id = 0;
  uint64_t scope_id = 0;
  uint32_t policy_slot = 0;
  unsigned level = 0;
  std::string workspace;  // what its ${workspace} rules mean ("": none)
  uint16_t flags = 0;     // AC_SCOPE_F_*
  uint32_t arm_tgid = 0;  // 0: armed; else pending until this process execs (abi.h)
};

// A binding (ac_bindings, abi.h): the cgroup path the kernel confines at its
// mkdir, and how.
struct BindingInfo {
  std::string path;  // below the cgroup2 root, as the kernel writes it: "/system.slice/x.service"
  uint32_t policy_slot = AC_SLOT_NONE;
  unsigned level = 0;
  std::string workspace;  // "" : none
  uint64_t confined = 0;  // cgroups the kernel registered at their mkdir
  uint64_t failed = 0;    // ... and could not
};

struct PolicyInfo {
  uint32_t slot = 0;
  std::string name;
  uint32_t owner = AC_POLICY_OWNER_NAMED;
  uint32_t flags = 0;
  uint64_t digest = 0;
};

// The cgroup a scope is made of: its directory, open (the UDP receive
// filter is attached through it; -1 on removal when the cgroup is gone,
// which took the filter with it), its id and its level below the root.
struct ScopeCgroup {
  int fd = -1;
  uint64_t id = 0;
  unsigned level = 0;
  // The cgroup's parent is agentcage's own run parent, where only runs
  // live (a shared set only; never the root cgroup): the filter goes
  // there, once for every run below it, and stays for as long as that
  // cgroup does. Attaching and detaching it per run would switch the
  // kernel's cgroup ingress branch on and off (a patch of kernel text, with
  // every CPU stopped for it) twice per run whenever no other such program
  // is attached on the host.
  bool filter_at_parent = false;
};

struct ProgramInfo {
  std::string name;  // the BPF program's name (e.g. "ac_file_open")
  int fd = -1;       // owned by the Enforcer
  // The UDP client filter and the DNS programs: attached to a scope's
  // cgroup (add_scope), so a shared set pins the program itself (under
  // programs/), not a link.
  bool per_scope = false;
};

// Decision counters for one policy slot, summed over CPUs.
struct SlotCounters {
  std::array<ac_counters, AC_HOOK_COUNT> hooks{};
};

class Enforcer {
 public:
  // A private program set: loaded and attached for this process only, detached
  // when the Enforcer is destroyed (tests, doctor's probe), the UDP receive
  // filter from every scope's cgroup too.
  static Result<std::unique_ptr<Enforcer>> load(const LoadOptions& opts = {});
  // The shared, pinned program set (see SharedOptions): adopted when this
  // build's set is pinned and complete, otherwise loaded, attached and pinned.
  static Result<std::unique_ptr<Enforcer>> open_shared(const SharedOptions& opts = {});
  // The directory this build's shared set is (or would be) pinned in under
  // `pin_root`; a complete set has a "ready" entry in it.
  static std::string shared_pin_dir(const std::string& pin_root);
  ~Enforcer();
  Enforcer(const Enforcer&) = delete;
  Enforcer& operator=(const Enforcer&) = delete;

  // Install or atomically replace the policy in `slot`. New rules are written
  // under a fresh rules id, the slot is switched with one element update, and
  // only then are the old rules removed. On failure the slot keeps its old
  // policy and nothing new stays in the maps.
  Status put_policy(uint32_t slot, const CompiledPolicy& policy);
  // Convenience for path-only policies.
  Status put_policy(uint32_t slot, std::span<const PathRule> rules, uint32_t flags = 0);
  // Install a named policy (AC_POLICY_OWNER_NAMED) into `slot`.
  Status put_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy);
  Status remove_policy(uint32_t slot);

  // The scope lifecycle's map operations. Products call them only through
  // scope/ (scope/scope.h), which chooses the slot and keeps the ordering
  // rules; tests and the doctor's private probe use them directly.
  //
  // Install a transient policy (AC_POLICY_OWNER_TRANSIENT) into `slot`, with
  // the slot's decision counters reset.
  Status put_transient_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy);
  // Put `cgroup` and everything below it under the policy in `policy_slot`:
  // first the UDP receive filter is attached to it (the program the LSM
  // hooks cannot be: ac_udp_client_filter, run only for the sockets made in
  // a scope), then the scope is registered.
  // `workspace`: absolute, normalised directory the policy's ${workspace}
  // rules apply to for this scope (empty: none). `flags`: AC_SCOPE_F_*.
  // With AC_SCOPE_F_DNS in `flags`, the DNS programs (dns.bpf.h) are
  // attached too and the scope's DNS goes to 127.0.0.1:dns_port (and
  // [::1]:dns_port with AC_SCOPE_F_DNS6).
  // `arm_tgid` non-zero: the scope is registered pending (struct ac_scope in
  // abi.h): nothing is confined until the process with this pid (as the
  // host sees it) execs from inside the cgroup; that exec is the first act
  // decided under the policy (a container runtime's init: its setup runs
  // unconfined, its entrypoint does not).
  Status add_scope(const ScopeCgroup& cgroup, uint64_t scope_id, uint32_t policy_slot,
                   const std::string& workspace = {}, uint16_t flags = 0, uint16_t dns_port = 0,
                   uint32_t arm_tgid = 0);
  // The scope, then its filter. A scope not registered counts as success:
  // removing twice is not an error. The scope's report goes with it.
  Status remove_scope(const ScopeCgroup& cgroup);
  // Finish a scope the kernel registered at its cgroup's mkdir (a binding's,
  // AC_SCOPE_F_INCOMPLETE): attach the UDP receive filter, then clear the
  // flag, so its processes may create UDP sockets. A complete scope: nothing.
  // EBUSY for a pending scope (see set_scope_slot).
  Status complete_scope(const ScopeCgroup& cgroup);
  // Point the scope of cgroup `cgroup_id` at `policy_slot` (AC_SLOT_NONE:
  // deny all): a bound scope follows its binding's policy. EBUSY for a
  // pending scope (add_scope's arm_tgid), which is left as it is: rewriting
  // its element could lose an arming made in the old one meanwhile.
  Status set_scope_slot(uint64_t cgroup_id, uint32_t policy_slot);

  // Bindings (ac_bindings, abi.h). From put_binding on, a cgroup made at
  // `path` (below the cgroup2 root, starting with '/') is a scope under
  // `policy_slot` (AC_SLOT_NONE: deny all) from its mkdir on, with
  // `workspace` ("" : none) for its ${workspace} rules. Replaces an existing
  // binding of the path; scopes already made keep what they had (set_scope_slot).
  Status put_binding(const std::string& path, uint32_t policy_slot, const std::string& workspace);
  // No binding at `path` any more (none: success). Its scopes stay.
  Status remove_binding(const std::string& path);
  Result<std::vector<BindingInfo>> bindings() const;

  // The deny/audit report of a live scope, by scope id.
  Result<ScopeReport> scope_report(uint64_t scope_id) const;
  // Record every decision record of scope `scope_id` from now on into a
  // ring buffer of its own (ac_scope_rings, abi.h), outside the audit log's
  // budget; returns the ring buffer's descriptor, for its one reader
  // (EventReader). Before the scope's first process starts, so nothing is
  // missed; the entry goes with the scope (remove_scope). EEXIST when the
  // scope is recorded already.
  Result<UniqueFd> record_scope(uint64_t scope_id);

  // Pins of a scope's resolver (ac_pins, abi.h): `key` reachable until
  // `expires_ns` (CLOCK_BOOTTIME). A scope's pins go with it (remove_scope).
  Status put_pin(const ac_pin_key& key, uint64_t expires_ns);
  void delete_pin(const ac_pin_key& key);
  // How many pins scope `scope_id` holds (tests, `status`).
  Result<size_t> pins_of(uint64_t scope_id) const;

  // Run `fn` holding the cross-process lock (shared mode; a no-op lock for a
  // private set), so a sequence of map operations is atomic with respect to
  // other agentcage processes. Re-entrant.
  Status with_lock(const std::function<Status()>& fn);

  Result<std::vector<ScopeInfo>> scopes() const;
  // The fill of the maps that bound what can be confined, installed or
  // pinned (scopes, policies, path and network rules, workspaces, listeners,
  // pins): entries against capacity. A walk of each map (batched where the
  // kernel allows): for a periodic gauge, not per event.
  std::vector<MapFill> map_fill() const;
  // The size of the set's ring buffer (ac_events), as it was loaded; 0 when unknown.
  uint32_t ring_buffer_bytes() const;
  // The digest of the BPF object this binary carries, which names its pinned set's directory.
  static std::string object_digest();
  // How many places (address, port, protocol) hold a socket of scope
  // `scope_id` (none once the scope is removed).
  Result<size_t> listeners_of(uint64_t scope_id) const;
  Result<std::vector<PolicyInfo>> policies() const;
  // The policy in `slot`; std::nullopt when the slot is free.
  Result<std::optional<PolicyInfo>> policy(uint32_t slot) const;
  std::vector<ProgramInfo> programs() const;
  bool shared() const { return shared_; }
  // A shared set this process adopted (open_shared found it pinned), not
  // one it loaded.
  bool adopted() const { return shared_ && !skel_; }
  // For a copy of an adopted Enforcer in a child process (a fork or clone
  // that keeps using it): the descriptors the child must keep open (maps,
  // programs, scopes' cgroups, the lock file while open).
  std::vector<int> descriptors() const;
  // Closes the lock file; the next take_lock() opens it afresh. A process
  // whose children use copies of this Enforcer calls it first: a flock
  // belongs to the open file description, so processes sharing one would
  // not exclude each other.
  void close_lock_file() { lock_fd_.reset(); }
  // The directory this build's set is pinned in ("" for a private set).
  const std::string& pin_dir() const { return pin_dir_; }

  Result<SlotCounters> counters(uint32_t slot) const;
  Result<uint64_t> stat(ac_stat which) const;

  int events_fd() const;

 private:
  Enforcer() = default;
  static Result<std::unique_ptr<Enforcer>> load_skeleton(const LoadOptions& opts);
  Status adopt_pinned(const std::string& dir);
  Status pin_all(const std::string& dir);
  Status check_lsm_active() const;
  Status attach_receive_filter(int cgroup_fd, bool at_parent, unsigned level);
  Status attach_receive_filter_to(int cgroup_fd);
  // Attached to the cgroup itself (not merely in force there from above).
  Result<bool> receive_filter_on(int cgroup_fd) const;
  void detach_receive_filter(int cgroup_fd);
  // The DNS programs (dns.bpf.h) on a scope's cgroup, all or none.
  Status attach_dns(int cgroup_fd);
  void detach_dns(int cgroup_fd);
  Result<int> dns_program(size_t index) const;
  Result<int> pins_map() const;
  void delete_pins_of(uint64_t scope_id);
  Status take_lock();
  void drop_lock();

  Result<ac_config> read_config() const;
  Status write_config(const ac_config& cfg);
  // Recompute the scope level mask from the scopes map.
  Status write_levels();
  Result<uint32_t> next_id(uint32_t ac_config::*field, uint32_t limit);
  Status install_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy, uint32_t owner);
  // Delete rule and workspace entries no live policy or scope refers to
  // (superseded rules, leftovers of a crashed agentcage).
  void purge_unreferenced();
  void reset_counters(uint32_t slot);
  void delete_workspace(uint32_t tag);
  // A workspace's entries under a fresh tag (the directory and the ones above
  // it); nothing stays on failure.
  Result<uint32_t> add_workspace(const std::string& workspace);
  // The workspace tags bindings hold (their entries stay while they do).
  std::vector<uint32_t> binding_tags() const;
  // Each workspace tag's directory.
  std::map<uint32_t, std::string> workspace_paths() const;
  // Delete the entries of `tag` unless a scope or a binding still uses it.
  void release_workspace(uint32_t tag);

  struct SkelDeleter {
    void operator()(agentcage_bpf* skel) const;
  };
  std::unique_ptr<agentcage_bpf, SkelDeleter> skel_;  // null when adopted
  struct MapFds {
    int scopes = -1, policies = -1, settings = -1, path_rules = -1, workspaces = -1, net_rules = -1,
        decision_counts = -1, stats = -1, events = -1, scope_reports = -1, listeners = -1, scope_rings = -1,
        bindings = -1;
  } maps_;
  int receive_filter_ = -1;  // ac_udp_client_filter (owned by skel_ or owned_fds_)
  mutable uint32_t receive_filter_id_ = 0;  // its program id, read when first needed
  // Opened when first needed (a run with domain rules), not at adoption.
  mutable std::vector<int> dns_programs_;
  mutable int pins_ = -1;
  // A private set's scopes' cgroups (id, descriptor): the filter comes off
  // them when the set goes. A shared set's filter stays (as its links do).
  std::vector<std::pair<uint64_t, UniqueFd>> filtered_;
  mutable std::vector<UniqueFd> owned_fds_;    // adopted maps and programs
  mutable std::vector<ProgramInfo> programs_;  // filled on demand for an adopted set
  bool shared_ = false;
  std::string pin_dir_;
  std::string lock_path_;
  UniqueFd lock_fd_;
  int lock_depth_ = 0;
};

}  // namespace agentcage::bpf
