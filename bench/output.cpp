// SPDX-License-Identifier: Apache-2.0
// What every section prints with, and the clock it times with.
#include <time.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include "bench.h"

namespace agentcage::bench {

// Progress goes to stderr (merged into the same stream in the VM), marked.
void progress(const char* fmt, ...) {
  std::fputs("  .. ", stderr);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string fmt_ns(double ns) {
  if (ns < 10'000) return fmt("%.0f ns", ns);
  if (ns < 10'000'000) return fmt("%.1f us", ns / 1e3);
  return fmt("%.2f ms", ns / 1e6);
}

uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace agentcage::bench
