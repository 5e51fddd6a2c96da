// SPDX-License-Identifier: Apache-2.0
// The kernel's decision on compiled rules, in C++: what the hooks answer for
// one operation of a scoped process, computed from a CompiledPolicy with the
// lookups the BPF side makes on the maps (path.bpf.h ac_path_access and
// ac_path_ancestor, the name rules, rules.bpf.h ac_port_allowed, the
// judgement of agentcage.bpf.c ac_judge_dentry). `agentcage policy explain`
// answers with it; a kernel test asks it and the kernel the same random
// operations and requires the same answers.
//
// Out of its reach, as of explain's: what the kernel decides before the
// rules (cgroupfs and other processes' /proc entries are never reachable,
// the run's own processes are readable, a path deeper than
// AC_PATH_MAX_DEPTH or on a detached mount), and the socket, IPC and
// process hooks that have no rule (docs: the README's rule table).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "bpf/compiled.h"
#include "policy/model.h"
#include "util/result.h"

namespace agentcage::bpf {

enum class Operation {
  read,     // open for reading (file_open, FMODE_READ)
  write,    // open for writing, create, unlink, rename, chmod, ... (FMODE_WRITE, path_*)
  exec,     // execve of the file (bprm_check_security)
  stat,     // stat, readlink, getxattr (inode_getattr and friends)
  connect,  // connect or sendto an inet address (socket_connect)
};

struct Request {
  Operation op = Operation::read;
  // file operations: the path the kernel resolves (absolute, normalised,
  // symbolic links already followed: the caller's job)
  std::string path;
  // connect: the address as the maps hold it (IPv4 as ::ffff:a.b.c.d), the
  // port in host order, and AC_PROTO_TCP or AC_PROTO_UDP
  std::array<uint8_t, 16> addr{};
  uint16_t port = 0;
  uint8_t proto_bit = AC_PROTO_TCP;
};

struct Decision {
  bool allowed = false;      // what the rules say (in audit mode a denial is only reported)
  uint8_t reason = 0;        // AC_REASON_*
  uint32_t access = 0;       // the bits the rules grant the target (AC_ACCESS_*)
  bool by_name = false;      // a name rule denied it (reason AC_REASON_RULE_DENY)
  bool by_ancestor = false;  // allowed as a directory on the way to an allowed path (stat)
};

// `workspace`: the scope's workspace directory (absolute, real path; ""
// when it has none), which its ${workspace} rules are relative to.
Decision decide(const CompiledPolicy& policy, const std::string& workspace, const Request& request);

// The decision and the policy entry that made it (`agentcage policy
// explain`): for an allowed request the most specific entry that grants it,
// for a denied one the deny entry or name pattern, none for a default deny.
struct Explanation {
  Decision decision;
  std::string rule;      // "files.read /etc", "files.deny '**/.env'", ... ("": no rule decided)
  policy::Position pos;  // of that entry in the policy's file (line 0: none)
  std::string detail;    // one sentence on how the rule applies
};
Explanation explain(const policy::Policy& policy, const CompiledPolicy& compiled,
                    const std::string& workspace, const Request& request);

// `ADDR:PORT[/tcp|/udp]` (IPv6 as `[ADDR]:PORT`; TCP when no protocol is
// given) as a connect request.
Result<Request> parse_connect_target(const std::string& text);

}  // namespace agentcage::bpf
