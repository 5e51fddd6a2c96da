// SPDX-License-Identifier: Apache-2.0
// `agentcage policy check [FILE...] [--dir DIR] [--json]`,
// `agentcage policy explain POLICY OPERATION TARGET [ACCESS]`,
// `agentcage policy suggest INPUT... [--run ID] [--name NAME]`.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/compile.h"
#include "bpf/decide.h"
#include "bpf/names.h"
#include "cli/command.h"
#include "cli/help.h"
#include "core/paths.h"
#include "policy/draft.h"
#include "policy/locate.h"
#include "policy/policy.h"
#include "policy/values.h"
#include "util/text.h"
#include "util/unique_fd.h"

namespace agentcage::cli {
namespace {

struct ExplainArgs {
  std::string policy, operation, target, access, workspace, policy_dir;
  bool json = false;
};

// The path the kernel would decide on: symbolic links followed (realpath),
// the last one too when `follow` (open, exec, stat) and not otherwise (a
// change or lstat of a symbolic link is decided on the link itself); for a
// file that does not exist yet (a create), its directory's real path and
// its name; else the lexically normalised path.
std::string kernel_path(const std::string& path, bool follow) {
  const std::filesystem::path p(path);
  if (p.filename() == "." || p.filename() == "..") follow = true;  // a directory: nothing to not follow
  char* real = nullptr;
  if (follow && (real = ::realpath(path.c_str(), nullptr))) {
    std::string out = real;
    std::free(real);
    return out;
  }
  if (char* dir = ::realpath(p.parent_path().c_str(), nullptr)) {
    std::string out = std::string(dir) + (std::string(dir) == "/" ? "" : "/") + p.filename().string();
    std::free(dir);
    return out;
  }
  auto norm = policy::normalize_path(path, 4096);
  return norm ? *norm : path;
}

int explain_command(const ExplainArgs& a) {
  auto usage = [](const std::string& msg) {
    std::cerr << "agentcage policy explain: " << msg << "\n";
    return 2;
  };
  bpf::Request q;
  std::string what;
  if (a.operation == "open") {
    const std::string access = a.access.empty() ? "read" : a.access;
    if (access == "read")
      q.op = bpf::Operation::read;
    else if (access == "write")
      q.op = bpf::Operation::write;
    else
      return usage("open takes read or write after the path, got '" + access + "'");
    what = "open for " + access;
  } else if (!a.access.empty()) {
    return usage("only open takes an ACCESS (read or write), not " + a.operation);
  } else if (a.operation == "exec") {
    q.op = bpf::Operation::exec;
    what = "exec";
  } else if (a.operation == "stat" || a.operation == "lstat") {
    q.op = bpf::Operation::stat;
    what = a.operation;
  } else if (a.operation == "change") {
    q.op = bpf::Operation::write;
    what = "change (create, unlink, rename, chmod, ...)";
  } else if (a.operation == "connect") {
    auto c = bpf::parse_connect_target(a.target);
    if (!c) return usage(c.error().message);
    q = *c;
    what = std::string("connect (") + (q.proto_bit == AC_PROTO_UDP ? "udp" : "tcp") + ")";
  } else {
    return usage("unknown operation '" + a.operation +
                 "' (expected open, exec, stat, lstat, change or connect)");
  }
  if (q.op != bpf::Operation::connect) {
    if (a.target.empty() || a.target.front() != '/')
      return usage("TARGET must be an absolute path, got '" + a.target + "'");
    q.path = kernel_path(a.target, a.operation != "change" && a.operation != "lstat");
  }
  std::string workspace;
  if (!a.workspace.empty()) {
    workspace = kernel_path(a.workspace, true);
    if (workspace == "/") return usage("--workspace cannot be /");
  }

  auto file =
      policy::locate_policy(a.policy, a.policy_dir.empty() ? policy::default_policy_dir() : a.policy_dir);
  if (!file) return usage(file.error().message);
  policy::ParseResult parsed = policy::load_policy_file(*file);
  if (!parsed.ok()) {
    for (const auto& d : parsed.errors) std::cerr << d.format() << "\n";
    return 2;
  }
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled) {
    std::cerr << compiled.error().message << "\n";
    return 2;
  }
  const policy::Policy& p = *parsed.policy;
  const bpf::Explanation x = bpf::explain(p, *compiled, workspace, q);
  const bool audit = p.mode == policy::Mode::audit;
  const std::string decision = x.decision.allowed ? "allow" : audit ? "audit" : "deny";
  const bool has_ws_rules = [&] {
    for (const auto* list : {&p.read, &p.write, &p.deny})
      for (const auto& e : *list)
        if (e.in_workspace) return true;
    return false;
  }();
  const bool no_ws = workspace.empty() && has_ws_rules;
  if (a.json) {
    nlohmann::json j = {
        {"decision", decision},
        {"allowed", x.decision.allowed},
        {"operation", a.operation},
        {"target", a.target},
        {"reason", std::string(bpf::reason_name(x.decision.reason))},
        {"detail", x.detail},
        {"policy", p.name},
        {"policy_file", *file},
        {"mode", policy::to_string(p.mode)},
        {"workspace", workspace.empty() ? nlohmann::json(nullptr) : nlohmann::json(workspace)}};
    if (q.op != bpf::Operation::connect) j["resolved"] = q.path;
    j["rule"] = x.rule.empty() ? nlohmann::json(nullptr)
                               : nlohmann::json{{"entry", x.rule},
                                                {"file", p.source_of(x.pos)},
                                                {"line", x.pos.line},
                                                {"column", x.pos.column}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << decision << ": " << what << " " << a.target;
    if (q.op != bpf::Operation::connect && q.path != a.target)
      std::cout << " (the kernel sees " << q.path << ")";
    std::cout << "\n";
    if (!x.rule.empty())
      std::cout << "  rule:   " << p.source_of(x.pos) << ":" << x.pos.line << ":" << x.pos.column << ": "
                << x.rule << "\n";
    std::cout << "  why:    " << x.detail << " [" << bpf::reason_name(x.decision.reason) << "]\n";
    if (audit && !x.decision.allowed)
      std::cout << "  mode:   audit: the operation goes ahead and is reported as a would-be denial\n";
    if (no_ws)
      std::cout << "  note:   the policy has ${workspace} rules; without --workspace DIR they were not "
                   "considered\n";
  }
  return x.decision.allowed ? 0 : 1;
}

struct SuggestArgs {
  std::vector<std::string> inputs;
  std::string run_id, name = "suggested", output, workspace_root = core::kDefaultWorkspaceRoot;
  size_t collapse = 3;
};

// One line to stderr, every byte a run could have chosen escaped.
void say(const std::string& line) { std::cerr << "agentcage policy suggest: " << escape(line, 4000) << "\n"; }

// One input's text: a file, or stdin for "-".
Result<std::string> read_input(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::from_errno(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) return Error::from_errno(path);
  return text;
}

// The draft's operations, each asked of the compiled draft as `policy
// explain` would, with its own run's workspace: every one must be allowed,
// or the draft is wrong.
std::vector<std::string> unallowed(const bpf::CompiledPolicy& compiled,
                                   const std::vector<policy::DraftCheck>& checks) {
  std::vector<std::string> out;
  for (const auto& c : checks) {
    bpf::Request q;
    if (c.op == "connect") {
      auto parsed = bpf::parse_connect_target(c.target);
      if (!parsed) {
        out.push_back(c.op + " " + c.target + ": " + parsed.error().message);
        continue;
      }
      q = *parsed;
    } else {
      q.path = c.target;
      q.op = c.op == "exec"                            ? bpf::Operation::exec
             : c.op == "stat"                          ? bpf::Operation::stat
             : c.op == "change" || c.access == "write" ? bpf::Operation::write
                                                       : bpf::Operation::read;
    }
    if (!bpf::decide(compiled, c.workspace, q).allowed)
      out.push_back(c.op + " " + c.target + (c.access.empty() ? "" : " " + c.access) + " (" + c.origin + ")");
  }
  return out;
}

int suggest_command(const SuggestArgs& a) {
  // Every input, merged: each observation keeps its own run's workspace, so
  // ${workspace} rules come out once for all of them.
  std::string root = a.workspace_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root.empty() || root.front() != '/') {
    say("--workspace-root must be an absolute directory, got " + quote(a.workspace_root));
    return 2;
  }
  std::vector<policy::Observation> items;
  std::optional<std::string> from_policy;
  std::string incomplete;
  uint64_t records = 0;
  for (const auto& path : a.inputs) {
    auto text = read_input(path);
    if (!text) {
      say(text.error().message);
      return 2;
    }
    auto obs = policy::read_observations(*text, path == "-" ? "stdin" : path,
                                         a.run_id.empty() ? std::nullopt : std::optional(a.run_id), root);
    if (!obs) {
      say(obs.error().message);
      return 2;
    }
    records += obs->records;
    if (!obs->complete) {
      say("warning: " + (path == "-" ? std::string("stdin") : path) + ": " + obs->incomplete +
          "; the draft allows only what these records show (record every operation with "
          "`agentcage run --mode audit --record --result FILE ...`)");
      if (incomplete.empty()) incomplete = obs->incomplete;
    }
    if (obs->policy && !from_policy) from_policy = obs->policy;
    if (items.empty())
      items = std::move(obs->items);
    else
      std::move(obs->items.begin(), obs->items.end(), std::back_inserter(items));
  }
  if (records == 0) say("warning: the input holds no denied or audited operation; the draft allows nothing");

  policy::DraftOptions o;
  o.name = a.name;
  o.collapse = a.collapse;
  o.workspace_root = root;
  o.source = a.inputs.size() == 1 ? a.inputs.front() : std::to_string(a.inputs.size()) + " inputs";
  o.from_policy = from_policy;
  if (!a.run_id.empty()) o.run_id = a.run_id;
  o.incomplete = incomplete;
  const policy::Draft draft = policy::draft_policy(items, o);

  // A draft no policy file may be is no draft: say so (its last note), and
  // print nothing of it.
  if (const size_t max = policy::ParseOptions{}.max_bytes; draft.yaml.size() > max) {
    say(draft.notes.empty() ? "the draft is too large" : draft.notes.back());
    return 2;
  }
  // The draft must load and allow what was observed: parsed and compiled
  // as `run` would, then each operation decided as the kernel would.
  policy::ParseOptions po;
  po.check_exec_exists = false;  // recorded on another host, maybe
  policy::ParseResult parsed = policy::parse_policy(draft.yaml, "<draft>", po);
  std::optional<bpf::CompiledPolicy> compiled;
  std::string compile_error;
  if (parsed.ok()) {
    if (auto c = bpf::compile(*parsed.policy))
      compiled = std::move(*c);
    else
      compile_error = c.error().message;
  }
  if (!compiled) {
    say("internal error: the draft does not load (please report it):");
    constexpr size_t kShown = 5;
    for (size_t i = 0; i < parsed.errors.size() && i < kShown; ++i)
      std::cerr << "  " << escape(parsed.errors[i].format(), 1000) << "\n";
    if (parsed.errors.size() > kShown) std::cerr << "  ... (" << parsed.errors.size() - kShown << " more)\n";
    if (!compile_error.empty()) std::cerr << "  " << escape(compile_error, 1000) << "\n";
    return 2;
  }
  const auto missing = unallowed(*compiled, draft.checks);

  if (a.output.empty() || a.output == "-") {
    std::cout << draft.yaml;
  } else {
    // A temporary file of our own (never one that was there: a symbolic
    // link planted in a shared directory is not followed), renamed over
    // FILE when complete.
    const std::string tmp = a.output + ".tmp";
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!out) {
      say("writing " + a.output + ": creating " + tmp + ": " + std::strerror(errno) +
          (errno == EEXIST ? " (remove it, or choose another FILE)" : ""));
      return 2;
    }
    size_t done = 0;
    while (done < draft.yaml.size()) {
      const ssize_t n = ::write(out.get(), draft.yaml.data() + done, draft.yaml.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    const bool written = done == draft.yaml.size() && ::fsync(out.get()) == 0;
    const int err = errno;
    out.reset();
    if (!written || std::rename(tmp.c_str(), a.output.c_str()) != 0) {
      say("writing " + a.output + ": " + std::strerror(written ? errno : err));
      std::remove(tmp.c_str());
      return 2;
    }
  }
  for (const auto& n : draft.notes) say("note: " + n);
  if (!missing.empty()) {
    say("internal error: the draft does not allow " + std::to_string(missing.size()) +
        " observed operation(s) (please report it):");
    for (const auto& m : missing) std::cerr << "  " << escape(m, 1000) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_policy(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* policy = app.add_subcommand("policy", "Work with policy files");
  policy->require_subcommand(1);
  auto* check = policy->add_subcommand("check", "Check that policy files load, without applying them");
  check->footer(
      "Check each policy FILE (YAML, apiVersion agentcage/v1) as `agentcage run` and the daemon\n"
      "load it, without applying it: syntax, unknown keys, types, paths (files rules are\n"
      "literal: '*', '?' and '[' are refused), CIDRs, ports, sizes, durations, that exec.allow\n"
      "programs exist, and\n"
      "the policy compiler (e.g. a program under a files.write rule, a destination covered by\n"
      "too many port ranges), so \"ok\" means the policy loads on this host. Every error is\n"
      "printed as FILE:LINE:COL: message.\n\n"
      "--dir DIR checks every policy file the daemon would load from DIR (a regular file\n"
      "NAME.yaml, not hidden) under the daemon's file-name rules too: NAME must be a valid\n"
      "policy name and match metadata.name. An empty DIR is valid (the daemon loads nothing).\n\n"
      "--json prints one JSON document (docs/schema/policy-check.schema.json) for CI:\n"
      "  {\"ok\": true|false, \"files\": [{\"file\", \"ok\", \"policy\", \"mode\", \"rules\",\n"
      "   \"errors\": [{\"file\", \"line\", \"column\", \"message\"}]}]}\n\n"
      "Exit status: 0 when every file is valid, 1 otherwise, 2 on a usage error (no FILE\n"
      "and no --dir) or when DIR cannot be listed (then no JSON document; the error is on\n"
      "stderr).");
  auto opts = std::make_shared<policy::CheckOptions>();
  check->add_option("FILE", opts->files, "Policy files to check")->type_name("FILE");
  check->add_option("--dir", opts->dir, "Also check every policy file of this policy directory")
      ->type_name("DIR");
  check->add_flag("--json", opts->json, "Print one JSON document instead of text");
  check->callback([opts] {
    if (opts->files.empty() && !opts->dir)
      throw CLI::ValidationError("policy check", "nothing to check: name policy FILEs, or --dir DIR");
  });
  commands.add(check,
               [opts] { return policy::check_command(*opts, bpf::compile_problem, std::cout, std::cerr); });

  auto* explain = policy->add_subcommand(
      "explain", "Say what a policy decides for one operation, and which rule decides it");
  explain->footer(with_defaults(
      "Answer as the kernel would for a process confined by POLICY (a file path, or a NAME in the\n"
      "policy directory: --policy-dir, else $AGENTCAGE_POLICY_DIR, else @POLICY_DIR@), from the\n"
      "same compiled rules the kernel's maps hold, and name the entry that decides (FILE:LINE:COL).\n\n"
      "OPERATION TARGET [ACCESS]:\n"
      "  open PATH [read|write]   opening a file (read when no ACCESS is given)\n"
      "  exec PATH                starting a program\n"
      "  stat PATH                stat, extended attributes (of what a symbolic link leads to)\n"
      "  lstat PATH               lstat, readlink (of a symbolic link itself)\n"
      "  change PATH              create, unlink, rename, link, mkdir, chmod, truncate, ...\n"
      "                           (of a symbolic link itself, not what it leads to)\n"
      "  connect ADDR:PORT[/tcp|/udp]   an inet destination (IPv6: [ADDR]:PORT; tcp by default)\n\n"
      "PATH is resolved as the kernel resolves it: symbolic links on the way are followed, and\n"
      "the last one too for open, exec and stat, so the answer is for the file they lead to\n"
      "(shown when it differs). ${workspace} rules apply with\n"
      "--workspace DIR. What the kernel decides before any rule is not shown here: cgroupfs,\n"
      "other processes' /proc entries, paths deeper than 64 components, detached mounts.\n\n"
      "Examples:\n"
      "  agentcage policy explain python-sandbox open /etc/passwd read\n"
      "  agentcage policy explain policies/python-sandbox.yaml exec /usr/bin/python3\n"
      "  agentcage policy explain llm-proxy-only connect 10.20.1.5:443/tcp\n\n"
      "Exit status: 0 allowed, 1 denied (in audit mode too: it would be reported), 2 usage\n"
      "error or a policy that does not load."));
  auto ex = std::make_shared<ExplainArgs>();
  explain->add_option("POLICY", ex->policy, "Policy file or NAME")->type_name("POLICY")->required();
  explain->add_option("OPERATION", ex->operation, "open, exec, stat, lstat, change or connect")
      ->type_name("OPERATION")
      ->required();
  explain->add_option("TARGET", ex->target, "Absolute path, or ADDR:PORT[/PROTO] for connect")
      ->type_name("TARGET")
      ->required();
  explain->add_option("ACCESS", ex->access, "open only: read (default) or write")->type_name("ACCESS");
  explain->add_option("--workspace", ex->workspace, "The directory ${workspace} rules refer to")
      ->type_name("DIR");
  explain->add_option("--policy-dir", ex->policy_dir, "Where a policy NAME is looked up")->type_name("DIR");
  explain->add_flag("--json", ex->json, "Print one JSON document instead of text");
  commands.add(explain, [ex] { return explain_command(*ex); });

  auto* suggest = policy->add_subcommand(
      "suggest", "Draft a minimal policy from what runs did (their result or audit log records)");
  suggest->footer(with_defaults(
      "Turn the decision records of one or more runs into a draft policy that allows what they\n"
      "did and nothing else, with a comment above each rule naming the operations that added it.\n"
      "The workflow (docs/policy.md): run the workload in audit mode with every record kept,\n"
      "draft, review, then enforce:\n\n"
      "  agentcage run --mode audit --record --result rec.json --policy base.yaml -- CMD\n"
      "  agentcage policy suggest rec.json -o mine.yaml\n"
      "  agentcage policy check mine.yaml && agentcage run --policy mine.yaml -- CMD\n\n"
      "INPUT: a run's result document (its \"recording\" from --record; without one only the\n"
      "first records of denials.records, and a warning says so) or the daemon's audit log\n"
      "(JSON lines; --run ID takes one run's lines; the log holds at most 256 records a second\n"
      "per run). - reads stdin. Several inputs are merged. Each run's own workspace is written\n"
      "as ${workspace}: a result's \"workspace\"; for a log line, --workspace-root DIR/RUN_ID\n"
      "(the root the daemon's host used; default @WORKSPACE_ROOT@).\n"
      "No rule is drafted at or above a workspace or DIR.\n\n"
      "What becomes a rule: exec -> exec.allow (the program, never its directory); opens,\n"
      "stats, watches and executable mappings -> files.read; opens for writing and changes ->\n"
      "files.write; connects -> network.allow (address/32, port, protocol; 0.0.0.0 and ::,\n"
      "which reach this host's own services, with a note). A directory listed, stat'ed or\n"
      "(outside the workspace) changed gets no rule of its own, a note: a rule on it would\n"
      "allow everything below it. Files read in one directory collapse into it from --collapse\n"
      "N files or subdirectories (default 3; 0: never; stats never count), never above\n"
      "/usr/lib-like depths, never to a hidden directory (/home/me/.ssh) and never under /etc,\n"
      "/proc, /sys, /dev, /run or /boot; writes collapse only in the workspace. Every\n"
      "directory rule says so in a comment. Nothing else is allowed: IPC, debugging, native\n"
      "code, listening sockets and denied system calls are listed as notes (stderr and the\n"
      "draft's closing comment), and the switches that would allow them are named, never\n"
      "turned on.\n\n"
      "The draft is checked before it is printed: it must load (parse and compile) and allow\n"
      "every observed operation it has a rule for, decided as `policy explain` decides.\n\n"
      "Exit status: 0 a draft was written; 1 the draft does not allow an observed operation (a\n"
      "bug: the draft is still written); 2 an input cannot be read or is not records (FILE:LINE\n"
      "says where), or the draft is larger than a policy file may be (collapse more) or does\n"
      "not load: nothing is written then."));
  auto sg = std::make_shared<SuggestArgs>();
  suggest->add_option("INPUT", sg->inputs, "Result documents or audit logs (- for stdin)")
      ->type_name("INPUT")
      ->required();
  suggest->add_option("--run", sg->run_id, "Only this run's records of an audit log")->type_name("ID");
  suggest->add_option("--name", sg->name, "The draft's metadata.name (default: suggested)")
      ->type_name("NAME");
  suggest->add_option("--collapse", sg->collapse, "Reads in one directory that make it one rule (0: never)")
      ->type_name("N");
  suggest->add_option("-o,--output", sg->output, "Write the draft to FILE instead of stdout")
      ->type_name("FILE");
  suggest
      ->add_option("--workspace-root", sg->workspace_root,
                   "Where the runs had their workspaces (a log's run RUN_ID: DIR/RUN_ID)")
      ->type_name("DIR");
  commands.add(suggest, [sg] { return suggest_command(*sg); });
}

}  // namespace agentcage::cli
