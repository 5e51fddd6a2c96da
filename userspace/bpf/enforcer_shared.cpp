// SPDX-License-Identifier: Apache-2.0
// Enforcer: the shared program set pinned in bpffs (open, adopt, pin) and the
// cross-process lock that serialises map updates between agentcage processes.
#include "bpf/enforcer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>

#include "agentcage.digest.h"
#include "bpf/enforcer_internal.h"
#include "bpf/programs.h"
#include "bpf/skeleton.h"
#include "util/log.h"

namespace agentcage::bpf {

using detail::bpf_error;
using detail::kPerScopePrograms;
using detail::kReceiveFilter;
using detail::per_scope_program;

namespace {

}  // namespace

// The pinned set's directory is named after the BPF object this binary
// carries, so two builds never adopt each other's maps.
// Computed when the object was built (cmake/object_digest.cmake): hashing
// 1.5 MB on every run's start cost more than the rest of adopting the set.
std::string Enforcer::object_digest() { return AGENTCAGE_BPF_OBJECT_DIGEST; }

namespace {

Status make_dirs(const std::string& path, mode_t mode) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return Error::from_errno("creating " + cur);
  }
  return {};
}

// Remove a pin directory tree (unlinking pins drops their references; links
// whose last reference goes are detached).
void remove_pins(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace

std::string Enforcer::shared_pin_dir(const std::string& pin_root) { return pin_root + "/" + object_digest(); }

Result<std::unique_ptr<Enforcer>> Enforcer::open_shared(const SharedOptions& opts) {
  log::route_libbpf();
  const std::string dir = shared_pin_dir(opts.pin_root);

  // Adopting or loading happens under the cross-process lock, so two
  // agentcage processes starting at once never load two sets.
  std::unique_ptr<Enforcer> lock_holder(new Enforcer());
  lock_holder->lock_path_ = opts.lock_path;
  if (Status st = lock_holder->take_lock(); !st) return st.error();

  auto open = [&]() -> Result<std::unique_ptr<Enforcer>> {
    struct stat sb {};
    if (::stat((dir + "/ready").c_str(), &sb) == 0) {
      std::unique_ptr<Enforcer> self(new Enforcer());
      if (Status st = self->adopt_pinned(dir); !st)
        return st.error().wrap("adopting the pinned programs in " + dir +
                               " (remove that directory to load them afresh)");
      return self;
    }
    // Load first: when the kernel refuses BPF LSM programs, that is the
    // problem to report, not a missing bpffs.
    auto self = load_skeleton(opts.load);
    if (!self) return self.error();
    if (Status st = (*self)->check_lsm_active(); !st) return st.error();
    const std::string parent = std::filesystem::path(opts.pin_root).parent_path().string();
    struct statfs fs {};
    if (::statfs(parent.c_str(), &fs) != 0 || fs.f_type != BPF_FS_MAGIC)
      return Error{"bpf: " + parent + " is not a mounted bpf filesystem; mount it with `mount -t bpf bpf " +
                       parent + "` (systemd mounts /sys/fs/bpf at boot)",
                   kErrNoBpffs};
    // A set without its ready mark is a load that died half way: drop it.
    remove_pins(dir);
    ac_config cfg{};
    cfg.next_rules_id = 1;
    cfg.next_workspace_tag = 1;
    if (Status st = (*self)->write_config(cfg); !st) return st.error();
    if (Status st = (*self)->pin_all(dir); !st) {
      remove_pins(dir);
      return st.error();
    }
    return std::move(*self);
  };
  auto self = open();
  if (!self) {
    lock_holder->drop_lock();
    return self.error();
  }
  (*self)->shared_ = true;
  (*self)->pin_dir_ = dir;
  (*self)->lock_path_ = opts.lock_path;
  (*self)->lock_fd_ = std::move(lock_holder->lock_fd_);
  // The lock fd moved with the flock held: release it now.
  if ((*self)->lock_fd_) ::flock((*self)->lock_fd_.get(), LOCK_UN);
  if (Status st = (*self)->check_lsm_active(); !st) return st.error();
  return std::move(*self);
}

Status Enforcer::pin_all(const std::string& dir) {
  if (Status st = make_dirs(dir + "/maps", 0700); !st) return st;
  if (Status st = make_dirs(dir + "/links", 0700); !st) return st;
  if (Status st = make_dirs(dir + "/programs", 0700); !st) return st;
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel_->obj) {
    if (bpf_map__is_internal(map)) continue;
    std::string path = dir + "/maps/" + bpf_map__name(map);
    if (int err = bpf_map__pin(map, path.c_str())) return bpf_error("pinning map " + path, err);
  }
  // A pinned link keeps its program attached after this process exits.
  // A program this kernel has no hook for is marked by an empty directory
  // under skipped/, so adopting the set (every run's start) needs no look at
  // the kernel's BTF to know which links must be there.
  const bpf_object_skeleton* sk = skel_->skeleton;
  for (int i = 0; i < sk->prog_cnt; ++i) {
    if (program_skipped(*sk->progs[i].prog)) {
      if (Status st = make_dirs(dir + "/skipped/" + sk->progs[i].name, 0700); !st) return st;
      continue;
    }
    if (per_scope_program(sk->progs[i].name)) {
      // Attached to cgroups one by one: the program itself is pinned.
      const std::string path = dir + "/programs/" + sk->progs[i].name;
      if (int err = bpf_program__pin(*sk->progs[i].prog, path.c_str())) return bpf_error("pinning " + path, err);
      continue;
    }
    bpf_link* link = *sk->progs[i].link;
    std::string path = dir + "/links/" + sk->progs[i].name;
    if (!link) return Error{"bpf: program " + std::string(sk->progs[i].name) + " is not attached", ENOENT};
    if (int err = bpf_link__pin(link, path.c_str())) return bpf_error("pinning link " + path, err);
  }
  // Last: the mark that says the set is complete.
  if (int err = bpf_obj_pin(maps_.settings, (dir + "/ready").c_str()))
    return bpf_error("pinning " + dir + "/ready", err);
  return {};
}

Status Enforcer::adopt_pinned(const std::string& dir) {
  // Adoption is on every run's start-up path: open the maps by their
  // pinned names and check the links, without parsing the BPF object.
  auto get = [&](const std::string& name, int* out) -> Status {
    std::string path = dir + "/maps/" + name;
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) return bpf_error("opening pinned " + path, fd);
    owned_fds_.emplace_back(fd);
    *out = fd;
    return {};
  };
  const std::pair<const char*, int*> wanted[] = {{"ac_scopes", &maps_.scopes},
                                                 {"ac_policies", &maps_.policies},
                                                 {"ac_settings", &maps_.settings},
                                                 {"ac_path_rules", &maps_.path_rules},
                                                 {"ac_workspaces", &maps_.workspaces},
                                                 {"ac_net_rules", &maps_.net_rules},
                                                 {"ac_decision_counts", &maps_.decision_counts},
                                                 {"ac_stats", &maps_.stats},
                                                 {"ac_events", &maps_.events},
                                                 {"ac_scope_reports", &maps_.scope_reports},
                                                 {"ac_listeners", &maps_.listeners},
                                                 {"ac_scope_rings", &maps_.scope_rings},
                                                 {"ac_bindings", &maps_.bindings}};
  for (const auto& [name, out] : wanted)
    if (Status st = get(name, out); !st) return st;
  const std::string filter = dir + "/programs/" + kReceiveFilter;
  receive_filter_ = bpf_obj_get(filter.c_str());
  if (receive_filter_ < 0) return bpf_error("opening pinned " + filter, receive_filter_);
  owned_fds_.emplace_back(receive_filter_);

  // Every LSM program must still be attached: a pinned link is an
  // attachment, and the set pins one link per LSM program of this build's
  // object (all but the receive filter), or marks it skipped/ when this
  // kernel has no such hook.
  auto names_in = [](const std::string& sub, std::set<std::string>& out) -> Status {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(sub, ec))
      out.insert(entry.path().filename());
    if (ec) return Error{"bpf: listing " + sub + ": " + ec.message(), ec.value()};
    return {};
  };
  std::set<std::string> links, skipped;
  if (Status st = names_in(dir + "/links", links); !st) return st;
  struct stat sb {};
  if (::stat((dir + "/skipped").c_str(), &sb) == 0) {
    if (Status st = names_in(dir + "/skipped", skipped); !st) return st;
  } else {
    // A set pinned by a build that did not mark skipped programs.
    auto skip = programs_to_skip();
    if (!skip) return skip.error();
    skipped.insert(skip->begin(), skip->end());
  }
  for (const auto& name : skipped)
    if (links.count(name))
      return Error{"bpf: program " + name + " is both attached and marked skipped in " + dir, EEXIST};
  constexpr size_t kPrograms = sizeof(agentcage_bpf::progs) / sizeof(bpf_program*) - kPerScopePrograms;
  if (links.size() + skipped.size() != kPrograms)
    return Error{"bpf: " + std::to_string(links.size()) + " of the " +
                     std::to_string(kPrograms - skipped.size()) + " programs are attached in " + dir +
                     "/links",
                 ENOENT};
  return {};
}

std::vector<ProgramInfo> Enforcer::programs() const {
  if (!programs_.empty() || pin_dir_.empty()) return programs_;
  // Adopted set: resolve the programs behind the pinned links on demand.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(pin_dir_ + "/links", ec)) {
    int link_fd = bpf_obj_get(entry.path().c_str());
    if (link_fd < 0) continue;
    UniqueFd link(link_fd);
    bpf_link_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(link.get(), &info, &len) != 0) continue;
    int prog_fd = bpf_prog_get_fd_by_id(info.prog_id);
    if (prog_fd < 0) continue;
    owned_fds_.emplace_back(prog_fd);
    programs_.push_back({entry.path().filename().string(), prog_fd});
  }
  if (receive_filter_ >= 0) programs_.push_back({kReceiveFilter, receive_filter_, true});
  for (size_t i = 0; i < std::size(detail::kDnsPrograms); ++i)
    if (auto fd = dns_program(i)) programs_.push_back({detail::kDnsPrograms[i].name, *fd, true});
  return programs_;
}

std::vector<int> Enforcer::descriptors() const {
  std::vector<int> fds;
  for (const auto& fd : owned_fds_) fds.push_back(fd.get());
  for (const auto& [id, fd] : filtered_) fds.push_back(fd.get());
  if (lock_fd_) fds.push_back(lock_fd_.get());
  return fds;
}

Status Enforcer::take_lock() {
  if (lock_path_.empty()) return {};
  if (lock_depth_++ > 0) return {};
  if (!lock_fd_) {
    auto parent = std::filesystem::path(lock_path_).parent_path().string();
    if (Status st = make_dirs(parent, 0755); !st) {
      --lock_depth_;
      return st;
    }
    int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      --lock_depth_;
      return Error::from_errno("opening lock " + lock_path_);
    }
    lock_fd_.reset(fd);
  }
  while (::flock(lock_fd_.get(), LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    --lock_depth_;
    return Error::from_errno("locking " + lock_path_);
  }
  return {};
}

void Enforcer::drop_lock() {
  if (lock_path_.empty() || lock_depth_ == 0) return;
  if (--lock_depth_ == 0 && lock_fd_) ::flock(lock_fd_.get(), LOCK_UN);
}

Status Enforcer::with_lock(const std::function<Status()>& fn) {
  if (Status st = take_lock(); !st) return st;
  Status result = fn();
  drop_lock();
  return result;
}

}  // namespace agentcage::bpf
