// SPDX-License-Identifier: Apache-2.0
// The daemon and its service manager (systemd's notification protocol,
// sd_notify(3), through libsystemd): READY=1 once the daemon enforces with
// its policy directory loaded, STATUS= lines that say what it is doing,
// RELOADING=1 around a reload, STOPPING=1, and WATCHDOG=1 keep-alives when
// the unit sets WatchdogSec=. Without NOTIFY_SOCKET (no systemd, or
// Type=simple) every call does nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace agentcage::daemon {

class ServiceManager {
 public:
  // Reads NOTIFY_SOCKET and WATCHDOG_USEC/WATCHDOG_PID once.
  ServiceManager();

  bool notifying() const { return notifying_; }
  // The interval keep-alives are due at (half the unit's WatchdogSec=), zero without a watchdog.
  std::chrono::microseconds watchdog_interval() const { return watchdog_; }

  // READY=1 with a STATUS= line, once; later calls only update the status.
  void ready(const std::string& status);
  void status(const std::string& status);
  // RELOADING=1 (with MONOTONIC_USEC=, systemd's reload protocol); the next ready() says READY=1 again.
  void reloading(const std::string& status);
  void stopping(const std::string& status);
  // WATCHDOG=1 when one is due (call every tick; sends at most once per interval).
  void keep_alive();

 private:
  void send(const std::string& message);

  bool notifying_ = false;
  bool ready_ = false;
  std::chrono::microseconds watchdog_{0};
  std::chrono::steady_clock::time_point last_keep_alive_{};
  std::string status_;
};

}  // namespace agentcage::daemon
