// SPDX-License-Identifier: Apache-2.0
// A real `agentcage daemon` for kernel tests: started from build/agentcage
// with a test policy directory, its control socket at the default path, and
// the helpers the daemon tests share (spawning processes, polling, the
// control protocol). Needs root and a kernel that enforces (the VM).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bpf/enforcer.h"
#include "cgroup/cgroup.h"
#include "control/client.h"
#include "kernel_env.h"
#include "probes.h"
#include "run_helpers.h"

namespace agentcage::kt {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline constexpr int kMetricsPort = 19477;
inline const std::string kSocket = "/run/agentcage/control.sock";  // the default: `agentcage run` finds it

// A plain HTTP/1.0 GET on 127.0.0.1; returns the body ("" on failure).
inline std::string http_get(int port, const std::string& target) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// One sample of the daemon's /metrics text: the value of the line that
// starts with `series` (exact series text, labels in exposition order), or -1.
inline double scrape(const std::string& series) {
  std::istringstream in(http_get(kMetricsPort, "/metrics"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

inline constexpr int kPrometheusPort = 19090;

inline std::string url_encode(const std::string& s) {
  std::string out;
  char hex[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// The value of a one-element PromQL vector result of the test's Prometheus, or -1.
inline double promql(const std::string& query) {
  nlohmann::json j = nlohmann::json::parse(
      http_get(kPrometheusPort, "/api/v1/query?query=" + url_encode(query)), nullptr, false);
  if (!j.is_object() || j.value("status", "") != "success") return -1;
  const auto& result = j["data"]["result"];
  if (!result.is_array() || result.size() != 1) return -1;
  return std::stod(result[0]["value"][1].get<std::string>());
}

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  // Atomically, as editors and config management do: the daemon never sees
  // half a file.
  std::filesystem::path tmp = p.parent_path() / ("." + p.filename().string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(tmp, p);
}

// A policy for the tests: cat/sleep/sh may run and read the C library;
// /etc/hostname is readable, /etc/passwd only when `allow_passwd`.
inline std::string dtest_policy(bool allow_passwd) {
  return std::string(
             "apiVersion: agentcage/v1\n"
             "kind: Policy\n"
             "metadata: {name: dtest}\n"
             "spec:\n"
             "  exec: {allow: [/usr/bin/cat, /usr/bin/sleep, /usr/bin/sh]}\n"
             "  files:\n"
             "    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache, /etc/hostname") +
         (allow_passwd ? ", /etc/passwd" : "") + ", \"${workspace}\"]\n";
}

inline bool wait_until(const std::function<bool()>& cond, std::chrono::seconds limit) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(200ms);
  }
  return cond();
}

// The last line of the JSON-lines audit log at `path` that `match` accepts,
// waiting up to `limit` for one to be written (the daemon writes a
// decision's line once it has read its record); null when none came. A
// line that is not a JSON object is never a match.
inline nlohmann::json wait_for_audit_line(const std::filesystem::path& path,
                                          const std::function<bool(const nlohmann::json&)>& match,
                                          std::chrono::seconds limit = 30s) {
  nlohmann::json found;
  wait_until(
      [&] {
        std::istringstream audit(slurp(path));
        for (std::string l; std::getline(audit, l);) {
          nlohmann::json ev = nlohmann::json::parse(l, nullptr, false);
          if (ev.is_object() && match(ev)) found = std::move(ev);
        }
        return found.is_object();
      },
      limit);
  return found;
}

// The first operation of a process started inside `cg` (clone3 +
// CLONE_INTO_CGROUP): open(path) for reading. Returns 0 or the errno.
inline int open_in(const cgroup::Cgroup& cg, const std::string& path) {
  return run_in_cgroup(cg.fd(), [&]() -> int {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
  });
}

struct Proc {
  pid_t pid = -1;
  std::filesystem::path out;
};

// fork + exec with stdout/stderr to `out`.
inline Proc spawn(const std::vector<std::string>& argv, const std::filesystem::path& out,
                  const std::vector<std::string>& env = {}, const std::function<void()>& in_child = {}) {
  Proc p;
  p.out = out;
  p.pid = ::fork();
  if (p.pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    if (in_child) in_child();
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(99);
  }
  return p;
}

// What `fd` gives until its end (a pipe: until every writer is gone).
inline std::string read_to_end(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What docs/schema/SCHEMA.schema.json finds wrong with the JSON document in
// `file` (tests/scripts/schemas.py, run by python3): empty when it is valid.
// The checker's output goes to `file` + ".schema-check".
inline std::string schema_errors(const std::string& schema, const std::filesystem::path& file) {
  const std::string check =
      "import json, sys; sys.path.insert(0, sys.argv[1]); import schemas; "
      "e = schemas.errors(sys.argv[2], json.load(open(sys.argv[3]))); print(e); sys.exit(1 if e else 0)";
  std::filesystem::path out = file;
  out += ".schema-check";
  std::error_code ec;
  std::filesystem::remove(out, ec);
  const int rc =
      wait_exit(spawn({"/usr/bin/python3", "-c", check, std::string(AGENTCAGE_SOURCE_DIR) + "/tests/scripts",
                       schema, file.string()},
                      out)
                    .pid);
  if (rc == 0) return "";
  std::ifstream in(out);
  std::ostringstream text;
  text << in.rdbuf();
  return "exit " + std::to_string(rc) + ": " + text.str();
}

inline Result<nlohmann::json> control(const nlohmann::json& req) {
  return control::call(kSocket, req, 10000);
}

inline nlohmann::json status() {
  auto r = control(nlohmann::json{{"op", "status"}});
  if (!r || !r->value("ok", false)) return nlohmann::json::object();
  return (*r)["status"];
}

inline std::optional<uint32_t> named_slot(const nlohmann::json& st, const std::string& name) {
  for (const auto& p : st.value("policies", nlohmann::json::array()))
    if (p["name"] == name && p["owner"] == "named") return p["slot"].get<uint32_t>();
  return std::nullopt;
}

class DaemonEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    ASSERT_TRUE(std::filesystem::exists(agentcage_bin())) << agentcage_bin();
    char tmpl[] = "/tmp/ac-daemon-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::filesystem::create_directories(dir_ / "policies");
    write_file(dir_ / "policies" / "dtest.yaml", dtest_policy(false));
    std::ofstream(dir_ / "daemon.yaml") << "policy_dir: " << (dir_ / "policies").string() << "\n"
                                        << "metrics_address: 127.0.0.1:" << kMetricsPort << "\n"
                                        << "audit_log: " << (dir_ / "audit.jsonl").string() << "\n";
    auto root = cgroup::find_cgroup2_root();
    ASSERT_TRUE(root) << root.error().message;
    root_ = *root;
  }

  void TearDown() override {
    stop_daemon(SIGTERM);
    if (prometheus_ > 0) {
      ::kill(prometheus_, SIGKILL);
      wait_exit(prometheus_);
    }
    // The daemon's named slot stays pinned by design, and a direct
    // attachment's transient slot stays cached for reuse: tests leave
    // neither (a slot a scope still points at stays, rule 1 of scope/slots.h).
    if (auto e = bpf::Enforcer::open_shared())
      if (auto pols = (*e)->policies()) {
        auto scopes = (*e)->scopes();
        for (const auto& p : *pols) {
          if (p.name != "dtest" && p.name != "daudit" && p.name != "dextra" && p.name != "dnew") continue;
          bool used = !scopes;
          if (scopes)
            for (const auto& sc : *scopes) used |= sc.policy_slot == p.slot;
          if (!used) (void)(*e)->remove_policy(p.slot);
        }
      }
    std::error_code ec;
    std::filesystem::remove(dir_ / "daemon.log", ec);
    std::filesystem::remove_all(dir_, ec);
  }

  // `in_child` runs in the daemon's process before its exec (e.g. to place
  // it in a cgroup, as a service manager does).
  void start_daemon(const std::function<void()>& in_child = {}) {
    daemon_ = spawn({agentcage_bin(), "daemon", "--config", (dir_ / "daemon.yaml").string()},
                    dir_ / "daemon.log", {}, in_child);
    ASSERT_TRUE(wait_until([&] { return named_slot(status(), "dtest").has_value(); }, 120s))
        << "daemon did not come up with policy dtest:\n"
        << slurp(dir_ / "daemon.log");
  }

  void stop_daemon(int sig) {
    if (daemon_.pid <= 0) return;
    ::kill(daemon_.pid, sig);
    wait_exit(daemon_.pid);
    daemon_.pid = -1;
  }

  std::string log() { return slurp(dir_ / "daemon.log"); }

  // A real Prometheus server on kPrometheusPort scraping every second, with
  // SCRAPE_CONFIGS (YAML list items under scrape_configs:); TearDown stops it.
  void start_prometheus(const std::string& scrape_configs) {
    std::filesystem::create_directories(dir_ / "tsdb");
    std::ofstream(dir_ / "prometheus.yml") << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                              "scrape_configs:\n"
                                           << scrape_configs;
    Proc prom = spawn({"/usr/bin/prometheus", "--config.file=" + (dir_ / "prometheus.yml").string(),
                       "--storage.tsdb.path=" + (dir_ / "tsdb").string(),
                       "--web.listen-address=127.0.0.1:" + std::to_string(kPrometheusPort)},
                      dir_ / "prometheus.log");
    prometheus_ = prom.pid;
  }

  // `agentcage run --policy dtest` with the test policy directory.
  Proc start_run(const std::vector<std::string>& cmd, const std::string& tag,
                 const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {agentcage_bin(), "run",
                                     "--policy",      "dtest",
                                     "--policy-dir",  (dir_ / "policies").string(),
                                     "--result",      (dir_ / (tag + ".json")).string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return spawn(argv, dir_ / (tag + ".out"));
  }

  std::filesystem::path dir_, root_;
  Proc daemon_;
  pid_t prometheus_ = -1;
};

}  // namespace agentcage::kt
