// SPDX-License-Identifier: Apache-2.0
#include "util/mountinfo.h"

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

#include "util/file.h"
#include "util/unique_fd.h"

namespace agentcage {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto oct = [](char c) { return c >= '0' && c <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

// The table of a host with thousands of mounts still fits.
constexpr size_t kMaxMountinfoBytes = 16u << 20;

}  // namespace

std::vector<MountEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string tok;
    while (fields >> tok) f.push_back(tok);
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i)
      if (f[i] == "-") {
        dash = i;
        break;
      }
    if (dash == 0 || dash + 1 >= f.size()) continue;
    MountEntry e;
    char colon = 0, rest = 0;
    unsigned long long id = 0;
    if (std::sscanf(f[0].c_str(), "%llu%c", &id, &rest) != 1) continue;
    e.id = id;
    if (std::sscanf(f[2].c_str(), "%u%c%u%c", &e.major, &colon, &e.minor, &rest) != 3 || colon != ':')
      continue;
    e.mount_point = unescape(f[4]);
    e.fs_type = f[dash + 1];
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<MountEntry>> read_mountinfo() {
  UniqueFd fd(::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC));
  if (!fd) return Error::from_errno("reading /proc/self/mountinfo");
  auto text = read_up_to(fd.get(), kMaxMountinfoBytes + 1);
  if (!text) return text.error().wrap("reading /proc/self/mountinfo");
  if (text->size() > kMaxMountinfoBytes)
    return Error{"/proc/self/mountinfo is longer than " + std::to_string(kMaxMountinfoBytes) + " bytes",
                 EFBIG};
  return parse_mountinfo(*text);
}

std::optional<std::string> fs_type_of_mount(const std::vector<MountEntry>& mounts, uint64_t mount_id) {
  for (const auto& m : mounts)
    if (m.id == mount_id) return m.fs_type;
  return std::nullopt;
}

}  // namespace agentcage
