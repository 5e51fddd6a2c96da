// SPDX-License-Identifier: Apache-2.0
#include "bpf/record.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "bpf/names.h"
#include "util/sys_names.h"
#include "util/text.h"

namespace agentcage::bpf {
namespace {

// A fixed char array as a string: up to its first NUL, at most `max` bytes.
std::string bounded(const char* s, size_t max) { return std::string(s, ::strnlen(s, max)); }

}  // namespace

std::optional<ac_event_decision> decode_record(const void* data, size_t size) {
  if (!data || size < sizeof(ac_event_header)) return std::nullopt;
  ac_event_header hdr;
  std::memcpy(&hdr, data, sizeof hdr);
  if (hdr.type != AC_EVENT_DECISION || hdr.size != sizeof(ac_event_decision) ||
      size < sizeof(ac_event_decision))
    return std::nullopt;
  ac_event_decision ev;
  std::memcpy(&ev, data, sizeof ev);
  return ev;
}

std::string record_target(const ac_event_decision& r) {
  const size_t len = r.target_len < sizeof r.target ? r.target_len : sizeof r.target;
  switch (r.target_kind) {
    case AC_TARGET_PATH:
    case AC_TARGET_UNIX:
      return bounded(r.target, len);
    case AC_TARGET_UNIX_ABSTRACT:
      // The name is target_len bytes, NULs included: no NUL ends it.
      return "@" + std::string(r.target, len);
    case AC_TARGET_INET: {
      char buf[INET6_ADDRSTRLEN] = {};
      if (r.family == AF_INET) {
        if (!::inet_ntop(AF_INET, r.addr, buf, sizeof buf)) return "";
        return std::string(buf) + ":" + std::to_string(r.port);
      }
      if (r.family == AF_INET6) {
        if (!::inet_ntop(AF_INET6, r.addr, buf, sizeof buf)) return "";
        return "[" + std::string(buf) + "]:" + std::to_string(r.port);
      }
      return "";
    }
    default:
      return "";
  }
}

nlohmann::json record_json(const ac_event_decision& r) {
  using nlohmann::json;
  // The kernel stores the negative errno; 64 bits so that no value overflows.
  const int64_t err = r.error < 0 ? -static_cast<int64_t>(r.error) : r.error;
  json j;
  j["scope_id"] = r.scope_id;
  j["policy_slot"] = r.policy_slot;
  j["hook"] = hook_name(r.hook);
  j["decision"] = decision_name(r.decision);
  j["reason"] = reason_name(r.reason);
  j["pid"] = r.pid;
  j["tid"] = r.tid;
  j["uid"] = r.uid;
  j["comm"] = valid_utf8(bounded(r.comm, sizeof r.comm));
  j["target"] = valid_utf8(record_target(r));
  j["target_kind"] = target_kind_name(r.target_kind);
  j["errno"] = err;
  if (err == 0)
    j["errno_name"] = nullptr;
  else
    j["errno_name"] = err <= INT_MAX ? errno_name(static_cast<int>(err)) : "E" + std::to_string(err);
  j["cgroup_id"] = r.hdr.cgroup_id;
  // What a path decision needed (policy suggest turns it into a read,
  // write or exec rule), and an address's protocol.
  if (r.target_kind == AC_TARGET_PATH && r.access) {
    json access = json::array();
    if (r.access & AC_ACCESS_READ) access.push_back("read");
    if (r.access & AC_ACCESS_WRITE) access.push_back("write");
    if (r.access & AC_ACCESS_EXEC) access.push_back("exec");
    j["access"] = std::move(access);
    if (r.access & AC_RECORD_DIRECTORY) j["directory"] = true;
  }
  if (r.target_kind == AC_TARGET_INET) {
    if (r.protocol == IPPROTO_TCP)
      j["protocol"] = "tcp";
    else if (r.protocol == IPPROTO_UDP)
      j["protocol"] = "udp";
    else
      j["protocol"] = std::to_string(r.protocol);
  }
  return j;
}

}  // namespace agentcage::bpf
