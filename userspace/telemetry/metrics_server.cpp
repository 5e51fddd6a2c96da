// SPDX-License-Identifier: Apache-2.0
#include "telemetry/metrics_server.h"

#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "util/file.h"
#include "util/log.h"
#include "util/unique_fd.h"

namespace agentcage::telemetry {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;
// One address's connections are capped below the total, so that idle
// connections from one host cannot keep the scraper out.
constexpr unsigned kMaxConnections = 256;
constexpr unsigned kMaxConnectionsPerAddress = 16;
constexpr unsigned kConnectionTimeoutSeconds = 10;
constexpr unsigned kThreads = 2;
// TLS 1.2 and 1.3 only (what Prometheus speaks); GnuTLS's defaults otherwise.
constexpr const char* kTlsPriorities = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
constexpr const char* kRealm = "agentcage metrics";
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// A PEM file's text. A private key readable by every user on the host is
// refused: anyone could then pose as this endpoint.
Result<std::string> read_pem(const std::string& path, bool secret) {
  return read_regular_file(path, kMaxPemBytes, 0, [&](const struct stat& st) -> Status {
    if (secret && (st.st_mode & S_IROTH))
      return Error{path + ": the private key is readable by every user; chmod o-r " + path, EPERM};
    return {};
  });
}

// The files as GnuTLS will use them, checked here so a bad one is named
// precisely (the server would only say it cannot start).
Status check_files(const TlsFiles& files, const std::string& cert, const std::string& key,
                   const std::string& ca) {
  gnutls_certificate_credentials_t cred = nullptr;
  if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
    return Error{"metrics TLS: cannot allocate credentials", ENOMEM};
  std::unique_ptr<gnutls_certificate_credentials_st, decltype(&gnutls_certificate_free_credentials)> owner(
      cred, gnutls_certificate_free_credentials);
  auto datum = [](const std::string& text) {
    return gnutls_datum_t{reinterpret_cast<unsigned char*>(const_cast<char*>(text.data())),
                          static_cast<unsigned>(text.size())};
  };
  auto why = [](int rc) {
    std::string text = gnutls_strerror(rc);
    if (!text.empty() && text.back() == '.') text.pop_back();
    return text;
  };
  const gnutls_datum_t c = datum(cert), k = datum(key);
  const int rc = gnutls_certificate_set_x509_key_mem2(cred, &c, &k, GNUTLS_X509_FMT_PEM, nullptr, 0);
  if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
    return Error{"metrics TLS: the key in " + files.key_file + " is not the key of the certificate in " +
                     files.cert_file,
                 EINVAL};
  if (rc < 0)
    return Error{"metrics TLS: cannot use " + files.cert_file + " with " + files.key_file + ": " + why(rc) +
                     " (expected a PEM certificate and an unencrypted PEM key)",
                 EINVAL};
  if (!files.client_ca_file.empty()) {
    const gnutls_datum_t a = datum(ca);
    const int n = gnutls_certificate_set_x509_trust_mem(cred, &a, GNUTLS_X509_FMT_PEM);
    if (n <= 0)
      return Error{"metrics TLS: no usable PEM certificate in " + files.client_ca_file +
                       (n < 0 ? " (" + why(n) + ")" : std::string()),
                   EINVAL};
  }
  return {};
}

// Whether the connection's client presented a certificate that verifies
// against client_ca_file. libmicrohttpd only asks for one; judging it is ours.
bool client_certificate_verifies(MHD_Connection* conn) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  auto* session = static_cast<gnutls_session_t>(info ? info->tls_session : nullptr);
  if (!session) return false;
  unsigned count = 0;
  if (!gnutls_certificate_get_peers(session, &count) || count == 0) return false;
  unsigned status = 0;
  return gnutls_certificate_verify_peers2(session, &status) == GNUTLS_E_SUCCESS && status == 0;
}

// A listening TCP socket on HOST:PORT ("" host: every address).
Result<UniqueFd> bind_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Error{"metrics: expected HOST:PORT, got " + address, EINVAL};
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return Error{"metrics: cannot listen on " + address + ": " + ::gai_strerror(rc), EINVAL};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
  int err = EADDRNOTAVAIL;
  for (const addrinfo* a = list.get(); a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      err = errno;
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 64) == 0) return fd;
    err = errno;
  }
  return Error::from_errno("metrics: cannot listen on " + address, err);
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

MHD_Result queue_text(MHD_Connection* conn, unsigned status, const std::string& text) {
  MHD_Response* r =
      MHD_create_response_from_buffer(text.size(), const_cast<char*>(text.data()), MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, kContentType);
  const MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

// Whether the request's basic-auth credentials are a user's.
bool authorized(MHD_Connection* conn, const BasicAuth& auth) {
  char* password = nullptr;
  char* user = MHD_basic_auth_get_username_password(conn, &password);
  const bool ok = user && password && auth.check(user, password);
  if (password) {
    explicit_bzero(password, std::strlen(password));
    MHD_free(password);
  }
  if (user) MHD_free(user);
  return ok;
}

}  // namespace

// libmicrohttpd's callbacks, with the server as their context.
struct MetricsServer::Callbacks {
  static MHD_Result request(void* cls, MHD_Connection* conn, const char* url, const char* method,
                            const char* /*version*/, const char* /*upload*/, size_t* upload_size,
                            void** state) {
    auto* self = static_cast<MetricsServer*>(cls);
    // The first call has the headers only: answer on the second, as the
    // library asks, so that a request with a body is read (and ignored).
    static int headers_seen;
    if (*state == nullptr) {
      *state = &headers_seen;
      return MHD_YES;
    }
    if (*upload_size) {
      *upload_size = 0;
      return MHD_YES;
    }
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
      return queue_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
    if (self->client_certs_ && !client_certificate_verifies(conn))
      return queue_text(conn, MHD_HTTP_FORBIDDEN,
                        "a client certificate signed by the daemon's client_ca_file is required\n");
    if (self->auth_ && !authorized(conn, *self->auth_)) {
      const std::string text = "401 Unauthorized\n";
      MHD_Response* r =
          MHD_create_response_from_buffer(text.size(), const_cast<char*>(text.data()), MHD_RESPMEM_MUST_COPY);
      if (!r) return MHD_NO;
      const MHD_Result ret = MHD_queue_basic_auth_fail_response(conn, kRealm, r);
      MHD_destroy_response(r);
      return ret;
    }
    if (std::strcmp(url, "/metrics") != 0) return queue_text(conn, MHD_HTTP_NOT_FOUND, "see /metrics\n");
    return queue_text(conn, MHD_HTTP_OK, self->body_());
  }

  static void log(void* cls, const char* format, va_list ap) {
    auto* self = static_cast<MetricsServer*>(cls);
    char line[512];
    std::vsnprintf(line, sizeof line, format, ap);
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    // Before the server runs: why it cannot start. After: one client's
    // failed handshake or connection, not worth more than a debug line.
    std::lock_guard lock(self->log_mutex_);
    if (!self->started_)
      self->start_log_ += (self->start_log_.empty() ? "" : "; ") + text;
    else
      log::debug("metrics: " + text);
  }
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const ServeOptions& options,
                                                            std::function<std::string()> body) {
  std::unique_ptr<MetricsServer> self(new MetricsServer());
  self->body_ = std::move(body);
  self->auth_ = options.auth;
  std::string cert, key, ca;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
  if (options.tls) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
      return Error{"metrics TLS: this system's libmicrohttpd was built without TLS", ENOTSUP};
    auto c = read_pem(options.tls->cert_file, false);
    if (!c) return c.error().wrap("metrics TLS certificate");
    auto k = read_pem(options.tls->key_file, true);
    if (!k) return k.error().wrap("metrics TLS key");
    if (!options.tls->client_ca_file.empty()) {
      auto a = read_pem(options.tls->client_ca_file, false);
      if (!a) return a.error().wrap("metrics TLS client CA");
      ca = std::move(*a);
      self->client_certs_ = true;
    }
    if (Status st = check_files(*options.tls, *c, *k, ca); !st) return st.error();
    cert = std::move(*c);
    key = std::move(*k);
    flags |= MHD_USE_TLS;
  }
  auto listener = bind_address(options.address);
  if (!listener) return listener.error();
  self->port_ = bound_port(listener->get());
  // libmicrohttpd closes the socket it is given when it stops.
  UniqueFd given(::fcntl(listener->get(), F_DUPFD_CLOEXEC, 0));
  if (!given) return Error::from_errno("metrics: dup");

  std::vector<MHD_OptionItem> opts = {
      {MHD_OPTION_LISTEN_SOCKET, given.get(), nullptr},
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&Callbacks::log), self.get()},
      {MHD_OPTION_THREAD_POOL_SIZE, kThreads, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxConnectionsPerAddress, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutSeconds, nullptr},
  };
  if (options.tls) {
    opts.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, cert.data()});
    opts.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, key.data()});
    opts.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(kTlsPriorities)});
    if (self->client_certs_) opts.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0, ca.data()});
  }
  opts.push_back({MHD_OPTION_END, 0, nullptr});
  self->daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &Callbacks::request, self.get(),
                                   MHD_OPTION_ARRAY, opts.data(), MHD_OPTION_END);
  explicit_bzero(key.data(), key.size());
  if (!self->daemon_) {
    std::lock_guard lock(self->log_mutex_);
    return Error{"metrics: cannot serve on " + options.address +
                     (self->start_log_.empty() ? std::string() : ": " + self->start_log_),
                 EIO};
  }
  (void)given.release();
  self->started_ = true;
  return self;
}

MetricsServer::~MetricsServer() {
  if (daemon_) MHD_stop_daemon(daemon_);
}

}  // namespace agentcage::telemetry
