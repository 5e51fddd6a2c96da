// SPDX-License-Identifier: Apache-2.0
#include "policy/values.h"

#include <arpa/inet.h>
#include <limits.h>
#include <sys/socket.h>

#include <charconv>
#include <utility>

#include "policy/public_suffix.h"
#include "util/suggest.h"
#include "util/text.h"

namespace agentcage::policy {
namespace {

Error fail(std::string message) { return Error{std::move(message), 0}; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_control(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b < 0x20 || b == 0x7f;
}

enum class Num { ok, none, overflow };

// Consumes the decimal digits at the front of `text` into `value` (all of
// them, also on overflow, so the caller can tell "too large" from "not a
// number"). No sign, no whitespace: policy values are exact.
Num take_uint(std::string_view& text, uint64_t& value) {
  value = 0;
  bool overflow = false;
  size_t i = 0;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    const auto digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) overflow = true;
    if (!overflow) value = value * 10 + digit;
  }
  if (i == 0) return Num::none;
  text.remove_prefix(i);
  return overflow ? Num::overflow : Num::ok;
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!is_digit(c)) return false;
  }
  return true;
}

// Shared by every path flavour. `shown` is the text as the user wrote it
// (for ${workspace} paths `path` is only the part after the variable).
Result<std::string> normalize(std::string_view path, size_t max_bytes, std::string_view shown) {
  if (path.empty()) return fail("empty path");
  for (char c : path) {
    if (is_control(c)) return fail("control character in path " + quote(shown));
  }
  if (path.front() != '/') return fail("relative path " + quote(shown) + " (paths must be absolute)");
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view component = path.substr(i, end - i);
    i = end;
    if (component.empty() || component == ".") continue;
    // The kernel matches where a file really is, so "/a/b/.." would only
    // look like it means "/a"; if "b" is a symlink it does not. Make the
    // policy say the real path instead of guessing.
    if (component == "..") {
      return fail("'..' is not allowed in paths, got " + quote(shown) + " (write the path it leads to)");
    }
    out += '/';
    out += component;
    // Stop early on absurd inputs; the exact length is reported below.
    if (out.size() > max_bytes) break;
  }
  if (out.empty()) out = "/";
  if (out.size() > max_bytes) {
    return fail("path " + quote(shown) + " is too long: at most " + std::to_string(max_bytes) +
                " bytes after normalisation");
  }
  return out;
}

// The "${...}" starting at `at`, quoted for a message.
std::string variable_at(std::string_view text, size_t at) {
  const size_t close = text.find('}', at);
  return quote(text.substr(at, close == std::string_view::npos ? std::string_view::npos : close - at + 1),
               32);
}

constexpr std::string_view kWorkspace = "${workspace}";

Error variable_error(std::string_view text, size_t at) {
  if (text.substr(at).starts_with(kWorkspace)) {
    return fail("${workspace} may only appear at the start of a path, got " + quote(text));
  }
  return fail("unknown variable " + variable_at(text, at) + " in " + quote(text) +
              " (only ${workspace} is supported)");
}

std::string format_address(int family, const std::array<uint8_t, 16>& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!inet_ntop(family, addr.data(), buf, sizeof buf)) return "?";
  return buf;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  static constexpr const char* kForm =
      " (expected bytes, or a number with a unit K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti "
      "(powers of 1024), e.g. 512Mi)";
  if (text.empty()) return fail(std::string("empty size") + kForm);
  std::string_view rest = text;
  uint64_t number = 0;
  switch (take_uint(rest, number)) {
    case Num::none:
      return fail(quote(text) + " is not a size" + kForm);
    case Num::overflow:
      return fail("size " + quote(text) + " is too large (at most 16 EiB)");
    case Num::ok:
      break;
  }
  struct Unit {
    std::string_view name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"K", 1000},
      {"M", 1000ull * 1000},
      {"G", 1000ull * 1000 * 1000},
      {"T", 1000ull * 1000 * 1000 * 1000},
      {"Ki", 1ull << 10},
      {"Mi", 1ull << 20},
      {"Gi", 1ull << 30},
      {"Ti", 1ull << 40},
  };
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == rest) unit = &u;
  }
  if (!unit) {
    return fail("unknown unit " + quote(rest, 16) + " in size " + quote(text) +
                " (use K, M, G, T, Ki, Mi, Gi or Ti)");
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(number, unit->factor, &bytes)) {
    return fail("size " + quote(text) + " is too large (at most 16 EiB)");
  }
  if (bytes == 0) return fail("size must be greater than 0, got " + quote(text));
  return bytes;
}

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  static constexpr const char* kForm = " (expected e.g. 30s, 500ms, 5m, 1h or 1h30m)";
  struct Unit {
    std::string_view name;
    uint64_t ms;
  };
  // Largest first: components must follow this order.
  static constexpr Unit kUnits[] = {{"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}, {"ms", 1}};
  const auto max_ms = static_cast<uint64_t>(kMaxTimeout.count());
  const std::string too_long = "duration " + quote(text) + " is too long (at most 7 days)";

  if (text.empty()) return fail(std::string("empty duration") + kForm);
  std::string_view rest = text;
  uint64_t total = 0;
  int previous = -1;  // index into kUnits of the previous component
  while (!rest.empty()) {
    uint64_t number = 0;
    switch (take_uint(rest, number)) {
      case Num::none:
        return fail(quote(text) + " is not a duration" + kForm);
      case Num::overflow:
        return fail(too_long);
      case Num::ok:
        break;
    }
    size_t letters = 0;
    while (letters < rest.size() && !is_digit(rest[letters])) ++letters;
    const std::string_view name = rest.substr(0, letters);
    rest.remove_prefix(letters);
    if (name.empty()) return fail("duration " + quote(text) + " has no unit (use ms, s, m or h, e.g. 30s)");
    int index = -1;
    for (int k = 0; k < 4; ++k) {
      if (kUnits[k].name == name) index = k;
    }
    if (index < 0) {
      return fail("unknown unit " + quote(name, 16) + " in duration " + quote(text) + " (use ms, s, m or h)");
    }
    if (index <= previous) {
      return fail("duration " + quote(text) +
                  ": units must go from largest to smallest, each at most once (e.g. 1h30m)");
    }
    previous = index;
    const uint64_t unit_ms = kUnits[index].ms;
    // Both checks keep the arithmetic below far from overflow.
    if (number > max_ms / unit_ms) return fail(too_long);
    total += number * unit_ms;
    if (total > max_ms) return fail(too_long);
  }
  if (total == 0) return fail("duration must be greater than 0, got " + quote(text));
  return std::chrono::milliseconds(static_cast<int64_t>(total));
}

Result<double> parse_cpus(std::string_view text) {
  // Only plain decimals: from_chars alone would accept "1e3", "inf", "nan".
  const std::string form = quote(text) + " is not a number of CPUs (expected e.g. 0.5, 1 or 2)";
  const size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view fraction = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  const bool ok_whole = whole.empty() || all_digits(whole);
  const bool ok_fraction = dot == std::string_view::npos || all_digits(fraction);
  if (text.empty() || text.size() > 32 || !ok_whole || !ok_fraction || (whole.empty() && fraction.empty())) {
    return fail(form);
  }
  double cpus = 0;
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), cpus, std::chars_format::fixed);
  if (ec != std::errc{} || end != text.data() + text.size()) return fail(form);
  if (!(cpus > 0)) return fail("number of CPUs must be greater than 0, got " + quote(text));
  if (cpus > kMaxCpus) return fail("number of CPUs must be at most 1024, got " + quote(text));
  return cpus;
}

Result<uint32_t> parse_pids(std::string_view text) {
  std::string_view rest = text;
  uint64_t pids = 0;
  const Num n = take_uint(rest, pids);
  if (n == Num::none || !rest.empty()) return fail(quote(text) + " is not a positive integer");
  // (overflow is "too large", handled with the range check)
  if (n == Num::overflow || pids > kMaxPids) {
    return fail("pids must be at most " + std::to_string(kMaxPids) + ", got " + quote(text));
  }
  if (pids == 0) return fail("pids must be at least 1, got " + quote(text));
  return static_cast<uint32_t>(pids);
}

Result<PortRange> parse_port_range(std::string_view text) {
  auto port = [&](std::string_view part) -> Result<uint16_t> {
    std::string_view rest = part;
    uint64_t value = 0;
    const Num n = take_uint(rest, value);
    if (n == Num::none || !rest.empty()) {
      return fail(quote(text) + " is not a port or port range (expected e.g. 443 or 8000-8100)");
    }
    if (n == Num::overflow || value < 1 || value > 65535) {
      return fail("port " + quote(part, 16) + " is out of range 1..65535");
    }
    return static_cast<uint16_t>(value);
  };
  const size_t dash = text.find('-');
  auto first = port(text.substr(0, dash));
  if (!first) return first.error();
  if (dash == std::string_view::npos) return PortRange{*first, *first};
  auto last = port(text.substr(dash + 1));
  if (!last) return last.error();
  if (*first > *last)
    return fail("port range " + quote(text) + " is empty: the first port is above the last");
  return PortRange{*first, *last};
}

Result<Domain> parse_domain(std::string_view text) {
  const std::string shown = quote(text, 80);
  if (text.empty()) return fail("a domain name is empty");
  if (text.find("://") != std::string_view::npos || text.find('/') != std::string_view::npos)
    return fail(shown + " is a URL or a path; a domain rule names a host, e.g. api.example.com");
  if (text.find(':') != std::string_view::npos)
    return fail(shown +
                " has a ':'; a domain rule names a host without a port (use 'ports') and an "
                "address is a cidr rule's");
  for (unsigned char c : text)
    if (c >= 0x80)
      return fail(shown + " is not ASCII; write an international name in its xn-- (punycode) form");
  Domain d;
  std::string_view rest = text;
  if (rest.starts_with("*.")) {
    d.wildcard = true;
    rest.remove_prefix(2);
  }
  if (rest.ends_with('.')) rest.remove_suffix(1);
  if (rest.find('*') != std::string_view::npos)
    return fail(shown + ": '*' is allowed only as a whole first label (\"*.example.org\")");
  if (rest.empty()) return fail(shown + " names no domain");
  if (rest.size() > 253) return fail(shown + " is longer than 253 bytes (the DNS limit)");
  size_t labels = 0;
  bool all_numeric = true;
  for (size_t start = 0; start <= rest.size();) {
    size_t dot = rest.find('.', start);
    if (dot == std::string_view::npos) dot = rest.size();
    const std::string_view label = rest.substr(start, dot - start);
    if (label.empty()) return fail(shown + " has an empty label (\"..\", or a leading dot)");
    if (label.size() > 63) return fail(shown + " has a label longer than 63 bytes");
    if (label.front() == '-' || label.back() == '-')
      return fail(shown + ": a label cannot begin or end with '-'");
    for (char c : label) {
      const bool ok = is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
      if (!ok) return fail(shown + ": " + quote(std::string(1, c)) + " cannot appear in a domain name");
      if (!is_digit(c)) all_numeric = false;
    }
    ++labels;
    start = dot + 1;
  }
  if (all_numeric) return fail(shown + " is an address, not a name; use {cidr: ...} for addresses");
  if (labels < 2)
    return fail(shown + (d.wildcard ? " is every name in a top-level domain; name the domain under it"
                                    : " is a single label; a domain rule names a fully qualified host"));
  d.name.reserve(rest.size());
  for (char c : rest) d.name.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  auto section = public_suffix_section(d.name);
  if (!section) return section.error();
  if (*section == SuffixSection::none) return d;
  const std::string suffix = quote(d.name, 80);
  const std::string under = "\"*.example." + d.name + "\"";
  if (d.wildcard) {
    const char* who =
        *section == SuffixSection::icann
            ? " (Public Suffix List, ICANN section: anyone can register a domain under it)"
            : " (Public Suffix List, private section: its operator gives names under it to anyone)";
    return fail(shown + " is every name under " + suffix + ", a public suffix" + who +
                "; name the domain you mean under it, e.g. " + under + ", or the exact host");
  }
  // An exact rule matches that one name, which the suffix's operator holds:
  // no registrant gains from it. An operator's suffix can be a real host
  // ("s3.amazonaws.com", path-style S3); a registry's is not one a run needs,
  // and the rule does not match the names under it.
  if (*section == SuffixSection::icann)
    return fail(shown +
                " is a public suffix (Public Suffix List, ICANN section), a registry's name: the rule " +
                "would match that one name, not the names under it; name the host you mean, e.g. " +
                "\"api.example." + d.name + "\"" + ", or a domain's names, e.g. " + under);
  return d;
}

Result<Cidr> parse_cidr(std::string_view text) {
  const std::string form = quote(text) + " is not an IPv4 or IPv6 address with an optional /length";
  const size_t slash = text.find('/');
  const std::string_view address = text.substr(0, slash);
  // inet_pton reads a C string: only let through characters an address can
  // have, so an embedded NUL cannot cut the text short.
  if (address.empty() || address.size() >= INET6_ADDRSTRLEN) return fail(form);
  for (char c : address) {
    const bool hex = is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex && c != '.' && c != ':') return fail(form);
  }
  Cidr cidr;
  const std::string copy(address);
  cidr.family = copy.find(':') == std::string::npos ? AF_INET : AF_INET6;
  if (inet_pton(cidr.family, copy.c_str(), cidr.addr.data()) != 1) return fail(form);
  const unsigned bits = cidr.family == AF_INET ? 32 : 128;

  unsigned prefix = bits;
  if (slash != std::string_view::npos) {
    const std::string_view length = text.substr(slash + 1);
    std::string_view rest = length;
    uint64_t value = 0;
    const Num n = take_uint(rest, value);
    if (n == Num::none || !rest.empty()) {
      return fail("prefix length " + quote(length, 16) + " in " + quote(text) + " is not a number");
    }
    if (n == Num::overflow || value > bits) {
      return fail("prefix length " + quote(length, 16) + " in " + quote(text) + " is larger than " +
                  std::to_string(bits) + (bits == 32 ? " (IPv4)" : " (IPv6)"));
    }
    prefix = static_cast<unsigned>(value);
  }
  cidr.prefix_len = static_cast<uint8_t>(prefix);

  // A rule like 10.20.1.0/16 almost always means "I got the mask wrong": say
  // what it would match instead of silently widening or narrowing it.
  std::array<uint8_t, 16> network = cidr.addr;
  for (unsigned bit = prefix; bit < bits; ++bit) {
    network[bit / 8] = static_cast<uint8_t>(network[bit / 8] & ~(0x80u >> (bit % 8)));
  }
  if (network != cidr.addr) {
    return fail("host bits are set in " + quote(text) + "; the network address is " +
                format_address(cidr.family, network) + "/" + std::to_string(prefix));
  }
  return cidr;
}

Result<std::string> normalize_path(std::string_view path, size_t max_bytes) {
  return normalize(path, max_bytes, path);
}

Result<Mode> parse_mode(std::string_view text) {
  if (text == "enforce") return Mode::enforce;
  if (text == "audit") return Mode::audit;
  static constexpr std::string_view kModes[] = {"enforce", "audit"};
  return fail("invalid mode " + quote(text) + " (expected 'enforce' or 'audit')" +
              did_you_mean(text, kModes));
}

// A files rule that looks like a pattern would be taken as a literal name
// and never match what its author meant: refuse it. (Programs and sockets
// are named exactly and checked to exist: /usr/bin/[ is a program.)
Error pattern_error(std::string_view text, size_t at) {
  return fail(quote(std::string(1, text[at])) + " in " + quote(text) +
              ": files rules are literal paths, not patterns (a directory covers everything under "
              "it); name the file or directory itself, or deny by name anywhere with files.deny "
              "'**/NAME' or '**/*.EXT'");
}

Result<std::optional<NameValue>> parse_name_pattern(std::string_view text) {
  constexpr std::string_view kAnywhere = "**/";
  if (!text.starts_with(kAnywhere)) return std::optional<NameValue>();
  const std::string_view rest = text.substr(kAnywhere.size());
  const std::string forms = " (name patterns are '**/NAME' and '**/*.EXT')";
  if (rest.empty()) return fail(quote(text) + ": nothing after '**/'" + forms);
  if (rest.find('/') != std::string_view::npos)
    return fail(quote(text) + ": a name pattern names one path component, with no '/' after '**/'" + forms +
                "; '**/DIR' already covers everything under every DIR");
  for (char c : rest)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return fail(quote(text) + ": control characters in a name pattern");
  NameValue v;
  std::string_view name = rest;
  if (rest.starts_with("*.")) {
    v.suffix = true;
    name = rest.substr(1);  // ".EXT"
    if (name.size() == 1) return fail(quote(text) + ": no extension after '*.'" + forms);
  }
  if (const size_t at = name.find_first_of("*?["); at != std::string_view::npos)
    return fail(quote(std::string(1, name[at])) + " in " + quote(text) + ": only '**/NAME' and '**/*.EXT' " +
                "are supported (NAME and EXT are literal)");
  if (name.find("${") != std::string_view::npos)
    return fail(quote(text) +
                ": a name pattern holds no variables (it applies everywhere, the workspace included)");
  if (name == "." || name == "..") return fail(quote(text) + ": '" + std::string(name) + "' is not a name");
  if (name.size() > kMaxNamePatternBytes)
    return fail(quote(text) + ": " + (v.suffix ? "the extension" : "the name") + " is longer than " +
                std::to_string(kMaxNamePatternBytes) + " bytes");
  v.text = std::string(name);
  return std::optional<NameValue>(std::move(v));
}

Result<FilePath> parse_file_path(std::string_view text) {
  if (const size_t at = text.find_first_of("*?["); at != std::string_view::npos)
    return pattern_error(text, at);
  if (text.starts_with(kWorkspace)) {
    const std::string_view rest = text.substr(kWorkspace.size());
    if (!rest.empty() && rest.front() != '/') {
      return fail("${workspace} must be followed by '/' or end the path, got " + quote(text));
    }
    if (const size_t at = rest.find("${"); at != std::string_view::npos) {
      return variable_error(text, kWorkspace.size() + at);
    }
    if (rest.empty()) return FilePath{"", true};
    // Only the part below the workspace is known here; the compiler checks
    // the full length once the run's workspace is.
    auto norm = normalize(rest, kMaxRulePathBytes, text);
    if (!norm) return norm.error();
    return FilePath{*norm == "/" ? std::string() : std::move(*norm), true};
  }
  if (const size_t at = text.find("${"); at != std::string_view::npos) return variable_error(text, at);
  if (!text.empty() && text.front() != '/') {
    return fail("relative path " + quote(text) + " (paths must be absolute or start with ${workspace})");
  }
  auto norm = normalize(text, kMaxRulePathBytes, text);
  if (!norm) return norm.error();
  return FilePath{std::move(*norm), false};
}

Result<std::string> parse_exec_path(std::string_view text) {
  if (const size_t at = text.find("${"); at != std::string_view::npos) {
    if (text.substr(at).starts_with(kWorkspace)) {
      return fail("programs must be host paths; ${workspace} is not allowed in exec.allow, got " +
                  quote(text));
    }
    return variable_error(text, at);
  }
  if (!text.empty() && text.front() != '/') {
    return fail("relative path " + quote(text) + " (programs must be absolute paths, e.g. /usr/bin/python3)");
  }
  return normalize(text, PATH_MAX - 1, text);
}

bool is_dynamic_loader(std::string_view path) {
  const std::string_view base = path.substr(path.rfind('/') + 1);
  return base == "ld.so" || base.starts_with("ld-linux") || base.starts_with("ld64.so") ||
         base.starts_with("ld-musl-") ||
         (base.starts_with("ld-") && base.find(".so") != std::string_view::npos);
}

Result<UnixTarget> parse_unix_target(std::string_view text) {
  if (!text.empty() && text.front() == '@') {
    const std::string_view name = text.substr(1);
    if (name.empty()) return fail("abstract socket name after '@' is empty");
    for (char c : name) {
      if (is_control(c)) return fail("control character in abstract socket name " + quote(text));
    }
    if (name.size() > kMaxUnixNameBytes) {
      return fail("abstract socket name " + quote(text) + " is too long: at most " +
                  std::to_string(kMaxUnixNameBytes) + " bytes after '@'");
    }
    return UnixTarget{true, std::string(name)};
  }
  if (const size_t at = text.find("${"); at != std::string_view::npos) {
    return fail("variables are not allowed in unix socket paths, got " + quote(text));
  }
  if (text.empty() || text.front() != '/') {
    return fail("unix socket " + quote(text) + " must be an absolute path or @name for an abstract socket");
  }
  auto norm = normalize(text, kMaxUnixNameBytes, text);
  if (!norm) return norm.error();
  return UnixTarget{false, std::move(*norm)};
}

}  // namespace agentcage::policy
