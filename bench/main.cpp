// SPDX-License-Identifier: Apache-2.0
// agentcage-bench: measures what the LSM programs cost, side by side in one
// run, and prints a table. Needs root and a kernel that runs BPF LSM
// programs; bench/run starts it on this host or in the VM. See bench/README.md.
#include <sys/utsname.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "policy/policy.h"
#include "util/log.h"

namespace agentcage::bench {
namespace {

// ---- section 1: per-hook program time -------------------------------------------

// Per hook: calls summed over the windows, and ns/call of each window that
// saw calls (the table shows their median: one preempted vCPU in a window
// would otherwise dominate a mean).
struct HookSide {
  uint64_t calls = 0;
  std::vector<double> ns_per_call;
};
struct HookCost {
  std::map<std::string, HookSide> unscoped, scoped;  // by hook
  unsigned windows = 0;
  unsigned scoped_failures = 0, unscoped_failures = 0;
  uint64_t scoped_denials = 0;
  std::string error;  // set when the section could not run
};

Result<std::map<std::string, ProgStat>> snapshot(const std::vector<uint32_t>& ids) {
  auto all = agentcage_programs();
  if (!all) return all.error();
  std::map<std::string, ProgStat> out;
  for (uint32_t id : ids) {
    auto it = all->find(id);
    if (it == all->end()) return Error{"bench: program " + std::to_string(id) + " disappeared", ENOENT};
    out[it->second.hook] = it->second;
  }
  return out;
}

uint64_t denials(bpf::Enforcer& e) {
  auto c = e.counters(Fixture::kSlot);
  if (!c) return 0;
  uint64_t n = 0;
  for (const auto& h : c->hooks) n += h.decisions[AC_DECISION_DENY];
  return n;
}

HookCost measure_hooks(Fixture& fx, unsigned iterations, unsigned windows) {
  HookCost hc;
  hc.windows = windows;
  auto stats = StatsEnabled::enable();
  if (!stats) {
    hc.error = stats.error().message;
    return hc;
  }
  // One window: the workload in `cg`, program stats read before and after.
  auto window = [&](const cgroup::Cgroup& cg, std::map<std::string, HookSide>& out,
                    unsigned& failures) -> Status {
    auto before = snapshot(fx.prog_ids());
    if (!before) return before.error();
    auto f = run_mixed_workload(cg.fd(), fx.workspace(), iterations);
    if (!f) return f.error();
    failures += *f;
    auto after = snapshot(fx.prog_ids());
    if (!after) return after.error();
    for (const auto& [hook, a] : *after) {
      const ProgStat& b = before->at(hook);
      uint64_t cnt = a.run_cnt - b.run_cnt, ns = a.run_time_ns - b.run_time_ns;
      HookSide& side = out[hook];
      side.calls += cnt;
      if (cnt) side.ns_per_call.push_back(static_cast<double>(ns) / static_cast<double>(cnt));
    }
    return Status::success();
  };
  uint64_t d0 = denials(*fx.enforcer());
  for (unsigned w = 0; w < windows; w++) {
    Status st = window(fx.unscoped(), hc.unscoped, hc.unscoped_failures);
    if (st.ok()) st = window(fx.scoped(), hc.scoped, hc.scoped_failures);
    if (!st.ok()) {
      hc.error = st.error().message;
      return hc;
    }
  }
  hc.scoped_denials = denials(*fx.enforcer()) - d0;
  return hc;
}

void print_hooks(const HookCost& hc, unsigned iterations) {
  say("\n1. Per-hook BPF program time (kernel.bpf_stats_enabled: run_time_ns / run_cnt)\n");
  say("   a mixed workload (x%u: 2 opens, create/truncate/chmod/rename/unlink, mkdir/rmdir,\n"
      "   TCP connect, UDP sendto, unix connect; fork+exec /usr/bin/true every 10th), run by an\n"
      "   unscoped process and by a scoped one whose policy allows all of it, alternately, %u windows\n"
      "   each; ns/call = median over the windows of run_time_ns/run_cnt\n\n",
      iterations, hc.windows);
  if (!hc.error.empty()) {
    say("   NOT MEASURED: %s\n", hc.error.c_str());
    return;
  }
  Table t({"hook", "unscoped calls", "ns/call", "scoped calls", "ns/call", "scoped/unscoped"});
  for (const auto& [hook, u] : hc.unscoped) {
    auto it = hc.scoped.find(hook);
    HookSide s = it == hc.scoped.end() ? HookSide{} : it->second;
    double un = median(u.ns_per_call), sc = median(s.ns_per_call);
    t.row({hook, std::to_string(u.calls), u.calls ? fmt("%.0f", un) : "-", std::to_string(s.calls),
           s.calls ? fmt("%.0f", sc) : "-", u.calls && s.calls && un > 0 ? fmt("%.1fx", sc / un) : "-"});
  }
  t.print();
  say("\n   goal on real hardware: scoped file_open <= 400 ns/call\n");
  say("   scoped workload: %u failed operations, %llu denials (both must be 0 for real rule lookups)\n",
      hc.scoped_failures, static_cast<unsigned long long>(hc.scoped_denials));
  if (hc.unscoped_failures) say("   unscoped workload: %u failed operations\n", hc.unscoped_failures);
  say("   calls: every invocation system-wide during the windows (the workload is the only busy process)\n");
}

// ---- section 2: unscoped overhead, A (nothing loaded) vs B (loaded + scopes) -----

struct Overhead {
  std::vector<double> a[kOpCount], b[kOpCount];
  std::vector<double> round_ratio[kOpCount];  // B/A of each round's medians
  unsigned failures = 0;
};

void print_overhead(const Overhead& o, const Options& opts) {
  say("\n2. Unscoped process: nothing loaded (A) vs programs loaded + %u live scopes (B)\n", opts.scopes);
  say("   %u rounds, A and B alternated (BAAB...); %u timed batches per op per phase;\n"
      "   %u ops per batch (fork+exec: %u); medians over all batches of a phase\n\n",
      opts.rounds, opts.batches, opts.iterations, std::max(1u, opts.iterations / opts.exec_divisor));
  Table t({"op (unscoped)", "A median", "B median", "B/A", "round B/A min..max", "A noise (IQR)", "goal"});
  for (int op = 0; op < kOpCount; op++) {
    double a = median(o.a[op]), b = median(o.b[op]);
    double lo = *std::min_element(o.round_ratio[op].begin(), o.round_ratio[op].end());
    double hi = *std::max_element(o.round_ratio[op].begin(), o.round_ratio[op].end());
    double iqr = (quantile(o.a[op], 0.75) - quantile(o.a[op], 0.25)) / a * 100;
    t.row({op_name(static_cast<Op>(op)), fmt_ns(a), fmt_ns(b), fmt("%.3fx", b / a),
           fmt("%.3f", lo) + ".." + fmt("%.3f", hi), fmt("%.1f%%", iqr), "<= 1.02x"});
  }
  t.print();
  say("\n   goal on real hardware: B/A <= 1.02 (an unscoped process pays about one map lookup per hook)\n");
  say("   A noise: interquartile range of the A batches / their median; a B/A inside it is noise\n");
  if (o.failures)
    say("   WARNING: %u operations failed in the loops; the times above are suspect\n", o.failures);
}

// ---- the A/B schedule both kernel sections share -----------------------------------

int run_kernel_sections(const Options& opts) {
  bool want_hooks = opts.sections.count("hooks") > 0;
  bool want_loops = opts.sections.count("unscoped") > 0;
  auto fx = Fixture::create(opts);
  if (!fx) {
    say("agentcage-bench: %s\n", fx.error().message.c_str());
    return 1;
  }
  const fs::path open_path = (*fx)->workspace() / "data.txt";
  Overhead o;
  HookCost hc;
  bool hooks_done = false;
  std::vector<double> load_times;
  unsigned rounds = want_loops ? opts.rounds : 1;
  const unsigned hook_iterations = std::max(1u, opts.iterations / 10);

  auto phase = [&](bool loaded, unsigned r, LoopSamples* out) -> Status {
    if (loaded && !(*fx)->enforcer()) {
      progress("round %u: loading the programs + %u scopes", r + 1, opts.scopes);
      if (auto st = (*fx)->load(); !st.ok()) return st;
      load_times.push_back((*fx)->last_load_seconds());
    } else if (!loaded && (*fx)->enforcer()) {
      progress("round %u: unloading", r + 1);
      (*fx)->unload();
    }
    if (want_loops) {
      progress("round %u: phase %s loops", r + 1, loaded ? "B" : "A");
      auto s = run_loops((*fx)->unscoped().fd(), open_path, opts);
      if (!s) return s.error();
      *out = *s;
      o.failures += s->failures;
      for (int op = 0; op < kOpCount; op++) {
        auto& dst = loaded ? o.b[op] : o.a[op];
        dst.insert(dst.end(), s->ns_per_op[op].begin(), s->ns_per_op[op].end());
      }
    }
    if (loaded && want_hooks && !hooks_done) {
      progress("per-hook program time (bpf_stats on)");
      hc = measure_hooks(**fx, hook_iterations, 5);
      hooks_done = true;
    }
    return Status::success();
  };

  for (unsigned r = 0; r < rounds; r++) {
    LoopSamples a, b;
    // BAAB BAAB ...: drift hits A and B alike, consecutive B phases share
    // one load, and a host that cannot load the programs fails at once.
    bool b_first = (r % 2) == 0;
    Status st = b_first ? phase(true, r, &b) : phase(!want_loops, r, &a);
    if (st.ok() && want_loops) st = b_first ? phase(false, r, &a) : phase(true, r, &b);
    if (!st.ok()) {
      say("agentcage-bench: %s\n", st.error().message.c_str());
      if (!(*fx)->enforcer())
        say("agentcage-bench: bench/run measures in the VM when this host cannot enforce\n");
      return 1;
    }
    if (want_loops)
      for (int op = 0; op < kOpCount; op++)
        o.round_ratio[op].push_back(median(b.ns_per_op[op]) / median(a.ns_per_op[op]));
  }
  (*fx)->unload();

  std::string loads;
  for (double s : load_times) loads += (loads.empty() ? "" : ", ") + fmt("%.1f s", s);
  say("program loads (verify + attach + %u scopes): %zu, took %s\n", opts.scopes, load_times.size(),
      loads.c_str());
  if (want_hooks) print_hooks(hc, hook_iterations);
  if (want_loops) print_overhead(o, opts);
  return (hc.error.empty() && o.failures == 0 && hc.scoped_failures == 0) ? 0 : 1;
}

// ---- section 3: the cost of a run --------------------------------------------------

// Median wall time of fork + exec + wait of three commands and of a call
// through the daemon, interleaved run by run (ABCD BCDA ...), so drift and
// noise hit all alike:
//   bare   /usr/bin/true
//   bwrap  bwrap --unshare-all --die-with-parent --ro-bind / / /usr/bin/true
//   run    agentcage run --policy bench/run-true.yaml -- /usr/bin/true
//   daemon Client.run(["/usr/bin/true"]) through `agentcage daemon`, timed
//          inside one long-lived Python client (bench/daemon_client.py)
// and, as a diagnostic of the emulator's cost, the four again at fixed
// addresses (bench/README.md, section 3).
struct RunCommand {
  std::string label;
  std::vector<std::string> argv;  // empty: through the daemon
  std::vector<double> ns;         // one sample per round
  std::string error;              // set when it could not run (then not timed)
  bool fixed_addresses = false;   // address randomization off (a diagnostic)
};

// A policy document's text under another name (metadata.name), the rest as
// it was; "" when the text is no mapping with metadata.
std::string renamed_policy(const std::string& text, const std::string& name) {
  try {
    YAML::Node doc = YAML::Load(text);
    if (!doc.IsMap() || !doc["metadata"].IsMap()) return "";
    doc["metadata"]["name"] = name;
    YAML::Emitter out;
    out << doc;
    return out.good() ? std::string(out.c_str()) + "\n" : "";
  } catch (const YAML::Exception&) {
    return "";
  }
}

bool pinned_set_present(const std::string& pin_root) {
  std::error_code ec;
  return fs::exists(pin_root, ec) && !fs::is_empty(pin_root, ec);
}

int run_cost_section(const Options& opts) {
  const unsigned rounds = opts.run_rounds;
  fs::path agentcage = agentcage_binary(opts);
  const std::string pin_root = bpf::SharedOptions{}.pin_root;
  std::vector<RunCommand> cmds = {
      {"bare: /usr/bin/true", {"/usr/bin/true"}, {}, {}},
      {"bwrap --unshare-all --die-with-parent --ro-bind / / /usr/bin/true",
       {"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "/usr/bin/true"},
       {},
       {}},
      {"agentcage run --policy " + opts.run_policy + " -- /usr/bin/true",
       {agentcage.string(), "run", "--policy", opts.run_policy, "--", "/usr/bin/true"},
       {},
       {}},
      {"daemon: Client.run([\"/usr/bin/true\"]) (Python, per call)", {}, {}, {}},
  };
  constexpr size_t kBare = 0, kBwrap = 1, kRun = 2, kDaemon = 3;
  // The diagnostic rows: the four again, with address randomization off
  // (bench/README.md, section 3).
  constexpr size_t kFixed = 4;
  for (auto [i, short_label] : {std::pair<size_t, const char*>{kBare, "/usr/bin/true"},
                                {kBwrap, "bwrap ... /usr/bin/true"},
                                {kRun, "agentcage run ... /usr/bin/true"},
                                {kDaemon, "daemon call"}}) {
    RunCommand fixed = cmds[i];
    fixed.label = std::string("fixed addresses: ") + short_label;
    fixed.fixed_addresses = true;
    cmds.push_back(std::move(fixed));
  }
  constexpr size_t kFixedBare = kFixed, kFixedBwrap = kFixed + 1, kFixedRun = kFixed + 2,
                   kFixedDaemon = kFixed + 3;

  say("\n3. The cost of a run: wall time of fork + exec + wait, and of a call through the daemon,\n"
      "   side by side\n");
  say("   %u rounds, one run of each per round, the order rotated every round (ABCDEFGH BCDEFGHA ...);\n"
      "   medians over the rounds\n\n",
      rounds);

  // The daemon path: a daemon of the bench's own with the same policy, and
  // one long-lived Python client that times each call inside itself; for
  // the diagnostic, a second daemon at fixed addresses with the policy
  // under a name of its own (each daemon is ready once its name is in a slot).
  BenchDaemon daemon, fixed_daemon;
  DaemonClient client, fixed_client;
  std::string policy_name, policy_text;
  {
    auto parsed = policy::load_policy_file(opts.run_policy);
    if (!parsed.ok()) {
      say("   NOT MEASURED: %s is not a valid policy\n", opts.run_policy.c_str());
      return 1;
    }
    policy_name = parsed.policy->name;
    std::ifstream in(opts.run_policy);
    policy_text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string fixed_name = policy_name + "-fixed";
  std::string fixed_text = renamed_policy(policy_text, fixed_name);
  if (auto renamed = policy::parse_policy(fixed_text, opts.run_policy);
      !renamed.ok() || renamed.policy->name != fixed_name)
    cmds[kFixedDaemon].error = "cannot rename the policy of " + opts.run_policy + " to " + fixed_name;
  auto start_daemon = [&](BenchDaemon& d, DaemonClient& c, RunCommand& cmd, const std::string& name,
                          const std::string& text) {
    if (!cmd.error.empty()) return;
    if (Status st = d.start(agentcage, name, text, 0, cmd.fixed_addresses); !st)
      cmd.error = st.error().message;
    else if (Status cs = c.start(d.socket(), name, d.dir() / "client.log"); !cs)
      cmd.error = cs.error().message;
  };
  start_daemon(daemon, client, cmds[kDaemon], policy_name, policy_text);
  start_daemon(fixed_daemon, fixed_client, cmds[kFixedDaemon], fixed_name, fixed_text);

  // Warm-up, untimed: the first `agentcage run` on a machine without the
  // shared programs loads, attaches and pins them (seconds under TCG); every
  // later run opens the pinned set. One run of each command also proves it
  // works before anything is timed.
  bool was_pinned = pinned_set_present(pin_root);
  auto time_one = [&](const RunCommand& c) {
    if (c.argv.empty()) return c.fixed_addresses ? fixed_client.call() : client.call();
    return time_command(c.argv, 1, c.fixed_addresses);
  };
  for (size_t i : {kRun, kBare, kBwrap, kDaemon, kFixedBare, kFixedBwrap, kFixedRun, kFixedDaemon}) {
    if (!cmds[i].error.empty()) continue;
    auto t = time_one(cmds[i]);
    if (!t) {
      cmds[i].error = t.error().message;
      continue;
    }
    if (i == kRun)
      say("   warm-up (untimed): one agentcage run, %.2f s; %s\n", *t / 1e9,
          was_pinned ? "the shared programs were already pinned"
                     : ("it loaded and pinned the shared programs in " + pin_root).c_str());
  }
  if (!cmds[kRun].error.empty()) {
    say("   NOT MEASURED: agentcage run fails: %s\n", cmds[kRun].error.c_str());
    return 1;
  }
  if (!cmds[kBare].error.empty()) {
    say("   NOT MEASURED: /usr/bin/true fails: %s\n", cmds[kBare].error.c_str());
    return 1;
  }
  if (!cmds[kBwrap].error.empty())
    say("   bwrap: not measured (%s; Debian package bubblewrap)\n", cmds[kBwrap].error.c_str());
  // A diagnostic that cannot be set up (address randomization cannot be
  // turned off, the second daemon does not start) is left out, and the
  // goals' rows are measured as ever. (A row that worked here and fails in
  // a timed round fails the section, as any row does.)
  bool diagnostic = true;
  for (size_t i : {kFixedBare, kFixedRun, kFixedDaemon})
    if (!cmds[i].error.empty()) {
      say("   diagnostic at fixed addresses: not measured (%s fails: %s)\n", cmds[i].label.c_str(),
          cmds[i].error.c_str());
      diagnostic = false;
      break;
    }
  if (!diagnostic) {
    for (size_t i : {kFixedBare, kFixedBwrap, kFixedRun, kFixedDaemon})
      if (cmds[i].error.empty()) cmds[i].error = "left out with the diagnostic";
    fixed_client.stop();
    fixed_daemon.stop();
  }
  if (!cmds[kDaemon].error.empty()) {
    say("   NOT MEASURED: runs through the daemon fail: %s\n", cmds[kDaemon].error.c_str());
    return 1;
  }

  for (unsigned r = 0; r < rounds; r++) {
    if (r % 10 == 0) progress("run cost: rounds %u..%u of %u", r + 1, std::min(rounds, r + 10), rounds);
    for (size_t k = 0; k < cmds.size(); k++) {
      RunCommand& c = cmds[(r + k) % cmds.size()];
      if (!c.error.empty()) continue;
      auto t = time_one(c);
      if (!t) {
        say("   %s failed in round %u: %s\n", c.label.c_str(), r + 1, t.error().message.c_str());
        return 1;
      }
      c.ns.push_back(*t);
    }
  }

  // Each row against the bare row of its own kind (fixed addresses or not).
  const double bare = median(cmds[kBare].ns);
  const double fixed_bare = cmds[kFixedBare].ns.empty() ? 0 : median(cmds[kFixedBare].ns);
  Table t({"command", "median", "p25..p75", "over bare", "/ bare"});
  for (const auto& c : cmds) {
    if (c.ns.empty()) {
      t.row({c.label, "-", "-", "-", "-"});
      continue;
    }
    double m = median(c.ns), b = c.fixed_addresses ? fixed_bare : bare;
    bool is_bare = &c == &cmds[kBare] || &c == &cmds[kFixedBare];
    t.row({c.label, fmt_ns(m), fmt_ns(quantile(c.ns, 0.25)) + ".." + fmt_ns(quantile(c.ns, 0.75)),
           is_bare ? "-" : "+" + fmt_ns(m - b), is_bare ? "1.00x" : fmt("%.2fx", m / b)});
  }
  t.print();
  const double run = median(cmds[kRun].ns);
  say("\n");
  if (!cmds[kBwrap].ns.empty()) {
    double bw = median(cmds[kBwrap].ns);
    say("   agentcage run / bwrap: %.2fx   goal: < 1 (below bubblewrap)\n", run / bw);
    say("   daemon call / bwrap:   %.2fx   goal: < 0.5 (below half of bubblewrap)\n",
        median(cmds[kDaemon].ns) / bw);
  }
  say("   agentcage run over bare: +%s   goal on real hardware: well under 1 ms\n",
      fmt_ns(run - bare).c_str());
  // The diagnostic: the same commands at fixed addresses. The goals are
  // judged on the rows above.
  if (!cmds[kFixedBwrap].ns.empty() && !cmds[kFixedRun].ns.empty() && !cmds[kFixedDaemon].ns.empty()) {
    const double fixed_bw = median(cmds[kFixedBwrap].ns);
    say("   diagnostic, fixed addresses: agentcage run / bwrap: %.2fx, daemon call / bwrap: %.2fx\n",
        median(cmds[kFixedRun].ns) / fixed_bw, median(cmds[kFixedDaemon].ns) / fixed_bw);
    say("   (address randomization off for the command, the daemon, and all they start: under TCG\n"
        "   a program at new addresses has its code translated again in each process, which costs\n"
        "   a large program more than a small one; on real hardware randomization costs nothing.\n"
        "   The goals are judged on the rows without it)\n");
  }
  say("   reference points: docker run about 0.5 s, a Firecracker microVM boot about 125 ms\n");
  say("   agentcage run: a cgroup with limits, a registered scope, a workspace, a sandbox uid,\n"
      "   clone3 into the cgroup, wait, cleanup; bwrap as root (namespaces, no setuid needed);\n"
      "   daemon: the same run started by the daemon's fork server, the call as the Python client\n"
      "   makes it (connect, request with three descriptors, the answer with the result)\n");

  // Throughput: N clients (threads of the client process, one connection
  // each) back to back.
  progress("run cost: %u concurrent clients for %.0f s", opts.run_clients, opts.run_throughput_seconds);
  auto tp = client.throughput(opts.run_clients, opts.run_throughput_seconds);
  if (!tp) {
    say("   throughput: NOT MEASURED: %s\n", tp.error().message.c_str());
    return 1;
  }
  say("\n   runs through the daemon with %u concurrent clients: %.1f runs/s (%llu runs in %.1f s, %llu "
      "errors)\n",
      opts.run_clients, static_cast<double>(tp->runs) / tp->seconds,
      static_cast<unsigned long long>(tp->runs), tp->seconds, static_cast<unsigned long long>(tp->errors));
  if (tp->errors) {
    say("   a run failed: %s\n", tp->first_error.c_str());
    return 1;
  }
  return 0;
}

// ---- sections ---------------------------------------------------------------------

// Sections that need no loaded programs and no fixture run after the kernel
// sections, selected with --sections NAME. They use time_command() from
// workload.cpp.
struct StandaloneSection {
  std::string name;
  std::string what;
  std::function<int(const Options&)> run;
};
std::vector<StandaloneSection> standalone_sections() {
  return {
      {"run", "wall time: agentcage run -- true vs true vs bwrap --unshare-all ... true", run_cost_section},
      {"events", "audit events/s agentcage daemon delivers with zero loss; overflow accounting",
       events_section},
      {"seccomp", "the run's seccomp filter: per run and per call, with vs without", seccomp_section},
      {"dns", "name resolution through agentcage vs direct; connect with ~10,000 pins vs none", dns_section}};
}

}  // namespace
}  // namespace agentcage::bench

int main(int argc, char** argv) {
  using namespace agentcage;
  using namespace agentcage::bench;
  if (argc > 1 && argv[1] == kWorkerFlag) return worker_main(argc, argv);
  if (argc == 2 && argv[1] == kDnsWorkerFlag) return dns_worker_main();
  Options opts;
  std::string sections = "hooks,unscoped,run,seccomp";
  std::string environment;
  CLI::App app{"agentcage-bench: BPF LSM cost, measured side by side in one run (see bench/README.md)"};
  app.add_option("--iterations", opts.iterations, "ops per timed batch (fork+exec: /40; hook workload: /10)")
      ->check(CLI::Range(10u, 10'000'000u));
  app.add_option("--rounds", opts.rounds, "A/B rounds (BAAB order)")->check(CLI::Range(1u, 100u));
  app.add_option("--batches", opts.batches, "timed batches per op per phase")->check(CLI::Range(1u, 1000u));
  app.add_option("--scopes", opts.scopes, "live scopes in phase B")->check(CLI::Range(0u, 10000u));
  app.add_option(
      "--sections", sections,
      "comma-separated: hooks,unscoped,run,seccomp,events,dns (default: hooks,unscoped,run,seccomp)");
  app.add_option("--run-rounds", opts.run_rounds, "run section: rounds (one run of each command per round)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--run-clients", opts.run_clients,
                 "run section: concurrent clients of the daemon for the throughput line")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--run-throughput-seconds", opts.run_throughput_seconds,
                 "run section: how long the concurrent clients run")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--run-policy", opts.run_policy,
                 "run section: the policy for agentcage run (must allow /usr/bin/true)");
  app.add_option("--agentcage", opts.agentcage,
                 "run/events sections: the agentcage binary (default: ../agentcage next to this binary)");
  app.add_option("--events-seconds", opts.events_seconds, "events section: generator seconds per rate step")
      ->check(CLI::Range(1.0, 600.0));
  app.add_option("--events-start-rate", opts.events_start_rate,
                 "events section: first step's denied opens/s (doubled each step)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--dns-queries", opts.dns_queries, "dns section: queries per batch")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--dns-connects", opts.dns_connects, "dns section: connects per batch")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--dns-rounds", opts.dns_rounds, "dns section: rounds of its four batches per phase (ABBA)")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--dns-fill-runs", opts.dns_fill_runs, "dns section: runs holding pins in phase B")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--dns-fill-addresses", opts.dns_fill_addresses,
                 "dns section: addresses each of those runs pins (A records of one name)")
      ->check(CLI::Range(1u, 4000u));
  app.add_flag("--dns-all-cpus", opts.dns_all_cpus,
               "dns section: run its processes on any CPU (default: all on CPU 0)");
  app.add_option("--environment", environment, "printed in the header (bench/run says e.g. 'qemu TCG')");
  CLI11_PARSE(app, argc, argv);

  std::stringstream ss(sections);
  for (std::string s; std::getline(ss, s, ',');)
    if (!s.empty()) opts.sections.insert(s);
  auto extra = standalone_sections();
  for (const auto& s : opts.sections) {
    bool known = s == "hooks" || s == "unscoped";
    for (const auto& e : extra) known = known || e.name == s;
    if (!known) {
      std::string names = "hooks, unscoped";
      for (const auto& e : extra) names += ", " + e.name;
      std::fprintf(stderr, "agentcage-bench: unknown section '%s' (known: %s)\n", s.c_str(), names.c_str());
      return 2;
    }
  }

  log::set_level(log::Level::warn);
  utsname u{};
  ::uname(&u);
  say("agentcage bench: kernel %s, %ld CPUs%s%s\n", u.release, ::sysconf(_SC_NPROCESSORS_ONLN),
      environment.empty() ? "" : ", ", environment.c_str());
  if (::geteuid() != 0) {
    say("agentcage-bench: needs root (BPF, cgroups); use bench/run, which runs it here or in the VM\n");
    return 1;
  }

  int rc = 0;
  if (opts.sections.count("hooks") || opts.sections.count("unscoped")) rc = run_kernel_sections(opts);
  for (const auto& e : extra)
    if (opts.sections.count(e.name)) rc = std::max(rc, e.run(opts));
  return rc;
}
