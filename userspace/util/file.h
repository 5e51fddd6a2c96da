// SPDX-License-Identifier: Apache-2.0
// Reading small files whole: what a file must be before its bytes are taken;
// and writing one whole, so a reader sees the old bytes or the new, never part.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace agentcage {

// What is left to read from FD, at most MAX bytes (read is retried on EINTR).
Result<std::string> read_up_to(int fd, size_t max);

// The content of PATH, which must be a regular file of at most MAX bytes.
// FLAGS are added to O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK (e.g.
// O_NOFOLLOW: then a symbolic link fails with ELOOP). CHECK, if given, sees
// the open file's stat first; its error refuses the file. Errors name PATH
// and keep the errno as their code.
Result<std::string> read_regular_file(const std::string& path, size_t max, int flags = 0,
                                      const std::function<Status(const struct stat&)>& check = {});

// All of TEXT to FD (retried on EINTR and short writes).
Status write_all_to(int fd, std::string_view text);

// PATH's content becomes TEXT at once: written to PATH.tmp (created anew with
// MODE: an existing PATH.tmp, or a link there, is an error), synced, renamed
// over PATH, the directory synced. On error PATH is unchanged and the
// temporary file is gone; the error names the file and the step.
Status replace_file(const std::string& path, std::string_view text, mode_t mode);

}  // namespace agentcage
