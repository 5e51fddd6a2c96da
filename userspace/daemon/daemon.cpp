// SPDX-License-Identifier: Apache-2.0
// The daemon as a composition of its parts: the main loop (loop.h) owns the
// epoll and the tick; the policy directory (policy_dir.h, watched by
// policy_watch.h), the event sink (event_sink.h) and the control server
// (control_server.h) register their fds with it and are called. This file
// wires them together: startup, the tick, the requests the control server
// hands over (attach, detach, status, the run notifications, reload), and
// the hooks that keep the counters right around slot changes.
#include "daemon/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "bpf/lsm.h"
#include "bpf/names.h"
#include "bpf/record.h"
#include "cgroup/cgroup.h"
#include "cgroup/delegation.h"
#include "control/protocol.h"
#include "daemon/bindings.h"
#include "daemon/containers.h"
#include "daemon/control_server.h"
#include "daemon/event_sink.h"
#include "daemon/loop.h"
#include "daemon/named_slots.h"
#include "daemon/policy_dir.h"
#include "daemon/policy_watch.h"
#include "daemon/run_service.h"
#include "daemon/runs.h"
#include "daemon/service_manager.h"
#include "daemon/status.h"
#include "run/dns.h"
#include "run/runner.h"
#include "run/state.h"
#include "scope/attach.h"
#include "scope/scope.h"
#include "telemetry/audit.h"
#include "telemetry/basic_auth.h"
#include "telemetry/metrics.h"
#include "util/log.h"
#include "util/text.h"
#include "util/unique_fd.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace agentcage::daemon {

using control::Op;
using control::op_name;
using control::Request;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kTickMs = 1000;
constexpr int kEnforcerRetryTicks = 10;
constexpr int kReapTicks = 60;
// Containers whose cgroup is gone without a poststop hook are released this
// often: a stat per recorded container.
constexpr int kContainerSweepTicks = 5;
// ... once their cgroup has been gone this long: podman runs the poststop hook
// itself after the runtime removed the cgroup, and that hook's release (with
// the container's result) must not lose the race to the sweep.
constexpr auto kContainerSweepGrace = std::chrono::seconds(30);
// Map fill is a walk of each map (batched): every 15 s is enough for a gauge.
constexpr int kMapFillTicks = 15;
// How long a stopping daemon waits for its runs to end (each runner kills
// and removes its run on SIGTERM).
constexpr int kStopGraceMs = 10000;

class Daemon final : private PolicyDirListener, private ControlHandler {
 public:
  Daemon(Config cfg, std::string config_file, RunForker* forker)
      : cfg_(std::move(cfg)),
        config_file_(std::move(config_file)),
        runs_(cfg_.state_dir),
        containers_(cfg_.state_dir),
        sink_(cfg_.audit_log, cfg_.recent_events, metrics_, runs_, containers_),
        dir_(cfg_.policy_dir, cfg_.state_dir, *this),
        bindings_(cfg_.attach, metrics_),
        watch_(cfg_.policy_dir),
        server_({cfg_.control_socket, cfg_.control_group, cfg_.max_clients, cfg_.max_clients_per_uid,
                 cfg_.client_buffer_bytes},
                loop_, *this, closer_),
        runner_(
            cfg_, loop_, [this](uint64_t client, const json& reply) { server_.finish_run(client, reply); },
            [this](const Request& notice, uid_t owner) { note_run(notice, owner); }, closer_, forker) {
    // A runner that left something of its run: reaped at once, not at the next minute.
    runner_.on_left_behind([this] {
      if (enf_) reap_stale_runs();
    });
  }
  Status start();
  int run();

 private:
  Status serve_metrics(const Config& c);
  bool ensure_enforcer();
  Status watch_policy_dir();
  void on_signal(int signo);
  // Reads the configuration file again and applies what can change while
  // running; the answer's "config" part (reload op).
  json reload_config();
  void tick();
  void reap_stale_runs();
  // The bindings after any change of the policies (and every tick).
  void bind() {
    if (enf_ && !bindings_.empty()) bindings_.reconcile(*enf_, dir_);
  }
  // What `peer` may see of the status: all of it for root; for a member of
  // the control group the daemon, the enforcement and the policies, and of
  // the scopes its own runs only (no containers, bindings or counters).
  json status_json(const Peer& peer);
  json attach(const Request& r);
  json detach(const Request& r);
  // detach by container_id: the container's record says what to release.
  json detach_container(const std::string& id);
  // Releases the scopes of recorded containers whose cgroup is gone (a
  // runtime that died before its poststop hook).
  void sweep_containers();
  // A run_start or run_end notice, from the control socket or a runner's channel.
  // `owner`: the client a run through the daemon is for.
  void note_run(const Request& notice, std::optional<uid_t> owner = std::nullopt);

  // ControlHandler
  json handle(const Request& req, const Peer& peer) override;
  std::optional<json> start_run(const Request& req, const Peer& peer, std::vector<UniqueFd>& stdio) override {
    if (!enf_)
      return json{{"ok", false}, {"error", "cannot enforce: " + enforcer_error_}, {"exit_code", 125}};
    return runner_.start(req, peer, stdio, dir_.limits(req.policy));
  }
  void client_gone(uint64_t id) override { runner_.client_gone(id); }
  const std::deque<AuditEvent>& recent_events() override { return sink_.recent(); }

  // PolicyDirListener: metrics, and the counter ordering rules (event_sink.h).
  void reloaded(bool success) override { metrics_.policy_reload(success); }
  void rejected(core::FailClosedReason reason) override {
    metrics_.fail_closed(reason, telemetry::FailClosedSource::policy_file);
  }
  void policies_loaded(size_t count) override {
    policies_loaded_ = count;
    metrics_.policies_loaded(static_cast<double>(count));
  }
  void slot_named(uint32_t slot, const std::string& name) override { sink_.name_slot(slot, name); }
  void slot_fresh(uint32_t slot, const std::string& name) override { sink_.baseline(slot, name); }
  void before_slot_removed() override { sink_.collect_counters(); }
  void slot_removed(uint32_t slot) override { sink_.forget(slot); }

  // Declared in the order that makes destruction safe: the parts that hold
  // the Enforcer (slots, sink's reader) go before it, the loop's users before
  // the loop.
  Config cfg_;
  std::string config_file_;
  UniqueFd instance_lock_;
  EventLoop loop_;
  telemetry::Metrics metrics_;
  std::unique_ptr<bpf::Enforcer> enf_;
  std::string enforcer_error_;
  std::unique_ptr<EnforcerNamedSlots> named_slots_;
  RunIndex runs_;
  ContainerIndex containers_;
  // When the sweep first saw a recorded container's cgroup gone.
  std::map<std::string, std::chrono::steady_clock::time_point> gone_since_;
  EventSink sink_;
  PolicyDirectory dir_;
  Bindings bindings_;
  PolicyWatch watch_;
  bool watch_registered_ = false;
  // Closes what clients sent, off the loop; outlives the two below.
  Closer closer_;
  ControlServer server_;
  RunService runner_;
  uint64_t ticks_ = 0;
  size_t runs_active_ = 0;
  size_t policies_loaded_ = 0;
  ServiceManager service_;
  // What the service manager is told: ready once enforcing with the policy directory loaded.
  void tell_service_manager();
  // The per-policy gauges' view of the policy directory.
  std::vector<telemetry::PolicyState> policy_states() const {
    std::vector<telemetry::PolicyState> out;
    for (const auto& [file, pf] : dir_.files()) {
      telemetry::PolicyState st;
      st.name = pf.name;
      st.valid = pf.loaded;
      st.loaded_at = static_cast<double>(pf.loaded_at);
      // The mode of what enforces, when this daemon knows it (not for a slot
      // adopted from an earlier daemon whose file it has rejected since).
      if (dir_.named_slot(pf.name) && pf.loaded_at != 0)
        st.mode = pf.compiled.flags & AC_POLICY_F_AUDIT ? "audit" : "enforce";
      out.push_back(std::move(st));
    }
    return out;
  }
};

// ---------------------------------------------------------------------------
// startup

// "https://ADDRESS/metrics" as C says ("" when off).
std::string metrics_url(const Config& c) {
  if (c.metrics_address.empty()) return "";
  return (c.metrics_tls ? "https://" : "http://") + c.metrics_address + "/metrics";
}

// /metrics as C says. Fails closed: a TLS or users-file problem is an
// error (the daemon does not start, a reload keeps what ran), never plain or
// open metrics instead.
Status Daemon::serve_metrics(const Config& c) {
  if (c.metrics_address.empty()) return {};
  telemetry::ServeOptions options{.address = c.metrics_address, .tls = c.metrics_tls, .auth = nullptr};
  if (c.metrics_users_file) {
    auto auth = telemetry::BasicAuth::load_file(*c.metrics_users_file);
    if (!auth) return auth.error().wrap("metrics_basic_auth");
    options.auth = *auth;
    if (!c.metrics_tls)
      log::warn(
          "metrics: basic auth over plain HTTP: scrapers' passwords cross the network in clear; "
          "set metrics_tls too (docs/daemon.md)");
  }
  if (Status st = metrics_.listen(options); !st) return st;
  std::string auth;
  if (options.auth) {
    const size_t n = options.auth->users();
    auth = ", basic auth: " + std::to_string(n) + (n == 1 ? " user" : " users");
  }
  log::info("metrics on " + metrics_url(c) + " (port " + std::to_string(metrics_.port()) + auth + ")");
  return {};
}

Status Daemon::start() {
  // Descriptors clients sent wait in the Closer while a close is held
  // (daemon/closer.h): room for them up to the hard limit. Runners and the
  // fork server keep the limit the daemon started with.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (Status st = run::make_private_dir(cfg_.state_dir, 0755); !st) return st.error().wrap("state directory");
  const std::string lock = cfg_.state_dir + "/daemon.lock";
  instance_lock_.reset(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!instance_lock_) return Error::from_errno("opening " + lock);
  if (::flock(instance_lock_.get(), LOCK_EX | LOCK_NB) != 0)
    return Error{"another agentcage daemon is running (" + lock + " is locked); stop it first", EBUSY};

  if (Status st = loop_.open(
          kTickMs, [this](int signo) { on_signal(signo); }, [this] { tick(); });
      !st)
    return st;
  if (Status st = sink_.open_audit_log(); !st) return st;
  if (Status st = serve_metrics(cfg_); !st) return st;
  sink_.set_stream([this](const AuditEvent& event) { server_.stream(event); });
  dir_.load_state_file();
  for (const std::string& w : containers_.load()) log::warn("container records: " + w);
  ensure_enforcer();
  if (Status st = server_.listen(); !st) return st;
  if (Status st = watch_policy_dir(); !st)
    log::warn(st.error().message + " (policies are loaded once it exists)");
  if (enf_) {
    dir_.adopt_named_slots();
    dir_.full_scan();
    reap_stale_runs();
  }
  tick();  // binds too
  log::info(std::string("started (version ") + AGENTCAGE_VERSION + ", policy dir " + cfg_.policy_dir +
            ", control socket " + cfg_.control_socket + ")");
  if (service_.watchdog_interval().count())
    log::info("service manager watchdog: a keep-alive every " +
              std::to_string(service_.watchdog_interval().count() / 1000) + " ms");
  return {};
}

void Daemon::tell_service_manager() {
  if (!enf_) {
    service_.status("not enforcing: " + enforcer_error_ + " (retrying every " +
                    std::to_string(kEnforcerRetryTicks) + " s)");
    return;
  }
  service_.ready("enforcing; " + std::to_string(policies_loaded_) + " policies loaded from " + cfg_.policy_dir +
                 "; " + std::to_string(runs_active_) + " runs active");
}

bool Daemon::ensure_enforcer() {
  if (enf_) return true;
  bpf::SharedOptions opts;
  opts.pin_root = cfg_.pin_root;
  opts.load.ringbuf_bytes = cfg_.ring_buffer_bytes;
  auto e = bpf::Enforcer::open_shared(opts);
  if (!e) {
    metrics_.fail_closed(bpf::unavailable_reason(bpf::read_lsm_state()), telemetry::FailClosedSource::daemon);
    metrics_.enforcement_ready(false);
    if (enforcer_error_ != e.error().message)
      log::error("cannot enforce: " + e.error().message + " (retrying every " +
                 std::to_string(kEnforcerRetryTicks) + " s; runs refuse to start meanwhile)");
    enforcer_error_ = e.error().message;
    return false;
  }
  enforcer_error_.clear();
  enf_ = std::move(*e);
  if (const uint32_t ring = enf_->ring_buffer_bytes(); ring && ring != cfg_.ring_buffer_bytes)
    log::warn("the pinned program set in " + enf_->pin_dir() + " has a ring buffer of " + std::to_string(ring) +
              " bytes, not ring_buffer_size's " + std::to_string(cfg_.ring_buffer_bytes) +
              ": it was loaded by another agentcage process or an earlier configuration; the setting takes "
              "effect when the set is next loaded (after a reboot, or once no runs are active and every "
              "attached cgroup is detached -- `agentcage status` lists none -- stop the daemon, remove " +
              enf_->pin_dir() + ", start it: removing it while a cgroup is confined leaves that cgroup unconfined)");
  named_slots_ = std::make_unique<EnforcerNamedSlots>(*enf_);
  dir_.set_slots(named_slots_.get());
  if (int fd = sink_.attach(*enf_); fd >= 0)
    loop_.add(fd, EPOLLIN, [this](uint32_t) {
      // A run's start notice is sent before its first process exists: read
      // first, so that every decision of the run carries its id and labels.
      runner_.read_all_notices();
      sink_.consume();
      server_.flush_streams();
    });
  log::info("enforcing with the program set pinned in " + enf_->pin_dir());
  return true;
}

Status Daemon::watch_policy_dir() {
  Status st = watch_.watch();
  if (!watch_registered_ && watch_.fd() >= 0) {
    watch_registered_ = true;
    loop_.add(watch_.fd(), EPOLLIN, [this](uint32_t) {
      PolicyDirChanges changes = watch_.read();
      if (changes.rescan) dir_.full_scan();
      for (const auto& name : changes.files) dir_.apply_file(name);
      if (!changes.files.empty()) dir_.save_state_file();
      bind();
    });
  }
  return st;
}

void Daemon::reap_stale_runs() {
  std::ostringstream reaped;
  run::Paths paths;
  paths.policy_dir = cfg_.policy_dir;
  paths.cgroup_parent = cfg_.run_parent();
  paths.state_dir = cfg_.state_dir;
  run::reap_stale_runs(*enf_, paths, reaped);
  if (!reaped.str().empty()) log::warn(reaped.str());
}

// ---------------------------------------------------------------------------
// the loop's callbacks

void Daemon::on_signal(int signo) {
  if (signo == SIGHUP) {
    log::info("SIGHUP: reading " + (config_file_.empty() ? std::string("no configuration file") : config_file_) +
              " and rescanning " + cfg_.policy_dir);
    service_.reloading("reloading the configuration and the policies from " + cfg_.policy_dir);
    reload_config();
    dir_.rescan_all();
    bind();
    tell_service_manager();
    return;
  }
  if (signo == SIGUSR1) {
    // Log rotation: not a reload (agentcage_policy_reloads_total does not move).
    log::info("SIGUSR1: reopening the audit log " + cfg_.audit_log);
    sink_.flush_audit();
    if (Status st = sink_.open_audit_log(); !st) log::error(st.error().message);
    return;
  }
  log::info("stopping on signal " + std::to_string(signo) +
            " (enforcement continues: the programs stay pinned)");
  service_.stopping("stopping on signal " + std::to_string(signo) + "; enforcement continues");
  loop_.stop();
}

json Daemon::reload_config() {
  json out = {{"file", config_file_.empty() ? json(nullptr) : json(config_file_)},
              {"applied", json::array()},
              {"restart", json::array()},
              {"errors", json::array()}};
  if (config_file_.empty()) return out;  // the defaults: nothing to read
  ConfigResult r = load_config(config_file_);
  if (!r.ok()) {
    for (const auto& d : r.errors) {
      log::error(d.format(), {{"CONFIG_FILE", config_file_}});
      out["errors"].push_back(d.format());
    }
    log::error(config_file_ + " is not valid: not applied; the daemon goes on with the configuration it had");
    metrics_.config_reload(false);
    return out;
  }
  const Config& next = *r.config;
  bool failed = false;
  auto fail = [&](const std::string& setting, const Error& e) {
    log::error(config_file_ + ": " + setting + ": " + e.message + " (the previous value stays)");
    out["errors"].push_back(setting + ": " + e.message);
    failed = true;
  };
  const std::vector<ConfigChange> changes = config_changes(cfg_, next);
  std::vector<std::string> control_changes, metrics_changes;
  for (const ConfigChange& c : changes) {
    if (!c.live) {
      log::warn(config_file_ + ": " + c.setting + " changed: takes effect when the daemon restarts");
      out["restart"].push_back(c.setting);
      continue;
    }
    const std::string& k = c.setting;
    if (k == "audit_log") {
      if (Status st = sink_.move_audit_log(next.audit_log); !st) {
        fail(k, st.error());
        continue;
      }
      cfg_.audit_log = next.audit_log;
    } else if (k == "metrics_address" || k == "metrics_tls" || k == "metrics_basic_auth") {
      metrics_changes.push_back(k);
      continue;  // together, below
    } else if (k == "recent_events") {
      sink_.set_recent_events(next.recent_events);
      cfg_.recent_events = next.recent_events;
    } else if (k == "control_group" || k == "max_clients" || k == "max_clients_per_uid" ||
               k == "client_buffer_bytes") {
      control_changes.push_back(k);
      continue;  // together, below
    } else if (k == "max_runs") {
      cfg_.max_runs = next.max_runs;
    } else if (k == "max_runs_per_client") {
      cfg_.max_runs_per_client = next.max_runs_per_client;
    } else if (k.rfind("run_max_", 0) == 0) {
      cfg_.run_caps = next.run_caps;  // the run service reads cfg_ for each new run
    } else if (k == "attach") {
      cfg_.attach = next.attach;
      bindings_.configure(next.attach);  // applied by the bind() that follows every reload
    }
    out["applied"].push_back(k);
  }
  // Protected metrics are opened anew on every reload, changed or not: how
  // a renewed certificate or an edited users file is taken.
  const bool reread = metrics_changes.empty() && !next.metrics_address.empty() &&
                      (next.metrics_tls || next.metrics_users_file);
  if (!metrics_changes.empty() || reread) {
    std::vector<std::string> blamed = metrics_changes;
    if (reread) blamed.push_back(next.metrics_tls ? "metrics_tls" : "metrics_basic_auth");
    metrics_.stop_listening();
    if (Status st = serve_metrics(next); !st) {
      for (const auto& k : blamed) fail(k, st.error());
      // Back to what ran before, with its own TLS and users (or nothing).
      if (Status back = serve_metrics(cfg_); !back)
        log::error("metrics: cannot serve as before either: " + back.error().message);
    } else {
      for (const auto& k : metrics_changes) out["applied"].push_back(k);
      cfg_.metrics_address = next.metrics_address;
      cfg_.metrics_tls = next.metrics_tls;
      cfg_.metrics_users_file = next.metrics_users_file;
    }
  }
  if (!control_changes.empty()) {
    ControlOptions opt{cfg_.control_socket, next.control_group, next.max_clients, next.max_clients_per_uid,
                       next.client_buffer_bytes};
    if (Status st = server_.reconfigure(opt); !st) {
      for (const auto& k : control_changes) fail(k, st.error());
    } else {
      for (const auto& k : control_changes) out["applied"].push_back(k);
      cfg_.control_group = next.control_group;
      cfg_.max_clients = next.max_clients;
      cfg_.max_clients_per_uid = next.max_clients_per_uid;
      cfg_.client_buffer_bytes = next.client_buffer_bytes;
    }
  }
  if (!out["applied"].empty())
    log::info(config_file_ + ": applied " + out["applied"].dump());
  metrics_.config_reload(!failed);
  return out;
}

void Daemon::tick() {
  ++ticks_;
  service_.keep_alive();
  server_.tick();
  runner_.tick();
  metrics_.process();
  metrics_.policy_states(policy_states());
  metrics_.daemon_drops(sink_.audit_dropped(), server_.stream_dropped());
  if (!enf_) {
    if (ticks_ % kEnforcerRetryTicks == 0 && ensure_enforcer()) {
      dir_.adopt_named_slots();
      dir_.full_scan();
    }
  }
  if (!watch_.watching() && enf_ && watch_policy_dir()) dir_.full_scan();
  runs_active_ = runs_.scan();
  metrics_.runs_active(static_cast<double>(runs_active_));
  if (!enf_) {
    tell_service_manager();
    return;
  }
  sink_.collect_counters();
  sink_.count_lost();
  bind();
  if (auto sc = enf_->scopes()) metrics_.scopes_active(static_cast<double>(sc->size()));
  metrics_.containers_active(static_cast<double>(containers_.all().size()));
  Readiness r = check_ready(*enf_);
  metrics_.enforcement_ready(r.ready);
  if (!r.ready && ticks_ % 60 == 1) log::error("enforcement is NOT ready: " + r.detail);
  if (ticks_ % kReapTicks == 0) reap_stale_runs();
  if (ticks_ % kContainerSweepTicks == 0) sweep_containers();
  if (ticks_ % kMapFillTicks == 1) metrics_.map_fill(enf_->map_fill());
  sink_.flush_audit();
  tell_service_manager();
}

int Daemon::run() {
  int status = loop_.run();
  // Runs in flight end with the daemon, and their clients are told.
  runner_.stop_all(kStopGraceMs);
  if (status != 0) return status;
  sink_.consume();
  server_.flush_streams();
  sink_.flush_audit();
  // Still holding the instance lock: the socket is ours to remove, so
  // clients see "not running" rather than a refused connection.
  ::unlink(cfg_.control_socket.c_str());
  return 0;
}

// ---------------------------------------------------------------------------
// requests

json Daemon::handle(const Request& req, const Peer& peer) {
  const bool needs_enforcer = req.op == Op::attach || req.op == Op::detach;
  if (needs_enforcer && !enf_) return {{"ok", false}, {"error", "cannot enforce: " + enforcer_error_}};
  switch (req.op) {
    case Op::hello: {
      json ops = json::array();
      for (Op op : control::kOps)
        if (peer.root || control::op_allowed_for_group(op)) ops.push_back(std::string(op_name(op)));
      json reply = {{"ok", req.protocol == control::kProtocolVersion},
                    {"protocol", control::kProtocolVersion},
                    {"version", AGENTCAGE_VERSION},
                    {"ops", ops},
                    {"uid", peer.uid}};
      if (req.protocol != control::kProtocolVersion)
        reply["error"] = "protocol version " + std::to_string(req.protocol) +
                         " is not spoken here (this daemon speaks " +
                         std::to_string(control::kProtocolVersion) + "): update the client or the daemon";
      return reply;
    }
    case Op::run:
      break;  // start_run
    case Op::status:
      return {{"ok", true}, {"status", status_json(peer)}};
    case Op::attach: {
      json reply = attach(req);
      if (!req.container_id.empty())
        metrics_.container_operation(telemetry::Metrics::ContainerOp::confine, reply.value("ok", false));
      return reply;
    }
    case Op::detach: {
      json reply = detach(req);
      if (!req.container_id.empty() || reply.contains("container_id"))
        metrics_.container_operation(telemetry::Metrics::ContainerOp::release, reply.value("ok", false));
      return reply;
    }
    case Op::run_start:
    case Op::run_end:
      note_run(req);
      return {{"ok", true}};
    case Op::reload:
      if (!enf_) return {{"ok", false}, {"error", "cannot enforce: " + enforcer_error_ + " (no policy is installed)"}};
      {
        json config = reload_config();
        dir_.rescan_all();
        bind();
        return {{"ok", true}, {"status", dir_.status_json()}, {"config", config}};
      }
    case Op::events:
      break;  // the control server's own
  }
  return {{"ok", false}, {"error", "request: op " + std::string(op_name(req.op)) + " is not handled here"}};
}

void Daemon::note_run(const Request& req, std::optional<uid_t> owner) {
  if (req.op == Op::run_start) {
    runs_.note(req.scope_id, req.run_id, req.labels, owner);
  } else if (req.op == Op::run_end) {
    metrics_.run_finished(req.policy, req.outcome, req.duration_seconds);
    if (req.fail_closed) metrics_.fail_closed(*req.fail_closed, telemetry::FailClosedSource::run);
    // Seccomp denials and refused names are counted by the run itself (no BPF counter).
    if (req.syscalls_denied) metrics_.run_denials(req.policy, "syscall", req.syscalls_denied);
    if (req.dns_refused.total) metrics_.run_denials(req.policy, "dns", req.dns_refused.total);
    if (!req.dns_refused.by_name.empty()) {
      sink_.refused_names(req.run_id, req.policy, req.dns_refused.by_name);
      sink_.flush_audit();
      server_.flush_streams();
    }
    // Decisions of the run's last moments, before its transient slot goes:
    // its slot's (every slot's for a notice that does not name it).
    if (req.policy_slot)
      sink_.collect_counters(*req.policy_slot);
    else
      sink_.collect_counters();
  }
}

json Daemon::status_json(const Peer& peer) {
  json s = enf_ ? kernel_status(*enf_, runs_.ids())
                : json{{"enforcement", {{"ready", false}, {"detail", "cannot enforce: " + enforcer_error_}}}};
  s["policy_files"] = dir_.status_json();
  s["bindings"] = bindings_.status_json();
  s["daemon"] = {{"running", true},
                 {"pid", ::getpid()},
                 {"version", AGENTCAGE_VERSION},
                 {"policy_dir", cfg_.policy_dir},
                 {"metrics_address", cfg_.metrics_address},
                 {"metrics_port", metrics_.port()},
                 {"metrics_url", metrics_url(cfg_)},
                 {"metrics_auth", cfg_.metrics_users_file ? "basic" : "none"},
                 {"control_socket", cfg_.control_socket},
                 {"audit_log", cfg_.audit_log},
                 {"enforcer_error", enforcer_error_.empty() ? json(nullptr) : json(enforcer_error_)},
                 {"events_delivered", sink_.delivered()},
                 {"events_malformed", sink_.malformed()},
                 {"audit_dropped", sink_.audit_dropped()},
                 {"stream_dropped", server_.stream_dropped()},
                 {"clients", server_.clients()},
                 {"runs_active", runs_active_}};
  json containers = json::array();
  for (const auto& [id, c] : containers_.all())
    containers.push_back({{"container_id", id},
                          {"cgroup", c.cgroup},
                          {"cgroup_id", c.cgroup_id},
                          {"policy", c.policy},
                          {"workspace", c.workspace.empty() ? json(nullptr) : json(c.workspace)},
                          {"labels", c.labels},
                          {"attached", rfc3339_utc(c.attached_ns, 9)}});
  s["containers"] = containers;
  s["view"] = peer.root ? "all" : "own runs";
  if (!peer.root) {
    // Of the scopes and transient policies, its own runs'; none of the
    // counts that move with other tenants' runs and decisions.
    json own = json::array();
    std::set<uint64_t> own_slots;
    for (const json& scope : s.value("scopes", json::array()))
      if (peer.sees(runs_.owner(scope.value("scope_id", uint64_t{0})))) {
        own.push_back(scope);
        own_slots.insert(scope.value("policy_slot", uint64_t{0}));
      }
    s["scopes"] = own;
    json policies = json::array();
    for (const json& p : s.value("policies", json::array()))
      if (p.value("owner", "") != "transient" || own_slots.count(p.value("slot", uint64_t{0})))
        policies.push_back(p);
    s["policies"] = policies;
    for (const char* key : {"containers", "bindings", "counters", "events"}) s.erase(key);
    for (const char* key : {"events_delivered", "events_malformed", "audit_dropped", "stream_dropped",
                            "clients", "runs_active"})
      s["daemon"].erase(key);
  }
  return s;
}

json Daemon::attach(const Request& r) {
  const std::optional<uint32_t> slot = dir_.named_slot(r.policy);
  if (!slot)
    return {{"ok", false},
            {"error", "no policy named '" + r.policy + "' is loaded by the daemon (policy dir " +
                          cfg_.policy_dir + ")"}};
  if (const std::string domain = dir_.domain_rule(r.policy); !domain.empty())
    return {{"ok", false},
            {"error", "policy " + r.policy + " allows destinations by name (" + domain +
                          "); a name rule is answered by a resolver of each run's own, which an attached "
                          "cgroup has none of: run the workload with `agentcage run`, or allow its "
                          "destinations by cidr for an attachment"}};
  auto cg = scope::find_cgroup(r.cgroup);
  if (!cg) return {{"ok", false}, {"error", cg.error().message}};
  const bool uses_ws = dir_.uses_workspace(r.policy);
  std::string workspace;
  const bool container = !r.container_id.empty();
  if (container) {
    if (const ContainerScope* known = containers_.find(r.container_id)) {
      // The id's previous container, whose cgroup is gone without its
      // poststop (a restart under the same id after a missed poststop):
      // released now rather than by the sweep, which would refuse the
      // restart until then. One whose cgroup is still there is refused.
      auto current = cgroup::cgroup_id(known->cgroup);
      const bool gone = current ? *current != known->cgroup_id : current.error().code == ENOENT;
      if (!gone)
        return {{"ok", false},
                {"error", "container " + r.container_id + " is confined already (cgroup " + known->cgroup +
                              ", policy " + known->policy + "): detach it first"}};
      json released = detach_container(r.container_id);
      if (!released.value("ok", false))
        return {{"ok", false},
                {"error", "container " + r.container_id +
                              ": releasing the scope of its previous container, whose "
                              "cgroup is gone: " +
                              released.value("error", std::string("(no reason)"))}};
      gone_since_.erase(r.container_id);
      log::warn(
          "container " + r.container_id +
          ": attached again; the scope of its previous container, whose cgroup is gone without a poststop "
          "hook, was released");
    }
  }
  if (!r.workspace.empty() && container) {
    // The container's own view (its mount namespace after pivot_root):
    // the kernel's paths are the container's, so the text is what counts.
    if (!normal_absolute_path(r.workspace))
      return {{"ok", false},
              {"error", "workspace " + r.workspace +
                            ": a container's workspace must be a normalised absolute path other than /, as the "
                            "container sees it"}};
    workspace = r.workspace;
  } else if (!r.workspace.empty()) {
    std::error_code ec;
    fs::path ws = fs::canonical(r.workspace, ec);
    if (ec || !fs::is_directory(ws) || ws == "/")
      return {{"ok", false},
              {"error", "workspace " + r.workspace + ": not an existing directory other than /"}};
    workspace = ws.string();
  } else if (uses_ws) {
    return {{"ok", false},
            {"error", "policy " + r.policy + " has ${workspace} rules: " +
                          (container ? std::string("give the container a workspace (a bind mount at /workspace, or "
                                                   "one named by the io.agentcage.workspace annotation)")
                                     : std::string("pass a workspace"))}};
  }
  if (auto problem = dir_.workspace_problem(r.policy, workspace)) return {{"ok", false}, {"error", *problem}};
  if (r.arm_pid)
    if (Status st = scope::check_arm_pid(*cg, r.arm_pid); !st) return {{"ok", false}, {"error", st.error().message}};
  auto confined = scope::confine(*enf_, *cg, scope::NamedPolicy{r.policy, *slot}, workspace,
                                 static_cast<uint32_t>(r.arm_pid));
  if (!confined) return {{"ok", false}, {"error", confined.error().message}};
  if (container) {
    ContainerScope c;
    c.id = r.container_id;
    c.cgroup_id = cg->id;
    c.cgroup = cg->path.string();
    c.policy = r.policy;
    c.slot = *slot;
    c.workspace = workspace;
    c.labels = r.labels;
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    c.attached_ns = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
    if (Status st = containers_.add(c); !st) {
      // Unrecorded, it could never be released by id: undo it, and refuse.
      if (auto undone = scope::release(*enf_, *confined, scope::Ending::detach); !undone)
        log::error("container " + c.id + ": " + undone.error().message);
      return {{"ok", false}, {"error", "container " + c.id + ": " + st.error().message}};
    }
  }
  log::info("attached " + cg->path.string() + " to policy " + r.policy +
                (container ? ", container " + r.container_id : std::string()) +
                (r.arm_pid ? ", armed at the exec of pid " + std::to_string(r.arm_pid) : std::string()),
            {{"CGROUP", cg->path.string()}, {"POLICY", r.policy}});
  json reply = {{"ok", true},
                {"cgroup", cg->path.string()},
                {"cgroup_id", cg->id},
                {"policy", r.policy},
                {"slot", *slot}};
  if (container) reply["container_id"] = r.container_id;
  if (r.arm_pid) reply["arm_pid"] = r.arm_pid;
  // The file and mode of what enforces (this daemon installed it).
  for (const auto& [file, pf] : dir_.files())
    if (pf.name == r.policy && pf.loaded_at != 0) {
      reply["policy_file"] = (fs::path(cfg_.policy_dir) / file).string();
      reply["mode"] = pf.compiled.flags & AC_POLICY_F_AUDIT ? "audit" : "enforce";
    }
  return reply;
}

// What `agentcage detach` prints: the policy, and what it decided while the
// cgroup was attached, in total and per hook; for a container, also the
// first decision records (its result).
json released_json(const std::string& cgroup, const scope::Released& released, bool with_records) {
  const bpf::ScopeReport report = released.report.value_or(bpf::ScopeReport{});
  json denied_by_hook = json::object(), audited_by_hook = json::object();
  for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h) {
    if (report.denied[h]) denied_by_hook[std::string(bpf::hook_name(h))] = report.denied[h];
    if (report.audited[h]) audited_by_hook[std::string(bpf::hook_name(h))] = report.audited[h];
  }
  json out = {{"ok", true},
              {"cgroup", cgroup},
              {"policy", released.policy_name.empty() ? json(nullptr) : json(released.policy_name)},
              {"reported", released.report.has_value()},
              {"denied", report.denied_total()},
              {"audited", report.audited_total()},
              {"denied_by_hook", denied_by_hook},
              {"audited_by_hook", audited_by_hook}};
  if (with_records) {
    json records = json::array();
    for (const auto& ev : report.records) records.push_back(bpf::record_json(ev));
    out["records"] = records;
    out["records_taken"] = report.records_taken;
  }
  return out;
}

json Daemon::detach(const Request& r) {
  if (!r.container_id.empty()) return detach_container(r.container_id);
  auto cg = scope::find_cgroup(r.cgroup);
  if (!cg) return {{"ok", false}, {"error", cg.error().message}};
  const std::string container = containers_.id_of_scope(cg->id);
  if (!container.empty()) return detach_container(container);
  auto released = scope::release(*enf_, *cg, scope::Ending::detach);
  if (!released) return {{"ok", false}, {"error", released.error().message}};
  log::info("detached " + cg->path.string());
  return released_json(cg->path.string(), *released, false);
}

json Daemon::detach_container(const std::string& id) {
  const ContainerScope* c = containers_.find(id);
  if (!c) return {{"ok", false}, {"error", "container " + id + " is not confined by this daemon"}};
  scope::Confinement confinement;
  confinement.cgroup_id = c->cgroup_id;
  confinement.cgroup = c->cgroup;
  confinement.slot = c->slot;
  confinement.policy_name = c->policy;
  auto released = scope::release(*enf_, confinement, scope::Ending::detach);
  if (!released) return {{"ok", false}, {"error", "container " + id + ": " + released.error().message}};
  json out = released_json(c->cgroup, *released, true);
  out["container_id"] = id;
  out["labels"] = c->labels;
  log::info("released container " + id + " (cgroup " + c->cgroup + ", policy " + c->policy + ", " +
                std::to_string(out["denied"].get<uint64_t>()) + " denied)",
            {{"CGROUP", c->cgroup}, {"POLICY", c->policy}});
  if (Status st = containers_.remove(id); !st) log::warn("container " + id + ": " + st.error().message);
  return out;
}

void Daemon::sweep_containers() {
  std::vector<std::string> gone;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [id, c] : containers_.all()) {
    // Cgroup ids are never reused and v2 cgroups never renamed: the cgroup
    // at the recorded path with another id (or none) is not this one.
    auto current = cgroup::cgroup_id(c.cgroup);
    if (!current && current.error().code != ENOENT) continue;  // unknown: leave it
    if (current && *current == c.cgroup_id) {
      gone_since_.erase(id);
      continue;
    }
    const auto since = gone_since_.try_emplace(id, now).first;
    if (now - since->second >= kContainerSweepGrace) gone.push_back(id);
  }
  // Forget what was released meanwhile (by its poststop hook).
  for (auto it = gone_since_.begin(); it != gone_since_.end();)
    it = containers_.find(it->first) ? std::next(it) : gone_since_.erase(it);
  for (const std::string& id : gone) {
    json out = detach_container(id);
    metrics_.container_operation(telemetry::Metrics::ContainerOp::sweep, out.value("ok", false));
    if (out.value("ok", false))
      log::warn("container " + id + ": its cgroup is gone without a poststop hook; its scope was released");
    else
      log::warn(out.value("error", std::string()));
  }
}

}  // namespace

int run_daemon(const Config& config, const std::string& config_file, const CommandLine& command_line) {
  // Where runs live, settled before any child exists: in the delegated
  // layout this process moves into its leaf first (cgroup/delegation.h), so
  // the fork server and every runner start there.
  Config cfg = config;
  auto layout = cgroup::settle_daemon_layout(cfg.cgroup_layout, cfg.cgroup_parent);
  if (!layout) {
    log::error("daemon: " + layout.error().message);
    return 1;
  }
  cfg.settled_run_parent = layout->parent;
  log::info("runs through the daemon live in " + layout->parent + " below the cgroup2 root (" +
            layout->reason + ")");
  if (!layout->warning.empty()) log::warn(layout->warning);
  if (cfg.max_runs * run::kMaxPinsPerRun > AC_MAX_PINS)
    log::warn("max_runs " + std::to_string(cfg.max_runs) + ": that many runs at their limit of " +
              std::to_string(run::kMaxPinsPerRun) + " DNS pins each would fill the kernel's " +
              std::to_string(AC_MAX_PINS) +
              "; a run's allowed names then fail (SERVFAIL) until others end. " + "Keep max_runs at " +
              std::to_string(AC_MAX_PINS / run::kMaxPinsPerRun) + " or below where runs allow many names");
  // Then, while this process has one thread: the fork server runs' start
  // from (daemon/run_forker.h). Without it runs are exec'd.
  RunForker forker;
  if (command_line) {
    if (Status st = forker.start(command_line); !st)
      log::warn("no fork server (" + st.error().message + "): runs start with fork + exec");
  }
  Daemon d(std::move(cfg), config_file, &forker);
  if (Status st = d.start(); !st) {
    log::error("daemon: " + st.error().message);
    return 1;
  }
  return d.run();
}

int daemon_command(const std::string& config_file, const CommandLine& command_line) {
  // Its log goes to 2; the fork server's socket and the control socket must
  // never land on 0..2.
  if (!open_standard_fds()) return 1;
  Config cfg;
  if (!config_file.empty()) {
    auto r = load_config(config_file);
    if (!r.ok()) {
      for (const auto& d : r.errors) std::cerr << d.format() << "\n";
      std::cerr << "agentcage daemon: " << config_file << " is not valid; not started\n";
      return 1;
    }
    cfg = *r.config;
  }
  if (::geteuid() != 0) {
    std::cerr << "agentcage daemon: needs root (BPF LSM programs, cgroups, the control socket)\n";
    return 1;
  }
  return run_daemon(cfg, config_file, command_line);
}

}  // namespace agentcage::daemon
