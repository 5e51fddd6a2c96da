// SPDX-License-Identifier: Apache-2.0
// The mount table of /proc/PID/mountinfo, parsed: one home for its format.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage {

struct MountEntry {
  unsigned major = 0, minor = 0;  // the device of the mounted file system (st_dev)
  std::string mount_point;        // unescaped
  std::string fs_type;            // e.g. "ext4", "proc", "fuse.sshfs"
};

// The entries of a mountinfo text. Fields: id parent major:minor root
// mount-point options [optional fields...] - fs-type source super-options;
// a line without them is skipped. Mount points are unescaped (\ooo).
std::vector<MountEntry> parse_mountinfo(std::string_view text);

// This process's mount table (/proc/self/mountinfo).
Result<std::vector<MountEntry>> read_mountinfo();

// The type of the file system mounted from device `dev` in `mounts`, found
// without asking the file system itself (fstatfs of a FUSE file asks its
// server, which may never answer); none when no mount has that device.
std::optional<std::string> fs_type_of_device(const std::vector<MountEntry>& mounts, dev_t dev);

}  // namespace agentcage
