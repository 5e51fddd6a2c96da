// SPDX-License-Identifier: Apache-2.0
// Policy model -> what the kernel maps hold for one policy slot.
//
// Longest-prefix matching returns one rule, so the compiler folds into every
// rule what the rules enclosing it grant: a path's entry carries the union of
// the access of every rule on its way to "/", and any enclosing deny turns it
// into a deny. The same for CIDRs: an entry carries the port ranges of every
// shorter CIDR that covers it. One lookup in the kernel then gives the
// answer all rules together would give.
#pragma once

#include "bpf/compiled.h"
#include "policy/model.h"
#include "util/result.h"

namespace agentcage::bpf {

Result<CompiledPolicy> compile(const policy::Policy& policy);

}  // namespace agentcage::bpf
