// SPDX-License-Identifier: Apache-2.0
// The validated policy model: what a policy file means once every value has
// been checked. Produced by parse_policy() (policy.h); consumed by the policy
// compiler and the run lifecycle. Nothing in here needs re-validation.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "yaml/diagnostic.h"

namespace agentcage::policy {

// Where an entry is in its policy file (1-based line and column). The type is
// the YAML front end's; daemon/daemon.cpp still spells it policy::Position.
using Position = yaml::Position;

enum class Mode { enforce, audit };

// One files.read / files.write / files.deny entry. `path` is lexically
// normalised: absolute, no "//", "." or "..", no trailing '/' (except "/").
// When in_workspace is set the entry is relative to the per-run workspace:
// "" is the workspace itself, otherwise `path` starts with '/' ("/sub/dir").
struct PathEntry {
  std::string path;
  bool in_workspace = false;
  Position pos;
};

// One files.deny name pattern, in force at any depth: "**/NAME" denies every
// path with a component named NAME (a file, or a directory and everything
// under it); "**/*.EXT" every path with a component ending in ".EXT".
struct NamePattern {
  enum class Kind { name, suffix } kind = Kind::name;
  std::string text;  // NAME, or ".EXT" for a suffix
  Position pos;
};

// One exec.allow entry: the normalised path as written and, when the
// existence check ran (ParseOptions::check_exec_exists), its realpath. Without
// the check `resolved` equals `path` and the file system was not touched.
struct ExecEntry {
  std::string path;
  std::string resolved;
  Position pos;
  // A directory (known when the existence check ran): every program under
  // it may run (the kernel's rule is the same prefix rule either way).
  bool directory = false;
};

// An inclusive port range; a single port has first == last.
struct PortRange {
  uint16_t first = 1, last = 65535;
};

enum class Protocol { any, tcp, udp };

// One network.allow entry, or one network.listen entry (cidr: the local
// address and ports a socket may be bound to and listen on; unix_abstract:
// a name that may be bound; never unix_path).
struct NetRule {
  // domain: network.allow only; answered by the run's own resolver, which
  // pins the addresses of an allowed name for this run (docs/policy.md).
  enum class Kind { cidr, unix_path, unix_abstract, domain } kind = Kind::cidr;
  // cidr rules: AF_INET or AF_INET6, the network address in network byte
  // order (IPv4 uses the first 4 bytes; host bits are zero) and its length.
  int family = 0;
  std::array<uint8_t, 16> addr{};
  uint8_t prefix_len = 0;
  std::vector<PortRange> ports;  // empty = all ports
  Protocol protocol = Protocol::any;
  // unix rules: the normalised socket path (unix_path) or the abstract name
  // WITHOUT the leading '@' written in the policy (unix_abstract), i.e. the
  // bytes that follow the leading NUL of sun_path.
  std::string unix_name;
  // domain rules: the name (lower-case, no "*.", no trailing dot); wildcard:
  // every name strictly under it. Their ports are single ports.
  std::string domain;
  bool wildcard = false;
  Position pos;
};

// Resource limits. A value unset and not `unlimited` is not stated: the
// command line and then the defaults of core/limits.h apply
// (run::effective_limits). `unlimited` states that there is none.
struct Limits {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> pids;
  std::optional<double> cpus;
  std::optional<std::chrono::milliseconds> timeout;
  // limits.disk: the size of the run's workspace file system.
  std::optional<uint64_t> disk_bytes;
  struct Unlimited {
    bool memory = false, pids = false, cpu = false, timeout = false, disk = false;
  } unlimited;
};

// exec.native_code and exec.debugging: deny (the default) or allow.
enum class Permit { deny, allow };

// A whole policy. Empty lists deny everything of their kind.
struct Policy {
  std::string name;
  Position name_pos;  // of metadata.name's value
  Mode mode = Mode::enforce;
  std::vector<ExecEntry> exec_allow;
  // allow: memory the run wrote may become executable (JIT runtimes).
  Permit native_code = Permit::deny;
  // allow: ptrace, process_vm_writev and /proc/PID/mem writes between the
  // run's own processes (gdb, strace, py-spy). Never outside the run.
  Permit debugging = Permit::deny;
  std::vector<PathEntry> read, write, deny;
  std::vector<NamePattern> deny_names;  // files.deny's "**/NAME" and "**/*.EXT" entries
  std::vector<NetRule> network_allow;
  std::vector<NetRule> network_listen;
  // syscalls.allow: groups of policy/syscalls.h this policy lets the run
  // call (validated names, each once). Every other group fails with EPERM.
  std::vector<std::string> syscalls_allow;
  Limits limits;
  std::string source;  // the file name the policy was parsed from
  // The files it includes (`include:`), directly or through another, each
  // once, in the order they were merged; an entry's Position::source N > 0
  // names includes[N - 1]. Their bytes are kept so that a policy prepared
  // ahead is used only while every file still holds them.
  struct Included {
    std::string path;  // the resolved path that was read
    std::string text;
    Position pos;  // of its `include:` entry (source: the including file)
  };
  std::vector<Included> includes;

  // The file an entry at `pos` was written in.
  const std::string& source_of(const Position& pos) const {
    if (pos.source > 0 && static_cast<size_t>(pos.source) <= includes.size())
      return includes[pos.source - 1].path;
    return source;
  }
};

const char* to_string(Mode mode);
const char* to_string(Protocol protocol);
const char* to_string(Permit permit);

// The first network.allow domain rule of `policy`, or null: a policy with
// one needs a resolver of the run's own (run/dns.h).
inline const NetRule* first_domain_rule(const Policy& policy) {
  for (const auto& r : policy.network_allow)
    if (r.kind == NetRule::Kind::domain) return &r;
  return nullptr;
}

}  // namespace agentcage::policy
