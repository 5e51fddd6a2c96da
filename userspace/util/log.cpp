// SPDX-License-Identifier: Apache-2.0
#include "util/log.h"

#include <bpf/libbpf.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <systemd/sd-journal.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "util/shared_library.h"

namespace agentcage::log {
namespace {

std::atomic<Level> g_level{Level::warn};
std::atomic<bool> g_journal{false};

// Each level's word and its sd-daemon(3) priority prefix (LOG_DEBUG,
// LOG_INFO, LOG_WARNING, LOG_ERR), by Level's value.
struct LevelText {
  const char* word;
  const char* journal;
};
constexpr LevelText kLevels[] = {{"debug", "<7>"}, {"info", "<6>"}, {"warning", "<4>"}, {"error", "<3>"}};

const LevelText& text_of(Level level) {
  const auto i = static_cast<size_t>(level);
  return kLevels[i < std::size(kLevels) ? i : std::size(kLevels) - 1];
}

// A field name journald takes after the AGENTCAGE_ in front of it: upper
// case letters, digits and '_'.
bool valid_field_name(std::string_view name) {
  if (name.empty() || name.size() > 48) return false;
  for (char c : name)
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// sd_journal_sendv from libsystemd, opened the first time a message goes to
// the journal (util/shared_library.h); nullptr when libsystemd is not there.
decltype(&sd_journal_sendv) journal_sendv() {
  static const auto fn = []() -> decltype(&sd_journal_sendv) {
    auto lib = SharedLibrary::open("libsystemd.so.0");
    if (!lib) return nullptr;
    return lib->function<decltype(&sd_journal_sendv)>("sd_journal_sendv");
  }();
  return fn;
}

// One structured journal entry; false when the journal is not there to take
// it. (sd_journal_sendv reports success when journald's socket is missing:
// "fail silently", so ask first, or the message would be lost.)
bool send_to_journal(Level lvl, std::string_view message, std::initializer_list<Field> fields) {
  if (::access("/run/systemd/journal/socket", F_OK) != 0) return false;
  const auto sendv = journal_sendv();
  if (!sendv) return false;
  std::vector<std::string> items;
  items.reserve(fields.size() + 3);
  items.push_back("MESSAGE=agentcage: " + std::string(text_of(lvl).word) + ": " + std::string(message));
  items.push_back("PRIORITY=" + std::string(1, text_of(lvl).journal[1]));
  items.push_back("SYSLOG_IDENTIFIER=agentcage");
  for (const Field& f : fields)
    if (valid_field_name(f.name)) items.push_back("AGENTCAGE_" + std::string(f.name) + "=" + std::string(f.value));
  std::vector<iovec> iov;
  iov.reserve(items.size());
  for (auto& item : items) iov.push_back({item.data(), item.size()});
  return sendv(iov.data(), static_cast<int>(iov.size())) >= 0;
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

void write(Level lvl, std::string_view message, std::initializer_list<Field> fields) {
  if (lvl < g_level.load(std::memory_order_relaxed)) return;
  if (!g_journal.load(std::memory_order_relaxed)) {
    std::fprintf(stderr, "agentcage: %s: %.*s\n", text_of(lvl).word, static_cast<int>(message.size()),
                 message.data());
    return;
  }
  if (fields.size() != 0 && send_to_journal(lvl, message, fields)) return;
  // journald takes each line as an entry of its own: every line carries the priority.
  std::string out;
  size_t start = 0;
  do {
    size_t end = message.find('\n', start);
    if (end == std::string_view::npos) end = message.size();
    out += text_of(lvl).journal;
    out += "agentcage: ";
    out += text_of(lvl).word;
    out += ": ";
    out.append(message.substr(start, end - start));
    out += '\n';
    start = end + 1;
  } while (start < message.size());
  std::fwrite(out.data(), 1, out.size(), stderr);
}

void detect_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  unsigned long long dev = 0, ino = 0;
  struct stat st {};
  g_journal.store(stream && std::sscanf(stream, "%llu:%llu", &dev, &ino) == 2 && ::fstat(2, &st) == 0 &&
                      static_cast<unsigned long long>(st.st_dev) == dev &&
                      static_cast<unsigned long long>(st.st_ino) == ino,
                  std::memory_order_relaxed);
}

bool to_journal() { return g_journal.load(std::memory_order_relaxed); }

bool also_to_journal(Level lvl, std::string_view message, std::initializer_list<Field> fields) {
  return send_to_journal(lvl, message, fields);
}

void route_libbpf() { libbpf_set_print(libbpf_print); }

}  // namespace agentcage::log
