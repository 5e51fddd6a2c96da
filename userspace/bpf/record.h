// SPDX-License-Identifier: Apache-2.0
// The one decoder of decision records (struct ac_event_decision, abi.h): the
// target as text and the record as JSON. The audit log (telemetry/audit) and
// the run result (run/result) both use record_json, so a record has one shape
// wherever it appears; docs/daemon.md ("Decision records") documents it.
// Field names are a contract: fields are added, never renamed.
#pragma once

#include <agentcage/abi.h>

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace agentcage::bpf {

// Bytes from the ring buffer (or anywhere else) as a decision record: the
// header is checked before the body is read, and a record whose type or size
// is not a decision record's is refused (nullopt). Never trusts `size` or
// the header beyond that; every other field may hold any value, which
// record_target and record_json accept.
std::optional<ac_event_decision> decode_record(const void* data, size_t size);

// The record's target as text, by its target_kind: a path (files, programs,
// unix sockets bound at a path), "@name" for an abstract unix socket,
// "address:port" ("[v6]:port" for IPv6), or "" when the record has none.
// The bytes are the kernel's (a name need not be UTF-8; an abstract one may
// hold NULs). Never reads beyond target[], whatever target_len says.
std::string record_target(const ac_event_decision& record);

// The record as a JSON object:
//   {"cgroup_id":4321,"comm":"python3","decision":"deny","errno":13,"errno_name":"EACCES",
//    "hook":"file_open","pid":42,"policy_slot":3,"reason":"default_deny","scope_id":1234,
//    "target":"/etc/passwd","target_kind":"path","tid":43,"uid":1000,"access":["read"]}
// plus "access" (what a path decision needed: "read", "write", "exec") on
// path records that carry it, and "protocol" ("tcp", "udp", or the
// number) on address records.
// comm and target are made valid UTF-8 (ill-formed bytes become U+FFFD), so
// the object dumps without an error handler.
nlohmann::json record_json(const ac_event_decision& record);

}  // namespace agentcage::bpf
