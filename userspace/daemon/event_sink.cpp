// SPDX-License-Identifier: Apache-2.0
#include "daemon/event_sink.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "telemetry/audit.h"
#include "util/log.h"

namespace agentcage::daemon {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMaxAuditBuffer = 8u << 20;

}  // namespace

EventSink::EventSink(std::string audit_log, size_t recent_events, telemetry::Metrics& metrics, RunIndex& runs,
                     const ContainerIndex& containers)
    : audit_log_(std::move(audit_log)),
      recent_max_(recent_events),
      metrics_(metrics),
      runs_(runs),
      containers_(containers),
      boot_offset_ns_(telemetry::boot_to_realtime_offset_ns()) {}

Status EventSink::open_audit_log() {
  if (audit_log_ == "-") {
    audit_fd_.reset(::fcntl(1, F_DUPFD_CLOEXEC, 3));
    if (!audit_fd_) return Error::from_errno("audit log: stdout");
    return {};
  }
  std::error_code ec;
  fs::create_directories(fs::path(audit_log_).parent_path(), ec);
  UniqueFd fd(::open(audit_log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640));
  if (!fd) return Error::from_errno("audit log: opening " + audit_log_);
  audit_fd_ = std::move(fd);
  return {};
}

Status EventSink::move_audit_log(const std::string& audit_log) {
  flush_audit();
  std::string old = std::move(audit_log_);
  audit_log_ = audit_log;
  if (Status st = open_audit_log(); !st) {
    audit_log_ = std::move(old);
    return st;
  }
  return {};
}

void EventSink::set_recent_events(size_t n) {
  recent_max_ = n;
  while (recent_.size() > recent_max_) recent_.pop_front();
}

int EventSink::attach(bpf::Enforcer& enforcer) {
  enf_ = &enforcer;
  auto reader =
      bpf::EventReader::create(enforcer.events_fd(), [this](const ac_event_decision& ev) { on_event(ev); });
  if (!reader) {
    log::error("events: " + reader.error().message);
    return -1;
  }
  reader_ = std::move(*reader);
  return reader_->epoll_fd();
}

std::string EventSink::slot_name(uint32_t slot) {
  auto it = slot_names_.find(slot);
  if (it != slot_names_.end()) return it->second;
  // An unknown slot: refresh at most every 100 ms (an event storm from a new
  // slot must not turn into a map walk per event).
  if (enf_ && Clock::now() - last_slot_refresh_ > std::chrono::milliseconds(100)) {
    last_slot_refresh_ = Clock::now();
    if (auto pols = enf_->policies())
      for (const auto& p : *pols) slot_names_[p.slot] = p.name;
    it = slot_names_.find(slot);
    if (it != slot_names_.end()) return it->second;
  }
  return "unknown";
}

void EventSink::on_event(const ac_event_decision& ev) {
  ++delivered_;
  const std::string policy = slot_name(ev.policy_slot);
  metrics_.event(policy, ev.hook, ev.decision);
  telemetry::EventContext ctx;
  ctx.realtime_ns = static_cast<int64_t>(ev.hdr.time_ns) + boot_offset_ns_;
  ctx.policy = policy == "unknown" ? std::string() : policy;
  std::optional<uid_t> owner;
  if (std::optional<std::string> run = runs_.run_id(ev.scope_id)) {
    ctx.run_id = *run;
    ctx.labels = runs_.labels(ev.scope_id);
    owner = runs_.owner(ev.scope_id);
  } else if (std::string container = containers_.id_of_scope(ev.scope_id); !container.empty()) {
    ctx.container_id = std::move(container);
    if (const ContainerScope* c = containers_.find(ctx.container_id)) ctx.labels = c->labels;
  }
  emit(telemetry::event_line(ev, ctx), owner);
}

void EventSink::refused_names(const std::string& run_id, const std::string& policy,
                              const std::map<std::string, uint64_t>& by_name) {
  telemetry::EventContext ctx;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  ctx.realtime_ns = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
  ctx.policy = policy == "unknown" ? std::string() : policy;
  ctx.run_id = run_id;
  ctx.labels = runs_.labels_of_run(run_id);
  const std::optional<uid_t> owner = runs_.owner_of_run(run_id);
  for (const auto& [name, count] : by_name) emit(telemetry::refused_name_line(name, count, ctx), owner);
}

void EventSink::emit(std::string line, std::optional<uid_t> owner) {
  if (audit_buf_.size() + line.size() <= kMaxAuditBuffer)
    audit_buf_ += line;
  else
    ++audit_dropped_;
  AuditEvent event{std::move(line), owner};
  if (stream_) stream_(event);
  if (recent_max_) {
    recent_.push_back(std::move(event));
    while (recent_.size() > recent_max_) recent_.pop_front();
  }
}

void EventSink::consume() {
  if (!reader_) return;
  auto n = reader_->consume();
  if (!n) log::error(n.error().message);
  flush_audit();
}

void EventSink::flush_audit() {
  size_t off = 0;
  while (off < audit_buf_.size()) {
    ssize_t n = ::write(audit_fd_.get(), audit_buf_.data() + off, audit_buf_.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (errno != EAGAIN) log::error(std::string("audit log: ") + std::strerror(errno));
      break;
    }
    off += static_cast<size_t>(n);
  }
  audit_buf_.erase(0, off);
}

void EventSink::collect_counters() {
  if (!enf_) return;
  auto pols = enf_->policies();
  if (!pols) return;
  std::set<uint32_t> live;
  for (const auto& p : *pols) {
    live.insert(p.slot);
    collect_slot(p.slot, p.name);
  }
  for (uint32_t slot = 0; slot < AC_MAX_POLICIES; ++slot)
    if (!live.count(slot)) tracker_.forget(slot);
}

void EventSink::collect_slot(uint32_t slot, const std::string& name) {
  slot_names_[slot] = name;
  auto c = enf_->counters(slot);
  if (!c) return;
  for (const auto& d : tracker_.observe(slot, name, *c))
    metrics_.decisions(name, d.hook, d.decision, d.amount);
}

void EventSink::collect_counters(uint32_t slot) {
  if (!enf_ || slot >= AC_MAX_POLICIES) return;
  // The slot may hold another policy by now (the run released it, and
  // another run took it): its counters are that one's.
  auto p = enf_->policy(slot);
  if (!p) return;
  if (!*p) {
    tracker_.forget(slot);  // free: a policy installed there later counts afresh
    return;
  }
  collect_slot(slot, (*p)->name);
}

void EventSink::baseline(uint32_t slot, const std::string& name) {
  if (!enf_) return;
  if (auto c = enf_->counters(slot)) (void)tracker_.observe(slot, name, *c);
}

void EventSink::count_lost() {
  if (!enf_) return;
  mirror_stat(AC_STAT_EVENTS_LOST, lost_, &telemetry::Metrics::events_lost);
  mirror_stat(AC_STAT_EVENTS_SUPPRESSED, suppressed_, &telemetry::Metrics::events_suppressed);
}

void EventSink::mirror_stat(ac_stat which, StatSeen& s, void (telemetry::Metrics::*add)(uint64_t)) {
  if (auto now = enf_->stat(which)) {
    // The kernel's count is absolute and outlives the daemon: export what
    // was counted while this daemon runs, and what it finds at start.
    if (!s.initialised || *now >= s.seen) (metrics_.*add)(*now - (s.initialised ? s.seen : 0));
    s.seen = *now;
    s.initialised = true;
  }
}

}  // namespace agentcage::daemon
