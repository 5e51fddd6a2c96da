// SPDX-License-Identifier: Apache-2.0
#include "doctor/doctor.h"

#include <fcntl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "core/paths.h"
#include "scope/scope.h"
#include "util/mountinfo.h"

namespace agentcage::doctor {
namespace {

// bpf_loop (5.17) is the newest feature the programs need; 6.1 and 6.12 are
// what the test suite proves.
constexpr KernelVersion kMinKernel{5, 17};

Check make(std::string name, Outcome st, std::string detail, std::string fix = {}) {
  return Check{std::move(name), st, std::move(detail), std::move(fix)};
}

const char* tag(Outcome st) {
  switch (st) {
    case Outcome::ok:
      return " ok ";
    case Outcome::warn:
      return "warn";
    case Outcome::fail:
      return "FAIL";
  }
  return "?";
}

uint64_t read_cap_eff() {
  auto status = cgroup::read_file("/proc/self/status");
  if (!status) return 0;
  std::istringstream in(*status);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapEff:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  return 0;
}

}  // namespace

bool Report::ready() const {
  for (const auto& c : checks)
    if (c.status == Outcome::fail) return false;
  return !checks.empty();
}

bool parse_kernel_release(std::string_view release, KernelVersion& out) {
  const char* p = release.data();
  const char* end = p + release.size();
  auto r1 = std::from_chars(p, end, out.major);
  if (r1.ec != std::errc() || r1.ptr == end || *r1.ptr != '.') return false;
  auto r2 = std::from_chars(r1.ptr + 1, end, out.minor);
  return r2.ec == std::errc();
}

Check check_kernel(std::string_view release) {
  KernelVersion v;
  std::string rel(release);
  if (!parse_kernel_release(release, v))
    return make("kernel version", Outcome::fail, "cannot parse kernel release \"" + rel + "\"",
                "run on Linux 5.17 or newer (6.1 and 6.12 are tested)");
  bool new_enough =
      v.major > kMinKernel.major || (v.major == kMinKernel.major && v.minor >= kMinKernel.minor);
  if (!new_enough)
    return make("kernel version", Outcome::fail, "Linux " + rel + " is older than 5.17",
                "upgrade the kernel to 5.17 or newer (Debian 12's 6.1 and Debian 13's 6.12 are tested)");
  return make("kernel version", Outcome::ok,
              "Linux " + rel + " (5.17 or newer needed; 6.1 and 6.12 are tested)");
}

Check check_btf(bool present) {
  if (!present)
    return make("kernel BTF", Outcome::fail, "/sys/kernel/btf/vmlinux is missing",
                "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (all major distributions ship one)");
  return make("kernel BTF", Outcome::ok, "/sys/kernel/btf/vmlinux present (CO-RE relocations resolve)");
}

Check check_lsm(const bpf::LsmState& lsm) {
  if (!lsm.readable)
    return make("BPF LSM active", Outcome::fail, lsm.detail,
                "mount securityfs (mount -t securityfs securityfs /sys/kernel/security) and re-run");
  if (!lsm.bpf_active)
    return make("BPF LSM active", Outcome::fail, "active LSMs: " + lsm.list + " (no \"bpf\")",
                bpf::lsm_fix_hint(lsm));
  return make("BPF LSM active", Outcome::ok, "active LSMs: " + lsm.list);
}

Check check_cgroup(const std::string& root, const std::string& root_error,
                   const std::vector<std::string>& controllers) {
  if (root.empty())
    return make("cgroup v2", Outcome::fail, root_error,
                "mount the unified hierarchy: mount -t cgroup2 none /sys/fs/cgroup "
                "(systemd: boot with systemd.unified_cgroup_hierarchy=1)");
  std::vector<std::string> missing;
  for (const char* want : {"memory", "pids", "cpu"}) {
    bool found = false;
    for (const auto& c : controllers) found = found || c == want;
    if (!found) missing.emplace_back(want);
  }
  std::string have;
  for (const auto& c : controllers) have += (have.empty() ? "" : " ") + c;
  if (!missing.empty()) {
    std::string m;
    for (const auto& c : missing) m += (m.empty() ? "" : ", ") + c;
    return make(
        "cgroup v2", Outcome::fail,
        "cgroup2 at " + root + " lacks controller(s) " + m + " (has: " + (have.empty() ? "none" : have) + ")",
        "give cgroup v2 the controllers: boot with systemd.unified_cgroup_hierarchy=1 "
        "(or cgroup_no_v1=all) so memory, pids and cpu are not held by cgroup v1");
  }
  return make("cgroup v2", Outcome::ok, "cgroup2 at " + root + " with controllers " + have);
}

Check check_privileges(unsigned euid, uint64_t cap_eff) {
  struct Cap {
    int bit;
    const char* name;
  };
  static constexpr Cap kNeeded[] = {{21, "CAP_SYS_ADMIN"}, {38, "CAP_PERFMON"}, {39, "CAP_BPF"}};
  std::string missing;
  for (const auto& cap : kNeeded)
    if (!(cap_eff & (1ULL << cap.bit))) missing += (missing.empty() ? "" : ", ") + std::string(cap.name);
  if (!missing.empty())
    return make("privileges", Outcome::fail, "euid " + std::to_string(euid) + ", missing " + missing,
                "run agentcage as root (sudo agentcage ...) or grant CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN");
  return make("privileges", Outcome::ok,
              "euid " + std::to_string(euid) + " with CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN");
}

Check check_bpffs(std::string_view mountinfo) {
  std::string elsewhere;
  const std::string bpffs = core::kDefaultBpffs;
  for (const auto& m : parse_mountinfo(mountinfo)) {
    if (m.fs_type != "bpf") continue;
    if (m.mount_point == bpffs) return make("bpffs", Outcome::ok, "bpffs mounted at " + bpffs);
    elsewhere = m.mount_point;
  }
  // Every agentcage process shares one program set pinned under
  // /sys/fs/bpf/agentcage: runs and attach refuse to start without it.
  return make(
      "bpffs", Outcome::fail,
      elsewhere.empty()
          ? "no bpf filesystem mounted at " + bpffs + " (agentcage pins its programs there)"
          : "bpffs is mounted at " + elsewhere + ", not at " + bpffs + " (agentcage pins its programs there)",
      "mount -t bpf bpf " + bpffs);
}

Check check_enforcement() {
  const std::string name = "enforcement probe";
  auto enforcer = bpf::Enforcer::load();
  if (!enforcer)
    return make(name, Outcome::fail, "trial load + attach failed: " + enforcer.error().message,
                enforcer.error().code == EPERM
                    ? "this kernel refuses BPF LSM programs: run on a host whose kernel allows them "
                      "(e.g. Debian 12/13 stock kernels), or use the VM: tests/vm/run -- agentcage ..."
                    : "see the message above; re-run with -v for libbpf's log");

  auto root = cgroup::find_cgroup2_root();
  if (!root) return make(name, Outcome::fail, root.error().message, "mount cgroup v2 at /sys/fs/cgroup");
  std::filesystem::path parent = *root / "agentcage";
  std::error_code ec;
  std::filesystem::create_directory(parent, ec);
  if (ec)
    return make(name, Outcome::fail, "cannot create " + parent.string() + ": " + ec.message(),
                "run as root on a writable cgroup v2 hierarchy");
  auto cg = cgroup::Cgroup::create(*root, parent, "doctor-" + std::to_string(::getpid()));
  if (!cg)
    return make(name, Outcome::fail, cg.error().message, "run as root on a writable cgroup v2 hierarchy");

  // A transient policy with no rules: every open in the scope must be
  // denied. The probe's program set is private (load(), not the pinned one),
  // and it is confined through the scope lifecycle like every other caller.
  scope::TransientPolicy probe{"doctor-probe", bpf::CompiledPolicy{}};
  auto confined = scope::confine(**enforcer, scope::CgroupRef{cg->id(), cg->level(), cg->path()}, probe, "");
  if (!confined) {
    (void)cg->remove();
    return make(name, Outcome::fail, confined.error().message, "re-run with -v");
  }

  auto pid = cgroup::spawn_in_cgroup(cg->fd(), [] {
    int fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) return 10;  // opened: not enforced
    return errno == EACCES ? 0 : 11;
  });
  int status = -1;
  if (pid) {
    auto ws = cgroup::wait_for(*pid);
    status = ws ? *ws : -1;
  }
  auto released = scope::release(**enforcer, *confined, scope::Ending::drained);
  (void)cg->remove();
  if (!released)
    return make(name, Outcome::fail, "could not remove the probe's scope: " + released.error().message,
                "re-run with -v; `agentcage status` lists scopes left behind");
  if (released->kept)
    return make(name, Outcome::fail, "the probe's cgroup " + cg->path().string() + " still has processes",
                "kill them (echo 1 > cgroup.kill) and re-run");

  if (!pid) return make(name, Outcome::fail, pid.error().message, "the kernel must support clone3 (5.7+)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string what =
        WIFEXITED(status) && WEXITSTATUS(status) == 10
            ? "a process in a scoped cgroup opened \"/\": the programs are attached but not enforcing"
            : "the probe process failed unexpectedly (wait status " + std::to_string(status) + ")";
    return make(name, Outcome::fail, what, "check that the bpf LSM is active and nothing else overrides it");
  }
  uint64_t denied = released && released->report ? released->report->denied[AC_HOOK_FILE_OPEN] : 0;
  if (denied == 0)
    return make(name, Outcome::fail, "the denial was not counted",
                "report a bug: decision counters are not updated");
  return make(name, Outcome::ok,
              "programs loaded and attached; a process in a scoped cgroup was denied (EACCES) and the denial "
              "counted");
}

Report run() {
  Report r;
  struct utsname u {};
  ::uname(&u);
  r.checks.push_back(check_kernel(u.release));
  r.checks.push_back(check_btf(::access("/sys/kernel/btf/vmlinux", R_OK) == 0));
  r.checks.push_back(check_lsm(bpf::read_lsm_state()));

  auto root = cgroup::find_cgroup2_root();
  std::vector<std::string> controllers;
  if (root) {
    auto c = cgroup::read_controllers(*root / "cgroup.controllers");
    if (c) controllers = *c;
  }
  r.checks.push_back(check_cgroup(root ? root->string() : "", root ? "" : root.error().message, controllers));
  r.checks.push_back(check_privileges(::geteuid(), read_cap_eff()));
  auto mountinfo = cgroup::read_file("/proc/self/mountinfo");
  r.checks.push_back(check_bpffs(mountinfo ? *mountinfo : ""));
  r.checks.push_back(check_enforcement());
  return r;
}

std::string format_text(const Report& report) {
  std::ostringstream out;
  out << "agentcage doctor: can this host enforce agentcage policies?\n\n";
  int failed = 0;
  for (const auto& c : report.checks) {
    out << "  [" << tag(c.status) << "] " << c.name << ": " << c.detail << "\n";
    if (!c.fix.empty() && c.status != Outcome::ok) out << "         fix: " << c.fix << "\n";
    failed += c.status == Outcome::fail;
  }
  out << "\n";
  if (report.ready())
    out << "Enforcement is available: agentcage can confine runs on this host.\n";
  else
    out << "Enforcement is NOT available (" << failed << " check" << (failed == 1 ? "" : "s")
        << " failed): agentcage run refuses to start commands here (exit 125).\n"
        << "To develop or test on such a host, run inside the project's VM: tests/vm/run -- build/agentcage "
           "doctor\n";
  return out.str();
}

std::string format_json(const Report& report) {
  nlohmann::json j;
  j["ready"] = report.ready();
  j["checks"] = nlohmann::json::array();
  for (const auto& c : report.checks) {
    const char* st = c.status == Outcome::ok ? "ok" : c.status == Outcome::warn ? "warn" : "fail";
    j["checks"].push_back({{"name", c.name}, {"status", st}, {"detail", c.detail}, {"fix", c.fix}});
  }
  return j.dump(2) + "\n";
}

}  // namespace agentcage::doctor
