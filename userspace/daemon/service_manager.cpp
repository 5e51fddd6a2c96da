// SPDX-License-Identifier: Apache-2.0
#include "daemon/service_manager.h"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <cstdlib>
#include <cstring>

#include "util/log.h"

namespace agentcage::daemon {

ServiceManager::ServiceManager() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  notifying_ = socket != nullptr && *socket != '\0';
  uint64_t usec = 0;
  // > 0: the watchdog is on for this process (WATCHDOG_PID, when set, is ours).
  if (notifying_ && sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
    watchdog_ = std::chrono::microseconds(usec / 2);
}

void ServiceManager::send(const std::string& message) {
  if (!notifying_) return;
  // sd_notify's answer is advisory: a service manager that went away must not stop the daemon.
  if (int r = sd_notify(0, message.c_str()); r < 0)
    log::warn(std::string("service manager notification failed: ") + std::strerror(-r));
}

void ServiceManager::ready(const std::string& status) {
  if (ready_ && status == status_) return;
  status_ = status;
  send((ready_ ? "" : "READY=1\n") + std::string("STATUS=") + status);
  ready_ = true;
}

void ServiceManager::status(const std::string& status) {
  if (status == status_) return;
  status_ = status;
  send("STATUS=" + status);
}

void ServiceManager::reloading(const std::string& status) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t usec = static_cast<uint64_t>(now.tv_sec) * 1000000u + static_cast<uint64_t>(now.tv_nsec) / 1000u;
  status_ = status;
  send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec) + "\nSTATUS=" + status);
  ready_ = false;  // the reload ends with READY=1 again
}

void ServiceManager::stopping(const std::string& status) {
  status_ = status;
  send("STOPPING=1\nSTATUS=" + status);
}

void ServiceManager::keep_alive() {
  if (watchdog_.count() == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_keep_alive_ < watchdog_) return;
  last_keep_alive_ = now;
  send("WATCHDOG=1");
}

}  // namespace agentcage::daemon
