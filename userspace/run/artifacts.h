// SPDX-License-Identifier: Apache-2.0
// What a run leaves in a kept workspace (--keep, --workspace DIR), made safe
// to hand back: the files are the run's, so nothing in them may grant
// privileges to whoever touches them next.
#pragma once

#include <string>

#include "util/result.h"

namespace agentcage::run {

// Clears the set-user-ID and set-group-ID bits of every regular file and
// directory under `dir` (dir included). Never follows a symbolic link and
// never leaves the tree: each entry is opened relative to its directory's
// descriptor with O_NOFOLLOW, checked to be the entry that was listed, and
// changed through that descriptor. Call it only when nothing of the run is
// left running (the tree must not change meanwhile). Fails on a tree deeper
// than kMaxArtifactDepth levels or an entry it cannot open: the caller then
// must not hand the directory back as is.
inline constexpr int kMaxArtifactDepth = 256;
Status strip_setid_bits(const std::string& dir);

}  // namespace agentcage::run
