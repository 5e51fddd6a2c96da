// SPDX-License-Identifier: Apache-2.0
// What agentcage-runc does with one runtime call: pass it on unchanged, or
// first add agentcage's hooks to the bundle's config.json. Pure (the bundle
// is read by the caller), so the unit tests decide every case.
#pragma once

#include <filesystem>
#include <optional>

#include "oci/bundle.h"
#include "oci/hooks.h"
#include "oci/runtime_args.h"
#include "util/result.h"

namespace agentcage::shim {

// The createRuntime and poststop hooks that run AGENTCAGE (the agentcage
// binary) as `agentcage oci-hook --stage STAGE`.
oci::HookEdit hook_edit(const std::filesystem::path& agentcage);

// For ARGS (parsed) and, when ARGS start a container from a bundle (create,
// run, restore), BUNDLE (its config.json as read; nullptr for any other
// subcommand): the edit to make before exec'ing the real runtime, or
// nullopt to exec it unchanged.
//
// A container is confined when its policy is known: --agentcage-policy
// (the operator's, overrides an annotation and is written into it), else
// the io.agentcage.policy annotation, else --agentcage-default-policy
// (written into the annotation). A pod's sandbox (pause) container is never
// confined (oci::is_sandbox_container: its marker and its own id). Fail
// closed: a bundle that cannot be read or parsed, or an empty policy
// annotation, is an Error, so the container is not created; so is the
// restore of a container that would be confined (its processes never exec,
// where the scope arms, so they would run unconfined).
//
// The policy is passed on as text: it is the hook that checks it is a
// policy NAME the daemon loaded (the shim does not link the policy code).
Result<std::optional<oci::HookEdit>> decide(const oci::RuntimeArgs& args, const Result<oci::Bundle>* bundle,
                                            const std::filesystem::path& agentcage);

}  // namespace agentcage::shim
