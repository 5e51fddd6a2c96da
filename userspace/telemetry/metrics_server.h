// SPDX-License-Identifier: Apache-2.0
// The /metrics endpoint: HTTP or HTTPS, with or without basic auth
// (libmicrohttpd; TLS through GnuTLS). One GET /metrics answers the
// registry's text exposition, asked for per request.
//
// Not prometheus-cpp's civetweb exposer: the civetweb Debian ships (1.15,
// 1.16) loads OpenSSL 3 by hand without SSL_get_peer_certificate (a macro
// there) and either crashes on the first TLS connection or refuses to start.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "telemetry/basic_auth.h"
#include "util/result.h"

struct MHD_Daemon;

namespace agentcage::telemetry {

// The server's certificate (PEM, the chain after the leaf if any) and its
// private key (PEM, unencrypted); with client_ca_file (PEM certificates),
// a client must also present a certificate one of them signed (mutual TLS).
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // "": no client certificate asked for
  bool operator==(const TlsFiles&) const = default;
};

struct ServeOptions {
  std::string address;                    // "127.0.0.1:9477", "[::1]:9477", ":9477"; port 0 picks one
  std::optional<TlsFiles> tls;            // unset: plain HTTP
  std::shared_ptr<const BasicAuth> auth;  // null: no authentication
};

class MetricsServer {
 public:
  // Binds ADDRESS and serves. Fails closed: a TLS setting that cannot be
  // used (missing or unreadable file, bad PEM, a key that is not the
  // certificate's) is an error, never a fallback to plain HTTP.
  static Result<std::unique_ptr<MetricsServer>> start(const ServeOptions& options,
                                                      std::function<std::string()> body);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsServer() = default;
  struct Callbacks;
  friend struct Callbacks;

  std::function<std::string()> body_;
  std::shared_ptr<const BasicAuth> auth_;
  bool client_certs_ = false;  // a client must present a certificate client_ca_file signed
  std::mutex log_mutex_;
  std::string start_log_;  // libmicrohttpd's messages while starting (why it failed)
  std::atomic<bool> started_ = false;
  int port_ = 0;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace agentcage::telemetry
