// SPDX-License-Identifier: Apache-2.0
// An `agentcage daemon` of the bench's own (bench.h BenchDaemon), and the
// long-lived Python client the run section times calls through
// (DaemonClient, bench/daemon_client.py).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "bench.h"

namespace agentcage::bench {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

}  // namespace

// fork + exec `argv` under `env`; stdin from `in` (or as is), stdout to `out`
// (or the log), stderr to the log file.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int in, int out,
            const fs::path& log, bool fixed_addresses) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (in >= 0) ::dup2(in, 0);
    ::dup2(out >= 0 ? out : fd, 1);
    ::dup2(fd, 2);
    if (fixed_addresses && !fix_addresses()) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

void end(pid_t& pid, int sig) {
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  ::kill(pid, sig);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pid = -1;
}

fs::path agentcage_binary(const Options& opts) {
  std::error_code ec;
  return opts.agentcage.empty()
             ? fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "agentcage"
             : fs::path(opts.agentcage);
}

BenchDaemon::~BenchDaemon() { stop(); }

Status BenchDaemon::start(const fs::path& agentcage, const std::string& name, const std::string& policy_yaml,
                          int metrics_port, bool fixed_addresses) {
  char tmpl[] = "/tmp/agentcage-bench-daemon-XXXXXX";
  if (!::mkdtemp(tmpl)) return Error::from_errno("bench: mkdtemp");
  dir_ = tmpl;
  name_ = name;
  std::error_code ec;
  fs::create_directories(dir_ / "policies", ec);
  fs::create_directories(dir_ / "state", ec);
  if (ec) return Error{"bench: " + ec.message(), ec.value()};
  std::ofstream(dir_ / "policies" / (name + ".yaml")) << policy_yaml;
  std::ofstream cfg(dir_ / "daemon.yaml");
  cfg << "policy_dir: " << (dir_ / "policies").string() << "\n"
      << "control_socket: " << socket().string() << "\n"
      << "audit_log: " << (dir_ / "audit.jsonl").string() << "\n"
      << "state_dir: " << (dir_ / "state").string() << "\n";
  if (metrics_port > 0)
    cfg << "metrics_address: 127.0.0.1:" << metrics_port << "\n";
  else
    cfg << "metrics_address: \"off\"\n";
  cfg.close();

  const auto t0 = Clock::now();
  pid_ = spawn({agentcage.string(), "daemon", "--config", (dir_ / "daemon.yaml").string()},
               {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, -1, -1, log(),
               fixed_addresses);
  if (pid_ < 0) return Error::from_errno("bench: fork");
  // Ready when the daemon's named policy is in a slot (it loads or adopts the
  // shared set first).
  const auto deadline = Clock::now() + 120s;
  while (true) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Error{"bench: agentcage daemon exited at start (see its log: " + log().string() + ")", ECHILD};
    }
    // Only once the daemon has pinned the set: never load it from here.
    if (!enforcer_ && fs::exists(bpf::Enforcer::shared_pin_dir(bpf::SharedOptions{}.pin_root) + "/ready", ec))
      if (auto e = bpf::Enforcer::open_shared()) enforcer_ = std::move(e).value();
    if (enforcer_)
      if (auto ps = enforcer_->policies())
        for (const auto& p : *ps)
          if (p.name == name_ && p.owner == AC_POLICY_OWNER_NAMED) slot_ = p.slot;
    if (slot_) break;
    if (Clock::now() > deadline)
      return Error{"bench: agentcage daemon not ready after 120 s (log: " + log().string() + ")", ETIMEDOUT};
    std::this_thread::sleep_for(200ms);
  }
  start_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  return {};
}

void BenchDaemon::stop() {
  end(pid_, SIGTERM);
  // The daemon leaves its named policy installed (enforcement outlives it);
  // nothing points at the slot any more.
  if (enforcer_ && slot_) (void)enforcer_->with_lock([&] { return enforcer_->remove_policy(*slot_); });
  slot_.reset();
  enforcer_.reset();
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
  dir_.clear();
}

DaemonClient::~DaemonClient() { stop(); }

Status DaemonClient::start(const fs::path& socket, const std::string& policy, const fs::path& log) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) return Error::from_errno("bench: pipe2");
  if (::pipe2(from, O_CLOEXEC) != 0) {
    Status failed = Error::from_errno("bench: pipe2");
    ::close(to[0]);
    ::close(to[1]);
    return failed;
  }
  pid_ = spawn({"/usr/bin/python3", fs::absolute("bench/daemon_client.py").string(), socket.string(), policy},
               {"PATH=/usr/bin:/bin", "PYTHONPATH=" + fs::absolute("clients/python").string()}, to[0],
               from[1], log);
  ::close(to[0]);
  ::close(from[1]);
  to_ = ::fdopen(to[1], "w");
  from_ = ::fdopen(from[0], "r");
  if (pid_ < 0 || !to_ || !from_) return Error::from_errno("bench: starting bench/daemon_client.py");
  return {};
}

std::string DaemonClient::ask(const std::string& line) {
  if (!to_ || !from_) return "";
  std::fprintf(to_, "%s\n", line.c_str());
  std::fflush(to_);
  char buf[4096];
  if (!std::fgets(buf, sizeof buf, from_)) return "";
  std::string answer = buf;
  while (!answer.empty() && answer.back() == '\n') answer.pop_back();
  return answer;
}

Result<double> DaemonClient::call() {
  const std::string answer = ask("run");
  char* end = nullptr;
  const double ns = std::strtod(answer.c_str(), &end);
  if (answer.empty() || *end != '\0' || ns <= 0)
    return Error{"a run through the daemon: " + (answer.empty() ? "no answer from the client" : answer), EIO};
  return ns;
}

Result<DaemonClient::Throughput> DaemonClient::throughput(unsigned clients, double seconds) {
  const std::string answer = ask("throughput " + std::to_string(clients) + " " + std::to_string(seconds));
  Throughput t;
  unsigned long runs = 0, errors = 0;
  const int n = std::sscanf(answer.c_str(), "runs %lu seconds %lf errors %lu", &runs, &t.seconds, &errors);
  if (n != 3) return Error{"throughput through the daemon: " + (answer.empty() ? "no answer" : answer), EIO};
  t.runs = runs;
  t.errors = errors;
  if (const size_t at = answer.find(" first "); at != std::string::npos)
    t.first_error = answer.substr(at + 7);
  return t;
}

void DaemonClient::stop() {
  if (to_) {
    std::fprintf(to_, "quit\n");
    std::fclose(to_);
    to_ = nullptr;
  }
  if (from_) {
    std::fclose(from_);
    from_ = nullptr;
  }
  end(pid_, SIGTERM);
}

}  // namespace agentcage::bench
