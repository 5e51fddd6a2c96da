// SPDX-License-Identifier: Apache-2.0
#include "util/log.h"

#include <bpf/libbpf.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace agentcage::log {
namespace {

std::atomic<Level> g_level{Level::warn};

const char* prefix(Level level) {
  switch (level) {
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warning";
    case Level::error:
      return "error";
    case Level::off:
      break;
  }
  return "";
}

int libbpf_print(enum libbpf_print_level lvl, const char* fmt, va_list args) {
  Level mapped = lvl == LIBBPF_WARN ? Level::warn : Level::debug;
  if (mapped < g_level.load(std::memory_order_relaxed)) return 0;
  // Verifier logs run to many kilobytes: size the buffer, never truncate.
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n < 0) return n;
  std::string msg(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(msg.data(), msg.size(), fmt, args);
  msg.resize(static_cast<size_t>(n));
  while (!msg.empty() && msg.back() == '\n') msg.pop_back();
  write(mapped, "libbpf: " + msg);
  return n;
}

}  // namespace

void set_level(Level level) { g_level.store(level, std::memory_order_relaxed); }
Level level() { return g_level.load(std::memory_order_relaxed); }

void write(Level lvl, std::string_view message) {
  if (lvl < g_level.load(std::memory_order_relaxed)) return;
  std::fprintf(stderr, "agentcage: %s: %.*s\n", prefix(lvl), static_cast<int>(message.size()),
               message.data());
}

void route_libbpf() { libbpf_set_print(libbpf_print); }

}  // namespace agentcage::log
