// SPDX-License-Identifier: Apache-2.0
#include "util/sys_names.h"

#include <string.h>

namespace agentcage {

std::string errno_name(int err) {
  const char* name = ::strerrorname_np(err);
  return name ? std::string(name) : "E" + std::to_string(err);
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

}  // namespace agentcage
