// SPDX-License-Identifier: Apache-2.0
#include "cgroup/cgroup.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "util/mountinfo.h"
#include "util/raw_syscall.h"

namespace agentcage::cgroup {

std::vector<fs::path> parse_cgroup2_mounts(std::string_view mountinfo) {
  std::vector<fs::path> out;
  for (const auto& m : parse_mountinfo(mountinfo))
    if (m.fs_type == "cgroup2") out.emplace_back(m.mount_point);
  return out;
}

Result<fs::path> find_cgroup2_root() {
  auto text = read_file("/proc/self/mountinfo");
  if (!text) return text.error().wrap("cgroup");
  auto mounts = parse_cgroup2_mounts(*text);
  if (mounts.empty())
    return Error{"cgroup: no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup)", ENOENT};
  for (const auto& m : mounts)
    if (m == "/sys/fs/cgroup") return m;
  return mounts.front();
}

Result<uint64_t> cgroup_id(const fs::path& cgroup_dir) {
  // The kernel's cgroup id is the kernfs node id, exported as the 8-byte
  // file handle of the directory (the same scheme systemd uses).
  alignas(struct file_handle) unsigned char buf[sizeof(struct file_handle) + sizeof(uint64_t)] = {};
  auto* fh = reinterpret_cast<struct file_handle*>(buf);
  fh->handle_bytes = sizeof(uint64_t);
  int mount_id = 0;
  if (name_to_handle_at(AT_FDCWD, cgroup_dir.c_str(), fh, &mount_id, 0) != 0)
    return Error::from_errno("cgroup: reading the id of " + cgroup_dir.string());
  if (fh->handle_bytes != sizeof(uint64_t))
    return Error{"cgroup: unexpected file handle size for " + cgroup_dir.string(), EINVAL};
  uint64_t id = 0;
  std::memcpy(&id, buf + sizeof(struct file_handle), sizeof id);
  return id;
}

Result<unsigned> cgroup_level(const fs::path& root, const fs::path& cgroup_dir) {
  auto rel = cgroup_dir.lexically_normal().lexically_relative(root.lexically_normal());
  if (rel.empty() || *rel.begin() == "..")
    return Error{"cgroup: " + cgroup_dir.string() + " is not inside " + root.string(), EINVAL};
  unsigned level = 0;
  for (const auto& part : rel)
    if (part != "." && !part.empty()) ++level;
  return level;
}

Result<std::vector<CgroupNode>> cgroup_ancestors(const fs::path& cgroup_dir, unsigned level) {
  std::vector<CgroupNode> out;
  fs::path dir = cgroup_dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // a trailing slash
  for (unsigned i = 0; i < level; ++i) {
    dir = dir.parent_path();
    auto id = cgroup_id(dir);
    if (!id) return id.error();
    out.push_back({*id, dir});
  }
  return out;
}

Result<std::vector<CgroupNode>> cgroup_descendants(const fs::path& cgroup_dir) {
  std::vector<CgroupNode> out;
  if (auto stat = read_file(cgroup_dir / "cgroup.stat"))
    if (keyed_value(*stat, "nr_descendants") == 0u) return out;
  std::error_code ec;
  fs::recursive_directory_iterator it(cgroup_dir, fs::directory_options::none, ec), end;
  if (ec) return Error{"cgroup: listing " + cgroup_dir.string() + ": " + ec.message(), ec.value()};
  for (; it != end; it.increment(ec)) {
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) {  // removed meanwhile
        ec.clear();
        continue;
      }
      return Error{"cgroup: listing " + cgroup_dir.string() + ": " + ec.message(), ec.value()};
    }
    std::error_code type_ec;
    if (!it->is_directory(type_ec) || it->is_symlink(type_ec)) continue;
    auto id = cgroup_id(it->path());
    if (!id) {
      if (id.error().code == ENOENT) continue;
      return id.error();
    }
    out.push_back({*id, it->path()});
  }
  return out;
}

std::vector<std::string> parse_controllers(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  std::string name;
  while (in >> name) out.push_back(name);
  return out;
}

Result<std::vector<std::string>> read_controllers(const fs::path& file) {
  auto text = read_file(file);
  if (!text) return text.error();
  return parse_controllers(*text);
}

Status write_file(const fs::path& file, std::string_view content) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("cgroup: opening " + file.string());
  ssize_t n = ::write(fd, content.data(), content.size());
  int err = errno;
  ::close(fd);
  if (n < 0)
    return Error::from_errno("cgroup: writing \"" + std::string(content) + "\" to " + file.string(), err);
  if (static_cast<size_t>(n) != content.size()) return Error{"cgroup: short write to " + file.string(), EIO};
  return {};
}

Result<std::string> read_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return Error::from_errno("reading " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::vector<pid_t>> cgroup_procs(const fs::path& cgroup_dir) {
  auto text = read_file(cgroup_dir / "cgroup.procs");
  if (!text) return text.error();
  std::vector<pid_t> out;
  std::istringstream in(*text);
  long long pid = 0;
  while (in >> pid) {
    if (pid <= 0 || pid > INT32_MAX) return Error{"cgroup: " + cgroup_dir.string() + "/cgroup.procs: bad pid", EIO};
    out.push_back(static_cast<pid_t>(pid));
  }
  if (!in.eof()) return Error{"cgroup: " + cgroup_dir.string() + "/cgroup.procs: not a list of pids", EIO};
  return out;
}

// ---- Cgroup -----------------------------------------------------------------

Result<Cgroup> Cgroup::create(const fs::path& root, const fs::path& parent, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return Error{"cgroup: invalid cgroup name \"" + name + "\"", EINVAL};
  Cgroup cg;
  cg.path_ = parent / name;
  if (::mkdir(cg.path_.c_str(), 0755) != 0) return Error::from_errno("cgroup: creating " + cg.path_.string());
  cg.dir_.reset(::open(cg.path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cg.dir_) {
    Error e = Error::from_errno("cgroup: opening " + cg.path_.string());
    ::rmdir(cg.path_.c_str());
    return e;
  }
  auto id = cgroup_id(cg.path_);
  auto level = cgroup_level(root, cg.path_);
  if (!id || !level) {
    Error e = !id ? id.error() : level.error();
    ::rmdir(cg.path_.c_str());
    return e;
  }
  cg.id_ = *id;
  cg.level_ = *level;
  return cg;
}

Cgroup::Cgroup(Cgroup&& o) noexcept
    : path_(std::move(o.path_)), dir_(std::move(o.dir_)), id_(o.id_), level_(o.level_) {
  o.path_.clear();
}

Cgroup& Cgroup::operator=(Cgroup&& o) noexcept {
  if (this != &o) {
    if (!path_.empty()) (void)remove();
    path_ = std::move(o.path_);
    o.path_.clear();
    dir_ = std::move(o.dir_);
    id_ = o.id_;
    level_ = o.level_;
  }
  return *this;
}

Cgroup::~Cgroup() {
  if (!path_.empty()) (void)remove();
}

Status Cgroup::remove() {
  if (path_.empty()) return {};
  Status st = remove_tree(path_);
  if (st) path_.clear();
  return st;
}

namespace {

void kill_procs(const fs::path& dir) {
  // cgroup.kill (5.14+) kills the whole subtree atomically, forks included.
  if (write_file(dir / "cgroup.kill", "1")) return;
  // Older kernels: signal what is listed, repeatedly, from the deepest up.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory(ec)) kill_procs(entry.path());
  auto procs = read_file(dir / "cgroup.procs");
  if (!procs) return;
  std::istringstream in(*procs);
  pid_t pid;
  while (in >> pid) ::kill(pid, SIGKILL);
}

}  // namespace

Status Cgroup::kill_all() {
  if (path_.empty()) return Error{"cgroup: kill_all on a removed cgroup", EINVAL};
  kill_procs(path_);
  return {};
}

std::optional<uint64_t> keyed_value(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ') continue;
    const std::string_view value = line.substr(key.size() + 1);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size()) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

bool populated(const fs::path& dir) {
  auto events = read_file(dir / "cgroup.events");
  if (!events) return events.error().code != ENOENT;  // gone already; else unknown: say populated
  // No readable "populated" line is not an empty cgroup either: those who
  // ask (kill_and_drain, a scope's release) must then assume survivors.
  const auto value = keyed_value(*events, "populated");
  return !value || *value != 0;
}

Status kill_and_drain(const fs::path& dir) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + kDrainLimit;
  // cgroup.events signals POLLPRI when "populated" changes; the poll timeout
  // re-checks and re-kills regardless.
  UniqueFd events(::open((dir / "cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
  while (populated(dir)) {
    kill_procs(dir);
    if (steady_clock::now() > deadline)
      return Error{"cgroup: processes in " + dir.string() + " survived SIGKILL for " +
                       std::to_string(kDrainLimit.count()) + " s",
                   EBUSY};
    if (events) {
      pollfd p{events.get(), POLLPRI, 0};
      (void)::poll(&p, 1, 50);
    } else {
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
  return {};
}

Status remove_tree(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  using namespace std::chrono;
  if (Status st = kill_and_drain(dir); !st) return st;
  // Children first; cgroup directories only contain interface files and
  // child cgroups, and rmdir of a cgroup ignores the interface files.
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory(ec) && !entry.is_symlink(ec))
      if (Status st = remove_tree(entry.path()); !st) return st;
  // rmdir can race with the last task's exit being accounted: retry briefly.
  for (int i = 0; ::rmdir(dir.c_str()) != 0; ++i) {
    if (errno == ENOENT) return {};
    if (errno != EBUSY || i > 500) return Error::from_errno("cgroup: removing " + dir.string());
    std::this_thread::sleep_for(milliseconds(2));
  }
  return {};
}

Result<pid_t> spawn_in_cgroup(int cgroup_fd, const std::function<int()>& child, uint64_t clone_flags) {
  struct clone_args args {};
  args.flags = CLONE_INTO_CGROUP | clone_flags;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgroup_fd);
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0)
    return Error::from_errno(clone_flags & CLONE_NEWIPC ? "cgroup: clone3(CLONE_INTO_CGROUP | CLONE_NEWIPC)"
                                                        : "cgroup: clone3(CLONE_INTO_CGROUP)");
  if (pid == 0) {
    int rc = 127;
    try {
      rc = child();
    } catch (...) {
    }
    ::_exit(rc);
  }
  return static_cast<pid_t>(pid);
}

Result<ChildStack> ChildStack::map(size_t size) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size = (size + page - 1) / page * page;
  void* m =
      ::mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return Error::from_errno("mapping a child's stack");
  ChildStack s;
  s.map_ = m;
  s.len_ = size + page;
  if (::mprotect(m, page, PROT_NONE) != 0) return Error::from_errno("guarding a child's stack");
  return s;
}

ChildStack::ChildStack(ChildStack&& o) noexcept : map_(o.map_), len_(o.len_) {
  o.map_ = nullptr;
  o.len_ = 0;
}

ChildStack& ChildStack::operator=(ChildStack&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, len_);
    map_ = o.map_;
    len_ = o.len_;
    o.map_ = nullptr;
    o.len_ = 0;
  }
  return *this;
}

ChildStack::~ChildStack() {
  if (map_) ::munmap(map_, len_);
}

void* ChildStack::base() const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return map_ ? static_cast<char*>(map_) + page : nullptr;
}

size_t ChildStack::size() const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return map_ ? len_ - page : 0;
}

namespace {

#if defined(__x86_64__)
// clone3 whose child calls child(arg) on the stack `args` names (the kernel
// points its stack pointer at the top, 16-byte aligned: a call from there
// is what the ABI expects), then exits 127 should it return. The child's
// pid or -errno in the caller.
long clone3_calling(clone_args* args, void (*child)(void*), void* arg) {
  long ret;
  asm volatile(
      "mov %[child], %%r12\n\t"
      "mov %[arg], %%r13\n\t"
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xor %%ebp, %%ebp\n\t"
      "mov %%r13, %%rdi\n\t"
      "call *%%r12\n\t"
      "mov $127, %%edi\n\t"
      "mov %[exit_group], %%eax\n\t"
      "syscall\n\t"
      "ud2\n\t"
      "1:\n\t"
      : "=a"(ret)
      : "0"(static_cast<long>(SYS_clone3)), "D"(args),
        "S"(sizeof(clone_args)), [child] "r"(child), [arg] "r"(arg), [exit_group] "i"(SYS_exit_group)
      : "rcx", "r11", "r12", "r13", "memory", "cc");
  return ret;
}
#endif

}  // namespace

bool can_spawn_sharing_memory() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

Result<pid_t> spawn_in_cgroup_sharing_memory(int cgroup_fd, const ChildStack& stack, void (*child)(void*),
                                             void* arg, uint64_t clone_flags) {
#if defined(__x86_64__)
  if (!stack.base()) return Error{"cgroup: a child without a stack", EINVAL};
  struct clone_args args {};
  args.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP | clone_flags;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgroup_fd);
  args.stack = reinterpret_cast<uint64_t>(stack.base());
  args.stack_size = stack.size();
  // No handler of the caller's may run in the child (it would run in the
  // caller's memory): the child starts with every signal blocked and sets
  // its own handling before it unblocks them. Raw calls: the library's
  // own would leave its two internal signals (cancellation, set*id) open.
  const unsigned long all = ~0UL;
  unsigned long old = 0;
  if (const long blocked =
          raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, sysarg(&all), sysarg(&old), sizeof all);
      blocked < 0)
    return Error{std::string("cgroup: blocking signals: ") + std::strerror(static_cast<int>(-blocked)),
                 static_cast<int>(-blocked)};
  const long pid = clone3_calling(&args, child, arg);
  (void)raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, sysarg(&old), 0, sizeof old);
  if (pid < 0) {
    const int err = static_cast<int>(-pid);
    return Error{std::string(clone_flags & CLONE_NEWIPC
                                 ? "cgroup: clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP | CLONE_NEWIPC)"
                                 : "cgroup: clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)") +
                     ": " + std::strerror(err),
                 err};
  }
  return static_cast<pid_t>(pid);
#else
  (void)cgroup_fd, (void)stack, (void)child, (void)arg, (void)clone_flags;
  return Error{"cgroup: a child sharing memory: not on this architecture", ENOSYS};
#endif
}

Result<int> wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Error::from_errno("waitpid");
  }
  return status;
}

}  // namespace agentcage::cgroup
