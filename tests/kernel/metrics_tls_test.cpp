// SPDX-License-Identifier: Apache-2.0
// The daemon's /metrics over HTTPS with basic auth, end to end: a real
// daemon with throwaway self-signed certificates (made here with the
// openssl command) and a users file of real crypt(3) hashes, scraped by a
// real Prometheus over https with a client certificate and the right
// password (and not with a wrong one); curl without credentials, with a
// wrong password, without a client certificate and over plain HTTP to the
// TLS port; a daemon whose TLS files cannot be used refuses to start rather
// than serve plain HTTP. Needs root (the VM: tests/vm/run).
#include <crypt.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon_env.h"
#include "kernel_env.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kPassword = "correct horse battery staple";

std::string bcrypt(const std::string& password) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!::crypt_gensalt_rn("$2b$", 10, nullptr, 0, setting, sizeof setting)) return "";
  crypt_data data{};
  const char* out = ::crypt_r(password.c_str(), setting, &data);
  return out && out[0] != '*' ? out : "";
}

class MetricsTls : public DaemonEnv {
 protected:
  void SetUp() override {
    DaemonEnv::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    make_cert("metrics");
    make_cert("other");
    make_cert("scraper");  // the client certificate, its own CA
    const std::string hash = bcrypt(kPassword);
    ASSERT_FALSE(hash.empty());
    std::ofstream(dir_ / "metrics.users") << "# scrapers\nprometheus:" << hash << "\n";
    ::chmod((dir_ / "metrics.users").c_str(), 0600);
    std::ofstream(dir_ / "prometheus.password") << kPassword;
    std::ofstream(dir_ / "wrong.password") << "not the password";
  }

  // A self-signed certificate for 127.0.0.1: NAME.crt and NAME.key (0600).
  void make_cert(const std::string& name) {
    Proc p = spawn(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=agentcage-test", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", (dir_ / (name + ".key")).string(), "-out", (dir_ / (name + ".crt")).string()},
        dir_ / "openssl.log");
    ASSERT_EQ(wait_exit(p.pid), 0) << slurp(dir_ / "openssl.log");
    ::chmod((dir_ / (name + ".key")).c_str(), 0600);
  }

  void configure(const std::string& cert, const std::string& key, bool tls, bool auth) {
    std::ofstream cfg(dir_ / "daemon.yaml", std::ios::app);
    if (tls)
      cfg << "metrics_tls: {cert_file: " << (dir_ / (cert + ".crt")).string()
          << ", key_file: " << (dir_ / (key + ".key")).string()
          << ", client_ca_file: " << (dir_ / "scraper.crt").string() << "}\n";
    if (auth) cfg << "metrics_basic_auth: {users_file: " << (dir_ / "metrics.users").string() << "}\n";
  }

  // curl's HTTP status for URL ("000" when no HTTP answer came), trusting the
  // test certificate and presenting the scraper's unless `as_scraper` is false.
  std::string curl(const std::string& url, const std::vector<std::string>& extra = {},
                   bool as_scraper = true) {
    std::vector<std::string> argv = {
        "/usr/bin/curl", "-s", "-m",           "10",       "-o",
        "/dev/null",     "-w", "%{http_code}", "--cacert", (dir_ / "metrics.crt").string()};
    if (as_scraper)
      argv.insert(argv.end(),
                  {"--cert", (dir_ / "scraper.crt").string(), "--key", (dir_ / "scraper.key").string()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    std::error_code ec;
    fs::remove(dir_ / "curl.out", ec);
    Proc p = spawn(argv, dir_ / "curl.out");
    wait_exit(p.pid);
    return slurp(dir_ / "curl.out");
  }

  const std::string https_ = "https://127.0.0.1:" + std::to_string(kMetricsPort) + "/metrics";
};

TEST_F(MetricsTls, PrometheusScrapesOverHttpsWithBasicAuth) {
  configure("metrics", "metrics", true, true);
  start_daemon();
  EXPECT_NE(
      log().find("metrics on " + https_ + " (port " + std::to_string(kMetricsPort) + ", basic auth: 1 user)"),
      std::string::npos)
      << log();
  const std::string target = "127.0.0.1:" + std::to_string(kMetricsPort);
  auto job = [&](const std::string& name, const std::string& password_file) {
    return "  - job_name: " + name +
           "\n    scheme: https\n    tls_config: {ca_file: " + (dir_ / "metrics.crt").string() +
           ", cert_file: " + (dir_ / "scraper.crt").string() +
           ", key_file: " + (dir_ / "scraper.key").string() +
           "}\n    basic_auth: {username: prometheus, password_file: " + (dir_ / password_file).string() +
           "}\n    static_configs: [{targets: ['" + target + "']}]\n";
  };
  start_prometheus(job("agentcage", "prometheus.password") + job("wrongpass", "wrong.password"));
  ASSERT_TRUE(wait_until([] { return promql("up{job=\"agentcage\"}") == 1; }, 180s))
      << "Prometheus never scraped the daemon over https:\n"
      << slurp(dir_ / "prometheus.log") << log();
  EXPECT_EQ(promql("agentcage_enforcement_ready{job=\"agentcage\"}"), 1);
  EXPECT_EQ(promql("agentcage_policies_loaded{job=\"agentcage\"}"), 1);
  // The same scraper with a wrong password is refused every time.
  EXPECT_TRUE(wait_until([] { return promql("count_over_time(up{job=\"wrongpass\"}[1m])") >= 3; }, 60s));
  EXPECT_EQ(promql("max_over_time(up{job=\"wrongpass\"}[1m])"), 0);

  EXPECT_EQ(curl(https_, {"-u", std::string("prometheus:") + kPassword}), "200");
  EXPECT_EQ(curl(https_), "401");
  EXPECT_EQ(curl(https_, {"-u", "prometheus:wrong"}), "401");
  EXPECT_EQ(curl(https_, {"-u", std::string("nobody:") + kPassword}), "401");
  EXPECT_EQ(curl(https_, {"-u", std::string("prometheus:") + kPassword}, false),
            "403");  // no client certificate
  // Plain HTTP to the TLS port: no HTTP answer, no metrics.
  EXPECT_EQ(curl("http://" + target + "/metrics", {"-u", std::string("prometheus:") + kPassword}), "000");
  EXPECT_EQ(http_get(kMetricsPort, "/metrics"), "");

  // `agentcage status` says how the metrics are served.
  Proc st = spawn({agentcage_bin(), "status"}, dir_ / "status.out");
  EXPECT_EQ(wait_exit(st.pid), 0) << slurp(dir_ / "status.out");
  EXPECT_NE(slurp(dir_ / "status.out").find("metrics " + https_ + " (basic auth)"), std::string::npos)
      << slurp(dir_ / "status.out");
}

TEST_F(MetricsTls, BasicAuthOverPlainHttpWorksWithAWarning) {
  configure("", "", false, true);
  start_daemon();
  EXPECT_NE(log().find("basic auth over plain HTTP"), std::string::npos) << log();
  const std::string url = "http://127.0.0.1:" + std::to_string(kMetricsPort) + "/metrics";
  EXPECT_EQ(curl(url), "401");
  EXPECT_EQ(curl(url, {"-u", std::string("prometheus:") + kPassword}), "200");
}

// A reload (agentcage reload, SIGHUP) turns the protection on, takes a
// renewed certificate, and closes the endpoint when the files it is given
// cannot be used (never serving in clear instead).
TEST_F(MetricsTls, ReloadTurnsProtectionOnAndTakesRenewedFiles) {
  start_daemon();
  const std::string http = "http://127.0.0.1:" + std::to_string(kMetricsPort) + "/metrics";
  ASSERT_EQ(curl(http), "200");
  auto reload = [&](const std::string& tag) {
    Proc p = spawn({agentcage_bin(), "reload"}, dir_ / (tag + ".out"));
    const int code = wait_exit(p.pid);
    return std::to_string(code) + " " + slurp(dir_ / (tag + ".out"));
  };
  const std::string creds = std::string("prometheus:") + kPassword;

  configure("metrics", "metrics", true, true);
  std::string said = reload("on");
  EXPECT_NE(said.find("applied metrics_tls, metrics_basic_auth"), std::string::npos) << said;
  EXPECT_EQ(curl(https_, {"-u", creds}), "200") << log();
  EXPECT_EQ(curl(https_), "401");
  EXPECT_EQ(http_get(kMetricsPort, "/metrics"), "");

  // A renewed certificate: served from the next reload on.
  make_cert("metrics");
  EXPECT_EQ(curl(https_, {"-u", creds}), "000");  // still the old one, which the new CA file does not name
  said = reload("renewed");
  EXPECT_EQ(curl(https_, {"-u", creds}), "200") << said << log();

  // A renewal gone wrong (the other key): the endpoint closes, in clear too.
  std::filesystem::copy_file(dir_ / "other.key", dir_ / "metrics.key", fs::copy_options::overwrite_existing);
  said = reload("broken");
  EXPECT_EQ(said.rfind("1 ", 0), 0u) << said;  // agentcage reload fails and says why
  EXPECT_NE(said.find("  metrics_tls: metrics TLS: the key in " + (dir_ / "metrics.key").string() +
                      " is not the key of the certificate in " + (dir_ / "metrics.crt").string()),
            std::string::npos)
      << said;
  EXPECT_EQ(curl(https_, {"-u", creds}), "000");
  EXPECT_EQ(http_get(kMetricsPort, "/metrics"), "");
}

// Fail closed: TLS was asked for, so a key that is not the certificate's
// stops the daemon; nothing serves the metrics, in clear or otherwise.
TEST_F(MetricsTls, UnusableTlsFilesStopTheDaemon) {
  configure("metrics", "other", true, true);
  daemon_ =
      spawn({agentcage_bin(), "daemon", "--config", (dir_ / "daemon.yaml").string()}, dir_ / "daemon.log");
  EXPECT_EQ(wait_exit(daemon_.pid), 1) << log();
  daemon_.pid = -1;
  EXPECT_NE(log().find("metrics TLS: the key in " + (dir_ / "other.key").string() +
                       " is not the key of the certificate in " + (dir_ / "metrics.crt").string()),
            std::string::npos)
      << log();
  EXPECT_EQ(http_get(kMetricsPort, "/metrics"), "");
  EXPECT_EQ(curl(https_, {"-u", std::string("prometheus:") + kPassword}), "000");
}

}  // namespace
}  // namespace agentcage::kt
