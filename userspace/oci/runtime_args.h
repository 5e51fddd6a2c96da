// SPDX-License-Identifier: Apache-2.0
// A runc/crun command line as a container engine writes it, read the way the
// runtime reads it: global flags, then the subcommand, then its flags and
// the container id. containerd writes
//   runc --root R --log L --log-format json create --bundle B --pid-file P ID
// so the subcommand is found by name after skipping the global flags and
// their values, never as "the first word that is not a flag".
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "util/result.h"

namespace agentcage::oci {

struct RuntimeArgs {
  // argv without the shim's own --agentcage-* flags: what the real runtime
  // gets (argv[0] kept; the caller replaces it if it wants).
  std::vector<std::string> runtime_argv;
  std::string subcommand;  // "" when there is none (`runc --version`)
  // For create and run: the bundle, as given (relative to the current
  // directory) or "" when not given (the runtime then uses the current
  // directory).
  std::filesystem::path bundle;
  // For create, run and restore: the container's id (the first word that is
  // neither a flag nor a flag's value), "" when not given.
  std::string container_id;
  // The shim's own flags (global, before the subcommand).
  std::optional<std::string> real_runtime;    // --agentcage-runtime=PATH
  std::optional<std::string> policy;          // --agentcage-policy=NAME
  std::optional<std::string> default_policy;  // --agentcage-default-policy=NAME
};

// Whether SUBCOMMAND creates a container from a bundle (create, run).
bool creates_container(const std::string& subcommand);
// Whether SUBCOMMAND starts a container from a bundle: create, run, and
// restore (from a checkpoint: its processes never exec).
bool starts_from_bundle(const std::string& subcommand);

// ARGV (argv[0] first). Errors: a global flag neither runc nor crun knows (its
// value, if any, could be taken for the subcommand), a flag missing its
// value, an unknown or repeated --agentcage-* flag or one without "=VALUE",
// and, for create, run and restore, crun's --config/-f (the runtime would read
// another file than the bundle's config.json, which is the one the shim
// edits) or a second bundle flag, or an empty word as the subcommand.
Result<RuntimeArgs> parse_runtime_args(std::span<const std::string> argv);

}  // namespace agentcage::oci
