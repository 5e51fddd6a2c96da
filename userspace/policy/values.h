// SPDX-License-Identifier: Apache-2.0
// Parsers for the individual values of a policy, shared with the CLI's
// overrides (--memory, --timeout, --cpu, --pids). Each takes the text exactly
// as written (no surrounding whitespace is accepted) and fails with an
// Error whose message describes the problem without naming the option or
// key, so callers prefix their own context ("limits.pids: ...",
// "--pids: ...").
#pragma once

#include <agentcage/abi.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "policy/model.h"
#include "util/result.h"
#include "util/text.h"

namespace agentcage::policy {

// Longest normalised path a file rule may have: the kernel's LPM key holds
// AC_PATH_KEY_MAX bytes including the '/' the compiler appends; two bytes of
// headroom keep "/x" + '/' and the NUL-terminated event copy simple.
inline constexpr size_t kMaxRulePathBytes = AC_PATH_KEY_MAX - 2;
// sun_path is 108 bytes; a filesystem socket path needs its terminating NUL,
// an abstract name its leading NUL.
inline constexpr size_t kMaxUnixNameBytes = 107;
inline constexpr uint32_t kMaxPids = 4194304;  // PID_MAX_LIMIT on 64-bit Linux
inline constexpr double kMaxCpus = 1024;
inline constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24 * 7);

// "enforce" or "audit" (spec.mode, `run --mode`, `attach --mode`); another
// case or a typo gets a did-you-mean.
Result<Mode> parse_mode(std::string_view text);

// Bytes: "1073741824", "512Mi", "2G". Suffixes K/M/G/T are powers of 1000,
// Ki/Mi/Gi/Ti powers of 1024. Must be > 0 and fit 64 bits (< 16 EiB).
Result<uint64_t> parse_size(std::string_view text);

// "30s", "500ms", "5m", "1h", "1h30m": one or more <integer><unit>
// components, units h, m, s, ms from largest to smallest, each at most once.
// Must be > 0 and at most 7 days.
Result<std::chrono::milliseconds> parse_duration(std::string_view text);

// CPUs as a decimal number: "0.5", "2", "1.25". > 0 and <= 1024. No
// exponents, signs, "inf" or "nan".
Result<double> parse_cpus(std::string_view text);

// A limit (limits.* or its command-line option) stated as no limit at all.
inline constexpr std::string_view kUnlimited = "unlimited";

// Maximum number of tasks: a decimal integer, 1..4194304.
Result<uint32_t> parse_pids(std::string_view text);

// "443" or "8000-8100": ports 1..65535, first <= last.
Result<PortRange> parse_port_range(std::string_view text);

// A CIDR network.
struct Cidr {
  int family = 0;                  // AF_INET or AF_INET6
  std::array<uint8_t, 16> addr{};  // network byte order; IPv4 in bytes 0..3
  uint8_t prefix_len = 0;
};
// "10.20.0.0/16", "fd00::/8", "192.0.2.7" (= /32), "2001:db8::1" (= /128).
// Host bits must be zero; the error names the network address that was
// probably meant.
Result<Cidr> parse_cidr(std::string_view text);

// A domain name of a network.allow rule: "api.example.com" (that name) or
// "*.pkg.example.org" (every name strictly under pkg.example.org, not
// pkg.example.org itself).
struct Domain {
  std::string name;  // lower-case, without "*." and without a trailing dot
  bool wildcard = false;
};
// Letters, digits, '-' and '_' in dot-separated labels of 1..63 bytes, at
// most 253 bytes in all, at least two labels; one trailing dot is dropped
// and letters are lowered. Refused with a precise reason: a URL, an address
// (a cidr rule's job), a port, a '*' anywhere but a leading "*.", a
// wildcard over a top-level domain ("*.com") or over any other public
// suffix of either section of the Public Suffix List ("*.co.uk",
// "*.github.io"), an exact name that is a registry's (ICANN) public suffix
// ("co.uk"; an operator's, "s3.amazonaws.com", is a host and stays allowed),
// non-ASCII (write the punycode "xn--" form).
Result<Domain> parse_domain(std::string_view text);

// Lexical normalisation of an absolute path: collapses "//" and "." and
// strips a trailing '/' ("/" stays "/"). Rejects relative and empty paths,
// ".." components (the policy must say what it means; the kernel matches the
// real location, so ".." could only mislead), control characters (NUL and
// newline included), and results longer than max_bytes. Does not treat "${"
// specially: see parse_file_path.
Result<std::string> normalize_path(std::string_view path, size_t max_bytes);

// A files.* entry: an absolute path, or "${workspace}" optionally followed by
// "/sub/path". ${workspace} anywhere else and any other ${...} are errors.
struct FilePath {
  std::string path;  // normalised; for workspace paths "" or "/sub/path"
  bool in_workspace = false;
};
Result<FilePath> parse_file_path(std::string_view text);

// A files.deny name pattern: "**/NAME" (a path component named NAME, at any
// depth) or "**/*.EXT" (a component ending in ".EXT"; `text` is ".EXT").
// nullopt when `text` does not start with "**/" (a path, for
// parse_file_path); an error when it does but is not one of the two forms:
// another '*', '?' or '[', a '/' after "**/", ".", "..", control characters,
// or more than kMaxNamePatternBytes bytes of NAME or ".EXT".
inline constexpr size_t kMaxNamePatternBytes = AC_NAME_RULE_MAX;
struct NameValue {
  bool suffix = false;
  std::string text;
};
Result<std::optional<NameValue>> parse_name_pattern(std::string_view text);

// An exec.allow entry: an absolute host path (no variables), normalised.
Result<std::string> parse_exec_path(std::string_view text);

// Whether `path` (or a bare file name) names a dynamic loader by its name:
// ld.so, ld-2.36.so, ld-linux-x86-64.so.2, ld64.so.2, ld-musl-*.so.1. The ELF
// interpreter runs any file given to it (`ld.so /path/to/program`), so it is
// never an exec.allow program.
bool is_dynamic_loader(std::string_view path);

// A network rule's unix socket: "/run/x.sock" (filesystem socket, normalised)
// or "@name" (abstract socket; `name` is returned without the '@').
struct UnixTarget {
  bool abstract = false;
  std::string name;
};
Result<UnixTarget> parse_unix_target(std::string_view text);

// Message quoting lives in util/text.h; run/ and daemon/ call it
// policy::quote, as it was declared here before it moved down.
using ::agentcage::quote;

}  // namespace agentcage::policy
