// SPDX-License-Identifier: Apache-2.0
// The limits a run gets when neither its policy nor the command line states
// one: the one place they are written down. `agentcage run --help` shows
// them (cli::with_defaults), the runner applies them (run::effective_limits),
// and a policy or option says `unlimited` to do without one. Written as a
// policy would write them, and parsed by the same value parsers.
#pragma once

namespace agentcage::core {

// memory.max (swap off): enough for CPython with numpy and matplotlib.
inline constexpr const char* kDefaultMemory = "1Gi";
// pids.max: a multiprocessing pool or a build with a few dozen workers.
inline constexpr const char* kDefaultPids = "256";
// Wall-clock time from the start of COMMAND.
inline constexpr const char* kDefaultTimeout = "30m";
// The size of the workspace file system (a per-run tmpfs).
inline constexpr const char* kDefaultDisk = "1Gi";

}  // namespace agentcage::core
