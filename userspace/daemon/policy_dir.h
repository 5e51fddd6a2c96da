// SPDX-License-Identifier: Apache-2.0
// The daemon's policy directory: every NAME.yaml in it is the policy NAME,
// kept installed in a named slot of its own. A file that is created or
// changed is parsed, compiled and installed (in place in its slot when it had
// one, so scopes on it never see a gap); a change that does not validate is
// rejected with located messages and the previous version keeps enforcing; a
// file that is deleted takes its policy with it (scopes still on the slot
// then fail closed). The name -> slot map survives a restart in
// STATE_DIR/daemon-policies.json, and a restarted daemon adopts the slots a
// previous one pinned.
//
// Ordering rules, kept here:
//   1. Collect a slot's counters (Listener::before_slot_removed) before the
//      slot goes: its last decisions would be lost with it.
//   2. Baseline a fresh slot's counters (Listener::slot_fresh) before the
//      policy is installed in it: count from the install on, not from what a
//      previous owner left.
//   3. The state file is written after every change of the name -> slot map,
//      so a daemon that dies at any point restarts with the slots it pinned.
// The inotify watch that says which files changed is policy_watch.h.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/compiled.h"
#include "core/fail_closed.h"
#include "daemon/named_slots.h"
#include "policy/model.h"
#include "policy/name.h"

namespace agentcage::daemon {

using policy::is_policy_file_name;

// What the directory tells the rest of the daemon (metrics, counters).
class PolicyDirListener {
 public:
  virtual ~PolicyDirListener() = default;
  virtual void reloaded(bool success) = 0;
  // `reason`: the fail-closed reason (policy_invalid, internal).
  virtual void rejected(core::FailClosedReason reason) = 0;
  virtual void policies_loaded(size_t count) = 0;
  virtual void slot_named(uint32_t slot, const std::string& name) = 0;
  virtual void slot_fresh(uint32_t slot, const std::string& name) = 0;
  virtual void before_slot_removed() = 0;
  virtual void slot_removed(uint32_t slot) = 0;
};

// One file of the directory, as last processed.
struct PolicyFile {
  std::string name;  // the policy name (= file stem)
  std::optional<uint32_t> slot;
  uint64_t digest = 0;
  bool loaded = false;  // the file's current content is what enforces
  int64_t loaded_at = 0;  // when the enforcing content was installed (Unix seconds; 0: never)
  bool uses_workspace = false;
  // Its first domain rule ("FILE:LINE:COL: domain NAME"), "" without one:
  // such a policy governs runs (each has a resolver), not attachments.
  std::string domain_rule;
  // The files its last parse was led to by `include:` (policy::ParseResult::
  // included_files): a change to one of them reloads this policy too.
  std::vector<std::string> included_files;
  policy::Limits limits;         // the loaded content's limits (runs through the daemon)
  bpf::CompiledPolicy compiled;  // the loaded content's rules
  std::string error;             // why the current content was rejected
  // What was last processed (skip unchanged files on a rescan).
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  int64_t mtime_ns = -1;
};

class PolicyDirectory {
 public:
  PolicyDirectory(std::string policy_dir, std::string state_dir, PolicyDirListener& listener);

  // The kernel side; nothing is installed or removed until it is set (the
  // daemon waits for the program set). Not owned.
  void set_slots(NamedSlots* slots) { slots_ = slots; }
  bool has_slots() const { return slots_ != nullptr; }

  // STATE_DIR/daemon-policies.json: the name -> slot map of the last daemon.
  void load_state_file();
  void save_state_file();
  // Keep the named slots a previous daemon pinned whose slot still holds the
  // policy of that name (or whose file still exists): a restart then swaps
  // in place instead of installing a second copy.
  void adopt_named_slots();
  // Apply every policy file, remove the policies of files that are gone and
  // named slots of a previous daemon whose file is gone.
  void full_scan();
  // full_scan() that re-reads unchanged files too (SIGHUP, the reload op).
  void rescan_all();
  // The file `file_name` was written, renamed into place or removed; then
  // every policy that includes it is parsed again (its rules changed with
  // it; an include that is now wrong is a rejected change: the previous
  // version keeps enforcing).
  void apply_file(const std::string& file_name);
  void remove_file(const std::string& file_name);

  const std::string& path() const { return dir_; }
  std::optional<uint32_t> named_slot(const std::string& policy) const;
  bool uses_workspace(const std::string& policy) const;
  // The loaded `policy`'s first domain rule, "" when it has none.
  std::string domain_rule(const std::string& policy) const;
  // bpf::workspace_problem for the loaded content of `policy` (nullopt
  // when it is not loaded: the caller refuses that on its own).
  std::optional<std::string> workspace_problem(const std::string& policy, const std::string& workspace) const;
  // The limits of a loaded policy (unset: no policy of that name enforces).
  std::optional<policy::Limits> limits(const std::string& policy) const;
  size_t loaded_count() const { return named_slots_.size(); }
  const std::map<std::string, PolicyFile>& files() const { return files_; }
  // The "policy_files" part of the status answer.
  nlohmann::json status_json() const;

 private:
  void reject(PolicyFile& pf, const std::vector<std::string>& messages, core::FailClosedReason fail_reason);
  void install(PolicyFile& pf, const std::string& path);
  // apply_file without the dependents; false when the file was unchanged.
  bool apply_one(const std::string& file_name);

  std::string dir_, state_file_;
  PolicyDirListener& listener_;
  NamedSlots* slots_ = nullptr;
  std::map<std::string, PolicyFile> files_;      // by file name
  std::map<std::string, uint32_t> named_slots_;  // policy name -> slot
};

}  // namespace agentcage::daemon
