// SPDX-License-Identifier: Apache-2.0
// Reads decision records from the shared ring buffer (ac_events).
#pragma once

#include <agentcage/abi.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "util/result.h"

struct ring_buffer;

namespace agentcage::bpf {

// Owns the libbpf ring_buffer; must not outlive the Enforcer whose
// events_fd() it was built from.
class EventReader {
 public:
  using Handler = std::function<void(const ac_event_decision&)>;
  static Result<std::unique_ptr<EventReader>> create(int events_fd, Handler handler);
  ~EventReader();
  EventReader(const EventReader&) = delete;
  EventReader& operator=(const EventReader&) = delete;

  // Consume what is available, waiting up to timeout_ms. Returns the number
  // of records handled.
  Result<int> poll(int timeout_ms);
  // For an event loop: an fd that is readable when records are available,
  // and a non-blocking consume of everything available.
  int epoll_fd() const;
  Result<int> consume();
  // Records that were malformed (size/type mismatch) and skipped.
  uint64_t malformed() const { return malformed_; }

 private:
  EventReader() = default;
  static int on_record(void* ctx, void* data, size_t size);
  ring_buffer* rb_ = nullptr;
  Handler handler_;
  uint64_t malformed_ = 0;
};

}  // namespace agentcage::bpf
