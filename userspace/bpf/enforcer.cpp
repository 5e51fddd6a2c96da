#include "bpf/enforcer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bpf/lsm.h"
#include "util/log.h"

// The generated skeleton is C; keep our warning set for our own code only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wcast-align"
#include "agentcage.skel.h"
#pragma GCC diagnostic pop

namespace agentcage::bpf {
namespace {

Error bpf_error(const std::string& what, int err) {
  // libbpf returns negative errno values.
  return Error::from_errno("bpf: " + what, err < 0 ? -err : err);
}

int cpu_count() {
  int n = libbpf_num_possible_cpus();
  return n > 0 ? n : 1;
}

}  // namespace

Result<ac_path_key> make_path_key(uint32_t rules_id, const PathRule& rule) {
  const std::string& path = rule.path;
  if (rules_id & ~AC_RULES_ID_MASK) return Error{"bpf: rules id out of range", EINVAL};
  std::string text;
  if (rule.space == RuleSpace::abstract_unix) {
    if (path.empty()) return Error{"bpf: empty abstract unix socket name", EINVAL};
    text = path;  // exact bytes; the kernel side compares the length too
  } else {
    if (path.empty() || path.front() != '/')
      return Error{"bpf: path rule is not absolute: \"" + path + "\"", EINVAL};
    text = path == "/" ? "/" : path + "/";
  }
  if (text.size() > AC_PATH_KEY_MAX)
    return Error{"bpf: path rule longer than " + std::to_string(AC_PATH_KEY_MAX - 1) + " bytes: \"" +
                     path + "\"",
                 ENAMETOOLONG};
  ac_path_key key{};
  key.rules_id_be = htonl(rules_id | static_cast<uint32_t>(rule.space));
  std::memcpy(key.path, text.data(), text.size());
  key.prefixlen = static_cast<uint32_t>(32 + 8 * text.size());
  return key;
}

Result<ac_path_key> make_path_key(uint32_t rules_id, const std::string& path) {
  return make_path_key(rules_id, PathRule{path, 0, RuleSpace::absolute});
}

Result<ac_net_key> make_net_key(uint32_t rules_id, const NetRule& rule) {
  if (rule.prefix_len > 128) return Error{"bpf: CIDR prefix longer than 128 bits", EINVAL};
  if (rule.ranges.empty() || rule.ranges.size() > AC_NET_MAX_RANGES)
    return Error{"bpf: a CIDR rule needs 1.." + std::to_string(AC_NET_MAX_RANGES) + " port ranges", EINVAL};
  ac_net_key key{};
  key.rules_id_be = htonl(rules_id & AC_RULES_ID_MASK);
  std::memcpy(key.addr, rule.addr.data(), 16);
  key.prefixlen = 32u + rule.prefix_len;
  return key;
}

uint64_t policy_digest(const std::string& name, const CompiledPolicy& policy) {
  // FNV-1a over a length-prefixed serialisation: equal digests for equal
  // (name, rules, flags), and no two field sequences serialise alike.
  uint64_t h = 0xcbf29ce484222325ULL;
  auto bytes = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 0x100000001b3ULL;
    }
  };
  auto u64 = [&](uint64_t v) { bytes(&v, sizeof v); };
  auto str = [&](const std::string& v) {
    u64(v.size());
    bytes(v.data(), v.size());
  };
  str(name);
  u64(policy.flags);
  u64(policy.paths.size());
  for (const auto& r : policy.paths) {
    str(r.path);
    u64(r.access);
    u64(static_cast<uint32_t>(r.space));
  }
  u64(policy.net.size());
  for (const auto& r : policy.net) {
    bytes(r.addr.data(), r.addr.size());
    u64(r.prefix_len);
    u64(r.ranges.size());
    for (const auto& pr : r.ranges) {
      u64(pr.first);
      u64(pr.last);
      u64(pr.protocols);
    }
  }
  return h;
}

namespace {

// Collect every key of a map (hash or LPM trie). Used under the lock on maps
// that are small (rules, scopes, policies).
template <class Key>
std::vector<Key> all_keys(int fd) {
  std::vector<Key> keys;
  Key cur{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    keys.push_back(next);
    cur = next;
    prev = &cur;
  }
  return keys;
}

uint32_t rules_id_of(uint32_t rules_id_be) { return ntohl(rules_id_be) & AC_RULES_ID_MASK; }

// The pinned set's directory is named after the BPF object this binary
// carries, so two builds never adopt each other's maps.
std::string object_digest() {
  size_t size = 0;
  const void* data = agentcage_bpf__elf_bytes(&size);
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Status make_dirs(const std::string& path, mode_t mode) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST)
      return Error::from_errno("creating " + cur);
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

void Enforcer::SkelDeleter::operator()(agentcage_bpf* skel) const {
  agentcage_bpf__destroy(skel);  // closes links (pinned ones stay attached), maps and programs
}

Result<std::unique_ptr<Enforcer>> Enforcer::load_skeleton(const LoadOptions& opts) {
  log::route_libbpf();

  std::unique_ptr<Enforcer> self(new Enforcer());
  self->skel_.reset(agentcage_bpf__open());
  if (!self->skel_) return bpf_error("opening the BPF object failed", errno);

  if (int err = bpf_map__set_max_entries(self->skel_->maps.ac_events, opts.ringbuf_bytes))
    return bpf_error("sizing the event ring buffer", err);

  if (int err = agentcage_bpf__load(self->skel_.get())) {
    if (err == -EPERM)
      return Error{
          "bpf: the kernel refused to load the LSM programs (" + std::string(std::strerror(-err)) +
              "). Loading BPF LSM programs needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN), "
              "a kernel built with CONFIG_BPF_LSM=y and no lockdown or sandbox forbidding it; "
              "some virtualised kernels refuse LSM programs outright.",
          -err};
    if (err == -EACCES || err == -EINVAL)
      return bpf_error(
          "the kernel's verifier rejected an LSM program (run with -vv for the verifier log; "
          "this is a bug in agentcage or an unsupported kernel)",
          err);
    return bpf_error("loading the LSM programs into the kernel (run with -vv for libbpf's log)", err);
  }
  if (int err = agentcage_bpf__attach(self->skel_.get()))
    return bpf_error("attaching the LSM programs", err);

  auto& m = self->skel_->maps;
  self->maps_ = {bpf_map__fd(m.ac_scopes),          bpf_map__fd(m.ac_policies),
                 bpf_map__fd(m.ac_settings),        bpf_map__fd(m.ac_path_rules),
                 bpf_map__fd(m.ac_workspaces),      bpf_map__fd(m.ac_net_rules),
                 bpf_map__fd(m.ac_decision_counts), bpf_map__fd(m.ac_stats),
                 bpf_map__fd(m.ac_events),          bpf_map__fd(m.ac_scope_reports)};
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, self->skel_->obj) {
    self->programs_.push_back({bpf_program__name(prog), bpf_program__fd(prog)});
  }
  return self;
}

Status Enforcer::check_lsm_active() const {
  // Attaching succeeds even when the bpf LSM is not in the active LSM list,
  // but then the programs are never called. Refuse rather than pretend.
  LsmState lsm = read_lsm_state();
  if (!lsm.readable)
    return Error{"bpf: cannot confirm the BPF LSM is active: " + lsm.detail, ENOENT};
  if (!lsm.bpf_active)
    return Error{"bpf: the BPF LSM is not active (active LSMs: " + lsm.list +
                     "); programs would attach but never run. " + lsm_fix_hint(lsm),
                 ENOTSUP};
  return {};
}

Result<std::unique_ptr<Enforcer>> Enforcer::load(const LoadOptions& opts) {
  auto self = load_skeleton(opts);
  if (!self) return self.error();
  if (Status st = (*self)->check_lsm_active(); !st) return st.error();
  // Start from a clean configuration: no scope levels, so nothing is scoped.
  ac_config cfg{};
  cfg.next_rules_id = 1;
  cfg.next_workspace_tag = 1;
  if (Status st = (*self)->write_config(cfg); !st) return st.error();
  return std::move(*self);
}

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
    struct stat sb{};
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
    struct statfs fs{};
    if (::statfs(parent.c_str(), &fs) != 0 || fs.f_type != BPF_FS_MAGIC)
      return Error{"bpf: " + parent +
                       " is not a mounted bpf filesystem; mount it with `mount -t bpf bpf " + parent +
                       "` (systemd mounts /sys/fs/bpf at boot)",
                   ENOTSUP};
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
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel_->obj) {
    if (bpf_map__is_internal(map)) continue;
    std::string path = dir + "/maps/" + bpf_map__name(map);
    if (int err = bpf_map__pin(map, path.c_str())) return bpf_error("pinning map " + path, err);
  }
  // A pinned link keeps its program attached after this process exits.
  const bpf_object_skeleton* sk = skel_->skeleton;
  for (int i = 0; i < sk->prog_cnt; ++i) {
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
  // Adoption is on every run's start-up path: open the ten maps by their
  // pinned names and check the links, without parsing the BPF object.
  auto get = [&](const std::string& name, int* out) -> Status {
    std::string path = dir + "/maps/" + name;
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) return bpf_error("opening pinned " + path, fd);
    owned_fds_.emplace_back(fd);
    *out = fd;
    return {};
  };
  const std::pair<const char*, int*> wanted[] = {
      {"ac_scopes", &maps_.scopes},           {"ac_policies", &maps_.policies},
      {"ac_settings", &maps_.settings},       {"ac_path_rules", &maps_.path_rules},
      {"ac_workspaces", &maps_.workspaces},   {"ac_net_rules", &maps_.net_rules},
      {"ac_decision_counts", &maps_.decision_counts}, {"ac_stats", &maps_.stats},
      {"ac_events", &maps_.events},           {"ac_scope_reports", &maps_.scope_reports}};
  for (const auto& [name, out] : wanted)
    if (Status st = get(name, out); !st) return st;

  // Every program must still be attached: a pinned link is an attachment,
  // and the set pins one link per program of this build's object.
  constexpr size_t kPrograms = sizeof(agentcage_bpf::progs) / sizeof(bpf_program*);
  std::error_code ec;
  size_t links = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/links", ec)) {
    static_cast<void>(entry);
    ++links;
  }
  if (ec) return Error{"bpf: listing " + dir + "/links: " + ec.message(), ec.value()};
  if (links != kPrograms)
    return Error{"bpf: " + std::to_string(links) + " of the " + std::to_string(kPrograms) +
                     " programs are attached in " + dir + "/links",
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
  return programs_;
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

Enforcer::~Enforcer() = default;

int Enforcer::events_fd() const { return maps_.events; }


Result<ac_config> Enforcer::read_config() const {
  uint32_t zero = 0;
  ac_config cfg{};
  if (int err = bpf_map_lookup_elem(maps_.settings, &zero, &cfg)) return bpf_error("reading settings", err);
  return cfg;
}

Status Enforcer::write_config(const ac_config& cfg) {
  uint32_t zero = 0;
  if (int err = bpf_map_update_elem(maps_.settings, &zero, &cfg, BPF_ANY))
    return bpf_error("writing settings", err);
  return {};
}

Status Enforcer::write_levels() {
  auto cfg = read_config();
  if (!cfg) return cfg.error();
  cfg->scope_levels = 0;
  cfg->min_level = cfg->max_level = 0;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) != 0) continue;
    cfg->scope_levels |= 1ULL << scope.level;
  }
  if (cfg->scope_levels) {
    cfg->min_level = static_cast<uint32_t>(__builtin_ctzll(cfg->scope_levels));
    cfg->max_level = static_cast<uint32_t>(63 - __builtin_clzll(cfg->scope_levels));
  }
  return write_config(*cfg);
}

Result<uint32_t> Enforcer::next_id(uint32_t ac_config::*field, uint32_t limit) {
  auto cfg = read_config();
  if (!cfg) return cfg.error();
  uint32_t id = (*cfg).*field;
  if (id == 0) id = 1;
  if (id > limit)
    return Error{"bpf: ids exhausted; unload the pinned programs (remove " +
                     (pin_dir_.empty() ? std::string("them") : pin_dir_) + ") to start afresh",
                 EOVERFLOW};
  (*cfg).*field = id + 1;
  if (Status st = write_config(*cfg); !st) return st.error();
  return id;
}

void Enforcer::purge_unreferenced() {
  std::vector<uint32_t> live;
  for (uint32_t slot : all_keys<uint32_t>(maps_.policies)) {
    ac_policy p{};
    if (bpf_map_lookup_elem(maps_.policies, &slot, &p) == 0) live.push_back(p.rules_id);
  }
  auto is_live = [&](uint32_t id) { return std::find(live.begin(), live.end(), id) != live.end(); };
  for (const auto& key : all_keys<ac_path_key>(maps_.path_rules))
    if (!is_live(rules_id_of(key.rules_id_be))) bpf_map_delete_elem(maps_.path_rules, &key);
  for (const auto& key : all_keys<ac_net_key>(maps_.net_rules))
    if (!is_live(rules_id_of(key.rules_id_be))) bpf_map_delete_elem(maps_.net_rules, &key);

  std::vector<uint32_t> tags;
  std::vector<uint64_t> scope_ids;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) != 0) continue;
    tags.push_back(scope.workspace_tag);
    scope_ids.push_back(scope.scope_id);
  }
  for (const auto& key : all_keys<ac_path_key>(maps_.workspaces))
    if (std::find(tags.begin(), tags.end(), ntohl(key.rules_id_be)) == tags.end())
      bpf_map_delete_elem(maps_.workspaces, &key);
  for (uint64_t id : all_keys<uint64_t>(maps_.scope_reports))
    if (std::find(scope_ids.begin(), scope_ids.end(), id) == scope_ids.end())
      bpf_map_delete_elem(maps_.scope_reports, &id);
}

Status Enforcer::put_policy(uint32_t slot, std::span<const PathRule> rules, uint32_t flags) {
  CompiledPolicy p;
  p.paths.assign(rules.begin(), rules.end());
  p.flags = flags;
  return put_policy(slot, p);
}

Status Enforcer::put_policy(uint32_t slot, const CompiledPolicy& policy) {
  return put_policy(slot, std::string(), policy);
}

Status Enforcer::put_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy) {
  return with_lock([&] { return install_policy(slot, name, policy, AC_POLICY_OWNER_NAMED); });
}

Status Enforcer::install_policy(uint32_t slot, const std::string& name, const CompiledPolicy& policy,
                                uint32_t owner) {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  if (name.size() >= AC_POLICY_NAME_MAX)
    return Error{"bpf: policy name longer than " + std::to_string(AC_POLICY_NAME_MAX - 1) + " bytes", EINVAL};
  auto rules_id = next_id(&ac_config::next_rules_id, AC_RULES_ID_MASK);
  if (!rules_id) return rules_id.error();

  auto fail = [&](Error e) {
    purge_unreferenced();  // drops what was written under the new id
    return Status(std::move(e));
  };
  for (const auto& rule : policy.paths) {
    auto key = make_path_key(*rules_id, rule);
    if (!key) return fail(key.error());
    ac_path_rule value{rule.access, rule.space == RuleSpace::abstract_unix
                                        ? static_cast<uint32_t>(rule.path.size())
                                        : 0};
    if (int err = bpf_map_update_elem(maps_.path_rules, &*key, &value, BPF_ANY))
      return fail(bpf_error("writing path rule \"" + rule.path + "\"", err));
  }
  for (const auto& rule : policy.net) {
    auto key = make_net_key(*rules_id, rule);
    if (!key) return fail(key.error());
    ac_net_rule value{};
    value.count = static_cast<uint32_t>(rule.ranges.size());
    for (size_t i = 0; i < rule.ranges.size(); ++i) value.ranges[i] = rule.ranges[i];
    if (int err = bpf_map_update_elem(maps_.net_rules, &*key, &value, BPF_ANY))
      return fail(bpf_error("writing network rule", err));
  }

  // One element update switches every scope on this slot to the new rules;
  // only then are the superseded rules deleted.
  ac_policy value{};
  value.rules_id = *rules_id;
  value.flags = policy.flags;
  value.owner = owner;
  value.digest = policy_digest(name, policy);
  std::memcpy(value.name, name.data(), name.size());
  if (int err = bpf_map_update_elem(maps_.policies, &slot, &value, BPF_ANY))
    return fail(bpf_error("switching policy slot " + std::to_string(slot), err));
  purge_unreferenced();
  return {};
}

Status Enforcer::remove_policy(uint32_t slot) {
  return with_lock([&]() -> Status {
    int err = bpf_map_delete_elem(maps_.policies, &slot);
    if (err && err != -ENOENT) return bpf_error("removing policy slot " + std::to_string(slot), err);
    purge_unreferenced();
    return {};
  });
}

std::vector<uint32_t> Enforcer::referenced_slots() const {
  std::vector<uint32_t> out;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) == 0) out.push_back(scope.policy_slot);
  }
  return out;
}

void Enforcer::reset_counters(uint32_t slot) {
  std::vector<ac_counters> zeros(static_cast<size_t>(cpu_count()));
  for (uint32_t hook = 0; hook < AC_HOOK_COUNT; ++hook) {
    uint32_t idx = slot * AC_HOOK_COUNT + hook;
    bpf_map_update_elem(maps_.decision_counts, &idx, zeros.data(), BPF_ANY);
  }
}

Result<uint32_t> Enforcer::acquire_policy(const std::string& name, const CompiledPolicy& policy) {
  uint32_t chosen = AC_MAX_POLICIES;
  Status st = with_lock([&]() -> Status {
    const uint64_t digest = policy_digest(name, policy);
    std::vector<uint32_t> used = all_keys<uint32_t>(maps_.policies);
    for (uint32_t slot : used) {
      ac_policy p{};
      if (bpf_map_lookup_elem(maps_.policies, &slot, &p) != 0) continue;
      if (p.owner == AC_POLICY_OWNER_TRANSIENT && p.digest == digest &&
          std::string(p.name, strnlen(p.name, sizeof p.name)) == name) {
        chosen = slot;
        return {};
      }
    }
    const std::vector<uint32_t> referenced = referenced_slots();
    auto is_referenced = [&](uint32_t slot) {
      return std::find(referenced.begin(), referenced.end(), slot) != referenced.end();
    };
    auto install = [&](uint32_t slot) -> Status {
      reset_counters(slot);
      if (Status s = install_policy(slot, name, policy, AC_POLICY_OWNER_TRANSIENT); !s) return s;
      chosen = slot;
      return {};
    };
    for (uint32_t slot = 0; slot < AC_MAX_POLICIES; ++slot) {
      if (std::find(used.begin(), used.end(), slot) != used.end()) continue;
      // A scope may still point at a slot whose policy was removed (it fails
      // closed); never hand such a slot to another policy.
      if (is_referenced(slot)) continue;
      return install(slot);
    }
    // Every slot holds a policy: replace a cached transient one nobody uses.
    for (uint32_t slot : used) {
      ac_policy p{};
      if (bpf_map_lookup_elem(maps_.policies, &slot, &p) != 0) continue;
      if (p.owner == AC_POLICY_OWNER_TRANSIENT && !is_referenced(slot)) return install(slot);
    }
    return Error{"bpf: all " + std::to_string(AC_MAX_POLICIES) + " policy slots are in use", ENOSPC};
  });
  if (!st) return st.error();
  return chosen;
}

Status Enforcer::release_policy(uint32_t slot) {
  // An unused transient policy stays cached in its slot, so the next run of
  // the same policy only registers a scope (no rules to write). At most
  // kCachedTransient unused ones are kept; acquire_policy also replaces one
  // when every slot is taken. Memory stays bounded by distinct policies.
  return with_lock([&]() -> Status {
    const std::vector<uint32_t> referenced = referenced_slots();
    std::vector<uint32_t> unused;
    for (uint32_t s : all_keys<uint32_t>(maps_.policies)) {
      ac_policy p{};
      if (bpf_map_lookup_elem(maps_.policies, &s, &p) != 0 || p.owner != AC_POLICY_OWNER_TRANSIENT) continue;
      if (std::find(referenced.begin(), referenced.end(), s) == referenced.end()) unused.push_back(s);
    }
    if (unused.size() <= kCachedTransient) return {};
    // Evict others before the one just released (it is the most recently used).
    std::stable_partition(unused.begin(), unused.end(), [&](uint32_t s) { return s != slot; });
    bool deleted = false;
    for (size_t i = 0; i + kCachedTransient < unused.size(); ++i) {
      uint32_t victim = unused[i];
      if (int err = bpf_map_delete_elem(maps_.policies, &victim); err && err != -ENOENT)
        return bpf_error("removing policy slot " + std::to_string(victim), err);
      deleted = true;
    }
    if (deleted) purge_unreferenced();
    return {};
  });
}

Status Enforcer::add_scope(uint64_t cgroup_id, unsigned level, uint64_t scope_id, uint32_t policy_slot,
                           const std::string& workspace) {
  // Level 0 is the root cgroup: scoping it would confine the whole host.
  if (level == 0 || level > AC_MAX_SCOPE_LEVEL)
    return Error{"bpf: a scope must be a non-root cgroup at level 1.." + std::to_string(AC_MAX_SCOPE_LEVEL) +
                     " (got level " + std::to_string(level) + ")",
                 EINVAL};
  if (policy_slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(policy_slot) + " out of range", EINVAL};
  return with_lock([&]() -> Status {
    ac_scope existing{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgroup_id, &existing) == 0)
      return Error{"bpf: cgroup " + std::to_string(cgroup_id) + " is already a scope", EEXIST};

    ac_scope scope{};
    scope.scope_id = scope_id;
    scope.policy_slot = policy_slot;
    scope.level = static_cast<uint16_t>(level);
    ac_path_key ws_key{};
    if (!workspace.empty()) {
      if (workspace == "/") return Error{"bpf: the workspace cannot be /", EINVAL};
      auto key = make_path_key(0, workspace);
      if (!key) return key.error().wrap("workspace");
      auto tag = next_id(&ac_config::next_workspace_tag, UINT32_MAX - 1);
      if (!tag) return tag.error();
      scope.workspace_tag = *tag;
      key->rules_id_be = htonl(*tag);
      ws_key = *key;
      ac_workspace ws{static_cast<uint32_t>(workspace.size()), 0};
      if (int err = bpf_map_update_elem(maps_.workspaces, &ws_key, &ws, BPF_ANY))
        return bpf_error("registering workspace " + workspace, err);
    }
    auto undo = [&] {
      bpf_map_delete_elem(maps_.scopes, &cgroup_id);
      if (scope.workspace_tag) bpf_map_delete_elem(maps_.workspaces, &ws_key);
      bpf_map_delete_elem(maps_.scope_reports, &scope_id);
      static_cast<void>(write_levels());
    };
    // The report entry exists before the scope does, so no decision on the
    // scope can miss it.
    auto report = std::make_unique<ac_scope_report>();
    if (int err = bpf_map_update_elem(maps_.scope_reports, &scope_id, report.get(), BPF_ANY)) {
      undo();
      return bpf_error("creating the report of scope " + std::to_string(scope_id), err);
    }
    if (int err = bpf_map_update_elem(maps_.scopes, &cgroup_id, &scope, BPF_NOEXIST)) {
      bpf_map_delete_elem(maps_.scope_reports, &scope_id);
      if (scope.workspace_tag) bpf_map_delete_elem(maps_.workspaces, &ws_key);
      return bpf_error("registering scope for cgroup " + std::to_string(cgroup_id), err);
    }
    // Without its level bit the scope would silently not apply: undo it.
    if (Status st = write_levels(); !st) {
      undo();
      return st;
    }
    return {};
  });
}

Status Enforcer::remove_scope(uint64_t cgroup_id) {
  return with_lock([&]() -> Status {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgroup_id, &scope) != 0) return {};
    int err = bpf_map_delete_elem(maps_.scopes, &cgroup_id);
    if (err && err != -ENOENT) return bpf_error("removing scope for cgroup " + std::to_string(cgroup_id), err);
    if (Status st = write_levels(); !st) return st;
    // Its report and workspace entry go with it (rules stay: they belong to
    // the policy, which other scopes may use).
    bpf_map_delete_elem(maps_.scope_reports, &scope.scope_id);
    if (scope.workspace_tag)
      for (const auto& key : all_keys<ac_path_key>(maps_.workspaces))
        if (ntohl(key.rules_id_be) == scope.workspace_tag) bpf_map_delete_elem(maps_.workspaces, &key);
    return {};
  });
}

Result<ScopeReport> Enforcer::scope_report(uint64_t scope_id) const {
  auto raw = std::make_unique<ac_scope_report>();
  if (int err = bpf_map_lookup_elem(maps_.scope_reports, &scope_id, raw.get()))
    return bpf_error("reading the report of scope " + std::to_string(scope_id), err);
  ScopeReport out;
  for (size_t i = 0; i < AC_HOOK_COUNT; ++i) {
    out.denied[i] = raw->denied[i];
    out.audited[i] = raw->audited[i];
  }
  out.records_taken = raw->records_taken;
  size_t n = std::min<size_t>(raw->records_taken, AC_REPORT_RECORDS);
  out.records.assign(raw->records, raw->records + n);
  return out;
}

Result<std::vector<ScopeInfo>> Enforcer::scopes() const {
  std::vector<ScopeInfo> out;
  for (uint64_t cgid : all_keys<uint64_t>(maps_.scopes)) {
    ac_scope scope{};
    if (bpf_map_lookup_elem(maps_.scopes, &cgid, &scope) != 0) continue;
    out.push_back({cgid, scope.scope_id, scope.policy_slot, scope.level});
  }
  return out;
}

Result<std::vector<PolicyInfo>> Enforcer::policies() const {
  std::vector<PolicyInfo> out;
  for (uint32_t slot : all_keys<uint32_t>(maps_.policies)) {
    ac_policy p{};
    if (bpf_map_lookup_elem(maps_.policies, &slot, &p) != 0) continue;
    out.push_back({slot, std::string(p.name, strnlen(p.name, sizeof p.name)), p.owner, p.flags, p.digest});
  }
  std::sort(out.begin(), out.end(), [](const PolicyInfo& a, const PolicyInfo& b) { return a.slot < b.slot; });
  return out;
}

Result<SlotCounters> Enforcer::counters(uint32_t slot) const {
  if (slot >= AC_MAX_POLICIES)
    return Error{"bpf: policy slot " + std::to_string(slot) + " out of range", EINVAL};
  SlotCounters out;
  std::vector<ac_counters> percpu(static_cast<size_t>(cpu_count()));
  for (uint32_t hook = 0; hook < AC_HOOK_COUNT; ++hook) {
    uint32_t idx = slot * AC_HOOK_COUNT + hook;
    if (int err = bpf_map_lookup_elem(maps_.decision_counts, &idx, percpu.data()))
      return bpf_error("reading decision counters", err);
    for (const auto& c : percpu) {
      for (int d = 0; d < AC_DECISION_COUNT; ++d) out.hooks[hook].decisions[d] += c.decisions[d];
      for (int r = 0; r < AC_REASON_COUNT; ++r) out.hooks[hook].reasons[r] += c.reasons[r];
    }
  }
  return out;
}

Result<uint64_t> Enforcer::stat(ac_stat which) const {
  std::vector<uint64_t> percpu(static_cast<size_t>(cpu_count()));
  uint32_t idx = which;
  if (int err = bpf_map_lookup_elem(maps_.stats, &idx, percpu.data()))
    return bpf_error("reading statistics", err);
  uint64_t sum = 0;
  for (uint64_t v : percpu) sum += v;
  return sum;
}

// ---- EventReader ------------------------------------------------------------

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
  // Check the header before reading the body; never trust the size.
  if (size < sizeof(ac_event_header)) {
    ++self->malformed_;
    return 0;
  }
  ac_event_header hdr;
  std::memcpy(&hdr, data, sizeof hdr);
  if (hdr.type != AC_EVENT_DECISION || hdr.size != sizeof(ac_event_decision) ||
      size < sizeof(ac_event_decision)) {
    ++self->malformed_;
    return 0;
  }
  ac_event_decision ev;
  std::memcpy(&ev, data, sizeof ev);
  // An exception must not unwind through libbpf's C frames.
  try {
    self->handler_(ev);
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
