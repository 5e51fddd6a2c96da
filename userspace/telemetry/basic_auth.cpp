// SPDX-License-Identifier: Apache-2.0
#include "telemetry/basic_auth.h"

#include <crypt.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "util/file.h"
#include "util/text.h"

namespace agentcage::telemetry {
namespace {

constexpr size_t kMaxFileBytes = 64 * 1024;
constexpr size_t kMaxNameBytes = 64;

// crypt_r(3) of PASSWORD with SETTING ("" when it failed). struct crypt_data
// is large (32 KiB), so it lives on the heap, one per call: thread-safe.
std::string crypt_string(std::string_view password, const std::string& setting) {
  auto data = std::make_unique<crypt_data>();
  const std::string phrase(password);
  const char* out = ::crypt_r(phrase.c_str(), setting.c_str(), data.get());
  // libxcrypt's failure token starts with '*', never a valid hash.
  return out && out[0] != '*' ? std::string(out) : std::string();
}

// Equal contents, in time that depends only on the lengths.
bool same_bytes(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (unsigned char c : name)
    if (c <= ' ' || c == 0x7f) return false;
  return true;
}

// Why HASH cannot be used, or "".
std::string hash_problem(const std::string& hash) {
  switch (::crypt_checksalt(hash.c_str())) {
    case CRYPT_SALT_OK:
      break;
    case CRYPT_SALT_METHOD_LEGACY:
    case CRYPT_SALT_TOO_CHEAP:
      // A password in clear often parses as a DES hash: say so too.
      return "a weak hash method or cost (DES, MD5, ...), or a password in clear; make a bcrypt or yescrypt "
             "hash (docs/daemon.md)";
    case CRYPT_SALT_METHOD_DISABLED:
      return "this system's libcrypt has the hash's method disabled; make a bcrypt or yescrypt hash";
    default:
      return "not a password hash crypt(3) knows (expected e.g. $2b$..., $y$... or $6$...)";
  }
  // A truncated or damaged hash still has a good prefix: hashing anything
  // with it must give a hash of the same shape and length.
  const std::string probe = crypt_string("", hash);
  if (probe.size() != hash.size()) return "the hash is damaged (wrong length for its method)";
  return "";
}

}  // namespace

Result<std::shared_ptr<const BasicAuth>> BasicAuth::parse(std::string_view text, const std::string& path) {
  std::shared_ptr<BasicAuth> auth(new BasicAuth());
  std::map<std::string, size_t, std::less<>> line_of;
  size_t lineno = 0;
  while (!text.empty()) {
    ++lineno;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      return Error{where + "expected NAME:HASH (e.g. the output of htpasswd -nBC 12 NAME)", EINVAL};
    const std::string_view name = line.substr(0, colon);
    const std::string hash(line.substr(colon + 1));
    if (!valid_name(name))
      return Error{where + "the user name must be 1 to " + std::to_string(kMaxNameBytes) +
                       " characters without spaces or control characters, got " + quote(name),
                   EINVAL};
    if (auto seen = line_of.find(name); seen != line_of.end())
      return Error{
          where + "user " + quote(name) + " is already defined on line " + std::to_string(seen->second),
          EINVAL};
    if (const std::string problem = hash_problem(hash); !problem.empty())
      return Error{where + "user " + quote(name) + ": " + problem, EINVAL};
    line_of.emplace(std::string(name), lineno);
    auth->hashes_.emplace(std::string(name), hash);
  }
  if (auth->hashes_.empty())
    return Error{path + ": no users (add NAME:HASH lines; nobody could scrape the metrics)", EINVAL};
  // The decoy: a hash of the first user's method and cost, for unknown users.
  auth->decoy_ = crypt_string("agentcage-decoy", auth->hashes_.begin()->second);
  if (gnutls_rnd(GNUTLS_RND_KEY, auth->key_.data(), auth->key_.size()) != 0)
    return Error{"metrics basic auth: no random bytes for the password cache's key", EIO};
  return std::shared_ptr<const BasicAuth>(std::move(auth));
}

Result<std::shared_ptr<const BasicAuth>> BasicAuth::load_file(const std::string& path) {
  // O_NOFOLLOW: the file itself, never where a link points (whoever may
  // replace the link would choose the users).
  auto text = read_regular_file(path, kMaxFileBytes, O_NOFOLLOW, [&](const struct stat& st) -> Status {
    if (st.st_uid != ::geteuid())
      return Error{path + ": owned by uid " + std::to_string(st.st_uid) + ", not by the daemon's user (uid " +
                       std::to_string(::geteuid()) + "); chown it",
                   EPERM};
    if (st.st_mode & 077) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return Error{path + ": readable or writable by group or others (mode " + mode + "); chmod 600 " + path,
                   EPERM};
    }
    return {};
  });
  if (!text && text.error().code == ELOOP)
    return Error{path + ": is a symbolic link; point users_file at the file itself", ELOOP};
  if (!text) return text.error();
  return parse(*text, path);
}

BasicAuth::Digest BasicAuth::digest(std::string_view user, std::string_view password) const {
  std::string message;
  message.reserve(user.size() + 1 + password.size());
  message.append(user).push_back('\0');
  message.append(password);
  Digest out{};
  (void)gnutls_hmac_fast(GNUTLS_MAC_SHA256, key_.data(), key_.size(), message.data(), message.size(),
                         out.data());
  return out;
}

bool BasicAuth::check(std::string_view user, std::string_view password) const {
  const Digest d = digest(user, password);
  const std::string_view dv(reinterpret_cast<const char*>(d.data()), d.size());
  {
    std::lock_guard lock(mutex_);
    if (auto it = passed_.find(user); it != passed_.end()) {
      const std::string_view seen(reinterpret_cast<const char*>(it->second.data()), it->second.size());
      if (same_bytes(dv, seen)) return true;
    }
  }
  const auto it = hashes_.find(user);
  const std::string& hash = it == hashes_.end() ? decoy_ : it->second;
  const bool ok = same_bytes(crypt_string(password, hash), hash) && it != hashes_.end();
  if (ok) {
    std::lock_guard lock(mutex_);
    passed_.insert_or_assign(std::string(user), d);
  }
  return ok;
}

}  // namespace agentcage::telemetry
