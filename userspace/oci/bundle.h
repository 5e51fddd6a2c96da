// SPDX-License-Identifier: Apache-2.0
// An OCI bundle's config.json (runtime-spec config.md), read for what the
// shim and the hook decide on: the root, its annotations, its mounts, the
// entrypoint and the cgroup path. Everything else in the file is the
// runtime's business and is not looked at.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage::oci {

// A config.json is tens of kilobytes; Kubernetes caps all of a pod's
// annotations at 256 KiB. Larger is refused rather than read.
inline constexpr size_t kMaxConfigBytes = 4 << 20;

struct Mount {
  std::string destination, type, source;
  std::vector<std::string> options;
};

struct Bundle {
  std::filesystem::path dir;   // the bundle directory
  std::filesystem::path root;  // root.path, made absolute against dir when relative
  bool root_readonly = false;
  std::map<std::string, std::string> annotations;
  std::vector<Mount> mounts;
  std::vector<std::string> args;  // process.args
  std::string cgroups_path;       // linux.cgroupsPath ("" when absent)
};

// config.json of the bundle at `dir` (a regular file, size-capped, read without following a
// symlink at the last component), parsed strictly enough for the fields above.
Result<Bundle> read_bundle(const std::filesystem::path& dir);

// The same from the text of a config.json; `dir` is what relative paths are against.
Result<Bundle> parse_bundle(std::string_view config_json, const std::filesystem::path& dir);

// A bind mount whose destination is `destination` (normalised compare), if any.
const Mount* bind_mount_at(const Bundle& b, std::string_view destination);

}  // namespace agentcage::oci
