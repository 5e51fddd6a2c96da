#include "daemon/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpf/compile.h"
#include "bpf/enforcer.h"
#include "bpf/event_reader.h"
#include "bpf/lsm.h"
#include "bpf/names.h"
#include "cgroup/cgroup.h"
#include "daemon/event_sink.h"
#include "daemon/named_slots.h"
#include "daemon/policy_dir.h"
#include "daemon/protocol.h"
#include "daemon/runs.h"
#include "daemon/status.h"
#include "policy/policy.h"
#include "run/runner.h"
#include "run/state.h"
#include "scope/attach.h"
#include "scope/scope.h"
#include "telemetry/audit.h"
#include "telemetry/metrics.h"
#include "util/log.h"
#include "util/unique_fd.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace agentcage::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kTickMs = 1000;
constexpr int kEnforcerRetryTicks = 10;
constexpr int kReapTicks = 60;

struct Client {
  UniqueFd fd;
  uid_t uid = 0;
  bool root = false;
  std::string in, out;
  bool streaming = false;
  bool close_after_flush = false;
  bool want_out = false;  // EPOLLOUT registered
  uint64_t dropped = 0;   // events not queued since the last notice
};

class Daemon final : private PolicyDirListener {
 public:
  explicit Daemon(Config cfg)
      : cfg_(std::move(cfg)),
        runs_(cfg_.state_dir),
        sink_(cfg_.audit_log, cfg_.recent_events, metrics_, runs_),
        dir_(cfg_.policy_dir, cfg_.state_dir, *this) {}
  Status start();
  int loop();

 private:
  // ---- setup
  Status create_control_socket();
  Status watch_policy_dir();
  bool ensure_enforcer();
  void epoll_add(int fd, uint32_t events);
  void epoll_mod(int fd, uint32_t events);

  // ---- the policy directory's listener
  void reloaded(bool success) override { metrics_.policy_reload(success); }
  void rejected(const char* reason) override { metrics_.fail_closed(reason); }
  void policies_loaded(size_t count) override { metrics_.policies_loaded(static_cast<double>(count)); }
  void slot_named(uint32_t slot, const std::string& name) override { sink_.name_slot(slot, name); }
  void slot_fresh(uint32_t slot, const std::string& name) override { sink_.baseline(slot, name); }
  void before_slot_removed() override { sink_.collect_counters(); }
  void slot_removed(uint32_t slot) override { sink_.forget(slot); }

  // ---- telemetry
  void stream_line(const std::string& line);
  void consume_events();
  void tick();

  // ---- control socket
  void accept_clients();
  void on_client(int fd, uint32_t events);
  void handle_line(Client& c, const std::string& line);
  void respond(Client& c, const json& j);
  void flush_client(Client& c);
  void close_client(int fd);
  json status_json();
  json do_attach(const Request& r);
  json do_detach(const Request& r);

  Config cfg_;
  UniqueFd instance_lock_, epoll_, signal_fd_, timer_fd_, inotify_fd_, listen_fd_;
  int watch_ = -1;
  std::optional<gid_t> control_gid_;
  std::unique_ptr<bpf::Enforcer> enf_;
  std::unique_ptr<EnforcerNamedSlots> named_slots_;
  int reader_fd_ = -1;
  telemetry::Metrics metrics_;
  RunIndex runs_;
  EventSink sink_;
  PolicyDirectory dir_;
  std::map<int, Client> clients_;
  uint64_t client_dropped_ = 0;
  uint64_t ticks_ = 0;
  size_t runs_active_ = 0;
  bool stop_ = false;
  std::string enforcer_error_;
};

// ---------------------------------------------------------------------------
// setup

Status Daemon::start() {
  if (Status st = run::make_private_dir(cfg_.state_dir, 0755); !st) return st.error().wrap("state directory");
  const std::string lock = cfg_.state_dir + "/daemon.lock";
  instance_lock_.reset(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!instance_lock_) return Error::from_errno("opening " + lock);
  if (::flock(instance_lock_.get(), LOCK_EX | LOCK_NB) != 0)
    return Error{"another agentcage daemon is running (" + lock + " is locked); stop it first", EBUSY};

  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, nullptr);
  signal_fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!signal_fd_ || !epoll_ || !timer_fd_) return Error::from_errno("daemon: setting up the event loop");
  itimerspec its{};
  its.it_value.tv_nsec = kTickMs * 1000000L;
  its.it_interval.tv_nsec = kTickMs * 1000000L;
  if (kTickMs >= 1000) {
    its.it_value = {kTickMs / 1000, (kTickMs % 1000) * 1000000L};
    its.it_interval = its.it_value;
  }
  ::timerfd_settime(timer_fd_.get(), 0, &its, nullptr);
  epoll_add(signal_fd_.get(), EPOLLIN);
  epoll_add(timer_fd_.get(), EPOLLIN);

  if (Status st = sink_.open_audit_log(); !st) return st;
  if (!cfg_.metrics_address.empty()) {
    if (Status st = metrics_.listen(cfg_.metrics_address); !st) return st;
    log::info("metrics on http://" + cfg_.metrics_address + "/metrics (port " + std::to_string(metrics_.port()) + ")");
  }
  sink_.set_stream([this](const std::string& line) { stream_line(line); });
  dir_.load_state_file();
  ensure_enforcer();
  if (Status st = create_control_socket(); !st) return st;
  if (Status st = watch_policy_dir(); !st) log::warn(st.error().message + " (policies are loaded once it exists)");
  if (enf_) {
    dir_.adopt_named_slots();
    dir_.full_scan();
    std::ostringstream reaped;
    run::Paths paths;
    paths.policy_dir = cfg_.policy_dir;
    paths.cgroup_parent = cfg_.cgroup_parent;
    paths.state_dir = cfg_.state_dir;
    run::reap_stale_runs(*enf_, paths, reaped);
    if (!reaped.str().empty()) log::warn(reaped.str());
  }
  tick();
  log::info(std::string("started (version ") + AGENTCAGE_VERSION + ", policy dir " + cfg_.policy_dir +
            ", control socket " + cfg_.control_socket + ")");
  return {};
}

void Daemon::epoll_add(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void Daemon::epoll_mod(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

Status Daemon::create_control_socket() {
  const std::string& path = cfg_.control_socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Error{"control socket path too long: " + path, ENAMETOOLONG};
  std::memcpy(addr.sun_path, path.data(), path.size());
  std::optional<gid_t> group;
  if (cfg_.control_group) {
    const std::string& g = *cfg_.control_group;
    if (std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      group = static_cast<gid_t>(std::stoul(g));
    } else {
      struct group gr {};
      struct group* found = nullptr;
      std::vector<char> buf(16384);
      if (::getgrnam_r(g.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || !found)
        return Error{"control_group: no group named '" + g + "'", ENOENT};
      group = gr.gr_gid;
    }
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  // We hold the instance lock, so whatever is at the path is a leftover of a
  // daemon that died: replace it (only if it is a socket).
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Error{"control socket: " + path + " exists and is not a socket", EEXIST};
    ::unlink(path.c_str());
  }
  listen_fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) return Error::from_errno("control socket: socket");
  // Created 0660 from the start: no window with wider permissions.
  mode_t old = ::umask(0117);
  int rc = ::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  ::umask(old);
  if (rc != 0) return Error::from_errno("control socket: binding " + path, bind_errno);
  if (::chown(path.c_str(), 0, group.value_or(0)) != 0) return Error::from_errno("control socket: chown " + path);
  if (::chmod(path.c_str(), group ? 0660 : 0600) != 0) return Error::from_errno("control socket: chmod " + path);
  if (::listen(listen_fd_.get(), 64) != 0) return Error::from_errno("control socket: listen");
  epoll_add(listen_fd_.get(), EPOLLIN);
  control_gid_ = group;
  return {};
}

Status Daemon::watch_policy_dir() {
  if (!inotify_fd_) {
    inotify_fd_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!inotify_fd_) return Error::from_errno("inotify");
    epoll_add(inotify_fd_.get(), EPOLLIN);
  }
  if (watch_ >= 0) return {};
  // Whole writes (close after write, rename into place), removals, and the
  // directory itself going away. No IN_MODIFY: a half-written file is never
  // read.
  watch_ = ::inotify_add_watch(inotify_fd_.get(), cfg_.policy_dir.c_str(),
                               IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF |
                                   IN_MOVE_SELF | IN_ATTRIB | IN_ONLYDIR);
  if (watch_ < 0) return Error::from_errno("policy directory " + cfg_.policy_dir);
  return {};
}

bool Daemon::ensure_enforcer() {
  if (enf_) return true;
  bpf::SharedOptions opts;
  opts.pin_root = cfg_.pin_root;
  auto e = bpf::Enforcer::open_shared(opts);
  if (!e) {
    bpf::LsmState lsm = bpf::read_lsm_state();
    const char* reason = lsm.readable && !lsm.bpf_active ? "lsm_inactive" : "bpf_unavailable";
    metrics_.fail_closed(reason);
    metrics_.enforcement_ready(false);
    if (enforcer_error_ != e.error().message)
      log::error("cannot enforce: " + e.error().message + " (retrying every " + std::to_string(kEnforcerRetryTicks) +
                 " s; runs refuse to start meanwhile)");
    enforcer_error_ = e.error().message;
    return false;
  }
  enforcer_error_.clear();
  enf_ = std::move(*e);
  named_slots_ = std::make_unique<EnforcerNamedSlots>(*enf_);
  dir_.set_slots(named_slots_.get());
  reader_fd_ = sink_.attach(*enf_);
  if (reader_fd_ >= 0) epoll_add(reader_fd_, EPOLLIN);
  log::info("enforcing with the program set pinned in " + enf_->pin_dir());
  return true;
}

// ---------------------------------------------------------------------------
// telemetry

// One audit line to every streaming client; a client whose buffer is full
// misses it, and is told how many it missed before its next line.
void Daemon::stream_line(const std::string& line) {
  for (auto& [fd, c] : clients_) {
    if (!c.streaming) continue;
    std::string notice;
    if (c.dropped) notice = json{{"dropped", c.dropped}}.dump() + "\n";
    if (c.out.size() + notice.size() + line.size() > cfg_.client_buffer_bytes) {
      ++c.dropped;
      ++client_dropped_;
      continue;
    }
    c.out += notice;
    c.out += line;
    c.dropped = 0;
  }
}

void Daemon::consume_events() {
  sink_.consume();
  for (auto& [fd, c] : clients_)
    if (c.streaming && !c.out.empty()) flush_client(c);
}

void Daemon::tick() {
  ++ticks_;
  if (!enf_) {
    if (ticks_ % kEnforcerRetryTicks == 0 && ensure_enforcer()) {
      dir_.adopt_named_slots();
      dir_.full_scan();
    }
  }
  if (watch_ < 0 && enf_ && watch_policy_dir()) dir_.full_scan();
  runs_active_ = runs_.scan();
  metrics_.runs_active(static_cast<double>(runs_active_));
  if (!enf_) return;
  sink_.collect_counters();
  sink_.count_lost();
  if (auto sc = enf_->scopes()) metrics_.scopes_active(static_cast<double>(sc->size()));
  Readiness r = check_ready(*enf_);
  metrics_.enforcement_ready(r.ready);
  if (!r.ready && ticks_ % 60 == 1) log::error("enforcement is NOT ready: " + r.detail);
  if (ticks_ % kReapTicks == 0) {
    std::ostringstream reaped;
    run::Paths paths;
    paths.policy_dir = cfg_.policy_dir;
    paths.cgroup_parent = cfg_.cgroup_parent;
    paths.state_dir = cfg_.state_dir;
    run::reap_stale_runs(*enf_, paths, reaped);
    if (!reaped.str().empty()) log::warn(reaped.str());
  }
  sink_.flush_audit();
}

// ---------------------------------------------------------------------------
// control socket

void Daemon::accept_clients() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) return;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    bool root = cred.uid == 0;
    bool member = root;
    if (!member && control_gid_) {
      member = cred.gid == *control_gid_;
      // Supplementary groups as of connect time (SO_PEERGROUPS, Linux 4.13).
      std::vector<gid_t> groups(256);
      socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
      if (!member && ::getsockopt(fd.get(), SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
        groups.resize(glen / sizeof(gid_t));
        member = std::find(groups.begin(), groups.end(), *control_gid_) != groups.end();
      }
    }
    auto refuse = [&](const std::string& why) {
      std::string msg = json{{"ok", false}, {"error", why}}.dump() + "\n";
      (void)!::send(fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    };
    if (!member) {
      log::warn("control socket: refused uid " + std::to_string(cred.uid) + " (pid " + std::to_string(cred.pid) +
                "): not root and not in the control group");
      refuse("permission denied: root or the control group only");
      continue;
    }
    if (clients_.size() >= cfg_.max_clients) {
      refuse("too many clients (max_clients " + std::to_string(cfg_.max_clients) + ")");
      continue;
    }
    int raw = fd.get();
    Client c;
    c.fd = std::move(fd);
    c.uid = cred.uid;
    c.root = root;
    clients_.emplace(raw, std::move(c));
    epoll_add(raw, EPOLLIN | EPOLLRDHUP);
  }
}

void Daemon::respond(Client& c, const json& j) {
  c.out += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void Daemon::flush_client(Client& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    c.close_after_flush = true;  // peer gone
    c.out.clear();
    break;
  }
  bool want = !c.out.empty();
  if (want != c.want_out) {
    epoll_mod(c.fd.get(), EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u));
    c.want_out = want;
  }
}

void Daemon::close_client(int fd) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  clients_.erase(fd);
}

void Daemon::on_client(int fd, uint32_t events) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (events & EPOLLIN) {
    char buf[16384];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      if (n == 0) {
        if (c.out.empty() || !c.streaming) c.close_after_flush = true;
        if (c.streaming) return close_client(fd);
        break;
      }
      if (c.streaming || c.close_after_flush) continue;  // nothing more is read from a stream
      c.in.append(buf, static_cast<size_t>(n));
      size_t nl;
      while (!c.close_after_flush && !c.streaming && (nl = c.in.find('\n')) != std::string::npos) {
        std::string line = c.in.substr(0, nl);
        c.in.erase(0, nl + 1);
        handle_line(c, line);
      }
      if (c.in.size() > kMaxRequestBytes) {
        respond(c, {{"ok", false}, {"error", "request: longer than " + std::to_string(kMaxRequestBytes) + " bytes"}});
        c.close_after_flush = true;
        c.in.clear();
      }
    }
  }
  if ((events & (EPOLLHUP | EPOLLERR)) && !(events & EPOLLIN)) return close_client(fd);
  flush_client(c);
  if (c.close_after_flush && c.out.empty()) close_client(fd);
}

json Daemon::status_json() {
  json s = enf_ ? kernel_status(*enf_, runs_.ids())
                : json{{"enforcement", {{"ready", false}, {"detail", "cannot enforce: " + enforcer_error_}}}};
  s["policy_files"] = dir_.status_json();
  s["daemon"] = {{"running", true},
                 {"pid", ::getpid()},
                 {"version", AGENTCAGE_VERSION},
                 {"policy_dir", cfg_.policy_dir},
                 {"metrics_address", cfg_.metrics_address},
                 {"metrics_port", metrics_.port()},
                 {"control_socket", cfg_.control_socket},
                 {"audit_log", cfg_.audit_log},
                 {"enforcer_error", enforcer_error_.empty() ? json(nullptr) : json(enforcer_error_)},
                 {"events_delivered", sink_.delivered()},
                 {"events_malformed", sink_.malformed()},
                 {"audit_dropped", sink_.audit_dropped()},
                 {"stream_dropped", client_dropped_},
                 {"clients", clients_.size()},
                 {"runs_active", runs_active_}};
  return s;
}

json Daemon::do_attach(const Request& r) {
  const std::optional<uint32_t> slot = dir_.named_slot(r.policy);
  if (!slot)
    return {{"ok", false}, {"error", "no policy named '" + r.policy + "' is loaded by the daemon (policy dir " + cfg_.policy_dir + ")"}};
  auto cg = scope::find_cgroup(r.cgroup);
  if (!cg) return {{"ok", false}, {"error", cg.error().message}};
  const bool uses_ws = dir_.uses_workspace(r.policy);
  std::string workspace;
  if (!r.workspace.empty()) {
    std::error_code ec;
    fs::path ws = fs::canonical(r.workspace, ec);
    if (ec || !fs::is_directory(ws) || ws == "/")
      return {{"ok", false}, {"error", "workspace " + r.workspace + ": not an existing directory other than /"}};
    workspace = ws.string();
  } else if (uses_ws) {
    return {{"ok", false}, {"error", "policy " + r.policy + " has ${workspace} rules: pass a workspace"}};
  }
  auto confined = scope::confine(*enf_, *cg, scope::NamedPolicy{r.policy, *slot}, workspace);
  if (!confined) return {{"ok", false}, {"error", confined.error().message}};
  log::info("attached " + cg->path.string() + " to policy " + r.policy);
  return {{"ok", true}, {"cgroup", cg->path.string()}, {"cgroup_id", cg->id}, {"policy", r.policy}, {"slot", *slot}};
}

json Daemon::do_detach(const Request& r) {
  auto cg = scope::find_cgroup(r.cgroup);
  if (!cg) return {{"ok", false}, {"error", cg.error().message}};
  auto released = scope::release(*enf_, *cg, scope::Ending::detach);
  if (!released) return {{"ok", false}, {"error", released.error().message}};
  log::info("detached " + cg->path.string());
  // What `agentcage detach` prints: the policy, and what it decided while
  // the cgroup was attached, in total and per hook.
  const bpf::ScopeReport report = released->report.value_or(bpf::ScopeReport{});
  json denied_by_hook = json::object(), audited_by_hook = json::object();
  for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h) {
    if (report.denied[h]) denied_by_hook[std::string(bpf::hook_name(h))] = report.denied[h];
    if (report.audited[h]) audited_by_hook[std::string(bpf::hook_name(h))] = report.audited[h];
  }
  return {{"ok", true},
          {"cgroup", cg->path.string()},
          {"policy", released->policy_name.empty() ? json(nullptr) : json(released->policy_name)},
          {"reported", released->report.has_value()},
          {"denied", report.denied_total()},
          {"audited", report.audited_total()},
          {"denied_by_hook", denied_by_hook},
          {"audited_by_hook", audited_by_hook}};
}

void Daemon::handle_line(Client& c, const std::string& line) {
  auto req = parse_request(line);
  if (!req) {
    respond(c, {{"ok", false}, {"error", req.error().message}});
    return;
  }
  if (!c.root && !op_allowed_for_group(req->op)) {
    respond(c, {{"ok", false}, {"error", std::string("permission denied: op ") + std::string(op_name(req->op)) + " needs root"}});
    return;
  }
  const bool needs_enforcer = req->op == Op::attach || req->op == Op::detach;
  if (needs_enforcer && !enf_) {
    respond(c, {{"ok", false}, {"error", "cannot enforce: " + enforcer_error_}});
    return;
  }
  switch (req->op) {
    case Op::status: respond(c, json{{"ok", true}, {"status", status_json()}}); break;
    case Op::events:
      respond(c, {{"ok", true}, {"recent", sink_.recent().size()}, {"follow", req->follow}});
      for (const auto& l : sink_.recent()) c.out += l;
      if (req->follow) c.streaming = true;
      else c.close_after_flush = true;
      break;
    case Op::attach: respond(c, do_attach(*req)); break;
    case Op::detach: respond(c, do_detach(*req)); break;
    case Op::run_start:
      runs_.note(req->scope_id, req->run_id);
      respond(c, {{"ok", true}});
      break;
    case Op::run_end:
      metrics_.run_finished(req->policy, req->outcome, req->duration_seconds);
      if (req->fail_closed) metrics_.fail_closed(*req->fail_closed);
      // Decisions of the run's last moments, before its transient slot goes.
      sink_.collect_counters();
      respond(c, {{"ok", true}});
      break;
    case Op::reload:
      dir_.rescan_all();
      respond(c, {{"ok", true}, {"status", status_json()["policy_files"]}});
      break;
  }
}

// ---------------------------------------------------------------------------

int Daemon::loop() {
  epoll_event events[64];
  while (!stop_) {
    int n = ::epoll_wait(epoll_.get(), events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::error(std::string("epoll_wait: ") + std::strerror(errno));
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == signal_fd_.get()) {
        signalfd_siginfo si{};
        while (::read(fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          if (si.ssi_signo == SIGHUP) {
            log::info("SIGHUP: reopening the audit log and rescanning " + cfg_.policy_dir);
            sink_.flush_audit();
            if (Status st = sink_.open_audit_log(); !st) log::error(st.error().message);
            dir_.rescan_all();
          } else {
            log::info("stopping on signal " + std::to_string(si.ssi_signo) + " (enforcement continues: the programs stay pinned)");
            stop_ = true;
          }
        }
      } else if (fd == timer_fd_.get()) {
        uint64_t exp;
        (void)!::read(fd, &exp, sizeof exp);
        tick();
      } else if (fd == reader_fd_) {
        consume_events();
      } else if (fd == inotify_fd_.get()) {
        alignas(inotify_event) char buf[16384];
        std::set<std::string> changed;
        bool rescan = false;
        for (;;) {
          ssize_t len = ::read(fd, buf, sizeof buf);
          if (len <= 0) break;
          for (char* p = buf; p < buf + len;) {
            auto* ev = reinterpret_cast<inotify_event*>(p);
            p += sizeof(inotify_event) + ev->len;
            if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
              if (watch_ >= 0) log::warn("policy directory " + cfg_.policy_dir + " went away; its policies stay loaded until it is back");
              if (watch_ >= 0) ::inotify_rm_watch(fd, watch_);
              watch_ = -1;
              continue;
            }
            if (ev->mask & IN_Q_OVERFLOW) rescan = true;
            std::string name = ev->len ? std::string(ev->name) : std::string();
            if (is_policy_file_name(name)) changed.insert(name);
            else if (!name.empty() && name[0] == '.') rescan = true;  // e.g. a ConfigMap's ..data swap
          }
        }
        if (rescan) dir_.full_scan();
        for (const auto& name : changed) dir_.apply_file(name);
        if (!changed.empty()) dir_.save_state_file();
      } else if (fd == listen_fd_.get()) {
        accept_clients();
      } else {
        on_client(fd, events[i].events);
      }
    }
  }
  consume_events();
  sink_.flush_audit();
  // Still holding the instance lock: the socket is ours to remove, so
  // clients see "not running" rather than a refused connection.
  ::unlink(cfg_.control_socket.c_str());
  return 0;
}

}  // namespace

int run_daemon(const Config& config) {
  Daemon d(config);
  if (Status st = d.start(); !st) {
    log::error("daemon: " + st.error().message);
    return 1;
  }
  return d.loop();
}

int daemon_command(const std::string& config_file) {
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
  return run_daemon(cfg);
}

}  // namespace agentcage::daemon
