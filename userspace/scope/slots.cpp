// SPDX-License-Identifier: Apache-2.0
#include "scope/slots.h"

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>
#include <set>

namespace agentcage::scope {
namespace {

std::set<uint32_t> referenced_slots(const SlotView& view) {
  std::set<uint32_t> out;
  for (const auto& s : view.scopes) out.insert(s.policy_slot);
  return out;
}

bool is_transient(const bpf::PolicyInfo& p) { return p.owner == AC_POLICY_OWNER_TRANSIENT; }

// policies() is sorted by slot; a fake's may not be.
std::vector<bpf::PolicyInfo> by_slot(std::vector<bpf::PolicyInfo> policies) {
  std::sort(policies.begin(), policies.end(),
            [](const bpf::PolicyInfo& a, const bpf::PolicyInfo& b) { return a.slot < b.slot; });
  return policies;
}

Error all_in_use() {
  return Error{"all " + std::to_string(AC_MAX_POLICIES) +
                   " policy slots are in use (by named policies and by running or attached scopes)",
               ENOSPC};
}

}  // namespace

Result<SlotChoice> choose_transient_slot(const SlotView& view, const std::string& name, uint64_t digest,
                                         bool share_named) {
  const auto policies = by_slot(view.policies);
  auto same = [&](const bpf::PolicyInfo& p) { return p.name == name && p.digest == digest; };
  if (share_named)
    for (const auto& p : policies)
      if (p.owner == AC_POLICY_OWNER_NAMED && same(p)) return SlotChoice{p.slot, false, false};
  for (const auto& p : policies)
    if (is_transient(p) && same(p)) return SlotChoice{p.slot, false, true};

  const std::set<uint32_t> referenced = referenced_slots(view);
  std::set<uint32_t> holding;
  for (const auto& p : policies) holding.insert(p.slot);
  for (uint32_t slot = 0; slot < AC_MAX_POLICIES; ++slot)
    if (!holding.count(slot) && !referenced.count(slot)) return SlotChoice{slot, true, true};
  for (const auto& p : policies)
    if (is_transient(p) && !referenced.count(p.slot)) return SlotChoice{p.slot, true, true};
  return all_in_use();
}

Result<uint32_t> choose_named_slot(const SlotView& view, const std::vector<uint32_t>& reserved) {
  std::set<uint32_t> taken = referenced_slots(view);
  for (const auto& p : view.policies) taken.insert(p.slot);
  taken.insert(reserved.begin(), reserved.end());
  for (uint32_t slot = 0; slot < AC_MAX_POLICIES; ++slot)
    if (!taken.count(slot)) return slot;
  return all_in_use();
}

std::vector<uint32_t> transient_evictions(const SlotView& view, uint32_t released) {
  const std::set<uint32_t> referenced = referenced_slots(view);
  std::vector<uint32_t> unused;
  for (const auto& p : by_slot(view.policies))
    if (is_transient(p) && !referenced.count(p.slot)) unused.push_back(p.slot);
  if (unused.size() <= kCachedTransient) return {};
  // The one just released goes last: it is the most recently used.
  std::stable_partition(unused.begin(), unused.end(), [&](uint32_t s) { return s != released; });
  unused.resize(unused.size() - kCachedTransient);
  return unused;
}

}  // namespace agentcage::scope
