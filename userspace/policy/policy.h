// SPDX-License-Identifier: Apache-2.0
// The policy front end: policy YAML -> validated model (model.h), or a list
// of located diagnostics.
//
//   auto r = policy::load_policy_file("policies/python-sandbox.yaml");
//   if (!r.ok()) for (auto& d : r.errors) std::cerr << d.format() << '\n';
//
// The whole file is rejected on any error, and every error that can be found
// is reported (the first 100, then a count), sorted by position, as
// "FILE:LINE:COL: message". Parsing is bounded in time and memory for any
// input: the YAML front end (yaml/document.h, shared with the daemon
// configuration) checks size, UTF-8 and flow nesting before yaml-cpp sees the
// text, then runs a streaming pass that rejects anchors/aliases (no alias
// bombs), tags, extra documents and deep nesting before a tree is built.
//
// Plain YAML rules apply: inside [ ] or { } a value containing ${workspace}
// must be quoted (["${workspace}"]) because { } are flow indicators there;
// block lists ("- ${workspace}") need no quotes. The syntax error for the
// unquoted form says so.
//
// Includes: a top-level `include: [FILE.yaml, ...]` takes other policy files'
// rules (each a complete policy document, valid on its own; a path relative
// to the including file's directory, or absolute; at most kMaxIncludeDepth
// files deep, no cycles). The merge: every list (exec.allow, files.read,
// write and deny with their name patterns, network.allow and listen,
// syscalls.allow) is the union of the files' lists, so deny entries of any
// file deny; exec.native_code and exec.debugging are allow when any file
// allows; a limit the including file states is its own, else the tightest
// any included file states (a value beats `unlimited`); the name and mode
// are the including file's alone. Each entry keeps the file it was written
// in (Position::source, Policy::source_of), so errors and `policy explain`
// name it. policy/include.h has the mechanics.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/model.h"
#include "policy/values.h"
#include "util/result.h"
#include "yaml/diagnostic.h"

namespace agentcage::policy {

struct ParseOptions {
  // exec.allow entries must exist and be regular executable files; records
  // their realpath. Off: the file system is not touched (unit tests, fuzzing,
  // checking a policy meant for another machine).
  bool check_exec_exists = true;
  // Larger inputs are rejected without being parsed.
  size_t max_bytes = 256 * 1024;
};

struct ParseResult {
  std::optional<Policy> policy;          // set exactly when errors is empty
  std::vector<yaml::Diagnostic> errors;  // sorted by position; line 0 = the whole file
  // Every file `include:` led to (resolved), read or not, valid or not:
  // what a change to which makes this policy worth parsing again (the
  // daemon's policy directory), also when this parse failed.
  std::vector<std::string> included_files;
  bool ok() const { return policy.has_value() && errors.empty(); }
};

// Parses and validates one policy document. `filename` is only used in
// diagnostics and Policy::source.
ParseResult parse_policy(std::string_view text, const std::string& filename,
                         const ParseOptions& options = {});

// The bytes of the policy file `path`: a regular file of at most
// options.max_bytes (at most one byte more is read, should it grow while
// read: parse_policy reports that). The error says what is wrong, without
// the path.
Result<std::string> read_policy_text(const std::string& path, const ParseOptions& options = {});

// Reads `path` (read_policy_text) and parses it. Read failures are
// diagnostics at line 0.
ParseResult load_policy_file(const std::string& path, const ParseOptions& options = {});

// load_policy_file for a file of a policy directory, where the daemon names a
// policy by its file: NAME.yaml holds the policy NAME. A file whose stem is
// not a valid policy name (name.h) is rejected with an error about the whole
// file that says how to rename it; its content is still checked. A policy
// whose metadata.name is not the file's NAME is rejected there (located).
ParseResult load_policy_dir_file(const std::string& path, const ParseOptions& options = {});

// What `policy check` runs on a policy that parsed: the policy compiler
// (bpf::compile_problem, passed in by the command line: policy/ sits below
// bpf/). A located diagnostic when the policy cannot be loaded, else nullopt.
using Compiler = std::function<std::optional<yaml::Diagnostic>(const Policy&)>;

struct CheckOptions {
  std::vector<std::string> files;
  // Also every policy file the daemon would load from this directory
  // (NAME.yaml, not hidden), each under the daemon's file-name rules.
  std::optional<std::string> dir;
  bool json = false;  // one JSON document on `out` instead of text
};

// `agentcage policy check`: parses, validates and compiles each file, so
// that "ok" means "this loads". Text: "FILE: ok (policy NAME, ...)" on `out`
// per valid file, each error as FILE:LINE:COL: message on `err`. JSON (see
// docs/schema/policy-check.schema.json): {"ok": B, "files": [{"file", "ok",
// "policy", "mode", "rules": {...}, "errors": [{"file", "line", "column",
// "message"}]}]} on `out`. Returns 0 when every file is valid (an empty
// `dir` included), 1 otherwise, 2 when there is nothing to check or `dir`
// cannot be listed (no document then; the error goes to `err`).
int check_command(const CheckOptions& options, const Compiler& compile, std::ostream& out, std::ostream& err);

}  // namespace agentcage::policy
