// SPDX-License-Identifier: Apache-2.0
#include "run/recording.h"

#include <algorithm>
#include <cstring>

#include "bpf/record.h"

namespace agentcage::run {

Result<std::unique_ptr<Recording>> Recording::open(UniqueFd ring) {
  std::unique_ptr<Recording> self(new Recording());
  Recording* raw = self.get();
  auto reader = bpf::EventReader::create(ring.get(), [raw](const ac_event_decision& r) { raw->set_.add(r); });
  if (!reader) return reader.error().wrap("reading the run's recording");
  self->ring_ = std::move(ring);
  self->reader_ = std::move(*reader);
  return self;
}

int Recording::poll_fd() const { return reader_->epoll_fd(); }

Status Recording::drain() {
  auto n = reader_->consume();
  if (!n) return n.error();
  return {};
}

nlohmann::json Recording::json(uint64_t unrecorded) const {
  return set_.json(unrecorded + reader_->malformed());
}

RecordSet::Key RecordSet::key_of(const ac_event_decision& r) {
  const size_t len = std::min<size_t>(r.target_len, sizeof r.target);
  const size_t addr = r.target_kind == AC_TARGET_INET ? sizeof r.addr : 0;
  return Key{r.hook,
             r.decision,
             r.reason,
             r.target_kind,
             r.access,
             r.family,
             r.port,
             r.protocol,
             std::string(r.target, len),
             std::string(reinterpret_cast<const char*>(r.addr), addr)};
}

void RecordSet::add(const ac_event_decision& record) {
  ++total_;
  Key key = key_of(record);
  if (auto it = index_.find(key); it != index_.end()) {
    ++entries_[it->second].count;
    return;
  }
  if (entries_.size() >= kRecordingMaxDistinct) {
    ++dropped_;
    return;
  }
  index_.emplace(std::move(key), entries_.size());
  entries_.push_back(Entry{record, 1});
}

nlohmann::json RecordSet::json(uint64_t lost_elsewhere) const {
  nlohmann::json records = nlohmann::json::array();
  for (const Entry& e : entries_) {
    nlohmann::json r = bpf::record_json(e.first);
    r["count"] = e.count;
    records.push_back(std::move(r));
  }
  const uint64_t lost = lost_elsewhere + dropped_;
  return {{"complete", lost == 0},
          {"total", total_},
          {"distinct", entries_.size()},
          {"lost", lost},
          {"records", std::move(records)}};
}

}  // namespace agentcage::run
