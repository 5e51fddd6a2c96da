// SPDX-License-Identifier: Apache-2.0
#include "daemon/runs.h"

#include <fcntl.h>
#include <sys/file.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run/state.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMaxRunIds = 4096;

}  // namespace

size_t RunIndex::scan() {
  last_scan_ = Clock::now();
  size_t alive = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 21 || name.compare(16, 5, ".json") != 0) continue;
    // The record is written after its lock is taken, so probing the lock of a
    // run that has a record never races the run's own flock.
    UniqueFd lock(
        ::open((dir_ + "/" + name.substr(0, 16) + ".lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!lock) continue;
    if (::flock(lock.get(), LOCK_SH | LOCK_NB) == 0) continue;  // owner died: the reaper's
    std::ifstream in(entry.path());
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    auto rec = j.is_object() ? run::record_from_json(j) : Result<run::RunRecord>(Error{"", 0});
    if (rec && rec->spare) continue;  // prepared ahead, no run's yet (run/runner.h)
    ++alive;
    if (!rec || rec->cgroup_id == 0) continue;
    if (!run_ids_.count(rec->cgroup_id)) note(rec->cgroup_id, rec->run_id);
  }
  return alive;
}

std::optional<std::string> RunIndex::run_id(uint64_t scope_id) {
  auto run = run_ids_.find(scope_id);
  if (run == run_ids_.end() && Clock::now() - last_scan_ > std::chrono::seconds(1)) {
    scan();
    run = run_ids_.find(scope_id);
  }
  if (run == run_ids_.end()) return std::nullopt;
  return run->second;
}

void RunIndex::note(uint64_t scope_id, const std::string& run_id, const core::Labels& labels,
                    std::optional<uid_t> owner) {
  if (!run_ids_.count(scope_id)) order_.push_back(scope_id);
  run_ids_[scope_id] = run_id;
  if (labels.empty())
    labels_.erase(scope_id);
  else
    labels_[scope_id] = labels;
  if (owner)
    owners_[scope_id] = *owner;
  else
    owners_.erase(scope_id);
  while (order_.size() > kMaxRunIds) {
    run_ids_.erase(order_.front());
    labels_.erase(order_.front());
    owners_.erase(order_.front());
    order_.pop_front();
  }
}

core::Labels RunIndex::labels(uint64_t scope_id) const {
  auto it = labels_.find(scope_id);
  return it == labels_.end() ? core::Labels{} : it->second;
}

std::optional<uid_t> RunIndex::owner(uint64_t scope_id) const {
  auto it = owners_.find(scope_id);
  return it == owners_.end() ? std::nullopt : std::optional<uid_t>(it->second);
}

std::optional<uid_t> RunIndex::owner_of_run(const std::string& run_id) const {
  for (const auto& [scope, id] : run_ids_)
    if (id == run_id) return owner(scope);
  return std::nullopt;
}

core::Labels RunIndex::labels_of_run(const std::string& run_id) const {
  for (const auto& [scope, id] : run_ids_)
    if (id == run_id) return labels(scope);
  return {};
}

}  // namespace agentcage::daemon
