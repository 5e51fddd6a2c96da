// SPDX-License-Identifier: Apache-2.0
#include "run_helpers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace agentcage::kt {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string agentcage_bin() {
  return (fs::read_symlink("/proc/self/exe").parent_path() / ".." / "agentcage").lexically_normal().string();
}

std::set<uint64_t>& all_scopes() {
  static std::set<uint64_t> s;
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string& python_sandbox_with_keyctl() {
  static const std::string path = [] {
    const std::string p = "/tmp/agentcage-kt-python-sandbox-keys.yaml";
    std::ofstream(p) << slurp(kPythonSandbox) << "  syscalls:\n    allow: [keys]\n";
    return p;
  }();
  return path;
}

Started start(const std::vector<std::string>& args, const SpawnOptions& o) {
  Started s;
  char tmpl[] = "/tmp/ac-run-test-XXXXXX";
  s.dir = ::mkdtemp(tmpl);
  std::vector<std::string> argv = {agentcage_bin(), "run",
                                   "--policy",      o.policy.empty() ? kPythonSandbox : o.policy,
                                   "--result",      (s.dir / "result.json").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  s.t0 = Clock::now();
  s.pid = ::fork();
  if (s.pid == 0) {
    int out = ::open((s.dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open((s.dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::close(out);
    ::close(err);
    if (o.inherit_fd >= 0) ::fcntl(o.inherit_fd, F_SETFD, 0);
    for (const auto& e : o.env) ::putenv(const_cast<char*>(e.c_str()));
    if (o.in_child) o.in_child();
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(99);
  }
  return s;
}

std::string Ran::describe() const {
  return "exit " + std::to_string(code) + "\nstdout: " + out + "\nstderr: " + err;
}

Ran finish(const Started& s) {
  Ran r;
  int status = 0;
  while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - s.t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(s.dir / "stdout");
  r.err = slurp(s.dir / "stderr");
  std::error_code ec;
  if (fs::exists(s.dir / "result.json", ec)) {
    r.result = json::parse(slurp(s.dir / "result.json"), nullptr, false);
    if (r.result.is_object() && r.result.contains("scope_id"))
      all_scopes().insert(r.result["scope_id"].get<uint64_t>());
  }
  fs::remove_all(s.dir, ec);
  return r;
}

Ran run(const std::vector<std::string>& args, const SpawnOptions& o) { return finish(start(args, o)); }

std::vector<std::string> py(const std::string& code, std::vector<std::string> before) {
  before.insert(before.end(), {"--", "python3", "-c", code});
  return before;
}

uint64_t denied(const Ran& r, const std::string& hook) {
  const auto& by = r.result["denials"]["by_hook"];
  return by.contains(hook) ? by[hook].get<uint64_t>() : 0;
}

bool has_record(const Ran& r, const std::string& hook, const std::string& target) {
  for (const auto& rec : r.result["denials"]["records"])
    if (rec["hook"] == hook && rec["target"] == target) return true;
  return false;
}

bool process_gone(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

std::vector<pid_t> processes_of_dynamic_uids() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (st.st_uid >= 0x70000000u && st.st_uid < 0x70000000u + 65536u && !process_gone(std::stoi(name)))
      out.push_back(std::stoi(name));
  }
  return out;
}

std::vector<std::string> run_cgroups() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kRunsCgroup, ec))
    if (e.is_directory(ec)) out.push_back(e.path().string());
  return out;
}

bool is_spare_run(const std::string& cg) {
  const std::string id = fs::path(cg).filename().string();
  std::ifstream in("/run/agentcage/runs/" + id + ".json");
  const auto record = nlohmann::json::parse(in, nullptr, false);
  if (!record.is_object() || record.value("spare", false) != true) return false;
  // Its spare runner is there (else it is a leftover).
  const pid_t owner = record.value("owner_pid", 0);
  if (owner <= 0 || process_gone(owner)) return false;
  std::ifstream procs(fs::path(cg) / "cgroup.procs");
  std::string line;
  return !std::getline(procs, line);
}

Result<cgroup::Cgroup> test_cgroup(const std::string& name) {
  auto root = cgroup::find_cgroup2_root();
  if (!root) return root.error();
  std::error_code ec;
  fs::create_directories(*root / "agentcage-kt", ec);
  return cgroup::Cgroup::create(*root, *root / "agentcage-kt", name);
}

}  // namespace agentcage::kt
