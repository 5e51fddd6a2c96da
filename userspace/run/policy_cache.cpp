// SPDX-License-Identifier: Apache-2.0
#include "run/policy_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "bpf/compile.h"
#include "run/seccomp.h"

namespace agentcage::run {
namespace {

struct Entry {
  std::string text;
  PreparedPolicy prepared;
};

std::map<std::string, Entry>& cache() {
  static std::map<std::string, Entry> entries;
  return entries;
}

// The prepared set and the identity of the "ready" pin it was adopted under.
struct PreparedSet {
  std::unique_ptr<bpf::Enforcer> enforcer;
  dev_t dev = 0;
  ino_t ino = 0;
};

PreparedSet& prepared_set() {
  static PreparedSet set;
  return set;
}

// The shared set's "ready" pin, whose inode names the set pinned now.
std::string ready_pin() { return bpf::Enforcer::shared_pin_dir(bpf::SharedOptions{}.pin_root) + "/ready"; }

}  // namespace

const PreparedPolicy* prepared_policy(const std::string& path, std::string_view text) {
  const auto it = cache().find(path);
  if (it == cache().end() || it->second.text != text) return nullptr;
  // And every file it includes still holds the bytes it was prepared from.
  for (const auto& inc : it->second.prepared.policy.includes) {
    auto now = policy::read_policy_text(inc.path);
    if (!now || *now != inc.text) return nullptr;
  }
  return &it->second.prepared;
}

Status prepare_policy(const std::string& path) {
  auto text = policy::read_policy_text(path);
  if (!text) return Error{path + ": " + text.error().message, text.error().code};
  if (prepared_policy(path, *text)) return {};
  cache().erase(path);
  auto parsed = policy::parse_policy(*text, path);
  if (!parsed.ok()) return Error{path + ": not a valid policy", EINVAL};
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled) return compiled.error();  // located: FILE:LINE:COL
  auto filter = build_seccomp_filter(parsed.policy->syscalls_allow);
  if (!filter) return Error{path + ": " + filter.error().message, filter.error().code};
  if (cache().size() >= kMaxPreparedPolicies) cache().clear();
  cache().insert_or_assign(
      path, Entry{std::move(*text),
                  PreparedPolicy{std::move(*parsed.policy), std::move(*compiled), std::move(*filter)}});
  return {};
}

Status prepare_enforcer() {
  PreparedSet& set = prepared_set();
  const std::string ready = ready_pin();
  struct stat before {};
  if (::stat(ready.c_str(), &before) != 0) {
    set.enforcer.reset();
    return Error::from_errno("no shared program set is pinned (" + ready + ")");
  }
  if (set.enforcer && set.dev == before.st_dev && set.ino == before.st_ino) return {};
  set.enforcer.reset();
  auto opened = bpf::Enforcer::open_shared();
  if (!opened) return opened.error();
  // Held only when it is the set that was pinned all along (not one loaded
  // here, nor adopted while the pins changed).
  struct stat after {};
  if (!(*opened)->adopted() || ::stat(ready.c_str(), &after) != 0 || after.st_dev != before.st_dev ||
      after.st_ino != before.st_ino)
    return Error{"the shared program set changed while it was adopted", EAGAIN};
  (*opened)->close_lock_file();
  set.enforcer = std::move(*opened);
  set.dev = before.st_dev;
  set.ino = before.st_ino;
  return {};
}

std::vector<int> prepared_enforcer_fds() {
  const PreparedSet& set = prepared_set();
  return set.enforcer ? set.enforcer->descriptors() : std::vector<int>{};
}

std::unique_ptr<bpf::Enforcer> take_prepared_enforcer() {
  PreparedSet& set = prepared_set();
  std::unique_ptr<bpf::Enforcer> taken = std::move(set.enforcer);
  if (!taken) return nullptr;
  // Still the set pinned now: a spare runner takes it long after the
  // server checked (a set pinned anew since is opened afresh).
  struct stat now {};
  if (::stat(ready_pin().c_str(), &now) != 0 || now.st_dev != set.dev || now.st_ino != set.ino)
    return nullptr;
  return taken;
}

namespace {

struct StartGate {
  int fd = -1;
  std::stringbuf held;                 // what std::cerr said meanwhile
  std::streambuf* cerr_buf = nullptr;  // std::cerr's own, while held
};

StartGate& start_gate() {
  static StartGate gate;
  return gate;
}

}  // namespace

void set_start_gate(int fd) {
  StartGate& g = start_gate();
  g.fd = fd;
  if (!g.cerr_buf) g.cerr_buf = std::cerr.rdbuf(&g.held);
}

bool await_start_gate() {
  StartGate& g = start_gate();
  const int fd = std::exchange(g.fd, -1);
  if (fd < 0) return true;
  char byte = 0;
  ssize_t got;
  while ((got = ::read(fd, &byte, 1)) < 0 && errno == EINTR) {
  }
  ::close(fd);
  std::cerr.rdbuf(std::exchange(g.cerr_buf, nullptr));
  const std::string said = g.held.str();
  g.held.str({});
  if (got != 1) return false;
  std::cerr << said;
  std::cerr.flush();
  return true;
}

}  // namespace agentcage::run
