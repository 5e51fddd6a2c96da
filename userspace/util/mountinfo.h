// SPDX-License-Identifier: Apache-2.0
// The mount table of /proc/PID/mountinfo, parsed: one home for its format.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage {

struct MountEntry {
  uint64_t id = 0;                // the mount's id (statx's stx_mnt_id)
  unsigned major = 0, minor = 0;  // the device of the mounted file system (st_dev)
  std::string mount_point;        // unescaped
  std::string fs_type;            // e.g. "ext4", "proc", "fuse.sshfs"
};

// The entries of a mountinfo text. Fields: id parent major:minor root
// mount-point options [optional fields...] - fs-type source super-options;
// a line without them is skipped. Mount points are unescaped (\ooo).
std::vector<MountEntry> parse_mountinfo(std::string_view text);

// This process's mount table (/proc/self/mountinfo); a table longer than
// 16 MiB is an error, never cut.
Result<std::vector<MountEntry>> read_mountinfo();

// The type of the file system of mount `mount_id` (statx's stx_mnt_id) in
// `mounts`, found without asking the file system itself (fstatfs of a FUSE
// file asks its server, which may never answer); none when no mount has that
// id (detached, or of another mount namespace).
std::optional<std::string> fs_type_of_mount(const std::vector<MountEntry>& mounts, uint64_t mount_id);

}  // namespace agentcage
