// SPDX-License-Identifier: Apache-2.0
#include "control/notify.h"

#include <sys/stat.h>

#include <algorithm>

#include "control/client.h"
#include "control/protocol.h"
#include "policy/name.h"
#include "util/log.h"

namespace agentcage::control {
namespace {

constexpr int kNotifyTimeoutMs = 1000;

void send(const Request& r) {
  const std::string path = default_control_socket();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;  // no daemon
  auto answer = call(path, to_json(r), kNotifyTimeoutMs);
  if (!answer)
    log::debug("daemon notification: " + answer.error().message);
  else if (!answer->value("ok", false))
    log::warn("the daemon refused a run notification: " + answer->dump());
}

}  // namespace

void notify_run_start(const std::string& run_id, const std::string& policy, uint64_t scope_id,
                      const core::Labels& labels) {
  Request r;
  r.labels = labels;
  r.op = Op::run_start;
  r.run_id = run_id;
  r.policy = policy::valid_policy_name(policy) ? policy : "unknown";
  r.scope_id = scope_id;
  if (r.run_id.size() == 16) send(r);
}

void notify_run_end(const RunEnd& end) {
  Request r;
  r.op = Op::run_end;
  // A run that failed before it had an id (e.g. an invalid policy) still
  // counts as a run that did not happen; give it a placeholder id.
  r.run_id = end.run_id.size() == 16 ? end.run_id : std::string(16, '0');
  r.policy = policy::valid_policy_name(end.policy) ? end.policy : "unknown";
  r.outcome = end.outcome;
  r.exit_code = end.exit_code >= 0 && end.exit_code <= 255 ? end.exit_code : 255;
  r.duration_seconds = end.duration_seconds;
  r.fail_closed = end.fail_closed;
  r.syscalls_denied = std::min(end.syscalls_denied, kMaxSyscallsDenied);  // the daemon refuses more
  send(r);
}

}  // namespace agentcage::control
