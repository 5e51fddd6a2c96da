// SPDX-License-Identifier: Apache-2.0
#include "daemon/policy_dir.h"

#include "policy/include.h"

#include <sys/stat.h>

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "bpf/compile.h"
#include "bpf/keys.h"
#include "policy/policy.h"
#include "policy/values.h"
#include "util/log.h"

namespace agentcage::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string stem_of(const std::string& n) { return n.substr(0, n.size() - 5); }

}  // namespace

PolicyDirectory::PolicyDirectory(std::string policy_dir, std::string state_dir, PolicyDirListener& listener)
    : dir_(std::move(policy_dir)),
      state_file_(std::move(state_dir) + "/daemon-policies.json"),
      listener_(listener) {}

std::optional<uint32_t> PolicyDirectory::named_slot(const std::string& policy) const {
  auto it = named_slots_.find(policy);
  if (it == named_slots_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> PolicyDirectory::workspace_problem(const std::string& policy,
                                                              const std::string& workspace) const {
  const auto f = files_.find(policy + ".yaml");
  if (f == files_.end() || !f->second.loaded) return std::nullopt;
  return bpf::workspace_problem(f->second.compiled, policy, workspace);
}

bool PolicyDirectory::uses_workspace(const std::string& policy) const {
  auto f = files_.find(policy + ".yaml");
  return f != files_.end() && f->second.uses_workspace;
}

std::string PolicyDirectory::domain_rule(const std::string& policy) const {
  auto f = files_.find(policy + ".yaml");
  return f != files_.end() && f->second.loaded ? f->second.domain_rule : std::string();
}

std::optional<policy::Limits> PolicyDirectory::limits(const std::string& policy) const {
  auto f = files_.find(policy + ".yaml");
  if (f == files_.end() || !f->second.loaded) return std::nullopt;
  return f->second.limits;
}

void PolicyDirectory::load_state_file() {
  std::ifstream in(state_file_);
  if (!in) return;
  json j = json::parse(in, nullptr, false);
  if (!j.is_object()) return;
  for (const auto& [name, slot] : j.items())
    if (slot.is_number_unsigned() && slot.get<uint64_t>() < AC_MAX_POLICIES)
      named_slots_[name] = static_cast<uint32_t>(slot.get<uint64_t>());
}

void PolicyDirectory::save_state_file() {
  json j = json::object();
  for (const auto& [name, slot] : named_slots_) j[name] = slot;
  const std::string tmp = state_file_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    if (!out) {
      log::warn("cannot write " + tmp);
      return;
    }
  }
  if (::rename(tmp.c_str(), state_file_.c_str()) != 0)
    log::warn("cannot write " + state_file_ + ": " + std::strerror(errno));
}

void PolicyDirectory::adopt_named_slots() {
  if (!slots_) return;
  auto pols = slots_->policies();
  if (!pols) return;
  std::map<std::string, uint32_t> adopted;
  for (const auto& p : *pols) {
    if (p.owner != AC_POLICY_OWNER_NAMED || p.name.empty()) continue;
    auto it = named_slots_.find(p.name);
    std::error_code ec;
    bool ours = (it != named_slots_.end() && it->second == p.slot) ||
                fs::exists(fs::path(dir_) / (p.name + ".yaml"), ec);
    if (ours && !adopted.count(p.name)) adopted[p.name] = p.slot;
  }
  named_slots_ = adopted;
}

void PolicyDirectory::rescan_all() {
  for (auto& [name, pf] : files_) pf.mtime_ns = -1;
  full_scan();
}

void PolicyDirectory::full_scan() {
  if (!slots_) return;
  std::set<std::string> present;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string n = entry.path().filename().string();
    if (is_policy_file_name(n)) present.insert(n);
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    log::warn("policy directory " + dir_ + ": " + ec.message());
  for (const auto& n : present) apply_file(n);
  std::vector<std::string> gone;
  for (const auto& [n, pf] : files_)
    if (!present.count(n)) gone.push_back(n);
  for (const auto& n : gone) remove_file(n);
  // Named slots of a previous daemon whose file is gone.
  std::vector<std::string> stale;
  for (const auto& [name, slot] : named_slots_)
    if (!files_.count(name + ".yaml")) stale.push_back(name);
  for (const auto& name : stale) {
    uint32_t slot = named_slots_[name];
    listener_.before_slot_removed();  // rule 1
    if (Status st = slots_->remove(slot); !st) {
      log::error("removing policy " + name + ": " + st.error().message);
      continue;
    }
    named_slots_.erase(name);
    log::warn("policy " + name + " removed (its file is gone from " + dir_ +
              "): scopes still on it deny everything (fail closed)");
  }
  save_state_file();
  listener_.policies_loaded(named_slots_.size());
}

void PolicyDirectory::reject(PolicyFile& pf, const std::vector<std::string>& messages,
                             core::FailClosedReason fail_reason) {
  const std::string file = dir_ + "/" + pf.name + ".yaml";
  for (const auto& m : messages) log::error(m, {{"POLICY", pf.name}, {"POLICY_FILE", file}});
  pf.error = messages.empty() ? "rejected" : messages.front();
  if (messages.size() > 1) pf.error += " (and " + std::to_string(messages.size() - 1) + " more)";
  pf.loaded = false;
  listener_.reloaded(false);
  listener_.rejected(fail_reason);
  if (pf.slot)
    log::warn("policy " + pf.name + ": the change was rejected; the previous version keeps enforcing (slot " +
                  std::to_string(*pf.slot) + ")",
              {{"POLICY", pf.name}, {"POLICY_FILE", file}});
  else
    log::warn("policy " + pf.name + " is not loaded: runs and attachments naming it fail",
              {{"POLICY", pf.name}, {"POLICY_FILE", file}});
}

void PolicyDirectory::apply_file(const std::string& fname) {
  if (!apply_one(fname)) return;
  // The policies that include it, directly or not (each once).
  const std::string changed = policy::resolve_include("", (fs::path(dir_) / fname).string());
  std::vector<std::string> dependents;
  for (const auto& [name, pf] : files_)
    if (name != fname &&
        std::find(pf.included_files.begin(), pf.included_files.end(), changed) != pf.included_files.end())
      dependents.push_back(name);
  for (const auto& name : dependents) {
    log::info("policy " + stem_of(name) + " includes " + fname + ": parsing it again");
    files_[name].mtime_ns = -1;  // unchanged itself: parse it anyway
    apply_one(name);
  }
}

bool PolicyDirectory::apply_one(const std::string& fname) {
  if (!slots_) return false;
  const std::string path = (fs::path(dir_) / fname).string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    if (!files_.count(fname)) return false;
    remove_file(fname);
    return true;
  }
  PolicyFile& pf = files_[fname];
  if (pf.dev == st.st_dev && pf.ino == st.st_ino && pf.size == st.st_size && pf.mtime_ns == mtime_ns(st))
    return false;
  pf.dev = st.st_dev;
  pf.ino = st.st_ino;
  pf.size = st.st_size;
  pf.mtime_ns = mtime_ns(st);
  pf.name = stem_of(fname);
  if (!pf.slot)
    if (auto it = named_slots_.find(pf.name); it != named_slots_.end()) pf.slot = it->second;
  install(pf, path);
  return true;
}

void PolicyDirectory::install(PolicyFile& pf, const std::string& path) {
  auto parsed = policy::load_policy_dir_file(path);
  pf.included_files = parsed.included_files;
  if (!parsed.ok()) {
    std::vector<std::string> msgs;
    for (const auto& d : parsed.errors) msgs.push_back(d.format());
    return reject(pf, msgs, core::FailClosedReason::policy_invalid);
  }
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled)
    return reject(pf, {compiled.error().message}, core::FailClosedReason::policy_invalid);  // located
  const uint64_t digest = bpf::policy_digest(pf.name, *compiled);
  pf.limits = parsed.policy->limits;
  pf.domain_rule.clear();
  if (const policy::NetRule* d = policy::first_domain_rule(*parsed.policy))
    pf.domain_rule = parsed.policy->source_of(d->pos) + ":" + std::to_string(d->pos.line) + ":" +
                     std::to_string(d->pos.column) + ": domain " + d->domain;
  pf.uses_workspace = std::any_of(compiled->paths.begin(), compiled->paths.end(), [](const bpf::PathRule& r) {
    return r.space == bpf::RuleSpace::workspace;
  });
  const bool had_slot = pf.slot.has_value();
  // Whether the kernel gets these rules now (not an unchanged file read again).
  const bool installs = !(pf.loaded && pf.digest == digest);
  uint32_t slot = 0;
  if (pf.slot) {
    slot = *pf.slot;
    if (!(pf.loaded && pf.digest == digest)) {
      // The new rules govern the scopes already on the slot: each workspace
      // must pass what confine asks of a new one (bpf::workspace_problem).
      auto scopes = slots_->scopes();
      if (!scopes)
        return reject(pf,
                      {path + ": listing the scopes on slot " + std::to_string(slot) +
                       " to check their workspaces: " + scopes.error().message},
                      core::FailClosedReason::internal);
      for (const auto& sc : *scopes)
        if (sc.policy_slot == slot)
          if (auto problem = bpf::workspace_problem(*compiled, pf.name, sc.workspace))
            return reject(
                pf,
                {path + ": " + *problem + " (a scope on this policy, cgroup id " +
                 std::to_string(sc.cgroup_id) + ", has that workspace; the rules that enforce stay)"},
                core::FailClosedReason::policy_invalid);
      if (Status put = slots_->put(slot, pf.name, *compiled); !put)
        return reject(pf, {path + ": installing the policy: " + put.error().message},
                      core::FailClosedReason::internal);
    }
  } else {
    std::vector<uint32_t> reserved;
    for (const auto& [n, s] : named_slots_) reserved.push_back(s);
    Status put;
    auto s = slots_->allocate(reserved, [&](uint32_t fresh) -> Status {
      listener_.slot_fresh(fresh, pf.name);  // rule 2
      put = slots_->put(fresh, pf.name, *compiled);
      return put;
    });
    if (!put)
      return reject(pf, {path + ": installing the policy: " + put.error().message},
                    core::FailClosedReason::internal);
    if (!s) return reject(pf, {path + ": " + s.error().message}, core::FailClosedReason::internal);
    slot = *s;
  }
  pf.slot = slot;
  pf.digest = digest;
  pf.loaded = true;
  if (installs || !had_slot) pf.loaded_at = std::time(nullptr);
  pf.compiled = std::move(*compiled);
  pf.error.clear();
  named_slots_[pf.name] = slot;
  listener_.slot_named(slot, pf.name);
  save_state_file();
  listener_.reloaded(true);
  listener_.policies_loaded(named_slots_.size());
  log::info(std::string("policy ") + pf.name + (had_slot ? " reloaded" : " loaded") + " into slot " +
            std::to_string(slot) + " from " + path + " (" + policy::to_string(parsed.policy->mode) + ")");
}

void PolicyDirectory::remove_file(const std::string& fname) {
  auto it = files_.find(fname);
  if (it == files_.end()) return;
  PolicyFile pf = it->second;
  files_.erase(it);
  if (!slots_ || !pf.slot) return;
  listener_.before_slot_removed();  // rule 1
  if (Status st = slots_->remove(*pf.slot); !st) {
    log::error("removing policy " + pf.name + ": " + st.error().message);
    return;
  }
  size_t users = 0;
  if (auto sc = slots_->scopes())
    for (const auto& s : *sc) users += s.policy_slot == *pf.slot;
  named_slots_.erase(pf.name);
  listener_.slot_removed(*pf.slot);
  save_state_file();
  listener_.policies_loaded(named_slots_.size());
  log::warn("policy " + pf.name + " removed (" + fname + " was deleted)" +
            (users ? ": " + std::to_string(users) +
                         " scope(s) still on it now deny everything (fail closed) until they end"
                   : std::string()));
}

json PolicyDirectory::status_json() const {
  json files = json::array();
  for (const auto& [n, pf] : files_)
    files.push_back({{"file", (fs::path(dir_) / n).string()},
                     {"policy", pf.name},
                     {"state", pf.loaded ? "loaded"
                               : pf.slot ? "rejected_previous_enforcing"
                                         : "rejected"},
                     {"slot", pf.slot ? json(*pf.slot) : json(nullptr)},
                     {"error", pf.error.empty() ? json(nullptr) : json(pf.error)}});
  return files;
}

}  // namespace agentcage::daemon
