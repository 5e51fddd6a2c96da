// SPDX-License-Identifier: Apache-2.0
#include "control/protocol.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "oci/annotations.h"
#include "policy/name.h"

namespace agentcage::control {
namespace {

using nlohmann::json;

Error bad(const std::string& msg) { return Error{"request: " + msg, EINVAL}; }

Error bad_policy_name() {
  return bad("\"policy\" must be a policy name (" + std::string(policy::kPolicyNameRule) + ")");
}

bool valid_path_text(const std::string& s, bool absolute) {
  if (s.empty() || s.size() >= 4096 || s.find('\0') != std::string::npos) return false;
  return !absolute || s.front() == '/';
}

// "a, b, c" of the names of a closed set, for error messages.
template <class Set>
std::string names_of(const Set& set) {
  std::string out;
  for (auto v : set) out += (out.empty() ? "" : ", ") + std::string(core::name(v));
  return out;
}

std::string op_list() {
  std::string out;
  for (Op op : kOps) out += (out.empty() ? "" : ", ") + std::string(op_name(op));
  return out;
}

Status parse_labels(const json& v, core::Labels& out) {
  if (!v.is_object()) return bad("\"labels\" must be an object of strings");
  if (v.size() > core::kMaxLabels) return bad("at most " + std::to_string(core::kMaxLabels) + " labels");
  for (const auto& [key, value] : v.items()) {
    if (std::string why = core::label_key_error(key); !why.empty()) return bad(why);
    if (!value.is_string()) return bad("label " + key + " must be a string");
    const std::string text = value.get<std::string>();
    if (std::string why = core::label_value_error(text); !why.empty())
      return bad(why + " (label " + key + ")");
    out.emplace(key, text);
  }
  return {};
}

// "container_id" (optional): oci/annotations.h's rule.
Status parse_container_id(const json& j, std::string& out) {
  if (!j.contains("container_id")) return {};
  if (!j["container_id"].is_string()) return bad("\"container_id\" must be a string");
  std::string id = j["container_id"].get<std::string>();
  if (Status s = oci::check_container_id(id); !s) return bad("\"container_id\": " + s.error().message);
  out = std::move(id);
  return {};
}

// A list of strings: at most kMaxRunArgs, each at most kMaxArgBytes and
// without NUL bytes (they could not reach execve).
Status parse_strings(const json& j, const char* key, std::vector<std::string>& out) {
  const json& v = j[key];
  if (!v.is_array()) return bad(std::string("\"") + key + "\" must be an array of strings");
  if (v.size() > kMaxRunArgs)
    return bad(std::string("\"") + key + "\" has more than " + std::to_string(kMaxRunArgs) + " entries");
  for (const json& e : v) {
    if (!e.is_string()) return bad(std::string("\"") + key + "\" must be an array of strings");
    std::string s = e.get<std::string>();
    if (s.size() > kMaxArgBytes || s.find('\0') != std::string::npos)
      return bad(std::string("an entry of \"") + key + "\" is longer than " + std::to_string(kMaxArgBytes) +
                 " bytes or contains a NUL byte");
    out.push_back(std::move(s));
  }
  return {};
}

// run_end's "dns_refused": {"total": N, "by_name": {NAME: N, ...}}.
Status parse_refused_names(const json& v, RefusedNames& out) {
  auto count = [](const json& n) { return n.is_number_unsigned() && n.get<uint64_t>() <= kMaxSyscallsDenied; };
  const std::string range = "an integer 0.." + std::to_string(kMaxSyscallsDenied);
  if (!v.is_object()) return bad("\"dns_refused\" must be an object {\"total\": N, \"by_name\": {NAME: N}}");
  for (const auto& [key, value] : v.items())
    if (key != "total" && key != "by_name") return bad("unknown field \"" + key.substr(0, 64) + "\" in \"dns_refused\"");
  if (!v.contains("total") || !count(v["total"])) return bad("\"dns_refused.total\" must be " + range);
  out.total = v["total"].get<uint64_t>();
  if (!v.contains("by_name")) return {};
  const json& names = v["by_name"];
  if (!names.is_object() || names.size() > kMaxRefusedNames)
    return bad("\"dns_refused.by_name\" must be an object of at most " + std::to_string(kMaxRefusedNames) +
               " names, each with its count");
  uint64_t listed = 0;
  for (const auto& [name, n] : names.items()) {
    const bool printable = std::all_of(name.begin(), name.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (name.empty() || name.size() > 253 || !printable)
      return bad("a name of \"dns_refused.by_name\" must be 1..253 bytes of printable ASCII");
    if (!count(n) || n.get<uint64_t>() == 0) return bad("the count of a refused name must be an integer 1.." + std::to_string(kMaxSyscallsDenied));
    listed += n.get<uint64_t>();
    out.by_name[name] = n.get<uint64_t>();
  }
  if (listed > out.total) return bad("\"dns_refused.by_name\" counts more refusals than \"total\"");
  return {};
}

Status parse_run(const json& j, Request& r) {
  if (!j.contains("policy") || !j["policy"].is_string())
    return bad("missing \"policy\" (the name of a policy in the daemon's policy directory)");
  r.policy = j["policy"].get<std::string>();
  if (!policy::valid_policy_name(r.policy))
    return bad("\"policy\" must be the name of a policy in the daemon's policy directory (" +
               std::string(policy::kPolicyNameRule) + "); a client cannot send a policy file");
  if (!j.contains("argv")) return bad("missing \"argv\" (COMMAND and its arguments)");
  if (Status s = parse_strings(j, "argv", r.argv); !s) return s;
  if (r.argv.empty() || r.argv.front().empty()) return bad("\"argv\" must start with a COMMAND");
  if (j.contains("env"))
    if (Status s = parse_strings(j, "env", r.env); !s) return s;
  if (j.contains("workspace")) {
    if (!j["workspace"].is_string() || !valid_path_text(j["workspace"].get<std::string>(), true))
      return bad("\"workspace\" must be an absolute path (a directory the client owns)");
    r.workspace = j["workspace"].get<std::string>();
  }
  if (j.contains("limits")) {
    const json& l = j["limits"];
    if (!l.is_object()) return bad("\"limits\" must be an object (timeout, memory, pids, cpu, disk)");
    for (const auto& [key, value] : l.items()) {
      std::optional<std::string>* field = key == "timeout"  ? &r.limits.timeout
                                          : key == "memory" ? &r.limits.memory
                                          : key == "pids"   ? &r.limits.pids
                                          : key == "cpu"    ? &r.limits.cpu
                                          : key == "disk"   ? &r.limits.disk
                                                            : nullptr;
      if (!field)
        return bad("unknown limit \"" + key.substr(0, 64) + "\" (timeout, memory, pids, cpu, disk)");
      if (!value.is_string() || value.get<std::string>().empty() || value.get<std::string>().size() > 64)
        return bad("limit " + key +
                   " must be a string such as agentcage run takes (e.g. \"512Mi\", \"30s\", " +
                   "\"unlimited\")");
      *field = value.get<std::string>();
    }
  }
  if (j.contains("labels"))
    if (Status s = parse_labels(j["labels"], r.labels); !s) return s;
  return {};
}

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::hello:
      return "hello";
    case Op::run:
      return "run";
    case Op::status:
      return "status";
    case Op::events:
      return "events";
    case Op::attach:
      return "attach";
    case Op::detach:
      return "detach";
    case Op::run_start:
      return "run_start";
    case Op::run_end:
      return "run_end";
    case Op::reload:
      return "reload";
  }
  return "unknown";
}

bool op_allowed_for_group(Op op) {
  return op == Op::hello || op == Op::status || op == Op::events || op == Op::run;
}

Result<Request> parse_request(std::string_view line) {
  if (line.size() > kMaxRequestBytes)
    return bad("longer than " + std::to_string(kMaxRequestBytes) + " bytes");
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return bad("not valid JSON (one JSON object per line)");
  if (!j.is_object()) return bad("expected a JSON object");
  if (!j.contains("op") || !j["op"].is_string()) return bad("missing \"op\" (a string)");
  const std::string op = j["op"].get<std::string>();
  Request r;
  std::set<std::string> allowed = {"op"};
  if (op == "hello")
    r.op = Op::hello, allowed = {"op", "protocol", "client"};
  else if (op == "run")
    r.op = Op::run, allowed = {"op", "policy", "argv", "env", "workspace", "limits", "labels"};
  else if (op == "status")
    r.op = Op::status;
  else if (op == "events")
    r.op = Op::events, allowed = {"op", "follow"};
  else if (op == "attach")
    r.op = Op::attach, allowed = {"op", "cgroup", "policy", "workspace", "container_id", "arm_pid", "labels"};
  else if (op == "detach")
    r.op = Op::detach, allowed = {"op", "cgroup", "container_id"};
  else if (op == "run_start")
    r.op = Op::run_start, allowed = {"op", "run_id", "policy", "scope_id", "labels"};
  else if (op == "run_end")
    r.op = Op::run_end,
    allowed = {"op",          "run_id",          "policy",      "outcome",    "exit_code", "duration_seconds",
               "fail_closed", "syscalls_denied", "dns_refused", "policy_slot"};
  else if (op == "reload")
    r.op = Op::reload;
  else
    return bad("unknown op \"" + op.substr(0, 32) + "\" (" + op_list() + ")");

  for (const auto& [key, value] : j.items())
    if (!allowed.count(key)) return bad("unknown field \"" + key.substr(0, 64) + "\" for op " + op);

  auto need_string = [&](const char* key, std::string& out, bool required) -> Status {
    if (!j.contains(key)) return required ? Status(bad(std::string("missing \"") + key + "\"")) : Status{};
    if (!j[key].is_string()) return bad(std::string("\"") + key + "\" must be a string");
    out = j[key].get<std::string>();
    return {};
  };
  switch (r.op) {
    case Op::status:
    case Op::reload:
      break;
    case Op::hello:
      if (!j.contains("protocol") || !j["protocol"].is_number_unsigned() ||
          j["protocol"].get<uint64_t>() > 1000)
        return bad("\"protocol\" must be the protocol version the client speaks (this daemon speaks " +
                   std::to_string(kProtocolVersion) + ")");
      r.protocol = static_cast<int>(j["protocol"].get<uint64_t>());
      if (j.contains("client") && (!j["client"].is_string() || j["client"].get<std::string>().size() > 128))
        return bad("\"client\" must be a string of at most 128 bytes (the client's name and version)");
      break;
    case Op::run:
      if (Status s = parse_run(j, r); !s) return s.error();
      break;
    case Op::events:
      if (j.contains("follow")) {
        if (!j["follow"].is_boolean()) return bad("\"follow\" must be true or false");
        r.follow = j["follow"].get<bool>();
      }
      break;
    case Op::attach:
      if (Status s = need_string("workspace", r.workspace, false); !s) return s.error();
      if (!r.workspace.empty() && !valid_path_text(r.workspace, true))
        return bad("\"workspace\" must be an absolute path");
      if (Status s = need_string("policy", r.policy, true); !s) return s.error();
      if (!policy::valid_policy_name(r.policy)) return bad_policy_name();
      if (j.contains("arm_pid")) {
        const json& n = j["arm_pid"];
        if (!n.is_number_unsigned() || n.get<uint64_t>() == 0 || n.get<uint64_t>() > kMaxPid)
          return bad("\"arm_pid\" must be a process id 1.." + std::to_string(kMaxPid));
        r.arm_pid = static_cast<int>(n.get<uint64_t>());
      }
      if (j.contains("labels"))
        if (Status s = parse_labels(j["labels"], r.labels); !s) return s.error();
      if (Status s = parse_container_id(j, r.container_id); !s) return s.error();
      if (Status s = need_string("cgroup", r.cgroup, true); !s) return s.error();
      if (!valid_path_text(r.cgroup, false))
        return bad("\"cgroup\" must be a cgroup path (under 4096 bytes)");
      break;
    case Op::detach:
      if (Status s = parse_container_id(j, r.container_id); !s) return s.error();
      if (Status s = need_string("cgroup", r.cgroup, r.container_id.empty()); !s) return s.error();
      if (!r.container_id.empty() && j.contains("cgroup"))
        return bad("detach takes \"cgroup\" or \"container_id\", not both");
      if (r.container_id.empty() && !valid_path_text(r.cgroup, false))
        return bad("\"cgroup\" must be a cgroup path (under 4096 bytes)");
      break;
    case Op::run_start:
    case Op::run_end:
      if (Status s = need_string("run_id", r.run_id, true); !s) return s.error();
      if (!valid_run_id(r.run_id)) return bad("\"run_id\" must be 16 lowercase hex digits");
      if (Status s = need_string("policy", r.policy, true); !s) return s.error();
      if (!policy::valid_policy_name(r.policy)) return bad_policy_name();
      if (r.op == Op::run_start) {
        if (!j.contains("scope_id") || !j["scope_id"].is_number_unsigned())
          return bad("\"scope_id\" must be a non-negative integer");
        r.scope_id = j["scope_id"].get<uint64_t>();
        if (j.contains("labels"))
          if (Status s = parse_labels(j["labels"], r.labels); !s) return s.error();
        break;
      }
      {
        std::string outcome;
        if (Status s = need_string("outcome", outcome, true); !s) return s.error();
        auto parsed = core::parse_run_outcome(outcome);
        if (!parsed) return bad("\"outcome\" must be one of " + names_of(core::kRunOutcomes));
        r.outcome = *parsed;
      }
      if (!j.contains("exit_code") || !j["exit_code"].is_number_integer())
        return bad("\"exit_code\" must be an integer");
      {
        auto code = j["exit_code"].get<int64_t>();
        if (code < 0 || code > 255) return bad("\"exit_code\" must be 0..255");
        r.exit_code = static_cast<int>(code);
      }
      if (!j.contains("duration_seconds") || !j["duration_seconds"].is_number())
        return bad("\"duration_seconds\" must be a number");
      r.duration_seconds = j["duration_seconds"].get<double>();
      if (!std::isfinite(r.duration_seconds) || r.duration_seconds < 0 || r.duration_seconds > 1e8)
        return bad("\"duration_seconds\" must be between 0 and 1e8");
      if (j.contains("fail_closed")) {
        std::string reason;
        if (Status s = need_string("fail_closed", reason, true); !s) return s.error();
        r.fail_closed = core::parse_fail_closed_reason(reason);
        if (!r.fail_closed)
          return bad("\"fail_closed\" must be one of " + names_of(core::kFailClosedReasons));
      }
      if (j.contains("syscalls_denied")) {
        // A negative number is number_integer, one past 2^64-1 is number_float:
        // both fail is_number_unsigned, so get<> below never wraps or truncates.
        const json& n = j["syscalls_denied"];
        if (!n.is_number_unsigned() || n.get<uint64_t>() > kMaxSyscallsDenied)
          return bad("\"syscalls_denied\" must be an integer 0.." + std::to_string(kMaxSyscallsDenied) +
                     " (the run's count of denied system calls)");
        r.syscalls_denied = n.get<uint64_t>();
      }
      if (j.contains("dns_refused"))
        if (Status s = parse_refused_names(j["dns_refused"], r.dns_refused); !s) return s.error();
      if (j.contains("policy_slot")) {
        const json& n = j["policy_slot"];
        if (!n.is_number_unsigned() || n.get<uint64_t>() > UINT32_MAX)
          return bad("\"policy_slot\" must be an integer 0.." + std::to_string(UINT32_MAX) +
                     " (the slot the run's scope ran on)");
        r.policy_slot = n.get<uint32_t>();
      }
      break;
  }
  return r;
}

json to_json(const Request& r) {
  json j;
  j["op"] = std::string(op_name(r.op));
  switch (r.op) {
    case Op::status:
    case Op::reload:
      break;
    case Op::hello:
      j["protocol"] = r.protocol;
      break;
    case Op::run: {
      j["policy"] = r.policy;
      j["argv"] = r.argv;
      if (!r.env.empty()) j["env"] = r.env;
      if (!r.workspace.empty()) j["workspace"] = r.workspace;
      json limits = json::object();
      auto put = [&limits](const char* key, const std::optional<std::string>& v) {
        if (v) limits[key] = *v;
      };
      put("timeout", r.limits.timeout);
      put("memory", r.limits.memory);
      put("pids", r.limits.pids);
      put("cpu", r.limits.cpu);
      put("disk", r.limits.disk);
      if (!limits.empty()) j["limits"] = limits;
      if (!r.labels.empty()) j["labels"] = r.labels;
      break;
    }
    case Op::events:
      j["follow"] = r.follow;
      break;
    case Op::attach:
      j["cgroup"] = r.cgroup;
      j["policy"] = r.policy;
      if (!r.workspace.empty()) j["workspace"] = r.workspace;
      if (!r.container_id.empty()) j["container_id"] = r.container_id;
      if (r.arm_pid) j["arm_pid"] = r.arm_pid;
      if (!r.labels.empty()) j["labels"] = r.labels;
      break;
    case Op::detach:
      if (r.container_id.empty())
        j["cgroup"] = r.cgroup;
      else
        j["container_id"] = r.container_id;
      break;
    case Op::run_start:
      j["run_id"] = r.run_id;
      j["policy"] = r.policy;
      j["scope_id"] = r.scope_id;
      if (!r.labels.empty()) j["labels"] = r.labels;
      break;
    case Op::run_end:
      j["run_id"] = r.run_id;
      j["policy"] = r.policy;
      j["outcome"] = std::string(core::name(r.outcome));
      j["exit_code"] = r.exit_code;
      j["duration_seconds"] = r.duration_seconds;
      if (r.fail_closed) j["fail_closed"] = std::string(core::name(*r.fail_closed));
      if (r.syscalls_denied) j["syscalls_denied"] = r.syscalls_denied;
      if (r.dns_refused.total) j["dns_refused"] = {{"total", r.dns_refused.total}, {"by_name", r.dns_refused.by_name}};
      if (r.policy_slot) j["policy_slot"] = *r.policy_slot;
      break;
  }
  return j;
}

bool valid_run_id(std::string_view s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace agentcage::control
