// SPDX-License-Identifier: Apache-2.0
// Which of the BPF object's programs this kernel runs: hooks that exist only
// on newer kernels, and hooks whose arguments changed between versions.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

struct agentcage_bpf;
struct bpf_program;

namespace agentcage::bpf {

// Before load: turn off the programs whose hook this kernel lacks, and pick
// the variant of each hook that matches the kernel's arguments (read from
// the kernel's BTF). Fails, saying what is missing, when no variant fits.
Status select_programs(agentcage_bpf* skel);

// The names of the object's programs this kernel does not run.
Result<std::vector<std::string>> programs_to_skip();

// Whether a program of the object was left out by select_programs.
bool program_skipped(const ::bpf_program* prog);

}  // namespace agentcage::bpf
