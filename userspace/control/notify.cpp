// SPDX-License-Identifier: Apache-2.0
#include "control/notify.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "control/client.h"
#include "control/protocol.h"
#include "policy/name.h"
#include "util/log.h"

namespace agentcage::control {
namespace {

constexpr int kNotifyTimeoutMs = 1000;
constexpr const char* kChannelVariable = "AGENTCAGE_NOTIFY_FD";

// The daemon's channel for this runner (adopt_notify_channel), or -1.
int g_channel = -1;

void send(const Request& r) {
  if (g_channel >= 0) {
    // One datagram per notice; the daemon reads them in order.
    const std::string text = to_json(r).dump();
    if (::send(g_channel, text.data(), text.size(), MSG_NOSIGNAL) < 0)
      log::debug(std::string("daemon notification: ") + std::strerror(errno));
    return;
  }
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

bool notify_channel_adopted() { return g_channel >= 0; }

void adopt_notify_channel() {
  const char* value = std::getenv(kChannelVariable);
  if (!value) return;
  const std::string text = value;
  ::unsetenv(kChannelVariable);
  char* end = nullptr;
  errno = 0;
  const long fd = std::strtol(text.c_str(), &end, 10);
  struct stat st {};
  int type = 0;
  socklen_t len = sizeof type;
  if (text.empty() || *end != '\0' || errno != 0 || fd < 3 || fd > 1 << 20 ||
      ::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode) ||
      ::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET ||
      ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC) != 0) {
    log::warn(std::string(kChannelVariable) + "=" + text +
              " is not an open SOCK_SEQPACKET socket above 2: run notices go to the control socket");
    return;
  }
  g_channel = static_cast<int>(fd);
}

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
  r.policy_slot = end.policy_slot;
  r.dns_refused.total = std::min(end.dns_refused.total, kMaxSyscallsDenied);
  // Only names the daemon takes (1..253 bytes of printable ASCII): one it
  // refused would lose the whole notice. Others stay counted in the total.
  uint64_t listed = 0;
  for (const auto& [name, n] : end.dns_refused.by_name) {
    const bool printable = std::all_of(name.begin(), name.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (name.empty() || name.size() > 253 || !printable || r.dns_refused.by_name.size() >= kMaxRefusedNames ||
        n == 0 || listed + n > r.dns_refused.total)
      continue;
    r.dns_refused.by_name[name] = n;
    listed += n;
  }
  send(r);
}

}  // namespace agentcage::control
