// SPDX-License-Identifier: Apache-2.0
#include "daemon/status.h"

#include <bpf/bpf.h>
#include <sys/stat.h>

#include <cstdio>
#include <sstream>

#include "bpf/lsm.h"
#include "bpf/names.h"
#include "util/text.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

using nlohmann::json;

Readiness check_ready(const bpf::Enforcer& enforcer) {
  bpf::LsmState lsm = bpf::read_lsm_state();
  if (!lsm.readable) return {false, "cannot read the active LSM list: " + lsm.detail};
  if (!lsm.bpf_active) return {false, "the BPF LSM is not active (active LSMs: " + lsm.list + ")"};
  if (!enforcer.shared()) return {true, ""};  // a private set: this process holds the links
  const std::string& dir = enforcer.pin_dir();
  struct stat st {};
  if (::stat((dir + "/ready").c_str(), &st) != 0)
    return {false, dir + "/ready is missing (the pinned set was removed)"};
  for (const auto& prog : enforcer.programs()) {
    if (prog.per_scope) {
      const std::string pin = dir + "/programs/" + prog.name;
      if (UniqueFd fd(bpf_obj_get(pin.c_str())); !fd)
        return {false, pin + " is missing: new scopes cannot get " + prog.name};
      continue;
    }
    const std::string link = dir + "/links/" + prog.name;
    UniqueFd fd(bpf_obj_get(link.c_str()));
    if (!fd) return {false, "link " + link + " is missing: program " + prog.name + " is not attached"};
    bpf_link_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0 || info.prog_id == 0)
      return {false, "link " + link + " has no program"};
  }
  return {true, ""};
}

namespace {

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

json kernel_status(const bpf::Enforcer& enforcer, const std::map<uint64_t, std::string>& run_ids) {
  json out;
  Readiness r = check_ready(enforcer);
  json programs = json::array();
  for (const auto& p : enforcer.programs()) programs.push_back(p.name);
  out["enforcement"] = {{"ready", r.ready},
                        {"detail", r.detail},
                        {"shared", enforcer.shared()},
                        {"pin_dir", enforcer.pin_dir()},
                        {"programs", programs}};
  std::map<uint32_t, std::string> names;
  json policies = json::array();
  json counters = json::array();
  if (auto pols = enforcer.policies()) {
    for (const auto& p : *pols) {
      names[p.slot] = p.name;
      policies.push_back({{"slot", p.slot},
                          {"name", p.name},
                          {"owner", p.owner == AC_POLICY_OWNER_TRANSIENT ? "transient" : "named"},
                          {"mode", (p.flags & AC_POLICY_F_AUDIT) ? "audit" : "enforce"},
                          {"digest", hex(p.digest)}});
      auto c = enforcer.counters(p.slot);
      if (!c) continue;
      for (uint32_t h = 0; h < AC_HOOK_COUNT; ++h) {
        const auto& d = c->hooks[h].decisions;
        if (d[0] + d[1] + d[2] == 0) continue;
        counters.push_back({{"policy", p.name},
                            {"slot", p.slot},
                            {"hook", std::string(bpf::hook_name(h))},
                            {"allow", d[AC_DECISION_ALLOW]},
                            {"deny", d[AC_DECISION_DENY]},
                            {"audit", d[AC_DECISION_AUDIT]}});
      }
    }
  } else {
    out["errors"].push_back(pols.error().message);
  }
  out["policies"] = policies;
  out["counters"] = counters;
  json scopes = json::array();
  if (auto sc = enforcer.scopes()) {
    for (const auto& s : *sc) {
      auto it = names.find(s.policy_slot);
      auto run = run_ids.find(s.scope_id);
      auto report = enforcer.scope_report(s.scope_id);
      scopes.push_back({{"cgroup_id", s.cgroup_id},
                        {"scope_id", s.scope_id},
                        {"policy_slot", s.policy_slot},
                        {"policy", it == names.end() ? json(nullptr) : json(it->second)},
                        {"level", s.level},
                        {"run_id", run == run_ids.end() ? json(nullptr) : json(run->second)},
                        // Pending: nothing in it is confined until this pid execs.
                        {"arm_pid", s.arm_tgid ? json(s.arm_tgid) : json(nullptr)},
                        {"events_suppressed", report ? json(report->events_suppressed) : json(nullptr)}});
    }
  } else {
    out["errors"].push_back(sc.error().message);
  }
  out["scopes"] = scopes;
  auto sent = enforcer.stat(AC_STAT_EVENTS_SENT);
  auto lost = enforcer.stat(AC_STAT_EVENTS_LOST);
  auto suppressed = enforcer.stat(AC_STAT_EVENTS_SUPPRESSED);
  out["events"] = {
      {"sent", sent ? *sent : 0}, {"lost", lost ? *lost : 0}, {"suppressed", suppressed ? *suppressed : 0}};
  return out;
}

std::string format_status_text(const json& s) {
  std::ostringstream o;
  // Every value is the daemon's answer, which carries names and paths others
  // chose (a container's id and workspace, a policy file's name and error):
  // nothing in it reaches the terminal as a control character.
  auto str = [](const json& v) {
    return escape(v.is_string() ? v.get<std::string>()
                  : v.is_null() ? std::string("-")
                                : v.dump(-1, ' ', false, json::error_handler_t::replace),
                  4096);
  };
  const json& d = s.value("daemon", json::object());
  if (d.value("running", false)) {
    o << "daemon:      running (pid " << str(d.value("pid", json())) << ", version "
      << str(d.value("version", json())) << ")\n";
    // metrics_url is absent from an older daemon's answer: its address then.
    const std::string url = escape(d.value("metrics_url", d.value("metrics_address", std::string())), 4096);
    const std::string auth = escape(d.value("metrics_auth", std::string("none")), 64);
    o << "  policy dir " << str(d.value("policy_dir", json())) << ", metrics "
      << (url.empty() ? std::string("off") : url + (auth == "none" ? "" : " (" + auth + " auth)"))
      << ", audit log " << str(d.value("audit_log", json())) << "\n";
    if (d.contains("events_delivered"))
      o << "  events delivered " << str(d.value("events_delivered", json())) << ", runs active "
        << str(d.value("runs_active", json())) << "\n";
  } else {
    o << "daemon:      not running (" << str(d.value("detail", json("no answer on the control socket")))
      << ")\n";
  }
  if (s.value("view", std::string()) == "own runs")
    o << "view:        a member's: only your own runs (root sees every scope, container, counter and the "
         "daemon's totals)\n";
  if (!s.contains("enforcement")) return o.str();
  const json& e = s["enforcement"];
  o << "enforcement: " << (e.value("ready", false) ? "ready" : "NOT ready");
  if (!e.value("detail", std::string()).empty()) o << " (" << str(e["detail"]) << ")";
  o << "\n  programs: " << e.value("programs", json::array()).size() << " loaded from "
    << str(e.value("pin_dir", json())) << "\n";
  o << "policies:\n";
  for (const auto& p : s.value("policies", json::array()))
    o << "  slot " << p.value("slot", 0) << "  " << str(p.value("name", json())) << "  ("
      << str(p.value("owner", json())) << ", " << str(p.value("mode", json())) << ")\n";
  for (const auto& f : s.value("policy_files", json::array()))
    if (f.value("state", std::string()) != "loaded")
      o << "  file " << str(f.value("file", json())) << ": " << str(f.value("state", json())) << ": "
        << str(f.value("error", json())) << "\n";
  o << "scopes: " << s.value("scopes", json::array()).size() << "\n";
  for (const auto& sc : s.value("scopes", json::array()))
    o << "  cgroup " << sc.value("cgroup_id", uint64_t{0}) << "  policy " << str(sc.value("policy", json()))
      << (sc.value("run_id", json()).is_string() ? "  run " + str(sc["run_id"]) : std::string())
      << (sc.value("arm_pid", json()).is_number()
              ? "  pending (arms at exec of pid " + std::to_string(sc["arm_pid"].get<uint64_t>()) + ")"
              : std::string())
      << (sc.value("events_suppressed", uint64_t{0})
              ? "  events suppressed " + std::to_string(sc["events_suppressed"].get<uint64_t>())
              : std::string())
      << "\n";
  if (!s.value("containers", json::array()).empty()) {
    o << "containers: " << s["containers"].size() << "\n";
    for (const auto& c : s["containers"])
      o << "  " << str(c.value("container_id", json())) << "  cgroup " << c.value("cgroup_id", uint64_t{0})
        << "  policy " << str(c.value("policy", json()))
        << (c.value("workspace", json()).is_string() ? "  workspace " + str(c["workspace"]) : std::string())
        << "  since " << str(c.value("attached", json())) << "\n";
  }
  if (s.contains("counters")) o << "decisions (allow/deny/audit):\n";
  for (const auto& c : s.value("counters", json::array()))
    o << "  " << str(c.value("policy", json())) << " " << str(c.value("hook", json())) << ": "
      << c.value("allow", uint64_t{0}) << "/" << c.value("deny", uint64_t{0}) << "/"
      << c.value("audit", uint64_t{0}) << "\n";
  if (!s.contains("events")) return o.str();
  const json& ev = s["events"];
  o << "events: " << ev.value("sent", uint64_t{0}) << " sent, " << ev.value("lost", uint64_t{0}) << " lost, "
    << ev.value("suppressed", uint64_t{0}) << " suppressed (over a run's budget)\n";
  return o.str();
}

}  // namespace agentcage::daemon
