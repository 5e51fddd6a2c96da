// SPDX-License-Identifier: Apache-2.0
// The DNS section (issue 13's benchmark), side by side in one run:
//   - name resolution: the same query loop run directly against dnsmasq and
//     inside `agentcage run` with a domain policy (answered by the run's
//     resolver, which forwards to dnsmasq and pins the answer);
//   - connect cost: from that run, connects to the address its resolver
//     pinned and to an address a CIDR rule allows, with no other pins (A)
//     and with ~10,000 pins held by 100 other runs (B), in ABBA order.
// The pins are made by the product: the other runs resolve a name with 100
// A records through their own resolvers. See bench/README.md, section 6.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "bench.h"
#include "util/unique_fd.h"

namespace agentcage::bench {

namespace {

using namespace std::chrono_literals;

constexpr const char* kIface = "ac-dns-bench";        // dummy interface with the two addresses below
constexpr const char* kPinnedAddr = "198.18.0.2";     // api.bench.test: reached through a pin
constexpr const char* kCidrAddr = "198.18.1.2";       // reached through a cidr rule
constexpr const char* kName = "api.bench.test";       // the measured run's name
constexpr const char* kFillName = "fill.bench.test";  // the filling runs' name: many A records
constexpr unsigned kFillWave = 10;                    // filling runs started at once

// ---- a child that answers one line per line -------------------------------------

class Peer {
 public:
  Peer() = default;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() { stop(); }

  Status start(std::string label, const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const fs::path& log) {
    label_ = std::move(label);
    log_ = log;
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return Error::from_errno("bench: pipe");
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      return Error::from_errno("bench: pipe");
    }
    pid_ = spawn(argv, env, in[0], out[1], log);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (pid_ < 0) return Error::from_errno("bench: fork for " + label_);
    return Status::success();
  }

  Result<std::string> read_line(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{from_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0)
        return Error{label_ + ": no answer within " + std::to_string(timeout.count() / 1000) +
                         " s (log: " + log_.string() + ")",
                     ETIMEDOUT};
      char chunk[512];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Error{label_ + " ended early (log: " + log_.string() + ")", EPIPE};
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  Result<std::string> ask(const std::string& line, std::chrono::milliseconds timeout) {
    const std::string msg = line + "\n";
    if (::write(to_, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()))
      return Error::from_errno(label_ + ": writing a command");
    return read_line(timeout);
  }

  // End of input: the worker exits, and so does its run.
  void close_input() {
    if (to_ >= 0) ::close(to_);
    to_ = -1;
  }

  // Its exit status (a signal as 128+N), once it ended within `timeout`;
  // else SIGTERM (a run ends as on any signal), then SIGKILL.
  Result<int> wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return Error{label_ + ": not running", ESRCH};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        end(pid_, SIGTERM);
        return Error{label_ + ": did not end within " + std::to_string(timeout.count() / 1000) +
                         " s (log: " + log_.string() + ")",
                     ETIMEDOUT};
      }
      std::this_thread::sleep_for(20ms);
    }
    pid_ = -1;
    if (from_ >= 0) ::close(from_);
    from_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  void stop() {
    close_input();
    if (pid_ > 0) static_cast<void>(wait(10s));
    if (from_ >= 0) ::close(from_);
    from_ = -1;
  }
  const std::string& label() const { return label_; }

 private:
  std::string label_;
  fs::path log_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buf_;
};

// A worker's answer: `ok MEDIAN_NS FAILURES ANSWERS ERROR`.
struct Answer {
  double median_ns = 0;
  unsigned failures = 0, answers = 0;
  std::string error;
};
Result<Answer> parse_answer(const Peer& p, const std::string& cmd, const std::string& line) {
  std::istringstream in(line);
  std::string ok;
  Answer a;
  in >> ok >> a.median_ns >> a.failures >> a.answers;
  std::getline(in >> std::ws, a.error);
  if (ok != "ok" || !in.eof()) return Error{p.label() + ": '" + cmd + "' answered '" + line + "'", EPROTO};
  if (a.failures)
    return Error{
        p.label() + ": '" + cmd + "': " + std::to_string(a.failures) + " failed, the first: " + a.error, EIO};
  return a;
}

Result<Answer> command(Peer& p, const std::string& cmd, std::chrono::milliseconds timeout = 300s) {
  auto line = p.ask(cmd, timeout);
  if (!line) return line.error();
  return parse_answer(p, cmd, *line);
}

// ---- the environment: addresses, dnsmasq, policies -----------------------------

// A port nothing listens on now (the kernel's choice for `type` on `addr`);
// with `also_udp`, free for UDP as well.
Result<uint16_t> free_port(const char* addr, bool also_udp) {
  for (int attempt = 0; attempt < 20; attempt++) {
    UniqueFd t(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, addr, &a.sin_addr);
    socklen_t len = sizeof a;
    if (!t || ::bind(t.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(t.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return Error::from_errno(std::string("bench: binding a TCP socket on ") + addr);
    if (!also_udp) return ntohs(a.sin_port);
    UniqueFd u(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (u && ::bind(u.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return ntohs(a.sin_port);
  }
  return Error{std::string("bench: no port free for TCP and UDP on ") + addr, EADDRINUSE};
}

std::string policy_yaml(const std::string& name, const fs::path& worker, const std::string& domain,
                        uint16_t port, bool with_cidr) {
  std::string y = "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: " + name +
                  "\nspec:\n  mode: enforce\n  exec:\n    allow: [" + worker.string() +
                  "]\n  files:\n    read: [/usr/lib, /etc/ld.so.cache]\n  network:\n    allow:\n"
                  "      - {domain: " +
                  domain + ", ports: [" + std::to_string(port) + "], protocol: tcp}\n";
  if (with_cidr)
    y += "      - {cidr: " + std::string(kCidrAddr) + "/32, ports: [" + std::to_string(port) +
         "], protocol: tcp}\n";
  return y;
}

// ac_pins of every loaded agentcage set (there is one: the pinned set the
// runs share), read, never written: entries and the scopes they belong to.
struct PinCount {
  size_t pins = 0, scopes = 0, maps = 0;
};
Result<PinCount> count_pins() {
  PinCount c;
  std::set<uint64_t> scopes;
  for (uint32_t id = 0;;) {
    if (bpf_map_get_next_id(id, &id) != 0) {
      if (errno == ENOENT) break;
      return Error::from_errno("bench: bpf_map_get_next_id");
    }
    UniqueFd fd(bpf_map_get_fd_by_id(id));
    if (!fd) continue;  // gone in between
    bpf_map_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) return Error::from_errno("bench: map info");
    if (std::strcmp(info.name, "ac_pins") != 0 || info.key_size != sizeof(ac_pin_key)) continue;
    c.maps++;
    ac_pin_key key{}, next{};
    for (const void* prev = nullptr; bpf_map_get_next_key(fd.get(), prev, &next) == 0; prev = &key) {
      key = next;
      c.pins++;
      scopes.insert(key.scope_id);
    }
  }
  c.scopes = scopes.size();
  return c;
}

// What the section creates, removed in reverse by the destructor.
class DnsEnv {
 public:
  DnsEnv() = default;
  DnsEnv(const DnsEnv&) = delete;
  DnsEnv& operator=(const DnsEnv&) = delete;
  ~DnsEnv() {
    for (auto& p : fillers) p->close_input();  // all end at once
    fillers.clear();
    measured.stop();
    direct.stop();
    end(dnsmasq_, SIGTERM);
    if (iface_) (void)!std::system((std::string("ip link del ") + kIface + " 2>/dev/null").c_str());
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }

  Status create(const Options& opts) {
    if (!fs::exists("/usr/sbin/dnsmasq"))
      return Error{"setup: /usr/sbin/dnsmasq is missing (Debian package dnsmasq-base; scripts/install-deps)",
                   ENOENT};
    char tmpl[] = "/tmp/agentcage-bench-dns-XXXXXX";
    if (!::mkdtemp(tmpl)) return Error::from_errno("setup: mkdtemp /tmp/agentcage-bench-dns-XXXXXX");
    dir = tmpl;
    std::error_code ec;
    worker = fs::canonical("/proc/self/exe", ec);
    if (ec) return Error{"setup: where this binary is: " + ec.message(), ec.value()};

    // The addresses connects go to: local (a dummy interface), so a connect
    // to a port nothing listens on is refused at once, and not loopback,
    // which a resolver's answer never pins.
    (void)!std::system((std::string("ip link del ") + kIface + " 2>/dev/null").c_str());
    const std::string ip = std::string("ip link add ") + kIface + " type dummy && ip link set " + kIface +
                           " up && ip addr add " + kPinnedAddr + "/32 dev " + kIface + " && ip addr add " +
                           kCidrAddr + "/32 dev " + kIface;
    if (std::system(ip.c_str()) != 0)
      return Error{"setup: could not add the dummy interface " + std::string(kIface) + " with " +
                       kPinnedAddr + " and " + kCidrAddr + " (`" + ip + "` failed)",
                   EIO};
    iface_ = true;

    auto port = free_port("0.0.0.0", false);
    if (!port) return port.error().wrap("setup: the connect port");
    connect_port = *port;
    auto dport = free_port("127.0.0.1", true);
    if (!dport) return dport.error().wrap("setup: dnsmasq's port");
    dns_port = *dport;

    // The zone: the measured name (one address) and the filling runs' name
    // (opts.dns_fill_addresses addresses in 198.19.0.0/16, never reached).
    {
      std::ofstream hosts(dir / "hosts");
      hosts << kPinnedAddr << " " << kName << "\n";
      for (unsigned i = 0; i < opts.dns_fill_addresses; i++)
        hosts << "198.19." << i / 250 << "." << i % 250 + 1 << " " << kFillName << "\n";
      std::ofstream(dir / "resolv.conf") << "nameserver 127.0.0.1@" << dns_port << "\n";
      std::ofstream(dir / "measured.yaml")
          << policy_yaml("bench-dns-measured", worker, kName, connect_port, true);
      std::ofstream(dir / "fill.yaml")
          << policy_yaml("bench-dns-fill", worker, kFillName, connect_port, false);
      if (!hosts) return Error{"setup: writing " + (dir / "hosts").string(), EIO};
    }
    dnsmasq_ = spawn({"/usr/sbin/dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                      "--no-hosts", "--addn-hosts=" + (dir / "hosts").string(), "--no-poll",
                      "--bind-interfaces", "--listen-address=127.0.0.1", "--port=" + std::to_string(dns_port),
                      "--user=root", "--local-ttl=3600", "--log-facility=" + (dir / "dnsmasq.log").string()},
                     {}, -1, -1, dir / "dnsmasq.out");
    if (dnsmasq_ < 0) return Error::from_errno("setup: fork for dnsmasq");

    // The direct side: the worker outside every scope, asking dnsmasq; up
    // when dnsmasq answers it.
    if (Status st = direct.start("the unscoped worker", {worker.string(), std::string(kDnsWorkerFlag)}, {},
                                 dir / "direct.log");
        !st)
      return st.error().wrap("setup");
    if (auto r = direct.read_line(60s); !r) return r.error().wrap("setup");
    const std::string probe = "query 127.0.0.1 " + std::to_string(dns_port) + " " + kName + " 1";
    for (int i = 0;; i++) {
      auto a = command(direct, probe, 10s);
      if (a && a->answers == 1) break;
      if (i == 50)
        return Error{"setup: dnsmasq does not answer on 127.0.0.1:" + std::to_string(dns_port) +
                         " (log: " + (dir / "dnsmasq.log").string() + ")",
                     EIO};
      std::this_thread::sleep_for(200ms);
    }
    return Status::success();
  }

  // `agentcage run --policy FILE -- WORKER --worker-dns`, its resolver
  // forwarding to dnsmasq.
  Status start_run(Peer& p, const std::string& label, const fs::path& agentcage, const fs::path& policy,
                   const fs::path& log) const {
    const std::vector<std::string> argv = {agentcage.string(),
                                           "run",
                                           "--policy",
                                           policy.string(),
                                           "--timeout",
                                           "30m",
                                           "--",
                                           worker.string(),
                                           std::string(kDnsWorkerFlag)};
    const std::vector<std::string> env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                          "AGENTCAGE_RESOLV_CONF=" + (dir / "resolv.conf").string()};
    return p.start(label, argv, env, log);
  }

  fs::path dir, worker;
  uint16_t connect_port = 0, dns_port = 0;
  Peer direct, measured;
  std::vector<std::unique_ptr<Peer>> fillers;

 private:
  pid_t dnsmasq_ = -1;
  bool iface_ = false;
};

// ---- the measurement ---------------------------------------------------------------

enum DnsOp { kDirect = 0, kThrough, kPinned, kCidr, kDnsOps };
const char* const kOpLabel[kDnsOps] = {
    "resolution: direct to dnsmasq (per query)",
    "resolution: through agentcage (per query)",
    "connect: pinned address (per connect)",
    "connect: cidr-allowed address (per connect)",
};

struct Side {
  std::vector<double> wall[kDnsOps];  // the median of each batch
  std::vector<double> prog[kDnsOps];  // socket_connect program ns/call of each batch
  uint64_t prog_calls[kDnsOps] = {};
  PinCount pins;
};

// socket_connect's run_cnt and run_time_ns, summed over the loaded sets.
Result<ProgStat> connect_program() {
  auto all = agentcage_programs();
  if (!all) return all.error();
  ProgStat s;
  for (const auto& [id, p] : *all)
    if (p.hook == "socket_connect") {
      s.run_cnt += p.run_cnt;
      s.run_time_ns += p.run_time_ns;
    }
  return s;
}

class Measure {
 public:
  Measure(DnsEnv& env, const Options& opts) : env_(env), opts_(opts) {}

  std::string cmd(DnsOp op, bool warm) const {
    const unsigned q = warm ? 5 : opts_.dns_queries, c = warm ? 50 : opts_.dns_connects;
    switch (op) {
      case kDirect:
        return "query 127.0.0.1 " + std::to_string(env_.dns_port) + " " + kName + " " + std::to_string(q);
      case kThrough:
        return "query 127.0.0.1 53 " + std::string(kName) + " " + std::to_string(q);
      case kPinned:
        return "connect " + std::string(kPinnedAddr) + " " + std::to_string(env_.connect_port) + " " +
               std::to_string(c);
      default:
        return "connect " + std::string(kCidrAddr) + " " + std::to_string(env_.connect_port) + " " +
               std::to_string(c);
    }
  }

  // One batch; `side` null: warm-up, not recorded.
  Status batch(DnsOp op, Side* side) {
    Peer& p = op == kDirect ? env_.direct : env_.measured;
    const std::string c = cmd(op, side == nullptr);
    const bool connect = op == kPinned || op == kCidr;
    std::unique_ptr<StatsEnabled> stats;
    ProgStat before;
    if (connect && side && stats_ok_) {
      auto s = StatsEnabled::enable();
      auto b = s ? connect_program() : Result<ProgStat>(s.error());
      if (!s || !b) {
        stats_ok_ = false;
        stats_error_ = s ? b.error().message : s.error().message;
      } else {
        stats = std::move(*s);
        before = *b;
      }
    }
    auto a = command(p, c);
    if (!a) return a.error();
    if ((op == kDirect || op == kThrough) && a->answers != 1)
      return Error{
          p.label() + ": '" + c + "': the answer has " + std::to_string(a->answers) + " A records, not 1",
          EPROTO};
    if (!side) return Status::success();
    side->wall[op].push_back(a->median_ns);
    if (stats) {
      auto after = connect_program();
      if (!after) return after.error();
      const uint64_t n = after->run_cnt - before.run_cnt;
      side->prog_calls[op] += n;
      if (n)
        side->prog[op].push_back(static_cast<double>(after->run_time_ns - before.run_time_ns) /
                                 static_cast<double>(n));
    }
    return Status::success();
  }

  // `rounds` rounds of the four batches, the order rotated every round.
  Status phase(Side& side, unsigned& round) {
    auto pins = count_pins();
    if (!pins) return pins.error();
    side.pins = *pins;
    for (unsigned r = 0; r < opts_.dns_rounds; r++, round++)
      for (int k = 0; k < kDnsOps; k++)
        if (Status st = batch(static_cast<DnsOp>((round + k) % kDnsOps), &side); !st) return st;
    return Status::success();
  }

  bool stats_ok() const { return stats_ok_; }
  const std::string& stats_error() const { return stats_error_; }

 private:
  DnsEnv& env_;
  const Options& opts_;
  bool stats_ok_ = true;
  std::string stats_error_;
};

// opts.dns_fill_runs runs, kFillWave started at a time, each resolving the
// filling name once (its resolver pins every address) and then idle.
Status fill(DnsEnv& env, const Options& opts, const fs::path& agentcage) {
  for (unsigned first = 0; first < opts.dns_fill_runs; first += kFillWave) {
    const unsigned last = std::min(opts.dns_fill_runs, first + kFillWave);
    for (unsigned i = first; i < last; i++) {
      auto p = std::make_unique<Peer>();
      const std::string label = "filling run " + std::to_string(i + 1);
      if (Status st = env.start_run(*p, label, agentcage, env.dir / "fill.yaml",
                                    env.dir / ("fill-" + std::to_string(i + 1) + ".log"));
          !st)
        return st;
      env.fillers.push_back(std::move(p));
    }
    for (unsigned i = first; i < last; i++) {
      Peer& p = *env.fillers[i];
      if (auto r = p.read_line(300s); !r) return r.error();
      auto a = command(p, "query 127.0.0.1 53 " + std::string(kFillName) + " 1", 120s);
      if (!a) return a.error();
    }
  }
  return Status::success();
}

Status unfill(DnsEnv& env) {
  for (auto& p : env.fillers) p->close_input();
  for (auto& p : env.fillers) {
    auto st = p->wait(300s);
    if (!st) return st.error();
    if (*st != 0) return Error{p->label() + " exited " + std::to_string(*st), EIO};
  }
  env.fillers.clear();
  return Status::success();
}

std::string ratio(double b, double a) { return a > 0 && b > 0 ? fmt("%.3fx", b / a) : "-"; }

// Phases A1 B1 B2 A2 (ABBA); A and B pool the batches of their two phases.
void print_tables(const Side (&ph)[4], const Options& opts, const Measure& m) {
  Side a, b;
  for (int op = 0; op < kDnsOps; op++)
    for (int i = 0; i < 4; i++) {
      Side& to = (i == 0 || i == 3) ? a : b;
      to.wall[op].insert(to.wall[op].end(), ph[i].wall[op].begin(), ph[i].wall[op].end());
      to.prog[op].insert(to.prog[op].end(), ph[i].prog[op].begin(), ph[i].prog[op].end());
      to.prog_calls[op] += ph[i].prog_calls[op];
    }
  Table t({"op", "A1", "B1", "B2", "A2", "A", "B", "B/A"});
  auto row = [&](const std::string& label, bool prog, int op) {
    auto v = [&](const Side& s) {
      const auto& x = prog ? s.prog[op] : s.wall[op];
      return x.empty() ? std::string("-") : prog ? fmt("%.0f", median(x)) : fmt_ns(median(x));
    };
    const auto& xa = prog ? a.prog[op] : a.wall[op];
    const auto& xb = prog ? b.prog[op] : b.wall[op];
    t.row({label, v(ph[0]), v(ph[1]), v(ph[2]), v(ph[3]), v(a), v(b),
           xa.empty() || xb.empty() ? "-" : ratio(median(xb), median(xa))});
  };
  for (int op = 0; op < kDnsOps; op++) row(kOpLabel[op], false, op);
  row("socket_connect program, pinned (ns/call)", true, kPinned);
  row("socket_connect program, cidr (ns/call)", true, kCidr);
  t.print();
  auto rel = [&](const Side& s, DnsOp x, DnsOp y, bool prog) {
    const auto& vx = prog ? s.prog[x] : s.wall[x];
    const auto& vy = prog ? s.prog[y] : s.wall[y];
    return vx.empty() || vy.empty() ? 0.0 : median(vx) / median(vy);
  };
  auto line = [&](const char* what, DnsOp x, DnsOp y, bool prog) {
    const double ra = rel(a, x, y, prog), rb = rel(b, x, y, prog);
    if (ra <= 0 || rb <= 0) return;
    say("   %-48s A %7.3fx   B %7.3fx   B/A %6.3fx\n", what, ra, rb, rb / ra);
  };
  say("\n");
  line("resolution through agentcage / direct:", kThrough, kDirect, false);
  line("connect to a pinned address / cidr-allowed:", kPinned, kCidr, false);
  line("socket_connect program, pinned / cidr-allowed:", kPinned, kCidr, true);
  say("\n   ac_pins at the start of A1: %zu pins of %zu scopes; B1: %zu of %zu; B2: %zu of %zu; A2: %zu of "
      "%zu\n",
      ph[0].pins.pins, ph[0].pins.scopes, ph[1].pins.pins, ph[1].pins.scopes, ph[2].pins.pins,
      ph[2].pins.scopes, ph[3].pins.pins, ph[3].pins.scopes);
  say("   A1 B1 B2 A2: the phases in the order they ran; A, B: their batches pooled. Each value is a\n"
      "   median over batches (%u rounds of the four batches per phase, the order rotated every round)\n"
      "   of each batch's median op (%u queries, %u connects per batch)\n",
      opts.dns_rounds, opts.dns_queries, opts.dns_connects);
  say("   X / Y lines: the two ops measured in the same phases; their B/A is the change the other runs'\n"
      "   pins (and processes) bring to X beyond what they bring to Y\n");
  if (!m.stats_ok())
    say("   socket_connect program time not measured: %s\n", m.stats_error().c_str());
  else
    say("   program time: kernel.bpf_stats_enabled on only during the connect batches (calls in A: pinned\n"
        "   %llu, cidr %llu; every socket_connect on the machine in those windows)\n",
        static_cast<unsigned long long>(a.prog_calls[kPinned]),
        static_cast<unsigned long long>(a.prog_calls[kCidr]));
}

}  // namespace

int dns_section(const Options& opts) {
  const fs::path agentcage = agentcage_binary(opts);
  const unsigned expected_fill = opts.dns_fill_runs * opts.dns_fill_addresses;
  say("\n6. DNS: name resolution through agentcage vs direct; connect to a pinned address with\n"
      "   %u pins held by %u other runs (B) vs none (A), side by side\n",
      expected_fill, opts.dns_fill_runs);
  say("   dnsmasq on 127.0.0.1 is the upstream; one long-lived worker in an agentcage run with a\n"
      "   domain rule (%s) and a cidr rule (%s), one outside every scope; the other runs each\n"
      "   resolve %s (%u A records), which their resolvers pin\n\n",
      kName, kCidrAddr, kFillName, opts.dns_fill_addresses);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto fail = [](const std::string& what, const Error& e) {
    say("   NOT MEASURED: %s: %s\n", what.c_str(), e.message.c_str());
    return 1;
  };

  // Under emulation a wakeup that crosses to an idle CPU can cost
  // milliseconds, at random; a query through agentcage hops across three
  // processes (worker, runner, dnsmasq), a direct one across two. On one
  // CPU (inherited by every process the section starts) each side pays only
  // its own work. --dns-all-cpus leaves the affinity as it is.
  if (!opts.dns_all_cpus) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0)
      return fail("setup", Error::from_errno("sched_setaffinity to CPU 0"));
    say("   every process of this section runs on CPU 0 (--dns-all-cpus: any CPU)\n");
  }
  DnsEnv env;
  if (Status st = env.create(opts); !st) return fail("setup", st.error());
  if (Status st = env.start_run(env.measured, "the measured run", agentcage, env.dir / "measured.yaml",
                                env.dir / "measured.log");
      !st)
    return fail("setup", st.error());
  if (auto r = env.measured.read_line(300s); !r) return fail("starting the measured run", r.error());
  say("   setup: dnsmasq on 127.0.0.1:%u, the measured run started, %.1f s\n", env.dns_port, elapsed());

  // Warm-up, untimed: each batch once, the first query through agentcage
  // makes the pin the pinned connects need.
  Measure m(env, opts);
  for (DnsOp op : {kDirect, kThrough, kPinned, kCidr})
    if (Status st = m.batch(op, nullptr); !st) return fail("warm-up", st.error());

  Side ph[4];  // A1 B1 B2 A2
  unsigned round = 0;
  progress("dns: phase A1 (no other pins)");
  if (Status st = m.phase(ph[0], round); !st) return fail("phase A1", st.error());
  progress("dns: starting %u runs that pin %u addresses each", opts.dns_fill_runs, opts.dns_fill_addresses);
  const double f0 = elapsed();
  if (Status st = fill(env, opts, agentcage); !st) return fail("filling ac_pins", st.error());
  const double fill_s = elapsed() - f0;
  auto held = count_pins();
  if (!held) return fail("counting pins", held.error());
  if (held->pins < expected_fill)
    return fail("filling ac_pins",
                Error{std::to_string(opts.dns_fill_runs) + " runs hold " + std::to_string(held->pins) +
                          " pins, expected at least " + std::to_string(expected_fill),
                      EIO});
  progress("dns: phases B1, B2 (%zu pins of %zu scopes)", held->pins, held->scopes);
  if (Status st = m.phase(ph[1], round); !st) return fail("phase B1", st.error());
  if (Status st = m.phase(ph[2], round); !st) return fail("phase B2", st.error());
  progress("dns: ending the %u runs", opts.dns_fill_runs);
  const double u0 = elapsed();
  if (Status st = unfill(env); !st) return fail("ending the filling runs", st.error());
  const double unfill_s = elapsed() - u0;
  progress("dns: phase A2");
  if (Status st = m.phase(ph[3], round); !st) return fail("phase A2", st.error());

  env.measured.close_input();
  auto status = env.measured.wait(120s);
  if (!status) return fail("ending the measured run", status.error());
  if (*status != 0)
    return fail("the measured run", Error{"exited " + std::to_string(*status) +
                                              " (log: " + (env.dir / "measured.log").string() + ")",
                                          EIO});

  print_tables(ph, opts, m);
  say("   filling: %u runs started and resolved in %.1f s, ended in %.1f s; the section took %.0f s\n",
      opts.dns_fill_runs, fill_s, unfill_s, elapsed());
  return 0;
}

}  // namespace agentcage::bench
