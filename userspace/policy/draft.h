// SPDX-License-Identifier: Apache-2.0
// The core of `agentcage policy suggest`: decision records a run left behind
// (its result's recording, or audit log lines) -> observed operations -> a
// minimal draft policy that allows exactly what was observed, and the
// operations the command line checks the compiled draft against.
//
//   auto obs = policy::read_observations(text, "result.json", std::nullopt, workspace_root);
//   if (!obs) { std::cerr << obs.error().message << '\n'; return 2; }
//   if (!obs->complete) warn(obs->incomplete);  // rerun with --mode audit --record
//   policy::DraftOptions o;
//   policy::Draft d = policy::draft_policy(obs->items, o);
//   for (const auto& c : d.checks) ...  // bpf::decide each with c.workspace
//
// The record shape is bpf::record_json's (docs/daemon.md, "Decision
// records"); this layer reads it as JSON and does not include userspace/bpf.
//
// Each observation carries the workspace of the run it was seen in (a
// result's "workspace"; WORKSPACE_ROOT/RUN_ID for an audit-log line): paths
// under it become ${workspace} rules, so runs with different workspaces
// merge into one draft, and each check is decided with its own run's
// workspace.
//
// What each observation asks for:
//   exec (a path)                  exec.allow PATH: the program file, never its directory; a
//                                  directory (or "/") gets no rule, a note
//   file_open, file_receive        files.write PATH when "access" holds "write", else files.read
//                                  PATH (a record without "access" is taken as a read: a note
//                                  says so)
//   file_change                    files.write PATH
//   mmap_exec                      files.read PATH: an executable mapping needs the file readable,
//                                  and the kernel refuses it for a file the run may write (such a
//                                  mapping stays denied, with a note)
//   file_stat                      nothing when PATH is a directory on the way to another rule's
//                                  path (absolute rules) or to the run's workspace, which the
//                                  kernel lets be stat'ed; else files.read PATH
//   file_watch                     files.read PATH (a watch needs the path itself readable)
//   ... of a directory             no rule of its own: see "Directories" below
//   socket_connect, socket_send    network.allow {cidr: ADDR/32 or /128, ports: [PORT], protocol}
//     to an address                (IPv4-mapped IPv6 as IPv4, which matches both; a record without
//                                  "protocol", or of another protocol, gets an entry without one:
//                                  any protocol, tcp and udp too, which a comment says, and the
//                                  former a note); ports of one network and protocol share an
//                                  entry, at most AC_NET_MAX_RANGES ranges a network (the
//                                  compiler's limit: the rest stays denied, a note). The
//                                  any-address (0.0.0.0, ::) reaches the host's own services: its
//                                  entry gets a comment and a note saying so
//   ... to a unix socket           network.allow {unix: PATH} or {unix: "@NAME"}
//   anything else                  no rule: a note, and the YAML's closing comment "Not allowed by
//                                  this draft". Where the policy language has a switch for it
//                                  (exec.native_code, exec.debugging, syscalls.allow,
//                                  network.listen) the note names the switch; the draft never
//                                  turns one on.
// Only records with reason default_deny or no_policy (or none) become rules:
// a rule_deny record was denied on purpose by the observed policy's
// files.deny and stays denied, and the other reasons (protected,
// path_too_long, ...) are decided before any rule. A path or socket name
// holding U+FFFD (the record's stand-in for bytes that were not UTF-8) gets
// no rule: the rule would name another file (a note).
//
// Directories: a target is one when its record says so ("directory": true)
// or when another observed path lies below it (a record without the field,
// from an older agentcage, is otherwise taken for a file). A files rule on
// a directory allows everything below it, so a directory makes a rule only
// where a collapse could make one (eligible, below): a listing of an
// eligible directory (Python lists each directory it imports from) is a
// read rule on it. A stat, watch or mapping of a directory, a listing of
// one that is not eligible (/etc/fonts/conf.d, /home/me, ~/.aws), and a
// write or change of one outside the workspace get a note unless a rule
// the draft makes anyway covers them (a stat on the way to another rule or
// to the workspace needs none, as above). A write or change of a directory
// in the workspace makes a rule too. Every directory rule has the comment
// "# a directory: allows everything below it, observed or not".
//
// Files rules are never drafted for "/", a top-level path ("/usr", "/etc",
// "/.dockerenv"), a workspace, the workspace root
// (options.workspace_root) or a directory above one of them in absolute
// space (other runs' workspaces are below it), a path holding a pattern
// character ("*", "?", "[": the parser refuses them in files rules), a
// /proc/PID path (one process: the run's own are readable anyway, others
// never) or a path longer than a rule may be: a note instead, unless a
// collapsed directory covers it (below the top level such a read counts
// toward collapsing its directory like any other file read there).
// exec.allow and unix socket paths name one file exactly, so a "[" there is
// fine; the dynamic loader, a program the run also writes and one in the
// workspace get no exec rule (the compiler would refuse the first two; the
// kernel never runs the last).
//
// The workspace is not writable without a rule: what the run did there is
// drafted like any other path (a program there never runs, and a unix
// socket rule cannot name it: notes).
//
// Collapsing (options.collapse = N, default 3; 0 turns it off), per rule
// space (absolute, or below ${workspace}):
//   - reads: a directory D whose direct children include at least N read
//     rules (files opened for reading, mapped as code, stat'ed or watched
//     in D, directories listed there, or subdirectories that are rules
//     already) becomes the one rule D, replacing every read rule under it.
//     Stats count as reads do: an audit-mode run that can stat three files
//     can read them as well, so leaving stats out would protect nothing,
//     and a program's stats (Python's of each module source) are much of
//     what it uses. Deepest directories first, repeated until nothing
//     changes: a python3 run's /usr/lib/python3.11/{os,abc,io,...}.py and
//     its encodings/ become /usr/lib/python3.11; /usr/lib becomes a rule
//     only when N of its children did.
//   - writes, below ${workspace} only: one level, a directory where at
//     least N paths were written (directly in it) becomes one write rule,
//     never its parent. Writes elsewhere stay exact.
//   - D must be eligible: depth (components: /usr/lib is 2) at least 2
//     under /usr, /opt, /bin, /sbin, /lib, /lib32, /lib64 and /libx32
//     (installed files), at least 3 anywhere else (/home/me/project, never
//     /home/me or /tmp), never a path with a hidden component
//     (/home/me/.ssh, /opt/x/.git), and never under /etc, /proc, /sys,
//     /dev, /run or /boot, whose files stay exact (configuration, secrets,
//     devices, kernel state); below ${workspace} any directory, the
//     workspace itself included. D must not be a path no rule may name (a
//     workspace or above, ...) nor hold a path the observed policy denied
//     by rule.
// Then a rule covered by another is dropped: a write within a write rule; a
// read within a read or write rule (write implies read) or naming an
// exec.allow program (allowed programs are readable). An exec of a program
// under a files.write rule is refused by the compiler: no exec rule then,
// and a note.
//
// The YAML is a complete policy (apiVersion agentcage/v1, kind Policy,
// spec.mode enforce) that parse_policy accepts, with a comment above each
// rule naming the operations that made it (the first three targets, sorted;
// the workspace's as ${workspace}/...):
//   # file_open read by python3 (12×): /usr/lib/python3.11/abc.py, ... (+9 more)
// Comments and notes are escaped (util/text.h escape); a rule's own line is
// printable ASCII (anything else in a double-quoted scalar as \uXXXX or
// \UXXXXXXXX). Everything is sorted: the same observations give the same
// bytes. A draft larger than a policy file may be (ParseOptions::max_bytes)
// gets a note.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/paths.h"
#include "util/result.h"

namespace agentcage::policy {

// What a path operation needed (a record's "access" array).
inline constexpr uint8_t kAccessRead = 1;
inline constexpr uint8_t kAccessWrite = 2;
inline constexpr uint8_t kAccessExec = 4;

// One distinct operation seen in the records.
struct Observation {
  std::string hook;         // "file_open", "exec", ..., "syscall"
  std::string target_kind;  // "path", "inet", "unix", "unix_abstract", "none", "syscall"
  std::string target;       // as recorded: a path, "@name", "addr:port", a system call's name, ""
  uint8_t access = 0;       // kAccess* bits; 0: the record carries no "access"
  std::string protocol;     // "tcp", "udp", another protocol's number; "": not recorded
  std::string reason;       // "default_deny", "rule_deny", ...
  std::string comm;         // the process name
  bool directory = false;   // the record's "directory": the target is a directory (false: it is
                            // not, or the record does not say: older records)
  std::string workspace;    // the workspace of the run it was seen in, as the records show it
                            // (absolute, real); "": none known
  uint64_t count = 1;       // how many records were this operation
  std::string origin;       // where it was first seen: "result.json", "audit.log:17"
};

struct Observations {
  // Distinct operations (hook, target_kind, target, access, protocol,
  // reason, comm, directory, workspace), counts summed, sorted.
  std::vector<Observation> items;
  uint64_t records = 0;  // the records read (each record's count summed)
  // Every operation of the run is in `items`. A result without a complete
  // recording keeps only its first few records: `incomplete` says why, and
  // the caller should suggest `agentcage run --mode audit --record`.
  bool complete = true;
  std::string incomplete;
  // From a run's result: its workspace, policy and run id; from an audit
  // log: the policy when every line names the same one, the run id (and its
  // workspace) when filtered by one. Each observation carries its own
  // workspace: these are for messages.
  std::optional<std::string> workspace;
  std::optional<std::string> policy;
  std::optional<std::string> run_id;
};

// Reads a run's result document (one JSON object: its "recording" when that
// is an object, else "denials.records") or an audit log (JSON lines, blank
// lines skipped; with `run_id`, only that run's lines). Only "deny" and
// "audit" decisions are observations. Any line or record that is not a
// decision record fails the whole input: "SOURCE:LINE: ..." for a log,
// "SOURCE: recording.records[3]: ..." for a result.
// An observation's workspace: a result's "workspace"; for an audit-log line
// with a run_id (one path component), `workspace_root`/RUN_ID, where the
// host that wrote the log keeps its runs' workspaces; "" otherwise.
Result<Observations> read_observations(std::string_view text, std::string_view source_name,
                                       const std::optional<std::string>& run_id = std::nullopt,
                                       std::string_view workspace_root = core::kDefaultWorkspaceRoot);

struct DraftOptions {
  std::string name = "suggested";  // metadata.name; an invalid name falls back to "suggested" (a note)
  size_t collapse = 3;             // see above; 0: never collapse
  // Where runs get their workspaces (read_observations' workspace_root): no
  // rule at or above it, as at or above any observation's workspace; "":
  // only those.
  std::string workspace_root = core::kDefaultWorkspaceRoot;
  // For the header comment only.
  std::string source;                      // "result.json"
  std::optional<std::string> from_policy;  // the policy the observations were made under
  std::optional<std::string> run_id;
  std::string incomplete;  // Observations::incomplete: repeated as a warning in the header
};

// One operation the drafted policy must allow, in `agentcage policy explain`
// terms (bpf::decide): op "open" with access "read" or "write", "exec",
// "stat", "change" (a write), or "connect" with target "ADDR:PORT/tcp|udp"
// (bpf::parse_connect_target). Paths are absolute, as recorded: decide them
// with the check's workspace (its observation's). Observations the draft has no
// rule for have no check, and neither have unix socket connections and
// connections of a protocol other than tcp and udp (decide has no operation
// for them). A record without "protocol" is checked as tcp. An executable
// mapping and a watch are checked as an open for reading.
struct DraftCheck {
  std::string op;
  std::string target;
  std::string access;
  std::string workspace;  // the observation's workspace; "": none (or not an absolute directory)
  std::string origin;     // the observation's, for messages
  bool operator==(const DraftCheck&) const = default;
};

struct Draft {
  std::string yaml;  // the policy document
  // What was not drafted, what was allowed but deserves a second look, and
  // assumptions made; also in the YAML. Escaped (util/text.h escape).
  std::vector<std::string> notes;
  std::vector<DraftCheck> checks;  // draft_checks(observations, options)
};

Draft draft_policy(const std::vector<Observation>& observations, const DraftOptions& options);

// The checks for draft_policy(observations, options), sorted, each once.
std::vector<DraftCheck> draft_checks(const std::vector<Observation>& observations,
                                     const DraftOptions& options);

}  // namespace agentcage::policy
