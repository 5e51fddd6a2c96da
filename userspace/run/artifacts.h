// SPDX-License-Identifier: Apache-2.0
// What a run leaves in a kept workspace (--keep, --workspace DIR), made safe
// to hand back: the files are the run's, so nothing in them may grant
// privileges to whoever touches them next.
#pragma once

#include <cstdint>
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

// Copies the tree `from` into the new directory `to` (which must not exist):
// directories, regular files and symbolic links (as links, never followed),
// with their owners and permission bits but no set-id bits; device files,
// FIFOs and sockets are left out. Entries are opened as strip_setid_bits
// does (relative, O_NOFOLLOW, checked). The same depth bound applies, and at
// most `max_bytes` of file contents are written (EFBIG beyond: hard links
// and sparse files are copied out in full). Used for a kept tmpfs workspace
// (run/workspace.h), after the run; on an error `to` is left partial.
Status copy_kept_tree(const std::string& from, const std::string& to, uint64_t max_bytes);

}  // namespace agentcage::run
