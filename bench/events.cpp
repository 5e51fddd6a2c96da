// SPDX-License-Identifier: Apache-2.0
// The events section: how many denial records per second `agentcage daemon`
// (the ring buffer's only consumer) delivers to its audit log with zero loss,
// and the overflow accounting (produced = delivered + lost). See
// bench/README.md, "Section 4".
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench.h"

namespace agentcage::bench {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kPolicyName = "evbench";
// What the generator opens; the policy allows only /usr/lib, so every open of
// it is a denial (file_open, default_deny) and one ring-buffer record.
constexpr const char* kDeniedPath = "/etc/hostname";

std::string policy_yaml() {
  return std::string(
             "apiVersion: agentcage/v1\n"
             "kind: Policy\n"
             "metadata: {name: ") +
         kPolicyName +
         "}\n"
         "spec:\n"
         "  mode: enforce\n"
         "  files:\n"
         "    read: [/usr/lib]\n";
}

// A loopback port nothing listens on right now (bound, read, closed).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// GET /metrics from the daemon; "" on failure.
std::string scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  auto body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// Sum of the samples of `name` whose label set contains `label` ("" = all).
double metric_sum(const std::string& text, const std::string& name, const std::string& label) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    auto sp = line.rfind(' ');
    if (sp != std::string::npos) sum += std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return sum;
}

// Counts the audit log's lines of one scope, reading only what was appended
// since the last call (the daemon writes whole lines).
class AuditTail {
 public:
  AuditTail(fs::path path, uint64_t scope_id)
      : path_(std::move(path)), needle_("\"scope_id\":" + std::to_string(scope_id) + ",") {}
  uint64_t lines() {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return count_;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline yet: a partial line, read it next time
      offset_ += line.size() + 1;
      if (line.find(needle_) != std::string::npos) count_++;
    }
    return count_;
  }

 private:
  fs::path path_;
  std::string needle_;
  uint64_t offset_ = 0;
  uint64_t count_ = 0;
};

struct Step {
  double target = 0;  // opens/s asked of the generator (0: as fast as it can)
  bool consumer_stopped = false;
  double seconds = 0;  // the generator's wall time
  uint64_t attempts = 0, not_denied = 0;
  uint64_t produced = 0;                        // kernel deny counter delta of the slot
  uint64_t sent = 0, lost = 0;                  // kernel: records submitted / not taken
  uint64_t delivered = 0;                       // audit log lines of the scope
  double metric_events = -1, metric_lost = -1;  // /metrics deltas (-1: not scraped)
  double drain_seconds = 0;                     // generator end -> everything sent is in the log
  bool drained = false;
};

struct Ctx {
  bpf::Enforcer* e;
  uint32_t slot;
  const cgroup::Cgroup* cg;
  AuditTail* audit;
  int port;
  pid_t daemon;
};

uint64_t deny_count(bpf::Enforcer& e, uint32_t slot) {
  auto c = e.counters(slot);
  if (!c) return 0;
  uint64_t n = 0;
  for (const auto& h : c->hooks) n += h.decisions[AC_DECISION_DENY];
  return n;
}

// The generator: `rate` denied opens per second (paced on an absolute
// schedule; 0 = unpaced) for `seconds`, in the scope. Reports attempts and
// opens that were not denied through a pipe.
Result<Step> run_step(const Ctx& c, double rate, double seconds, bool stop_consumer) {
  Step s;
  s.target = rate;
  s.consumer_stopped = stop_consumer;
  const uint64_t lines0 = c.audit->lines();
  const uint64_t deny0 = deny_count(*c.e, c.slot);
  auto sent0 = c.e->stat(AC_STAT_EVENTS_SENT), lost0 = c.e->stat(AC_STAT_EVENTS_LOST);
  if (!sent0 || !lost0) return Error{"bench: reading the kernel event stats", EIO};
  const std::string m0 = scrape(c.port);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::from_errno("bench: pipe");
  if (stop_consumer) ::kill(c.daemon, SIGSTOP);
  auto t0 = Clock::now();
  auto pid = cgroup::spawn_in_cgroup(c.cg->fd(), [&]() -> int {
    uint64_t res[2] = {0, 0};  // attempts, not denied
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    const int64_t start_ns = start.tv_sec * 1'000'000'000LL + start.tv_nsec;
    const int64_t end_ns = start_ns + static_cast<int64_t>(seconds * 1e9);
    const double interval = rate > 0 ? 1e9 / rate : 0;
    for (uint64_t i = 0;; i++) {
      int64_t due = start_ns + static_cast<int64_t>(static_cast<double>(i) * interval);
      if (due >= end_ns) break;
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      int64_t now_ns = now.tv_sec * 1'000'000'000LL + now.tv_nsec;
      if (now_ns >= end_ns) break;
      if (due > now_ns) {
        timespec at{static_cast<time_t>(due / 1'000'000'000LL), static_cast<long>(due % 1'000'000'000LL)};
        ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr);
      }
      int fd = ::open(kDeniedPath, O_RDONLY | O_CLOEXEC);
      res[0]++;
      if (fd >= 0) {
        ::close(fd);
        res[1]++;
      } else if (errno != EACCES) {
        res[1]++;
      }
    }
    return ::write(fds[1], res, sizeof res) == static_cast<ssize_t>(sizeof res) ? 0 : 1;
  });
  ::close(fds[1]);
  if (!pid) {
    ::close(fds[0]);
    if (stop_consumer) ::kill(c.daemon, SIGCONT);
    return pid.error().wrap("bench: starting the generator");
  }
  uint64_t res[2] = {0, 0};
  ssize_t got = ::read(fds[0], res, sizeof res);
  ::close(fds[0]);
  auto st = cgroup::wait_for(*pid);
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The generator is gone: nothing more is produced. Read the kernel's
  // counters now (they are final), then let the consumer drain.
  const uint64_t deny1 = deny_count(*c.e, c.slot);
  auto sent1 = c.e->stat(AC_STAT_EVENTS_SENT), lost1 = c.e->stat(AC_STAT_EVENTS_LOST);
  if (stop_consumer) ::kill(c.daemon, SIGCONT);
  if (!st || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0 || got != static_cast<ssize_t>(sizeof res))
    return Error{"bench: the generator failed", EIO};
  if (!sent1 || !lost1) return Error{"bench: reading the kernel event stats", EIO};
  s.attempts = res[0];
  s.not_denied = res[1];
  s.produced = deny1 - deny0;
  s.sent = *sent1 - *sent0;
  s.lost = *lost1 - *lost0;

  // Drain: every record the kernel submitted must reach the audit log (the
  // daemon may still be working through the ring buffer and its write
  // buffer). Done when the log has `sent` new lines of the scope.
  auto drain0 = Clock::now();
  auto deadline = drain0 + 120s;
  while (true) {
    s.delivered = c.audit->lines() - lines0;
    if (s.delivered >= s.sent || Clock::now() > deadline) break;
    std::this_thread::sleep_for(50ms);
  }
  s.drain_seconds = std::chrono::duration<double>(Clock::now() - drain0).count();
  s.drained = s.delivered == s.sent;
  // The metrics: the lost counter is exported on the daemon's 1 s tick.
  if (!m0.empty()) {
    const std::string label = std::string("policy=\"") + kPolicyName + "\"";
    double ev0 = metric_sum(m0, "agentcage_events_total", label);
    double lo0 = metric_sum(m0, "agentcage_events_lost_total", "");
    auto mdeadline = Clock::now() + 10s;
    while (true) {
      std::string m1 = scrape(c.port);
      s.metric_events = metric_sum(m1, "agentcage_events_total", label) - ev0;
      s.metric_lost = metric_sum(m1, "agentcage_events_lost_total", "") - lo0;
      if ((s.metric_events == static_cast<double>(s.delivered) &&
           s.metric_lost == static_cast<double>(s.lost)) ||
          Clock::now() > mdeadline)
        break;
      std::this_thread::sleep_for(250ms);
    }
  }
  return s;
}

bool accounting_ok(const Step& s) { return s.produced == s.delivered + s.lost; }

std::string num(double v, const char* f = "%.0f") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Starts the daemon, waits for its policy, runs the steps, cleans up.
class EventsBench {
 public:
  explicit EventsBench(const Options& opts) : opts_(opts) {}
  ~EventsBench() { cleanup(); }
  int run();

 private:
  Status setup();
  void cleanup();
  void print(const std::vector<Step>& steps, const Step* forced) const;

  const Options& opts_;
  BenchDaemon daemon_;
  int port_ = -1;
  bpf::Enforcer* e_ = nullptr;
  uint32_t slot_ = 0;
  cgroup::Cgroup cg_;
  bool scope_added_ = false;
};

Status EventsBench::setup() {
  port_ = free_port();
  if (port_ <= 0) return Error{"bench: no free loopback port", EADDRINUSE};
  if (Status st = daemon_.start(agentcage_binary(opts_), kPolicyName, policy_yaml(), port_); !st) return st;
  e_ = daemon_.enforcer();
  slot_ = *daemon_.slot();
  // /metrics answers too.
  const auto deadline = Clock::now() + 60s;
  while (scrape(port_).empty()) {
    if (Clock::now() > deadline)
      return Error{"bench: the daemon's /metrics does not answer (log: " + daemon_.log().string() + ")",
                   ETIMEDOUT};
    std::this_thread::sleep_for(200ms);
  }

  auto root = cgroup::find_cgroup2_root();
  if (!root) return root.error().wrap("bench: no cgroup v2 hierarchy");
  auto cg = cgroup::Cgroup::create(*root, *root, "agentcage-bench-events-" + std::to_string(::getpid()));
  if (!cg) return cg.error().wrap("bench");
  cg_ = std::move(cg).value();
  // An attachment on the daemon's named slot, as `attach` makes one.
  if (auto st = e_->with_lock([&] {
        return e_->add_scope({cg_.fd(), cg_.id(), cg_.level()}, cg_.id(), slot_);
      });
      !st.ok())
    return st.error().wrap("bench: registering the generator's scope");
  scope_added_ = true;
  return Status::success();
}

void EventsBench::cleanup() {
  if (scope_added_ && e_) {
    (void)e_->with_lock([&] { return e_->remove_scope({cg_.fd(), cg_.id(), cg_.level()}); });
    scope_added_ = false;
  }
  if (cg_.id()) {
    (void)cg_.remove();
    cg_ = cgroup::Cgroup();
  }
  daemon_.stop();
  e_ = nullptr;
}

void EventsBench::print(const std::vector<Step>& steps, const Step* forced) const {
  say("  %-22s %9s %9s %9s %9s %7s %11s %8s %10s %9s\n", "target opens/s", "produced", "produced/s",
      "delivered", "deliv./s", "lost", "metrics e/l", "drain", "not denied", "p = d + l");
  say("  %s\n", std::string(118, '-').c_str());
  auto row = [&](const Step& s, const std::string& label) {
    std::string m = s.metric_events < 0 ? "-" : num(s.metric_events) + "/" + num(s.metric_lost);
    say("  %-22s %9llu %9s %9llu %9s %7llu %11s %7.2fs %10llu %9s\n", label.c_str(),
        static_cast<unsigned long long>(s.produced), num(static_cast<double>(s.produced) / s.seconds).c_str(),
        static_cast<unsigned long long>(s.delivered),
        num(static_cast<double>(s.delivered) / s.seconds).c_str(), static_cast<unsigned long long>(s.lost),
        m.c_str(), s.drain_seconds, static_cast<unsigned long long>(s.not_denied),
        accounting_ok(s) ? "OK" : "MISMATCH");
  };
  for (const auto& s : steps) row(s, s.target > 0 ? num(s.target) : "unpaced (max)");
  if (forced) row(*forced, "unpaced, daemon STOPPED");
}

int EventsBench::run() {
  const double seconds = opts_.events_seconds;
  say("\n4. Audit events: denial records per second delivered by agentcage daemon with zero loss,\n"
      "   and the overflow accounting (UNDER TCG EMULATION: absolute rates say nothing about real "
      "hardware)\n");
  say("   a generator in a scope opens %s (denied) at a target rate for %.0f s per step, doubling;\n"
      "   produced = the slot's kernel deny counter, lost = AC_STAT_EVENTS_LOST, delivered = the daemon's\n"
      "   audit log lines of the scope, read after the generator exited and the daemon drained\n\n",
      kDeniedPath, seconds);
  if (auto st = setup(); !st.ok()) {
    say("   NOT MEASURED: %s\n", st.error().message.c_str());
    std::ifstream log(daemon_.log());
    for (std::string line; std::getline(log, line);) say("   daemon: %s\n", line.c_str());
    say("   ready: pinned set %s, policy slot %u, /metrics %s\n", e_ ? "open" : "not open", slot_,
        scrape(port_).empty() ? "not answering" : "answering");
    return 1;
  }
  say("   daemon ready in %.1f s (policy %s in slot %u, metrics 127.0.0.1:%d); ring buffer 1 MiB,\n"
      "   record %zu bytes\n\n",
      daemon_.start_seconds(), kPolicyName, slot_, port_, sizeof(ac_event_decision));
  AuditTail audit(daemon_.dir() / "audit.jsonl", cg_.id());
  Ctx c{e_, slot_, &cg_, &audit, port_, daemon_.pid()};
  std::vector<Step> steps;
  int rc = 0;
  const Step* zero_loss = nullptr;
  const Step* overload = nullptr;
  bool generator_limit = false;
  for (double rate = opts_.events_start_rate; rate <= 4'096'000; rate *= 2) {
    std::fprintf(stderr, "  .. events: %.0f opens/s for %.0f s\n", rate, seconds);
    auto s = run_step(c, rate, seconds, false);
    if (!s) {
      say("   step %.0f/s failed: %s\n", rate, s.error().message.c_str());
      rc = 1;
      break;
    }
    steps.push_back(*s);
    if (s->lost > 0) break;
    // The generator could not keep up with its own schedule: the next
    // doubling would measure nothing new. One unpaced step, then stop.
    if (static_cast<double>(s->produced) / s->seconds < 0.9 * rate) {
      generator_limit = true;
      break;
    }
  }
  if (rc == 0 && generator_limit && steps.back().lost == 0) {
    std::fprintf(stderr, "  .. events: unpaced for %.0f s\n", seconds);
    auto s = run_step(c, 0, seconds, false);
    if (s)
      steps.push_back(*s);
    else
      rc = 1;
  }
  // The forced overflow: the consumer is SIGSTOPped while the generator runs
  // unpaced, so the ring buffer must fill; SIGCONT after the kernel counters
  // are read.
  Step forced;
  bool have_forced = false;
  if (rc == 0) {
    std::fprintf(stderr, "  .. events: forced overflow (daemon stopped) for %.0f s\n", seconds);
    auto s = run_step(c, 0, seconds, true);
    if (s) {
      forced = *s;
      have_forced = true;
    } else {
      rc = 1;
    }
  }
  print(steps, have_forced ? &forced : nullptr);
  for (const auto& s : steps) {
    if (s.lost == 0 && s.drained &&
        (!zero_loss || static_cast<double>(s.delivered) / s.seconds >
                           static_cast<double>(zero_loss->delivered) / zero_loss->seconds))
      zero_loss = &s;
    if (s.lost > 0 && !overload) overload = &s;
  }
  say("\n");
  if (zero_loss)
    say("   highest sustained rate with zero loss: %.0f events/s delivered (%s step; drained %.2f s after "
        "the generator)\n",
        static_cast<double>(zero_loss->delivered) / zero_loss->seconds,
        zero_loss->target > 0 ? (num(zero_loss->target) + "/s").c_str() : "unpaced",
        zero_loss->drain_seconds);
  else
    say("   no step ran without loss\n");
  if (overload)
    say("   overload at %s opens/s: produced %llu = delivered %llu + lost %llu: %s\n",
        num(overload->target).c_str(), static_cast<unsigned long long>(overload->produced),
        static_cast<unsigned long long>(overload->delivered), static_cast<unsigned long long>(overload->lost),
        accounting_ok(*overload) ? "OK" : "MISMATCH");
  else if (generator_limit)
    say("   no loss up to the generator's own limit: the consumer kept up with everything one process\n"
        "   could produce here\n");
  if (have_forced)
    say("   forced overflow (daemon stopped): produced %llu = delivered %llu + lost %llu: %s\n",
        static_cast<unsigned long long>(forced.produced), static_cast<unsigned long long>(forced.delivered),
        static_cast<unsigned long long>(forced.lost), accounting_ok(forced) ? "OK" : "MISMATCH");
  bool all_ok = true;
  for (const auto& s : steps) all_ok = all_ok && accounting_ok(s) && s.drained && s.not_denied == 0;
  if (have_forced)
    all_ok = all_ok && accounting_ok(forced) && forced.drained && forced.not_denied == 0 && forced.lost > 0;
  say("   accounting on every step (produced = delivered + lost, all sent records delivered, every open "
      "denied): %s\n",
      all_ok ? "OK" : "MISMATCH");
  say("   metrics e/l: agentcage_events_total{policy=\"%s\"} / agentcage_events_lost_total deltas from "
      "/metrics\n",
      kPolicyName);
  if (!all_ok) rc = 1;
  cleanup();
  return rc;
}

}  // namespace

int events_section(const Options& opts) {
  EventsBench b(opts);
  return b.run();
}

}  // namespace agentcage::bench
