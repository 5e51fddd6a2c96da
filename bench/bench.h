// SPDX-License-Identifier: Apache-2.0
// agentcage-bench: shared pieces of the benchmark binary.
//
// The binary measures, in one process and one kernel boot, side by side:
//   hooks     per-hook BPF program time (bpf_stats run_time_ns / run_cnt) for
//             a workload run by an unscoped and by a scoped process;
//   unscoped  open/close, connect and fork+exec loops of an unscoped process
//             with nothing loaded (A) vs programs loaded + N live scopes (B),
//             A and B rounds interleaved.
//   run       wall time of `agentcage run -- /usr/bin/true` vs bare
//             /usr/bin/true vs `bwrap --unshare-all ... /usr/bin/true`,
//             interleaved run by run (a standalone section in main.cpp,
//             timed with time_command()).
//   events    denial records per second `agentcage daemon` delivers with
//             zero loss, and produced = delivered + lost at overload
//             (a standalone section, events.cpp).
//   seccomp   the run's seccomp filter per run and per call, with vs
//             without (a standalone section, seccomp.cpp).
//   dns       name resolution through a run's resolver vs direct, and
//             connects to a pinned address with ~10,000 other pins vs none
//             (a standalone section, dns.cpp).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "util/result.h"

namespace agentcage::bench {

namespace fs = std::filesystem;

struct Options {
  unsigned iterations = 1000;                      // ops per timed batch (open/close, connect)
  unsigned exec_divisor = 40;                      // fork+exec batches run iterations/exec_divisor ops
  unsigned rounds = 10;                            // A/B rounds, BAAB order (one program load per two rounds)
  unsigned batches = 3;                            // timed batches per op per phase
  unsigned scopes = 100;                           // live scopes during phase B
  unsigned run_rounds = 60;                        // run section: rounds of bare / bwrap / agentcage run
  std::string run_policy = "bench/run-true.yaml";  // run section: policy allowing /usr/bin/true
  unsigned run_clients = 8;                        // run section: concurrent daemon clients (throughput)
  double run_throughput_seconds = 10;              // run section: how long they run
  std::string agentcage;      // run and events sections: agentcage binary ("" = next to this binary's dir)
  double events_seconds = 5;  // events section: generator time per step
  double events_start_rate = 500;     // events section: first step's opens/s (doubled per step)
  unsigned dns_queries = 100;         // dns section: queries per batch
  unsigned dns_connects = 500;        // dns section: connects per batch
  unsigned dns_rounds = 3;            // dns section: rounds of the four batches per phase (ABBA)
  unsigned dns_fill_runs = 100;       // dns section: runs holding pins in phase B
  unsigned dns_fill_addresses = 100;  // dns section: addresses each of them pins
  bool dns_all_cpus = false;          // dns section: leave the CPU affinity as it is (default: CPU 0 only)
  std::set<std::string> sections;
};

// ---- statistics -------------------------------------------------------------

// ---- output and time (output.cpp) -----------------------------------------------

// printf to stdout, flushed: every section's report.
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Progress to stderr (merged into the same stream in the VM), marked "  .. ".
void progress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// printf of one number with format `f`.
std::string fmt(const char* f, double v);
// A duration: ns below 10 us, us below 10 ms, ms above.
std::string fmt_ns(double ns);
// CLOCK_MONOTONIC in nanoseconds.
uint64_t now_ns();

double median(std::vector<double> v);
double quantile(std::vector<double> v, double q);

// Left-aligned first column, right-aligned others.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void row(std::vector<std::string> r) { rows_.push_back(std::move(r)); }
  void print() const {
    std::vector<size_t> w;
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); i++) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    for (size_t ri = 0; ri < rows_.size(); ri++) {
      std::string line = "  ";
      for (size_t i = 0; i < rows_[ri].size(); i++) {
        const std::string& c = rows_[ri][i];
        std::string pad(w[i] - c.size(), ' ');
        line += i == 0 ? c + pad : "  " + pad + c;
      }
      say("%s\n", line.c_str());
      if (ri == 0) {
        size_t total = 0;
        for (size_t x : w) total += x + 2;
        say("  %s\n", std::string(total - 2, '-').c_str());
      }
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// ---- the environment both phases share --------------------------------------

// Cgroups, a workspace and a policy that exist for the whole run; the
// Enforcer exists only in phase B. Everything is removed by the destructor.
class Fixture {
 public:
  static Result<std::unique_ptr<Fixture>> create(const Options& opts);
  ~Fixture();
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  // Phase B: load + attach the programs, install the policy, register the
  // live scopes (and the hook-cost scope). Records which program ids this
  // load created.
  Status load();
  // Phase A: detach and unload everything.
  void unload();
  bpf::Enforcer* enforcer() { return enforcer_.get(); }
  const std::vector<uint32_t>& prog_ids() const { return prog_ids_; }
  double last_load_seconds() const { return load_seconds_; }

  // The cgroup the unscoped workloads run in: a sibling of the scopes at the
  // same depth, so the hooks do the full unscoped check (one array lookup,
  // one ancestor-id read, one hash lookup that misses).
  const cgroup::Cgroup& unscoped() const { return unscoped_; }
  // The scope the scoped hook-cost workload runs in, and its workspace.
  const cgroup::Cgroup& scoped() const { return scoped_; }
  const fs::path& workspace() const { return workspace_; }
  const std::string& policy_yaml() const { return policy_yaml_; }
  static constexpr uint32_t kSlot = 1;

 private:
  Fixture() = default;
  Options opts_;
  fs::path cg_root_;
  fs::path base_dir_;   // mkdtemp: workspaces
  fs::path workspace_;  // the scoped workload's workspace
  std::string policy_yaml_;
  bpf::CompiledPolicy policy_;
  cgroup::Cgroup parent_;
  cgroup::Cgroup unscoped_;
  cgroup::Cgroup scoped_;
  std::vector<cgroup::Cgroup> live_;  // the N live scopes
  std::unique_ptr<bpf::Enforcer> enforcer_;
  std::vector<uint32_t> prog_ids_;
  double load_seconds_ = 0;
};

// ---- workloads (run in a child placed in a cgroup) ----------------------------

// stat and sendto: the metadata and ingress hooks an unscoped process
// passes through (inode_getattr; socket_sendmsg, which looks for a run's
// private socket at a loopback destination).
enum class Op { open_close = 0, connect = 1, fork_exec = 2, stat = 3, sendto = 4 };
constexpr int kOpCount = 5;
const char* op_name(Op op);

// Per-op nanoseconds of `batches` timed batches of each op, ops interleaved
// batch by batch. Runs in a child spawned into `cgroup_fd`; open+close opens
// `open_path` read-only.
struct LoopSamples {
  std::vector<double> ns_per_op[kOpCount];
  unsigned failures = 0;  // operations that did not behave as expected
};
Result<LoopSamples> run_loops(int cgroup_fd, const fs::path& open_path, const Options& opts);

// run_loops() runs the loops in a fresh exec of this binary:
//   agentcage-bench --worker-loops OPEN_PATH N N_EXEC BATCHES
// with the result pipe on fd 3. main() hands such an invocation to
// worker_main().
inline constexpr std::string_view kWorkerFlag = "--worker-loops";
int worker_main(int argc, char** argv);

// The mixed hook-cost workload: `iterations` rounds of opens, workspace
// changes, connect, sendto, unix connect, and every 10th round fork+exec.
// Returns the number of operations that failed (0 expected: the scoped
// policy allows everything the workload does).
Result<unsigned> run_mixed_workload(int cgroup_fd, const fs::path& workspace, unsigned iterations);

// Median wall time (ns) of fork + exec `argv` + wait, `runs` times; fails if
// any run exits non-zero. For the run benchmark (issue 4). With
// `fixed_addresses`, the command and everything it starts run with address
// randomization off (personality ADDR_NO_RANDOMIZE), a diagnostic of the
// emulator's cost (bench/README.md, section 3).
Result<double> time_command(const std::vector<std::string>& argv, unsigned runs,
                            bool fixed_addresses = false);
// Address randomization off for this process and all it starts
// (personality ADDR_NO_RANDOMIZE: inherited across fork and exec, cleared
// only by a set-id exec). False if the kernel refused.
bool fix_addresses();

// The agentcage binary the run and events sections start: --agentcage, else
// build/agentcage next to this binary's directory.
fs::path agentcage_binary(const Options& opts);

// fork + exec `argv` under `env` (daemon.cpp); stdin from `in` (or as is),
// stdout to `out` (or the log), stderr appended to the log file; with
// `fixed_addresses`, under fix_addresses().
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int in, int out,
            const fs::path& log, bool fixed_addresses = false);
// SIGCONT + `sig` to `pid`, then wait for it; sets `pid` to -1. No-op for
// pid <= 0.
void end(pid_t& pid, int sig);

// An `agentcage daemon` of the bench's own (daemon.cpp): a temporary
// directory with one policy (NAME.yaml), its own control socket, state
// directory and audit log; metrics on 127.0.0.1:PORT, or off with 0.
// start() returns once the policy is in its named slot; stop() (and the
// destructor) ends the daemon and removes the slot and the directory. With
// `fixed_addresses`, the daemon and every run it starts are under
// fix_addresses() (section 3's diagnostic).
class BenchDaemon {
 public:
  BenchDaemon() = default;
  ~BenchDaemon();
  BenchDaemon(const BenchDaemon&) = delete;
  BenchDaemon& operator=(const BenchDaemon&) = delete;
  Status start(const fs::path& agentcage, const std::string& name, const std::string& policy_yaml,
               int metrics_port, bool fixed_addresses = false);
  void stop();
  pid_t pid() const { return pid_; }
  const fs::path& dir() const { return dir_; }
  fs::path socket() const { return dir_ / "control.sock"; }
  fs::path log() const { return dir_ / "daemon.log"; }
  bpf::Enforcer* enforcer() const { return enforcer_.get(); }
  std::optional<uint32_t> slot() const { return slot_; }
  double start_seconds() const { return start_seconds_; }

 private:
  fs::path dir_;
  std::string name_;
  pid_t pid_ = -1;
  std::unique_ptr<bpf::Enforcer> enforcer_;
  std::optional<uint32_t> slot_;
  double start_seconds_ = 0;
};

// One long-lived client process of a daemon, bench/daemon_client.py with
// clients/python (paths relative to the working directory, the repository):
// each call is timed inside it, as an agent framework calls agentcage.
class DaemonClient {
 public:
  DaemonClient() = default;
  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;
  Status start(const fs::path& socket, const std::string& policy, const fs::path& log);
  // One run of /usr/bin/true under the policy: the call's time in ns.
  Result<double> call();
  struct Throughput {
    uint64_t runs = 0, errors = 0;
    double seconds = 0;
    std::string first_error;
  };
  // `clients` threads, one Client each, calling back to back for `seconds`.
  Result<Throughput> throughput(unsigned clients, double seconds);
  void stop();

 private:
  std::string ask(const std::string& line);
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// The events section (events.cpp): starts `agentcage daemon` with a
// temporary config, steps a denied-open generator's rate up until the ring
// buffer loses records, prints the table. 0 measured and every step's
// accounting exact, 1 otherwise.
int events_section(const Options& opts);

// The seccomp section (seccomp.cpp): the run's filter per run (fork + exec
// true with and without it) and per call (an allowed call with and without
// it; a denied call notified vs failed in the kernel). Needs no BPF LSM.
int seccomp_section(const Options& opts);

// The DNS section (dns.cpp): name resolution through a run's resolver vs
// directly against dnsmasq, and connects to a pinned address with other
// runs' pins filling ac_pins vs none. 0 measured, 1 a setup step or an
// operation failed.
int dns_section(const Options& opts);
// Its worker (dns_worker.cpp), `agentcage-bench --worker-dns`: commands on
// stdin, one answer line each on stdout. main() hands such an invocation to
// dns_worker_main().
inline constexpr std::string_view kDnsWorkerFlag = "--worker-dns";
int dns_worker_main();

// ---- BPF program statistics ----------------------------------------------------

// Turns on kernel.bpf_stats_enabled while alive (BPF_ENABLE_STATS, falling
// back to the sysctl, restored on destruction).
class StatsEnabled {
 public:
  static Result<std::unique_ptr<StatsEnabled>> enable();
  ~StatsEnabled();
  StatsEnabled(const StatsEnabled&) = delete;
  StatsEnabled& operator=(const StatsEnabled&) = delete;

 private:
  StatsEnabled() = default;
  int fd_ = -1;             // BPF_ENABLE_STATS fd
  std::string old_sysctl_;  // set when the sysctl was written instead
};

struct ProgStat {
  std::string hook;  // LSM hook name (file_open), or the program name
  uint64_t run_time_ns = 0;
  uint64_t run_cnt = 0;
};
// LSM programs whose names start with "ac_": every id from
// bpf_prog_get_next_id, keyed by id.
Result<std::map<uint32_t, ProgStat>> agentcage_programs();

}  // namespace agentcage::bench
