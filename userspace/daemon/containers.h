// SPDX-License-Identifier: Apache-2.0
// The containers the daemon confined (attach with a container_id, sent by
// `agentcage oci-hook` at a container's createRuntime): which scope is which
// container, for the audit line's container_id and `agentcage status`, and
// what to release at the container's poststop, when its cgroup is already
// gone. Each is kept as STATE_DIR/containers/ID.json from its attach to its
// release, so a daemon restart keeps them, and a container whose runtime died
// before poststop is released once its cgroup is gone (sweep).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/labels.h"
#include "util/result.h"

namespace agentcage::daemon {

struct ContainerScope {
  std::string id;          // oci::check_container_id
  uint64_t cgroup_id = 0;  // also the scope id
  std::string cgroup;      // absolute path of the cgroup when it was confined
  std::string policy;
  uint32_t slot = 0;
  std::string workspace;  // as the container sees it ("" : none)
  core::Labels labels;
  int64_t attached_ns = 0;  // CLOCK_REALTIME
};

class ContainerIndex {
 public:
  explicit ContainerIndex(const std::string& state_dir) : dir_(state_dir + "/containers") {}

  // Reads the records a previous daemon left. A record that cannot be read
  // or parsed is named in the returned warnings and left alone (the sweep
  // releases nothing it cannot read).
  std::vector<std::string> load();
  // Records a confined container (written to disk before it counts: a
  // daemon killed right after still knows it).
  Status add(const ContainerScope& c);
  // Forgets a released container (its file too).
  Status remove(const std::string& id);

  const ContainerScope* find(const std::string& id) const;
  // The container of a scope ("" : none).
  std::string id_of_scope(uint64_t scope_id) const;
  const std::map<std::string, ContainerScope>& all() const { return by_id_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::map<std::string, ContainerScope> by_id_;
  std::map<uint64_t, std::string> by_scope_;
};

// The JSON of a record, and back (strict: a field of the wrong type, a bad
// container id or a missing field is an error).
std::string to_record_json(const ContainerScope& c);
Result<ContainerScope> parse_record_json(const std::string& text);

}  // namespace agentcage::daemon
