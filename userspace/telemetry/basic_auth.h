// SPDX-License-Identifier: Apache-2.0
// Who may scrape /metrics: HTTP basic authentication against a users file.
//
// The file has one "NAME:HASH" line per user (htpasswd's form; blank lines
// and "#" comments allowed). HASH is a crypt(3) hash that libxcrypt rates
// as current (bcrypt "$2b$"/"$2y$", yescrypt "$y$", sha512crypt "$6$"):
// no password is ever stored in the clear. The file must be a regular file
// (not a symbolic link) owned by the daemon's user and readable by nobody
// else, since a hash still lets its reader guess passwords offline.
//
// A hash check is deliberately slow (bcrypt: tens of milliseconds), and a
// scraper sends its password with every scrape. So a password that passed
// is remembered as a keyed digest (HMAC-SHA-256 under a random key made at
// load time), and its next scrape costs one digest. A wrong password always
// costs the full check; an unknown user costs a check against a hash of the
// same kind, so the time does not tell which users exist.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "util/result.h"

namespace agentcage::telemetry {

class BasicAuth {
 public:
  // Reads and checks PATH. Errors name the file, and "PATH:LINE: ..." for
  // a bad line.
  static Result<std::shared_ptr<const BasicAuth>> load_file(const std::string& path);
  // The users of TEXT (the file's content; `path` names it in errors).
  static Result<std::shared_ptr<const BasicAuth>> parse(std::string_view text, const std::string& path);

  // Whether USER's password is PASSWORD. Thread-safe.
  bool check(std::string_view user, std::string_view password) const;
  size_t users() const { return hashes_.size(); }

 private:
  BasicAuth() = default;
  using Digest = std::array<uint8_t, 32>;
  Digest digest(std::string_view user, std::string_view password) const;

  std::map<std::string, std::string, std::less<>> hashes_;
  std::string decoy_;  // a hash like the users' own, checked for unknown users
  std::array<uint8_t, 32> key_{};
  mutable std::mutex mutex_;
  mutable std::map<std::string, Digest, std::less<>> passed_;
};

}  // namespace agentcage::telemetry
