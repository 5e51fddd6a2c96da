// SPDX-License-Identifier: Apache-2.0
// The /metrics endpoint's protection, on the host: the metrics_tls and
// metrics_basic_auth settings, the users file and its password hashes (real
// crypt(3) hashes made here), and the real server over loopback, asked with
// curl over HTTPS (a throwaway certificate made with the openssl command).
#include <arpa/inet.h>
#include <crypt.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "telemetry/basic_auth.h"
#include "telemetry/metrics_server.h"
#include "util/unique_fd.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using telemetry::BasicAuth;

// crypt(3) hash of PASSWORD with a fresh salt of PREFIX's method ("$2b$",
// "$y$", "$6$"); COST 0 is the method's default.
std::string make_hash(const std::string& password, const char* prefix, unsigned long cost = 0) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(::crypt_gensalt_rn(prefix, cost, nullptr, 0, setting, sizeof setting), nullptr);
  crypt_data data{};
  const char* out = ::crypt_r(password.c_str(), setting, &data);
  EXPECT_TRUE(out && out[0] != '*') << prefix;
  return out ? out : "";
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ac-metrics-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write(const std::string& name, const std::string& text, mode_t mode) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }
  fs::path dir_;
};

// ---- settings ---------------------------------------------------------------

std::string first_error(const std::string& text) {
  auto r = daemon::parse_config(text, "d.yaml");
  EXPECT_FALSE(r.ok()) << text;
  return r.errors.empty() ? "" : r.errors.front().format();
}

TEST(MetricsSettings, TlsAndBasicAuth) {
  auto r = daemon::parse_config(
      "metrics_address: 0.0.0.0:9477\n"
      "metrics_tls: {cert_file: /etc/agentcage/metrics.crt, key_file: /etc/agentcage/metrics.key}\n"
      "metrics_basic_auth:\n  users_file: /etc/agentcage/metrics.users\n",
      "d.yaml");
  ASSERT_TRUE(r.ok()) << r.errors.front().format();
  ASSERT_TRUE(r.config->metrics_tls);
  EXPECT_EQ(r.config->metrics_tls->cert_file, "/etc/agentcage/metrics.crt");
  EXPECT_EQ(r.config->metrics_tls->key_file, "/etc/agentcage/metrics.key");
  EXPECT_EQ(r.config->metrics_tls->client_ca_file, "");
  EXPECT_EQ(r.config->metrics_users_file, "/etc/agentcage/metrics.users");
  auto m = daemon::parse_config(
      "metrics_tls: {cert_file: /m.crt, key_file: /m.key, client_ca_file: /etc/agentcage/scrapers-ca.crt}\n",
      "d.yaml");
  ASSERT_TRUE(m.ok()) << m.errors.front().format();
  EXPECT_EQ(m.config->metrics_tls->client_ca_file, "/etc/agentcage/scrapers-ca.crt");
  // Neither by default.
  auto d = daemon::parse_config("", "d.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d.config->metrics_tls);
  EXPECT_FALSE(d.config->metrics_users_file);
}

TEST(MetricsSettings, ErrorsAreLocated) {
  EXPECT_EQ(first_error("metrics_tls: /etc/metrics.pem\n"),
            "d.yaml:1:14: metrics_tls: expected a mapping {cert_file: /path, key_file: /path}");
  EXPECT_EQ(first_error("metrics_tls: {cert_file: /a.crt}\n"),
            "d.yaml:1:14: metrics_tls: key_file is required");
  EXPECT_EQ(first_error("metrics_tls: {cert_file: a.crt, key_file: /a.key}\n"),
            "d.yaml:1:26: metrics_tls.cert_file: expected an absolute path, got 'a.crt'");
  EXPECT_EQ(first_error("metrics_tls: {cert_file: /a.crt, key_file: /a.key, client_ca: /ca.crt}\n"),
            "d.yaml:1:52: unknown setting 'client_ca' in metrics_tls");
  EXPECT_EQ(first_error("metrics_tls: {cert_file: /a.crt, key_file: /a.key, client_ca_file: ca.crt}\n"),
            "d.yaml:1:68: metrics_tls.client_ca_file: expected an absolute path, got 'ca.crt'");
  auto r = daemon::parse_config("metrics_basic_auth: {users: /u}\n", "d.yaml");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].format(), "d.yaml:1:21: metrics_basic_auth: users_file is required");
  EXPECT_EQ(r.errors[1].format().rfind("d.yaml:1:22: unknown setting 'users' in metrics_basic_auth", 0), 0u)
      << r.errors[1].format();
  EXPECT_EQ(first_error("metrics_basic_auth: {users_file: [/u]}\n"),
            "d.yaml:1:34: metrics_basic_auth.users_file: expected a single value");
  // Protection for an endpoint that is off protects nothing: refused.
  EXPECT_EQ(first_error("metrics_address: \"off\"\nmetrics_basic_auth: {users_file: /u}\n"),
            "d.yaml:2:21: metrics_basic_auth: set, but metrics_address is \"off\"; give metrics_address a "
            "HOST:PORT or remove metrics_basic_auth");
  EXPECT_EQ(first_error("metrics_tls: {cert_file: /a.crt, key_file: /a.key}\nmetrics_address: \"off\"\n"),
            "d.yaml:1:14: metrics_tls: set, but metrics_address is \"off\"; give metrics_address a HOST:PORT "
            "or remove metrics_tls");
}

// ---- the users file -----------------------------------------------------------

TEST(MetricsUsers, EachMethodChecksItsPassword) {
  const std::string text = "# scrapers\n\nprometheus:" + make_hash("s3cret pass", "$2b$", 5) +
                           "\nvm:" + make_hash("other", "$y$") + "\nlegacyjob:" + make_hash("six", "$6$") +
                           "\n";
  auto auth = BasicAuth::parse(text, "u.txt");
  ASSERT_TRUE(auth) << auth.error().message;
  const BasicAuth& a = **auth;
  EXPECT_EQ(a.users(), 3u);
  EXPECT_TRUE(a.check("prometheus", "s3cret pass"));
  EXPECT_TRUE(a.check("vm", "other"));
  EXPECT_TRUE(a.check("legacyjob", "six"));
  EXPECT_FALSE(a.check("prometheus", "s3cret pas"));
  EXPECT_FALSE(a.check("prometheus", ""));
  EXPECT_FALSE(a.check("prometheus", "other"));  // another user's password
  EXPECT_FALSE(a.check("nobody", "s3cret pass"));
  EXPECT_FALSE(a.check("", ""));
  // Remembered passwords still mean exactly that password and user.
  EXPECT_TRUE(a.check("prometheus", "s3cret pass"));
  EXPECT_FALSE(a.check("prometheus", "s3cret passX"));
  EXPECT_FALSE(a.check("vm", "s3cret pass"));
}

// A scrape after the first costs a digest, not a hash check: 50 remembered
// checks take less time than one bcrypt check at cost 10 (about 50 ms).
TEST(MetricsUsers, APasswordThatPassedIsCheap) {
  auto auth = BasicAuth::parse("p:" + make_hash("pw", "$2b$", 10) + "\n", "u.txt");
  ASSERT_TRUE(auth) << auth.error().message;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  ASSERT_TRUE((*auth)->check("p", "pw"));
  const auto full = Clock::now() - t0;
  t0 = Clock::now();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*auth)->check("p", "pw"));
  const auto cached = Clock::now() - t0;
  EXPECT_LT(cached, full) << "50 remembered checks took " << cached.count() << " ns, one full check "
                          << full.count() << " ns";
  // A wrong password is never remembered: it costs the full check each time.
  t0 = Clock::now();
  EXPECT_FALSE((*auth)->check("p", "wrong"));
  EXPECT_GT(Clock::now() - t0, cached / 50 * 10);
}

std::string parse_error(const std::string& text) {
  auto r = BasicAuth::parse(text, "u.txt");
  EXPECT_FALSE(r) << text;
  return r ? "" : r.error().message;
}

TEST(MetricsUsers, BadLinesAreLocated) {
  const std::string good = make_hash("pw", "$2b$", 5);
  EXPECT_EQ(parse_error("a:" + good + "\nplaintext\n"),
            "u.txt:2: expected NAME:HASH (e.g. the output of htpasswd -nBC 12 NAME)");
  EXPECT_EQ(parse_error("# x\na:" + good + "\na:" + good + "\n"),
            "u.txt:3: user 'a' is already defined on line 2");
  EXPECT_EQ(
      parse_error("a:$x$hunter2\n"),
      "u.txt:1: user 'a': not a password hash crypt(3) knows (expected e.g. $2b$..., $y$... or $6$...)");
  const std::string weak =
      "u.txt:1: user 'a': a weak hash method or cost (DES, MD5, ...), or a password in clear; make a bcrypt "
      "or "
      "yescrypt hash (docs/daemon.md)";
  EXPECT_EQ(parse_error("a:" + make_hash("pw", "$1$") + "\n"), weak);
  EXPECT_EQ(parse_error("a:hunter2\n"), weak);  // read as a DES hash
  EXPECT_EQ(parse_error("a:" + good.substr(0, good.size() - 3) + "\n"),
            "u.txt:1: user 'a': the hash is damaged (wrong length for its method)");
  EXPECT_EQ(
      parse_error("a b:" + good + "\n"),
      "u.txt:1: the user name must be 1 to 64 characters without spaces or control characters, got 'a b'");
  EXPECT_EQ(parse_error(":" + good + "\n"),
            "u.txt:1: the user name must be 1 to 64 characters without spaces or control characters, got ''");
  EXPECT_EQ(parse_error("# only a comment\n\n"),
            "u.txt: no users (add NAME:HASH lines; nobody could scrape the metrics)");
  // Windows line ends are taken.
  EXPECT_TRUE(BasicAuth::parse("a:" + good + "\r\n", "u.txt"));
}

class MetricsUsersFile : public TempDir {};

TEST_F(MetricsUsersFile, OnlyItsOwnerMayReadIt) {
  const std::string line = "a:" + make_hash("pw", "$2b$", 5) + "\n";
  const fs::path ok = write("users", line, 0600);
  auto auth = BasicAuth::load_file(ok);
  ASSERT_TRUE(auth) << auth.error().message;
  EXPECT_TRUE((*auth)->check("a", "pw"));
  EXPECT_TRUE(BasicAuth::load_file(write("users-ro", line, 0400)));

  const fs::path shared = write("users-group", line, 0640);
  auto r = BasicAuth::load_file(shared);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, shared.string() +
                                   ": readable or writable by group or others (mode 0640); chmod 600 " +
                                   shared.string());
  EXPECT_FALSE(BasicAuth::load_file(write("users-world", line, 0604)));

  const fs::path link = dir_ / "link";
  fs::create_symlink(ok, link);
  r = BasicAuth::load_file(link);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, link.string() + ": is a symbolic link; point users_file at the file itself");

  r = BasicAuth::load_file((dir_ / "missing").string());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "cannot read " + (dir_ / "missing").string() + ": No such file or directory");
  r = BasicAuth::load_file(write("bad", "a:" + make_hash("pw", "$2b$", 5) + "\nb\n", 0600));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            (dir_ / "bad").string() + ":2: expected NAME:HASH (e.g. the output of htpasswd -nBC 12 NAME)");
}

// ---- the server -------------------------------------------------------------------

class MetricsServerTest : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    ASSERT_EQ(std::system("command -v openssl >/dev/null && command -v curl >/dev/null"), 0)
        << "needs the openssl and curl commands (scripts/install-deps)";
    make_cert("server");
    make_cert("other");
    users_ = write("users", "prom:" + make_hash("right", "$2b$", 5) + "\n", 0600);
  }
  // A self-signed certificate for 127.0.0.1 (NAME.crt) and its key (NAME.key, 0600).
  void make_cert(const std::string& name) {
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
        "-subj /CN=agentcage-test -addext subjectAltName=IP:127.0.0.1 -keyout " +
        (dir_ / (name + ".key")).string() + " -out " + (dir_ / (name + ".crt")).string() + " 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    ::chmod((dir_ / (name + ".key")).c_str(), 0600);
  }
  telemetry::TlsFiles tls(const std::string& cert = "server", const std::string& key = "server",
                          const std::string& client_ca = "") {
    return {(dir_ / (cert + ".crt")).string(), (dir_ / (key + ".key")).string(),
            client_ca.empty() ? "" : (dir_ / (client_ca + ".crt")).string()};
  }
  Result<std::unique_ptr<telemetry::MetricsServer>> start(std::optional<telemetry::TlsFiles> files,
                                                          bool auth) {
    telemetry::ServeOptions o{.address = "127.0.0.1:0", .tls = std::move(files), .auth = nullptr};
    if (auth) {
      auto a = BasicAuth::load_file(users_);
      EXPECT_TRUE(a);
      if (a) o.auth = *a;
    }
    return telemetry::MetricsServer::start(o, [] { return std::string("agentcage_up 1\n"); });
  }
  // curl's "HTTP_STATUS BODY", or "curl exit N" when no HTTP answer came.
  std::string curl(const std::string& url, const std::string& extra = "") {
    const fs::path out = dir_ / "curl.out";
    const std::string cmd = "curl -sS -m 10 -o " + out.string() + " -w '%{http_code}' --cacert " +
                            (dir_ / "server.crt").string() + " " + extra + " '" + url + "' > " +
                            (dir_ / "curl.code").string() + " 2>/dev/null";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) return "curl exit " + std::to_string(WEXITSTATUS(rc));
    std::ifstream code(dir_ / "curl.code"), body(out);
    std::string c((std::istreambuf_iterator<char>(code)), {}), b((std::istreambuf_iterator<char>(body)), {});
    return c + " " + b;
  }
  fs::path users_;
};

TEST_F(MetricsServerTest, HttpsWithBasicAuth) {
  auto server = start(tls(), true);
  ASSERT_TRUE(server) << server.error().message;
  const std::string base = "127.0.0.1:" + std::to_string((*server)->port());
  ASSERT_NE((*server)->port(), 0);
  EXPECT_EQ(curl("https://" + base + "/metrics", "-u prom:right"), "200 agentcage_up 1\n");
  EXPECT_EQ(curl("https://" + base + "/metrics", "-u prom:right"), "200 agentcage_up 1\n");  // remembered
  EXPECT_EQ(curl("https://" + base + "/metrics").substr(0, 4), "401 ");
  EXPECT_EQ(curl("https://" + base + "/metrics", "-u prom:wrong").substr(0, 4), "401 ");
  EXPECT_EQ(curl("https://" + base + "/metrics", "-u other:right").substr(0, 4), "401 ");
  EXPECT_EQ(curl("https://" + base + "/other", "-u prom:right").substr(0, 4), "404 ");
  // Plain HTTP to the TLS port gets no HTTP answer at all.
  EXPECT_EQ(curl("http://" + base + "/metrics", "-u prom:right").rfind("curl exit", 0), 0u);
}

// Mutual TLS: only a client whose certificate client_ca_file vouches for
// gets past the certificate check (to basic auth).
TEST_F(MetricsServerTest, ClientCertificates) {
  make_cert("scraper");  // the scrapers' CA is the scraper's own self-signed certificate
  make_cert("rogue");
  auto server = start(tls("server", "server", "scraper"), true);
  ASSERT_TRUE(server) << server.error().message;
  const std::string url = "https://127.0.0.1:" + std::to_string((*server)->port()) + "/metrics";
  const std::string as_scraper =
      "--cert " + (dir_ / "scraper.crt").string() + " --key " + (dir_ / "scraper.key").string();
  const std::string as_rogue =
      "--cert " + (dir_ / "rogue.crt").string() + " --key " + (dir_ / "rogue.key").string();
  EXPECT_EQ(curl(url, as_scraper + " -u prom:right"), "200 agentcage_up 1\n");
  EXPECT_EQ(curl(url, as_scraper + " -u prom:wrong").substr(0, 4), "401 ");
  EXPECT_EQ(curl(url, "-u prom:right").substr(0, 4), "403 ");
  EXPECT_EQ(curl(url, as_rogue + " -u prom:right").substr(0, 4), "403 ");

  auto r = start(tls("server", "server", "missing"), false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "metrics TLS client CA: cannot read " + (dir_ / "missing.crt").string() +
                                   ": No such file or directory");
  telemetry::TlsFiles not_pem = tls();
  not_pem.client_ca_file = users_.string();
  r = start(not_pem, false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "metrics TLS: no usable PEM certificate in " + users_.string());
}

TEST_F(MetricsServerTest, PlainHttpWithAndWithoutAuth) {
  auto open = start(std::nullopt, false);
  ASSERT_TRUE(open) << open.error().message;
  EXPECT_EQ(curl("http://127.0.0.1:" + std::to_string((*open)->port()) + "/metrics"), "200 agentcage_up 1\n");
  auto guarded = start(std::nullopt, true);
  ASSERT_TRUE(guarded) << guarded.error().message;
  const std::string url = "http://127.0.0.1:" + std::to_string((*guarded)->port()) + "/metrics";
  EXPECT_EQ(curl(url).substr(0, 4), "401 ");
  EXPECT_EQ(curl(url, "-u prom:right"), "200 agentcage_up 1\n");
}

// Idle connections from one address do not keep a scraper at another out:
// an address has at most 16 at once.
TEST_F(MetricsServerTest, IdleConnectionsFromOneAddressDoNotKeepTheScraperOut) {
  auto server = start(std::nullopt, false);
  ASSERT_TRUE(server) << server.error().message;
  const auto port = static_cast<uint16_t>((*server)->port());
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 16; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    idle.push_back(std::move(fd));
  }
  // Their address gets no answer now; another gets its scrape.
  EXPECT_EQ(curl(url, "--interface 127.0.0.1").rfind("curl exit", 0), 0u);
  EXPECT_EQ(curl(url, "--interface 127.0.0.2"), "200 agentcage_up 1\n");
  idle.clear();
  EXPECT_TRUE([&] {
    for (int i = 0; i < 100; ++i) {
      if (curl(url, "--interface 127.0.0.1") == "200 agentcage_up 1\n") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }());
}

TEST_F(MetricsServerTest, UnusableTlsFilesAreRefused) {
  auto r = start(tls("server", "other"), false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "metrics TLS: the key in " + tls("server", "other").key_file +
                                   " is not the key of the certificate in " + tls().cert_file);
  telemetry::TlsFiles missing = tls();
  missing.cert_file = (dir_ / "none.crt").string();
  r = start(missing, false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "metrics TLS certificate: cannot read " + missing.cert_file + ": No such file or directory");
  telemetry::TlsFiles not_pem = tls();
  not_pem.cert_file = users_.string();
  r = start(not_pem, false);
  ASSERT_FALSE(r);
  EXPECT_NE(
      r.error().message.find("metrics TLS: cannot use " + users_.string() + " with " + tls().key_file + ": "),
      std::string::npos)
      << r.error().message;
  ::chmod(tls().key_file.c_str(), 0644);
  r = start(tls(), false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "metrics TLS key: " + tls().key_file +
                                   ": the private key is readable by every user; chmod o-r " +
                                   tls().key_file);
}

TEST_F(MetricsServerTest, ABusyPortIsAnError) {
  auto first = start(std::nullopt, false);
  ASSERT_TRUE(first) << first.error().message;
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = telemetry::MetricsServer::start({.address = address, .tls = std::nullopt, .auth = nullptr},
                                                [] { return std::string(); });
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().message, "metrics: cannot listen on " + address + ": Address already in use");
}

}  // namespace
}  // namespace agentcage
