// The loaded BPF LSM programs and their maps: one owner, RAII.
//
// Enforcer::load() opens, loads and attaches the skeleton and fails with a
// precise Error when the kernel refuses. Everything a scope needs is then a
// map update: register a cgroup as a scope, install a policy into a slot.
#pragma once

#include <agentcage/abi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/result.h"

struct agentcage_bpf;  // generated skeleton (agentcage.skel.h)
struct ring_buffer;

namespace agentcage::bpf {

// Where a path rule applies.
enum class RuleSpace : uint32_t {
  absolute = 0,                          // host paths
  workspace = AC_RULES_NS_WORKSPACE,     // relative to each run's workspace
  abstract_unix = AC_RULES_NS_ABSTRACT,  // abstract unix socket names (exact)
};

// One compiled path rule: a normalised path ("/" or no trailing slash;
// workspace rules are "/" for the workspace itself or "/sub/dir"; abstract
// names are the raw name) and the AC_ACCESS_* bits it grants, after the
// compiler merged in what enclosing rules grant (see policy/compile.h).
struct PathRule {
  std::string path;
  uint32_t access = 0;
  RuleSpace space = RuleSpace::absolute;
};

// One compiled CIDR rule: IPv6 address (IPv4 as ::ffff:a.b.c.d), prefix
// length in IPv6 bits, and the merged port ranges.
struct NetRule {
  std::array<uint8_t, 16> addr{};
  uint8_t prefix_len = 0;
  std::vector<ac_port_range> ranges;
};

// Everything a policy slot holds in the kernel.
struct CompiledPolicy {
  std::vector<PathRule> paths;
  std::vector<NetRule> net;
  uint32_t flags = 0;  // AC_POLICY_F_*
};

// The LPM key bytes for a path rule (trailing '/' appended, "/" stays "/";
// abstract names verbatim). Fails when the key would not fit AC_PATH_KEY_MAX.
Result<ac_path_key> make_path_key(uint32_t rules_id, const PathRule& rule);
Result<ac_path_key> make_path_key(uint32_t rules_id, const std::string& path);
Result<ac_net_key> make_net_key(uint32_t rules_id, const NetRule& rule);

struct LoadOptions {
  uint32_t ringbuf_bytes = 1u << 20;  // power of two, >= page size
};

// Decision counters for one policy slot, summed over CPUs.
struct SlotCounters {
  std::array<ac_counters, AC_HOOK_COUNT> hooks{};
};

class Enforcer {
 public:
  static Result<std::unique_ptr<Enforcer>> load(const LoadOptions& opts = {});
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
  Status remove_policy(uint32_t slot);

  // Put the cgroup `cgroup_id` (at cgroup `level`) and everything below it
  // under the policy in `policy_slot`.
  // `workspace`: absolute, normalised directory the policy's ${workspace}
  // rules apply to for this scope (empty: none).
  Status add_scope(uint64_t cgroup_id, unsigned level, uint64_t scope_id, uint32_t policy_slot,
                   const std::string& workspace = {});
  // ENOENT counts as success: removing twice is not an error.
  Status remove_scope(uint64_t cgroup_id);

  Result<SlotCounters> counters(uint32_t slot) const;
  Result<uint64_t> stat(ac_stat which) const;

  int events_fd() const;

 private:
  Enforcer() = default;
  Status write_levels();

  struct SkelDeleter {
    void operator()(agentcage_bpf* skel) const;
  };
  std::unique_ptr<agentcage_bpf, SkelDeleter> skel_;
  std::map<uint32_t, uint32_t> slot_rules_;        // slot -> live rules id
  struct WrittenRules {
    std::vector<ac_path_key> paths;
    std::vector<ac_net_key> net;
  };
  void delete_rules(const WrittenRules& rules);
  std::map<uint32_t, WrittenRules> rule_keys_;     // rules id -> keys written
  struct ScopeEntry {
    unsigned level = 0;
    uint32_t workspace_tag = 0;
    ac_path_key workspace_key{};
  };
  std::map<unsigned, unsigned> level_refs_;        // cgroup level -> live scopes
  std::map<uint64_t, ScopeEntry> scopes_;          // cgroup id -> what was registered
  uint32_t next_rules_id_ = 1;
  uint32_t next_workspace_tag_ = 1;
};

// Reads decision records from the ring buffer. Owns the libbpf ring_buffer;
// must not outlive the Enforcer whose events_fd() it was built from.
class EventReader {
 public:
  using Handler = std::function<void(const ac_event_decision&)>;
  static Result<std::unique_ptr<EventReader>> create(int events_fd, Handler handler);
  ~EventReader();
  EventReader(const EventReader&) = delete;
  EventReader& operator=(const EventReader&) = delete;

  // Consume what is available, waiting up to timeout_ms. Returns the number
  // of records handled.
  Result<int> poll(int timeout_ms);
  // Records that were malformed (size/type mismatch) and skipped.
  uint64_t malformed() const { return malformed_; }

 private:
  EventReader() = default;
  static int on_record(void* ctx, void* data, size_t size);
  ring_buffer* rb_ = nullptr;
  Handler handler_;
  uint64_t malformed_ = 0;
};

}  // namespace agentcage::bpf
