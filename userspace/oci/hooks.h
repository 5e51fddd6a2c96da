// SPDX-License-Identifier: Apache-2.0
// Adding agentcage's hooks to a bundle's config.json, for the runtime shim
// (agentcage-runc): what podman's hooks.d does for podman, done by rewriting
// the file before the real runtime reads it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace agentcage::oci {

// How long a runtime lets `agentcage oci-hook` run before it fails the
// container (the hook's daemon call must end well before). The shim's
// entries and packaging/oci/*.json use the same value.
inline constexpr int kHookTimeoutSeconds = 30;

// One entry of a hooks stage (runtime-spec config.md, "POSIX-platform Hooks").
struct Hook {
  std::string path;                // absolute
  std::vector<std::string> args;   // args[0] included, as execv wants it
  std::optional<int> timeout;      // seconds
};

// What the shim adds: one hook for createRuntime and one for poststop, and
// the policy annotation when the policy came from the shim's own arguments.
struct HookEdit {
  Hook create_runtime;
  Hook poststop;
  std::optional<std::string> policy;  // sets io.agentcage.policy
};

// CONFIG (a config.json's text) with EDIT applied: each hook appended to its
// stage unless an entry with the same path and args is there already, every
// other hook and field kept (the result equals CONFIG as JSON but for what
// EDIT adds). nullopt when nothing needed adding. A config that is not a
// JSON object, or whose "hooks", a stage or "annotations" has the wrong type,
// is an Error.
Result<std::optional<std::string>> edit_config(std::string_view config, const HookEdit& edit);

// edit_config on DIR/config.json, written back atomically: a new
// DIR/config.json.tmp with the old file's mode, fsynced, renamed over the
// old one (and the directory fsynced). On error the old file is unchanged
// and no config.json.tmp is left. Returns whether the file changed.
Result<bool> add_hooks(const std::filesystem::path& dir, const HookEdit& edit);

}  // namespace agentcage::oci
