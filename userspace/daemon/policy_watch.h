// SPDX-License-Identifier: Apache-2.0
// The inotify watch on the policy directory: which policy files were written
// whole, renamed, linked or removed (policy_dir.h applies them), and whether
// the directory must be rescanned (queue overflow, a ConfigMap's ..data swap:
// the rename of a dot-entry).
// The directory may not exist yet, or go away: then nothing is watched until
// watch() succeeds again.
#pragma once

#include <set>
#include <string>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

struct PolicyDirChanges {
  std::set<std::string> files;  // policy file names (policy_dir.h) to apply
  bool rescan = false;
};

class PolicyWatch {
 public:
  explicit PolicyWatch(std::string dir) : dir_(std::move(dir)) {}

  // Creates the inotify instance on first use (fd() is valid from then on)
  // and watches the directory.
  Status watch();
  bool watching() const { return watch_ >= 0; }
  int fd() const { return fd_.get(); }
  // Everything queued since the last call.
  PolicyDirChanges read();

 private:
  // A policy file name that is a symbolic link now (an IN_CREATE worth
  // applying: a regular file's creation is followed by its IN_CLOSE_WRITE).
  bool is_created_link(const std::string& name) const;

  std::string dir_;
  UniqueFd fd_;
  int watch_ = -1;
};

}  // namespace agentcage::daemon
