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

// One compiled path rule: an absolute, normalised path ("/" or no trailing
// slash) and the AC_ACCESS_* bits it grants (or AC_ACCESS_DENY).
struct PathRule {
  std::string path;
  uint32_t access = 0;
};

// The LPM key bytes for a path (trailing '/' appended, "/" stays "/").
// Exposed for unit tests; fails when the key would not fit AC_PATH_KEY_MAX.
Result<ac_path_key> make_path_key(uint32_t rules_id, const std::string& path);

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
  Status put_policy(uint32_t slot, std::span<const PathRule> rules, uint32_t flags = 0);
  Status remove_policy(uint32_t slot);

  // Put the cgroup `cgroup_id` (at cgroup `level`) and everything below it
  // under the policy in `policy_slot`.
  Status add_scope(uint64_t cgroup_id, unsigned level, uint64_t scope_id, uint32_t policy_slot);
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
  std::map<uint32_t, std::vector<ac_path_key>> rule_keys_;  // rules id -> keys written
  std::map<unsigned, unsigned> level_refs_;        // cgroup level -> live scopes
  std::map<uint64_t, unsigned> scope_levels_;      // cgroup id -> level
  uint32_t next_rules_id_ = 1;
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
