// SPDX-License-Identifier: Apache-2.0
#include "bpf/event_reader.h"

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "bpf/enforcer_internal.h"
#include "bpf/record.h"
#include "util/log.h"

namespace agentcage::bpf {

using detail::bpf_error;

Result<std::unique_ptr<EventReader>> EventReader::create(int events_fd, Handler handler) {
  std::unique_ptr<EventReader> self(new EventReader());
  self->handler_ = std::move(handler);
  self->rb_ = ring_buffer__new(events_fd, &EventReader::on_record, self.get(), nullptr);
  if (!self->rb_) return bpf_error("creating the event ring buffer reader", errno);
  return self;
}

EventReader::~EventReader() { ring_buffer__free(rb_); }

int EventReader::on_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<EventReader*>(ctx);
  const std::optional<ac_event_decision> ev = decode_record(data, size);
  if (!ev) {
    ++self->malformed_;
    return 0;
  }
  // An exception must not unwind through libbpf's C frames.
  try {
    self->handler_(*ev);
  } catch (const std::exception& e) {
    log::error(std::string("events: handler failed: ") + e.what());
  } catch (...) {
    log::error("events: handler failed");
  }
  return 0;
}

Result<int> EventReader::poll(int timeout_ms) {
  int n = ring_buffer__poll(rb_, timeout_ms);
  if (n == -EINTR) return 0;
  if (n < 0) return bpf_error("polling events", n);
  return n;
}

int EventReader::epoll_fd() const { return ring_buffer__epoll_fd(rb_); }

Result<int> EventReader::consume() {
  int n = ring_buffer__consume(rb_);
  if (n == -EINTR) return 0;
  if (n < 0) return bpf_error("consuming events", n);
  return n;
}

}  // namespace agentcage::bpf
