// SPDX-License-Identifier: Apache-2.0
// The one decoder of decision records (struct ac_event_decision, abi.h): the
// target as text and the record as JSON. The audit log (telemetry/audit) and
// the run result (run/result) both use record_json, so a record has one shape
// wherever it appears; docs/daemon.md ("Decision records") documents it.
// Field names are a contract: fields are added, never renamed.
#pragma once

#include <agentcage/abi.h>

#include <string>

#include <nlohmann/json.hpp>

namespace agentcage::bpf {

// The record's target as text, by its target_kind: a path (files, programs,
// unix sockets bound at a path), "@name" for an abstract unix socket,
// "address:port" ("[v6]:port" for IPv6), or "" when the record has none.
// The bytes are the kernel's (a name need not be UTF-8; an abstract one may
// hold NULs). Never reads beyond target[], whatever target_len says.
std::string record_target(const ac_event_decision& record);

// The record as a JSON object:
//   {"cgroup_id":4321,"comm":"python3","decision":"deny","errno":13,"errno_name":"EACCES",
//    "hook":"file_open","pid":42,"policy_slot":3,"reason":"default_deny","scope_id":1234,
//    "target":"/etc/passwd","target_kind":"path","tid":43,"uid":1000}
// comm and target are made valid UTF-8 (ill-formed bytes become U+FFFD), so
// the object dumps without an error handler.
nlohmann::json record_json(const ac_event_decision& record);

}  // namespace agentcage::bpf
