// SPDX-License-Identifier: Apache-2.0
// Policy front end: malformed inputs (each with the exact position and the
// gist of the message), valid policies field by field, and inputs built to
// make a naive parser slow or deep.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "policy/policy.h"

namespace agentcage::policy {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

// Lines 1-4 of most test policies; "spec:" is then line 5 and its first
// entry line 6.
const std::string kHead = "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: t\n";
const std::string kSpec = kHead + "spec:\n";

ParseOptions no_fs() {
  ParseOptions o;
  o.check_exec_exists = false;
  return o;
}

std::string dump(const std::vector<yaml::Diagnostic>& errors) {
  std::string out;
  for (const auto& d : errors) out += "  " + d.format() + "\n";
  return out;
}

// ---------------------------------------------------------------------------
// Malformed inputs: the first diagnostic (in position order) must be at
// line:column and contain `message`.
// ---------------------------------------------------------------------------

struct BadCase {
  const char* name;
  std::string yaml;
  int line;
  int column;
  const char* message;
  bool check_exec = false;
};

std::string deep_brackets(int depth) { return "a: " + std::string(static_cast<size_t>(depth), '['); }

std::string alias_bomb() {
  // The classic "billion laughs": 9 levels of 9 aliases each.
  std::string y = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    y += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) y += std::string(i ? "," : "") + "*" + static_cast<char>(c - 1);
    y += "]\n";
  }
  return y;
}

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // --- whole-file and encoding problems -------------------------------
      {"Empty", "", 1, 1, "empty policy"},
      {"WhitespaceOnly", "  \n\n\t\n", 1, 1, "empty policy"},
      {"CommentsOnly", "# just a comment\n   # another\n", 1, 1, "empty policy"},
      {"NulByte", "apiVersion: agentcage/v1\nkind: Po\0licy\n"s, 2, 9, "NUL byte"},
      {"InvalidUtf8", "apiVersion: agentcage/v1\nkind: \xff\n", 2, 7, "invalid UTF-8 (byte 0xff)"},
      {"OverlongUtf8", "a: \xc0\xaf\n", 1, 4, "invalid UTF-8"},
      {"Utf16Surrogate", "a: \xed\xa0\x80\n", 1, 4, "invalid UTF-8"},
      {"ControlCharacter", "a: b\x07\n", 1, 5, "control character 0x07"},
      {"Oversized", "a: " + std::string(300 * 1024, 'x') + "\n", 0, 0, "the limit is 262144 bytes"},
      // --- YAML structure --------------------------------------------------
      {"SecondDocument", kHead + "---\nkind: Policy\n", 5, 1, "second YAML document"},
      {"EmptySecondDocument", kHead + "---\n", 5, 1, "second YAML document"},
      {"Anchor", kHead + "spec: &s {mode: audit}\n", 5, 7,
       "anchor '&s': anchors and aliases are not allowed"},
      {"AliasToUndefinedAnchor", kHead + "spec: *s\n", 5, 7, "anchor is not defined"},
      {"AliasBomb", alias_bomb(), 1, 4, "anchors and aliases are not allowed"},
      {"CoreTag", kHead + "spec: {mode: !!str audit}\n", 5, 14, "YAML tag '!!str' is not allowed"},
      {"CustomTag", kHead + "spec: !custom {}\n", 5, 7, "YAML tag '!custom' is not allowed"},
      {"UnclosedFlowList", kSpec + "  exec: {allow: [/bin/true}\n", 6, 27, "YAML syntax error"},
      {"TabIndentation", kSpec + "  files:\n\t read: []\n", 7, 7, "YAML syntax error"},
      {"UnquotedWorkspaceInFlowList", kSpec + "  files: {write: [${workspace}]}\n", 6, 20,
       "quote values that contain ${...}"},
      {"DeepFlowNesting", deep_brackets(10000), 1, 36, "nested deeper than 32 levels"},
      {"DeepFlowMapNesting", "a: " + std::string(100, '{'), 1, 36, "nested deeper than 32 levels"},
      // A stray quote in a block scalar hides the brackets from the byte
      // scan; the event pass still stops at 32 levels. (yaml-cpp reads each
      // unclosed "[[" as a list holding an implicit mapping: two levels.)
      {"DeepNestingAfterStrayQuote", kHead + "x: |\n  say \"hi\ny: " + std::string(10000, '['), 7, 20,
       "collections nested deeper than 32 levels"},
      {"DeepBlockNesting",
       [] {
         std::string y;
         for (int i = 0; i < 10000; ++i) y += "- ";
         return y + "x\n";
       }(),
       1, 65, "collections nested deeper than 32 levels"},
      // --- document shape and required keys --------------------------------
      {"RootIsList", "- apiVersion: agentcage/v1\n", 1, 1, "a policy must be a mapping"},
      {"RootIsScalar", "hello\n", 1, 1, "got a scalar ('hello')"},
      {"RootIsNull", "---\n", 1, 1, "got null"},
      {"MissingApiVersion", "kind: Policy\nmetadata: {name: t}\n", 1, 1, "missing required key 'apiVersion'"},
      {"WrongApiVersion", "apiVersion: agentcage/v2\nkind: Policy\nmetadata: {name: t}\n", 1, 13,
       "unsupported apiVersion 'agentcage/v2'"},
      {"MissingKind", "apiVersion: agentcage/v1\nmetadata: {name: t}\n", 1, 1, "missing required key 'kind'"},
      {"WrongKind", "apiVersion: agentcage/v1\nkind: Pod\nmetadata: {name: t}\n", 2, 7,
       "kind must be 'Policy', got 'Pod'"},
      {"MissingMetadata", "apiVersion: agentcage/v1\nkind: Policy\n", 1, 1,
       "missing required key 'metadata'"},
      {"MissingName", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {}\n", 3, 1,
       "missing required key 'name' in metadata"},
      {"NullName", "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name:\n", 4, 3,
       "metadata.name has no value"},
      {"NameNotDnsLabel", "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: Python_Sandbox\n", 4, 9,
       "invalid metadata.name 'Python_Sandbox'"},
      {"NameTooLong",
       "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: " + std::string(64, 'a') + "\n", 4, 9,
       "1 to 63 lowercase letters"},
      {"NameEndsWithDash", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: abc-}\n", 3, 18,
       "invalid metadata.name 'abc-'"},
      {"MetadataNull", "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\nspec: {}\n", 3, 1,
       "metadata has no value"},
      {"MetadataIsScalar", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: t\n", 3, 11,
       "metadata must be a mapping, got a scalar ('t')"},
      // --- keys ---------------------------------------------------------------
      {"UnknownTopLevelKeyTypo", kHead + "sepc: {}\n", 5, 1,
       "unknown key 'sepc' at top level (did you mean 'spec'?)"},
      {"UnknownExecKeyTypo", kSpec + "  exec:\n    alow: [/bin/true]\n", 7, 5,
       "unknown key 'alow' in exec (did you mean 'allow'?)"},
      {"UnknownFilesKeyTransposition", kSpec + "  files: {raed: []}\n", 6, 11,
       "unknown key 'raed' in files (did you mean 'read'?)"},
      {"UnknownKeyNoSuggestion", kSpec + "  limits: {bandwidth: 1}\n", 6, 12,
       "unknown key 'bandwidth' in limits"},
      {"UnknownMetadataKey", "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: t\n  labels: {}\n",
       5, 3, "unknown key 'labels' in metadata"},
      {"DuplicateTopLevelKey", kHead + "kind: Policy\n", 5, 1,
       "duplicate key 'kind' at top level (first at 2:1)"},
      {"DuplicateNestedKey", kSpec + "  files:\n    read: [/usr]\n    read: [/etc]\n", 8, 5,
       "duplicate key 'read' in files (first at 7:5)"},
      {"DuplicateKeyInFlowMap", kSpec + "  limits: {pids: 1, pids: 2}\n", 6, 21,
       "duplicate key 'pids' in limits (first at 6:12)"},
      {"ListAsKey", kSpec + "  [mode]: audit\n", 6, 3, "keys must be strings, got a list in spec"},
      {"NullKey", kSpec + "  ~: audit\n", 6, 3, "keys must be strings, got null in spec"},
      // --- spec types ---------------------------------------------------------
      {"SpecNull", kHead + "spec:\n", 5, 1, "spec has no value"},
      {"SpecIsList", kHead + "spec: [a]\n", 5, 7, "spec must be a mapping, got a list"},
      {"InvalidMode", kSpec + "  mode: enforcing\n", 6, 9,
       "invalid mode 'enforcing' (expected 'enforce' or 'audit')"},
      {"ModeInOtherCase", kSpec + "  mode: Audit\n", 6, 9,
       "invalid mode 'Audit' (expected 'enforce' or 'audit') (did you mean 'audit'?)"},
      {"ProtocolInOtherCase", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, protocol: TCP}\n",
       8, 38, "invalid protocol 'TCP' (expected 'tcp', 'udp' or 'any') (did you mean 'tcp'?)"},
      {"PermitInOtherCase", kSpec + "  exec: {debugging: Allow}\n", 6, 21,
       "exec.debugging: invalid value 'Allow' (expected 'deny' or 'allow') (did you mean 'allow'?)"},
      {"ExecIsList", kSpec + "  exec: [a]\n", 6, 9, "exec must be a mapping, got a list"},
      {"ExecAllowNull", kSpec + "  exec:\n    allow:\n", 7, 5, "exec.allow has no value"},
      {"FilesReadScalar", kSpec + "  files:\n    read: /usr/lib\n", 7, 11,
       "files.read must be a list, got a scalar ('/usr/lib')"},
      {"FilesReadEntryMapping", kSpec + "  files:\n    read: [{a: b}]\n", 7, 12,
       "files.read[0] must be a string, got a mapping"},
      {"FilesReadExplicitNullEntry", kSpec + "  files:\n    read: [/usr, ~]\n", 7, 18,
       "files.read[1] is empty (null)"},
      {"FilesReadEmptyBlockEntry", kSpec + "  files:\n    read:\n      -\n      - /usr\n", 8, 7,
       "files.read[0] is empty (null)"},
      // --- paths ----------------------------------------------------------------
      {"RelativePath", kSpec + "  files: {read: [usr/lib]}\n", 6, 18,
       "files.read[0]: relative path 'usr/lib' (paths must be absolute or start with ${workspace})"},
      {"DotDotPath", kSpec + "  files: {read: [/usr/lib/../../etc]}\n", 6, 18,
       "'..' is not allowed in paths"},
      {"PathTooLong", kSpec + "  files: {read: [/" + std::string(246, 'a') + "]}\n", 6, 18,
       "is too long: at most 246 bytes"},
      {"PathWithNewline", kSpec + "  files: {read: [\"/usr\\nlib\"]}\n", 6, 18, "control character in path"},
      {"UnknownVariable", kSpec + "  files: {read: [\"${home}/.ssh\"]}\n", 6, 18,
       "unknown variable '${home}' in '${home}/.ssh' (only ${workspace} is supported)"},
      {"WorkspaceNotAtStart", kSpec + "  files: {read: [\"/tmp/${workspace}\"]}\n", 6, 18,
       "${workspace} may only appear at the start of a path"},
      {"WorkspaceGluedToName", kSpec + "  files:\n    write:\n      - ${workspace}foo\n", 8, 9,
       "${workspace} must be followed by '/' or end the path"},
      {"WorkspaceWithDotDot", kSpec + "  files:\n    write:\n      - ${workspace}/../x\n", 8, 9,
       "'..' is not allowed in paths, got '${workspace}/../x'"},
      // Pattern-looking rules are refused, never taken as literal names.
      {"GlobInWorkspaceDeny", kSpec + "  files:\n    deny:\n      - \"${workspace}/*.key\"\n", 8, 9,
       "files.deny[0]: '*' in '${workspace}/*.key': files rules are literal paths, not patterns"},
      // files.deny's name patterns: exactly '**/NAME' and '**/*.EXT'.
      {"NamePatternWithSlash", kSpec + "  files:\n    deny:\n      - \"**/.ssh/id_rsa\"\n", 8, 9,
       "files.deny[0]: '**/.ssh/id_rsa': a name pattern names one path component, with no '/' after '**/'"},
      {"NamePatternPrefix", kSpec + "  files:\n    deny:\n      - \"**/.env*\"\n", 8, 9,
       "'*' in '**/.env*': only '**/NAME' and '**/*.EXT' are supported"},
      {"NamePatternEmpty", kSpec + "  files:\n    deny:\n      - \"**/\"\n", 8, 9, "nothing after '**/'"},
      {"NamePatternNoExtension", kSpec + "  files:\n    deny:\n      - \"**/*.\"\n", 8, 9,
       "no extension after '*.'"},
      {"NamePatternDotDot", kSpec + "  files:\n    deny:\n      - \"**/..\"\n", 8, 9, "'..' is not a name"},
      {"NamePatternTooLong", kSpec + "  files:\n    deny:\n      - \"**/" + std::string(65, 'a') + "\"\n", 8,
       9, "the name is longer than 64 bytes"},
      {"NamePatternInRead", kSpec + "  files: {read: [\"**/.env\"]}\n", 6, 18,
       "'*' in '**/.env': files rules are literal paths, not patterns"},
      {"NamePatternUnquoted", kSpec + "  files:\n    deny:\n      - **/.env\n", 8, 9,
       "must be quoted: \"**/.env\""},
      {"QuestionMarkInRead", kSpec + "  files: {read: [\"/etc/host?\"]}\n", 6, 18, "'?' in '/etc/host?'"},
      {"BracketInWrite", kSpec + "  files: {write: [\"/tmp/[ab]\"]}\n", 6, 19, "'[' in '/tmp/[ab]'"},
      {"ExecWorkspace", kSpec + "  exec:\n    allow:\n      - ${workspace}/a.out\n", 8, 9,
       "${workspace} is not allowed in exec.allow"},
      {"ExecRelative", kSpec + "  exec: {allow: [python3]}\n", 6, 18,
       "exec.allow[0]: relative path 'python3' (programs must be absolute paths"},
      {"ExecMissing", kSpec + "  exec: {allow: [/nonexistent/agentcage/python9]}\n", 6, 18,
       "program '/nonexistent/agentcage/python9' does not exist", true},
      // A directory of programs is fine, one that holds the loader (or "/") is not.
      {"ExecDirectoryWithTheLoader", kSpec + "  exec: {allow: [/usr]}\n", 6, 18,
       "the directory '/usr' holds the dynamic loader", true},
      {"ExecRoot", kSpec + "  exec: {allow: [/]}\n", 6, 18, "'/' is the root directory", true},
      {"ExecDevice", kSpec + "  exec: {allow: [/dev/null]}\n", 6, 18,
       "'/dev/null' is neither a program nor a directory of programs", true},
      // --- network --------------------------------------------------------------
      // "      - {domain: " puts the value at column 18 of line 8.
      {"DomainUrl", kSpec + "  network:\n    allow:\n      - {domain: https://api.example.com}\n", 8, 18,
       "is a URL or a path"},
      {"DomainAddress", kSpec + "  network:\n    allow:\n      - {domain: 10.1.2.3}\n", 8, 18,
       "is an address, not a name; use {cidr: ...}"},
      {"DomainWithPort", kSpec + "  network:\n    allow:\n      - {domain: \"api.example.com:443\"}\n", 8, 18,
       "without a port (use 'ports')"},
      {"DomainStarInside", kSpec + "  network:\n    allow:\n      - {domain: \"api.*.example.com\"}\n", 8, 18,
       "'*' is allowed only as a whole first label"},
      {"DomainTopLevelWildcard", kSpec + "  network:\n    allow:\n      - {domain: \"*.com\"}\n", 8, 18,
       "every name in a top-level domain"},
      // Over any other public suffix too, of either section of the list; the
      // message names the suffix and what to write instead.
      {"DomainPublicSuffixWildcard", kSpec + "  network:\n    allow:\n      - {domain: \"*.co.uk\"}\n", 8, 18,
       "network.allow[0].domain: '*.co.uk' is every name under 'co.uk', a public suffix (Public Suffix "
       "List, ICANN section: anyone can register a domain under it); name the domain you mean under it, "
       "e.g. \"*.example.co.uk\", or the exact host"},
      {"DomainPrivateSuffixWildcard", kSpec + "  network:\n    allow:\n      - {domain: \"*.github.io\"}\n",
       8, 18,
       "network.allow[0].domain: '*.github.io' is every name under 'github.io', a public suffix (Public "
       "Suffix List, private section: its operator gives names under it to anyone); name the domain you "
       "mean under it, e.g. \"*.example.github.io\", or the exact host"},
      {"DomainPublicSuffixExact", kSpec + "  network:\n    allow:\n      - {domain: co.uk}\n", 8, 18,
       "network.allow[0].domain: 'co.uk' is a public suffix (Public Suffix List, ICANN section), a "
       "registry's name: the rule would match that one name, not the names under it; name the host you "
       "mean, e.g. \"api.example.co.uk\", or a domain's names, e.g. \"*.example.co.uk\""},
      {"DomainSingleLabel", kSpec + "  network:\n    allow:\n      - {domain: localhost}\n", 8, 18,
       "a single label"},
      {"DomainEmptyLabel", kSpec + "  network:\n    allow:\n      - {domain: a..example.com}\n", 8, 18,
       "an empty label"},
      {"DomainBadCharacter", kSpec + "  network:\n    allow:\n      - {domain: \"a b.example.com\"}\n", 8, 18,
       "' ' cannot appear in a domain name"},
      {"DomainNotAscii", kSpec + "  network:\n    allow:\n      - {domain: \"b\u00fccher.example\"}\n", 8, 18,
       "xn-- (punycode)"},
      {"DomainPortRange",
       kSpec + "  network:\n    allow:\n      - {domain: a.example.com, ports: [8000-8100]}\n", 8, 41,
       "a domain rule lists single ports, not a range"},
      {"DomainAndCidr", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, domain: a.example.com}\n",
       8, 28, "one of 'cidr', 'domain' or 'unix', not several"},
      {"DomainInListen", kSpec + "  network:\n    listen:\n      - {domain: a.example.com}\n", 8, 9,
       "network.listen[0]: a domain names a destination"},
      {"NetworkAllowScalarRule", kSpec + "  network:\n    allow: [10.0.0.0/8]\n", 7, 13,
       "network.allow[0] must be a mapping such as {cidr: 10.0.0.0/8"},
      {"CidrHostBits", kSpec + "  network:\n    allow:\n      - {cidr: 10.20.1.0/16}\n", 8, 16,
       "host bits are set in '10.20.1.0/16'; the network address is 10.20.0.0/16"},
      {"CidrIpv6HostBits", kSpec + "  network:\n    allow:\n      - cidr: fd00::1/8\n", 8, 15,
       "the network address is fd00::/8"},
      {"CidrBadAddress", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.256/8}\n", 8, 16,
       "'10.0.0.256/8' is not an IPv4 or IPv6 address"},
      {"CidrPrefixTooLong", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/33}\n", 8, 16,
       "prefix length '33' in '10.0.0.0/33' is larger than 32"},
      {"CidrPrefixNotNumber", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/x}\n", 8, 16,
       "prefix length 'x' in '10.0.0.0/x' is not a number"},
      {"PortZero", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, ports: [0]}\n", 8, 36,
       "port '0' is out of range 1..65535"},
      {"PortTooLarge", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, ports: [443, 65536]}\n", 8,
       41, "network.allow[0].ports[1]: port '65536' is out of range"},
      {"PortRangeReversed",
       kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, ports: [8100-8000]}\n", 8, 36,
       "port range '8100-8000' is empty"},
      {"PortNotANumber", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, ports: [https]}\n", 8,
       36, "'https' is not a port or port range"},
      {"PortsScalar", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, ports: 443}\n", 8, 35,
       "network.allow[0].ports must be a list, got a scalar ('443')"},
      {"PortsEmpty", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, ports: []}\n", 8, 35,
       "ports is empty (omit 'ports' to allow all ports)"},
      {"BadProtocol", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, protocol: sctp}\n", 8, 38,
       "invalid protocol 'sctp' (expected 'tcp', 'udp' or 'any')"},
      {"RuleTypo", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, port: [443]}\n", 8, 28,
       "unknown key 'port' in network rule (did you mean 'ports'?)"},
      {"RuleCidrAndUnix", kSpec + "  network:\n    allow:\n      - {cidr: 10.0.0.0/8, unix: /run/a.sock}\n",
       8, 28, "a rule has one of 'cidr', 'domain' or 'unix', not several"},
      {"RuleNeitherCidrNorUnix", kSpec + "  network:\n    allow:\n      - {protocol: tcp}\n", 8, 9,
       "a rule needs 'cidr' or 'domain' (with optional ports and protocol) or 'unix'"},
      {"UnixWithPorts", kSpec + "  network:\n    allow:\n      - {unix: /run/a.sock, ports: [1]}\n", 8, 29,
       "unix rules take no 'ports'"},
      {"UnixWithProtocol", kSpec + "  network:\n    allow:\n      - {unix: /run/a.sock, protocol: tcp}\n", 8,
       29, "unix rules take no 'protocol'"},
      {"UnixRelative", kSpec + "  network:\n    allow:\n      - {unix: run/a.sock}\n", 8, 16,
       "must be an absolute path or @name"},
      {"UnixAbstractEmpty", kSpec + "  network:\n    allow:\n      - {unix: \"@\"}\n", 8, 16,
       "abstract socket name after '@' is empty"},
      {"UnixPathTooLong", kSpec + "  network:\n    allow:\n      - {unix: /" + std::string(107, 's') + "}\n",
       8, 16, "at most 107 bytes"},
      // --- limits ---------------------------------------------------------------
      {"PidsNotANumber", kSpec + "  limits: {pids: \"many\"}\n", 6, 18,
       "limits.pids: 'many' is not a positive integer"},
      {"PidsZero", kSpec + "  limits: {pids: 0}\n", 6, 18, "pids must be at least 1"},
      {"PidsTooMany", kSpec + "  limits: {pids: 4194305}\n", 6, 18, "pids must be at most 4194304"},
      {"PidsIsList", kSpec + "  limits: {pids: [1]}\n", 6, 18, "limits.pids must be a scalar, got a list"},
      {"MemoryUnknownUnit", kSpec + "  limits: {memory: 512MB}\n", 6, 20,
       "unknown unit 'MB' in size '512MB'"},
      {"MemoryZero", kSpec + "  limits: {memory: 0Gi}\n", 6, 20, "size must be greater than 0"},
      {"MemoryOverflow", kSpec + "  limits: {memory: 16777216Ti}\n", 6, 20, "too large (at most 16 EiB)"},
      {"MemoryNegative", kSpec + "  limits: {memory: -1}\n", 6, 20, "'-1' is not a size"},
      {"CpuZero", kSpec + "  limits: {cpu: 0}\n", 6, 17, "number of CPUs must be greater than 0"},
      {"CpuTooMany", kSpec + "  limits: {cpu: 1025}\n", 6, 17, "number of CPUs must be at most 1024"},
      {"CpuExponent", kSpec + "  limits: {cpu: 1e2}\n", 6, 17, "'1e2' is not a number of CPUs"},
      {"TimeoutNoUnit", kSpec + "  limits: {timeout: 30}\n", 6, 21, "duration '30' has no unit"},
      {"TimeoutTooLong", kSpec + "  limits: {timeout: 169h}\n", 6, 21, "is too long (at most 7 days)"},
      {"TimeoutUnitOrder", kSpec + "  limits: {timeout: 30s1m}\n", 6, 21,
       "units must go from largest to smallest"},
      {"TimeoutUnknownUnit", kSpec + "  limits: {timeout: 1d}\n", 6, 21, "unknown unit 'd' in duration '1d'"},
      {"TimeoutZero", kSpec + "  limits: {timeout: 0s}\n", 6, 21, "duration must be greater than 0"},
      {"NativeCodeBadValue", kSpec + "  exec: {native_code: yes}\n", 6, 23,
       "exec.native_code: invalid value 'yes' (expected 'deny' or 'allow')"},
      {"DebuggingIsList", kSpec + "  exec: {debugging: [allow]}\n", 6, 21,
       "exec.debugging must be a scalar, got a list"},
      {"NativeCodeMisspelt", kSpec + "  exec: {native_cod: allow}\n", 6, 10, "did you mean 'native_code'?"},
      {"SyscallGroupUnknown", kSpec + "  syscalls: {allow: [io_urin]}\n", 6, 22,
       "unknown system-call group 'io_urin' (did you mean 'io_uring'?)"},
      {"SyscallsAllowIsScalar", kSpec + "  syscalls: {allow: io_uring}\n", 6, 21,
       "syscalls.allow must be a list"},
      {"SyscallsMisspelt", kSpec + "  syscals: {allow: [io_uring]}\n", 6, 3, "did you mean 'syscalls'?"},
  };
  return cases;
}

class Malformed : public ::testing::TestWithParam<BadCase> {};

TEST_P(Malformed, IsRejectedAtTheRightPlace) {
  const BadCase& c = GetParam();
  ParseOptions options;
  options.check_exec_exists = c.check_exec;
  const ParseResult r = parse_policy(c.yaml, "bad.yaml", options);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.policy.has_value());
  ASSERT_FALSE(r.errors.empty());
  const yaml::Diagnostic& d = r.errors.front();
  EXPECT_EQ(d.pos.line, c.line) << dump(r.errors);
  EXPECT_EQ(d.pos.column, c.column) << dump(r.errors);
  EXPECT_NE(d.message.find(c.message), std::string::npos) << "want: " << c.message << "\n" << dump(r.errors);
  EXPECT_EQ(d.file, "bad.yaml");
}

INSTANTIATE_TEST_SUITE_P(Policy, Malformed, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& param) {
                           return std::string(param.param.name);
                         });

TEST(PolicyParse, MalformedTableIsLargeEnough) { EXPECT_GE(bad_cases().size(), 40u); }

// ---------------------------------------------------------------------------
// Error reporting as a whole
// ---------------------------------------------------------------------------

TEST(PolicyParse, ReportsAllErrorsSortedByPosition) {
  const std::string yaml = kHead +
                           "spec:\n"
                           "  limits: {timeout: 30, pids: many}\n"  // 6
                           "  mode: audit\n"                        // 7
                           "  files:\n"                             // 8
                           "    deny: [relative]\n"                 // 9
                           "    raed: []\n"                         // 10
                           "  exec: {allow: [/usr/bin/../x]}\n";    // 11
  const ParseResult r = parse_policy(yaml, "p.yaml", no_fs());
  ASSERT_EQ(r.errors.size(), 5u) << dump(r.errors);
  EXPECT_EQ(r.errors[0].format(),
            "p.yaml:6:21: limits.timeout: duration '30' has no unit (use ms, s, m or h, e.g. 30s)");
  EXPECT_EQ(r.errors[1].format(), "p.yaml:6:31: limits.pids: 'many' is not a positive integer");
  EXPECT_EQ(r.errors[2].pos.line, 9);
  EXPECT_EQ(r.errors[3].format(), "p.yaml:10:5: unknown key 'raed' in files (did you mean 'read'?)");
  EXPECT_EQ(r.errors[4].pos.line, 11);
}

TEST(PolicyParse, NativeCodeDebuggingAndSyscallGroups) {
  auto defaults = parse_policy(kSpec + "  exec: {allow: []}\n", "p.yaml", no_fs());
  ASSERT_TRUE(defaults.ok()) << dump(defaults.errors);
  EXPECT_EQ(defaults.policy->native_code, Permit::deny);
  EXPECT_EQ(defaults.policy->debugging, Permit::deny);
  EXPECT_TRUE(defaults.policy->syscalls_allow.empty());

  auto r = parse_policy(kSpec +
                            "  exec: {native_code: allow, debugging: allow}\n"
                            "  syscalls: {allow: [io_uring, numa, io_uring]}\n",
                        "p.yaml", no_fs());
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_EQ(r.policy->native_code, Permit::allow);
  EXPECT_EQ(r.policy->debugging, Permit::allow);
  EXPECT_EQ(r.policy->syscalls_allow, (std::vector<std::string>{"io_uring", "numa"}));
}

TEST(PolicyParse, DiagnosticFormat) {
  EXPECT_EQ((yaml::Diagnostic{"a.yaml", {3, 7}, "boom"}.format()), "a.yaml:3:7: boom");
  EXPECT_EQ((yaml::Diagnostic{"a.yaml", {0, 0}, "cannot open"}.format()), "a.yaml: cannot open");
}

TEST(PolicyParse, CapsTheNumberOfErrors) {
  std::string yaml = kSpec + "  files:\n    read:\n";
  for (int i = 0; i < 500; ++i) yaml += "      - relative\n";
  const ParseResult r = parse_policy(yaml, "p.yaml", no_fs());
  ASSERT_EQ(r.errors.size(), 101u);
  EXPECT_EQ(r.errors.back().pos.line, 0);
  EXPECT_EQ(r.errors.back().message, "400 more errors not shown");
}

TEST(PolicyParse, DuplicateRulesAndPathsAreAccepted) {
  const std::string yaml = kSpec +
                           "  files: {read: [/usr, /usr, /usr/]}\n"
                           "  network:\n"
                           "    allow:\n"
                           "      - {cidr: 10.0.0.0/8}\n"
                           "      - {cidr: 10.0.0.0/8}\n";
  const ParseResult r = parse_policy(yaml, "p.yaml", no_fs());
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_EQ(r.policy->read.size(), 3u);
  EXPECT_EQ(r.policy->network_allow.size(), 2u);
}

TEST(PolicyParse, NotExecutableProgram) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "agentcage-policy-test-noexec";
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "tool";
  std::ofstream(file) << "#!/bin/sh\n";
  std::filesystem::permissions(file,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const ParseResult r = parse_policy(kSpec + "  exec: {allow: [" + file.string() + "]}\n", "p.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << dump(r.errors);
  EXPECT_EQ(r.errors[0].pos.line, 6);
  EXPECT_EQ(r.errors[0].pos.column, 18);
  EXPECT_NE(r.errors[0].message.find("is not executable"), std::string::npos) << r.errors[0].message;
  std::filesystem::remove_all(dir);
}

TEST(PolicyParse, DynamicLoaderIsNotAProgramToAllow) {
  // By name (no file system access) and by what a symlink resolves to.
  ParseOptions lexical;
  lexical.check_exec_exists = false;
  for (const char* loader :
       {"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-musl-x86_64.so.1",
        "/usr/lib/ld.so", "/lib/x86_64-linux-gnu/ld-2.36.so"}) {
    const ParseResult r = parse_policy(kSpec + "  exec: {allow: [" + loader + "]}\n", "p.yaml", lexical);
    ASSERT_EQ(r.errors.size(), 1u) << loader;
    EXPECT_NE(r.errors[0].message.find("is the dynamic loader"), std::string::npos) << r.errors[0].message;
    EXPECT_EQ(r.errors[0].pos.line, 6);
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "agentcage-policy-test-ldso";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ld-linux-x86-64.so.2") << "\x7f"
                                                 "ELF";
  std::filesystem::permissions(dir / "ld-linux-x86-64.so.2", std::filesystem::perms::owner_all);
  std::filesystem::create_symlink("ld-linux-x86-64.so.2", dir / "innocent");
  const ParseResult r =
      parse_policy(kSpec + "  exec: {allow: [" + (dir / "innocent").string() + "]}\n", "p.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << dump(r.errors);
  EXPECT_NE(r.errors[0].message.find("is the dynamic loader"), std::string::npos) << r.errors[0].message;
  // A program whose name merely starts with "ld" is fine.
  const ParseResult ok = parse_policy(kSpec + "  exec: {allow: [/usr/bin/ldd]}\n", "p.yaml", lexical);
  EXPECT_TRUE(ok.ok()) << dump(ok.errors);
  std::filesystem::remove_all(dir);
}

TEST(PolicyParse, ExecRecordsRealpath) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "agentcage-policy-test-exec";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::filesystem::path real = dir / "tool-1.0";
  std::ofstream(real) << "#!/bin/sh\n";
  std::filesystem::permissions(real, std::filesystem::perms::owner_all);
  std::filesystem::create_symlink("tool-1.0", dir / "tool");
  const ParseResult r =
      parse_policy(kSpec + "  exec: {allow: [" + (dir / "tool").string() + "]}\n", "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  ASSERT_EQ(r.policy->exec_allow.size(), 1u);
  EXPECT_EQ(r.policy->exec_allow[0].path, (dir / "tool").string());
  EXPECT_EQ(r.policy->exec_allow[0].resolved, std::filesystem::canonical(real).string());
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------
// Valid policies, field by field
// ---------------------------------------------------------------------------

// The example from the policy format, with ${workspace} quoted inside flow
// lists (YAML treats { } there as flow indicators).
const char* kFullExample = R"(apiVersion: agentcage/v1
kind: Policy
metadata:
  name: python-sandbox
spec:
  mode: enforce              # enforce | audit
  exec:
    allow: [/usr/bin/python3]
  files:
    read: [/usr/lib, /usr/share/fonts, /etc/ld.so.cache]
    write: ["${workspace}"]
    deny: ["${workspace}/.git/hooks"]
  network:
    allow:
      - {cidr: 10.20.0.0/16, ports: [443, 8000-8100], protocol: tcp}
      - {unix: /run/llm-proxy.sock}
  limits: {memory: 512Mi, pids: 64, cpu: 1.0, timeout: 30s}
)";

TEST(PolicyParse, FullExample) {
  const ParseResult r = parse_policy(kFullExample, "full.yaml", no_fs());
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  const Policy& p = *r.policy;
  EXPECT_EQ(p.name, "python-sandbox");
  EXPECT_EQ(p.source, "full.yaml");
  EXPECT_EQ(p.mode, Mode::enforce);

  ASSERT_EQ(p.exec_allow.size(), 1u);
  EXPECT_EQ(p.exec_allow[0].path, "/usr/bin/python3");
  EXPECT_EQ(p.exec_allow[0].resolved, "/usr/bin/python3");  // no file system check
  EXPECT_EQ(p.exec_allow[0].pos.line, 8);
  EXPECT_EQ(p.exec_allow[0].pos.column, 13);

  ASSERT_EQ(p.read.size(), 3u);
  EXPECT_EQ(p.read[0].path, "/usr/lib");
  EXPECT_FALSE(p.read[0].in_workspace);
  EXPECT_EQ(p.read[1].path, "/usr/share/fonts");
  EXPECT_EQ(p.read[2].path, "/etc/ld.so.cache");
  EXPECT_EQ(p.read[2].pos.line, 10);
  EXPECT_EQ(p.read[2].pos.column, 40);

  ASSERT_EQ(p.write.size(), 1u);
  EXPECT_EQ(p.write[0].path, "");
  EXPECT_TRUE(p.write[0].in_workspace);
  ASSERT_EQ(p.deny.size(), 1u);
  EXPECT_EQ(p.deny[0].path, "/.git/hooks");
  EXPECT_TRUE(p.deny[0].in_workspace);

  ASSERT_EQ(p.network_allow.size(), 2u);
  const NetRule& inet = p.network_allow[0];
  EXPECT_EQ(inet.kind, NetRule::Kind::cidr);
  EXPECT_EQ(inet.family, AF_INET);
  EXPECT_EQ(inet.addr[0], 10);
  EXPECT_EQ(inet.addr[1], 20);
  EXPECT_EQ(inet.addr[2], 0);
  EXPECT_EQ(inet.addr[3], 0);
  EXPECT_EQ(inet.prefix_len, 16);
  ASSERT_EQ(inet.ports.size(), 2u);
  EXPECT_EQ(inet.ports[0].first, 443);
  EXPECT_EQ(inet.ports[0].last, 443);
  EXPECT_EQ(inet.ports[1].first, 8000);
  EXPECT_EQ(inet.ports[1].last, 8100);
  EXPECT_EQ(inet.protocol, Protocol::tcp);
  EXPECT_EQ(inet.pos.line, 15);
  EXPECT_EQ(inet.pos.column, 9);
  const NetRule& unix_rule = p.network_allow[1];
  EXPECT_EQ(unix_rule.kind, NetRule::Kind::unix_path);
  EXPECT_EQ(unix_rule.unix_name, "/run/llm-proxy.sock");
  EXPECT_TRUE(unix_rule.ports.empty());

  ASSERT_TRUE(p.limits.memory_bytes);
  EXPECT_EQ(*p.limits.memory_bytes, 512ull << 20);
  ASSERT_TRUE(p.limits.pids);
  EXPECT_EQ(*p.limits.pids, 64u);
  ASSERT_TRUE(p.limits.cpus);
  EXPECT_DOUBLE_EQ(*p.limits.cpus, 1.0);
  ASSERT_TRUE(p.limits.timeout);
  EXPECT_EQ(*p.limits.timeout, 30s);
}

TEST(PolicyParse, MinimalPolicyDeniesEverything) {
  const ParseResult r =
      parse_policy("apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: deny-all}\n", "m.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  const Policy& p = *r.policy;
  EXPECT_EQ(p.name, "deny-all");
  EXPECT_EQ(p.mode, Mode::enforce);
  EXPECT_TRUE(p.exec_allow.empty());
  EXPECT_TRUE(p.read.empty());
  EXPECT_TRUE(p.write.empty());
  EXPECT_TRUE(p.deny.empty());
  EXPECT_TRUE(p.network_allow.empty());
  EXPECT_FALSE(p.limits.memory_bytes);
  EXPECT_FALSE(p.limits.pids);
  EXPECT_FALSE(p.limits.cpus);
  EXPECT_FALSE(p.limits.timeout);
  EXPECT_FALSE(p.limits.disk_bytes);
}

TEST(PolicyParse, EmptySectionsAreAllowed) {
  const ParseResult r = parse_policy(
      kSpec + "  exec: {}\n  files: {read: []}\n  network: {allow: []}\n  limits: {}\n", "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_TRUE(r.policy->read.empty());
}

TEST(PolicyParse, AuditMode) {
  const ParseResult r = parse_policy(kSpec + "  mode: audit\n", "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_EQ(r.policy->mode, Mode::audit);
  EXPECT_STREQ(to_string(r.policy->mode), "audit");
}

TEST(PolicyParse, Ipv6Rules) {
  const std::string yaml = kSpec +
                           "  network:\n"
                           "    allow:\n"
                           "      - {cidr: \"fd00:1234::/32\", ports: [53], protocol: udp}\n"
                           "      - cidr: ::1\n";
  const ParseResult r = parse_policy(yaml, "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  ASSERT_EQ(r.policy->network_allow.size(), 2u);
  const NetRule& a = r.policy->network_allow[0];
  EXPECT_EQ(a.family, AF_INET6);
  EXPECT_EQ(a.prefix_len, 32);
  const std::array<uint8_t, 16> want_a{0xfd, 0x00, 0x12, 0x34};
  EXPECT_EQ(a.addr, want_a);
  EXPECT_EQ(a.protocol, Protocol::udp);
  ASSERT_EQ(a.ports.size(), 1u);
  EXPECT_EQ(a.ports[0].first, 53);
  const NetRule& b = r.policy->network_allow[1];
  EXPECT_EQ(b.family, AF_INET6);
  EXPECT_EQ(b.prefix_len, 128);
  EXPECT_EQ(b.addr[15], 1);
  EXPECT_EQ(b.protocol, Protocol::any);
  EXPECT_TRUE(b.ports.empty());
}

TEST(PolicyParse, DomainRules) {
  const std::string yaml = kSpec +
                           "  network:\n"
                           "    allow:\n"
                           "      - {domain: API.Example.COM., ports: [443], protocol: tcp}\n"
                           "      - {domain: \"*.pkg.example.org\", ports: [443, 80]}\n"
                           "      - domain: _dmarc.example.net\n"
                           // Names under a public suffix are ordinary names; an
                           // operator's suffix is a host an exact rule may name.
                           "      - {domain: \"*.example.co.uk\", ports: [443]}\n"
                           "      - {domain: \"*.example.github.io\", ports: [443]}\n"
                           "      - {domain: s3.amazonaws.com, ports: [443]}\n";
  const ParseResult r = parse_policy(yaml, "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  ASSERT_EQ(r.policy->network_allow.size(), 6u);
  const NetRule& a = r.policy->network_allow[0];
  EXPECT_EQ(a.kind, NetRule::Kind::domain);
  EXPECT_EQ(a.domain, "api.example.com") << "lower-cased, trailing dot dropped";
  EXPECT_FALSE(a.wildcard);
  EXPECT_EQ(a.protocol, Protocol::tcp);
  ASSERT_EQ(a.ports.size(), 1u);
  EXPECT_EQ(a.ports[0].first, 443);
  const NetRule& b = r.policy->network_allow[1];
  EXPECT_EQ(b.domain, "pkg.example.org");
  EXPECT_TRUE(b.wildcard);
  EXPECT_EQ(b.ports.size(), 2u);
  EXPECT_EQ(b.protocol, Protocol::any);
  EXPECT_EQ(r.policy->network_allow[2].domain, "_dmarc.example.net");
  EXPECT_TRUE(r.policy->network_allow[2].ports.empty());
  EXPECT_EQ(r.policy->network_allow[3].domain, "example.co.uk");
  EXPECT_TRUE(r.policy->network_allow[3].wildcard);
  EXPECT_EQ(r.policy->network_allow[4].domain, "example.github.io");
  EXPECT_EQ(r.policy->network_allow[5].domain, "s3.amazonaws.com");
  EXPECT_FALSE(r.policy->network_allow[5].wildcard);
}

TEST(PolicyParse, AbstractUnixSocket) {
  const ParseResult r =
      parse_policy(kSpec + "  network:\n    allow:\n      - {unix: \"@llm-proxy\"}\n", "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  ASSERT_EQ(r.policy->network_allow.size(), 1u);
  EXPECT_EQ(r.policy->network_allow[0].kind, NetRule::Kind::unix_abstract);
  EXPECT_EQ(r.policy->network_allow[0].unix_name, "llm-proxy");
}

TEST(PolicyParse, ExecAllowTakesADirectoryOfPrograms) {
  const ParseResult r = parse_policy(kSpec + "  exec: {allow: [/usr/bin, /usr/bin/true]}\n", "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  ASSERT_EQ(r.policy->exec_allow.size(), 2u);
  EXPECT_TRUE(r.policy->exec_allow[0].directory);
  EXPECT_EQ(r.policy->exec_allow[0].resolved, std::filesystem::canonical("/usr/bin").string());
  EXPECT_FALSE(r.policy->exec_allow[1].directory);
}

TEST(PolicyParse, DenyTakesNamePatterns) {
  const ParseResult r = parse_policy(kSpec +
                                         "  files:\n    deny:\n"
                                         "      - \"**/.env\"\n"
                                         "      - \"**/*.pem\"\n"
                                         "      - \"**/*.tar.gz\"\n"
                                         "      - ${workspace}/.git/hooks\n",
                                     "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  const Policy& p = *r.policy;
  ASSERT_EQ(p.deny_names.size(), 3u);
  EXPECT_EQ(p.deny_names[0].kind, NamePattern::Kind::name);
  EXPECT_EQ(p.deny_names[0].text, ".env");
  EXPECT_EQ(p.deny_names[0].pos.line, 8);
  EXPECT_EQ(p.deny_names[1].kind, NamePattern::Kind::suffix);
  EXPECT_EQ(p.deny_names[1].text, ".pem");
  EXPECT_EQ(p.deny_names[2].text, ".tar.gz");
  ASSERT_EQ(p.deny.size(), 1u);  // the literal entry stays a path
  EXPECT_EQ(p.deny[0].path, "/.git/hooks");
}

// Programs and sockets are named exactly (and programs checked to exist):
// "/usr/bin/[" is coreutils' test, not a pattern. Only files rules refuse
// pattern characters.
TEST(PolicyParse, ProgramsAndSocketsMayHavePatternCharactersInTheirNames) {
  ParseOptions no_fs;
  no_fs.check_exec_exists = false;
  const ParseResult r = parse_policy(kSpec +
                                         "  exec: {allow: [\"/usr/bin/[\"]}\n"
                                         "  network:\n    allow:\n      - {unix: \"/run/a[1]?.sock\"}\n",
                                     "p.yaml", no_fs);
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_EQ(r.policy->exec_allow[0].path, "/usr/bin/[");
  EXPECT_EQ(r.policy->network_allow[0].unix_name, "/run/a[1]?.sock");
}

TEST(PolicyParse, WorkspacePathsAndNormalisation) {
  const std::string yaml = kSpec +
                           "  files:\n"
                           "    read:\n"
                           "      - /usr//lib/./x86_64-linux-gnu/\n"
                           "      - /\n"
                           "      - ${workspace}/\n"
                           "    write:\n"
                           "      - ${workspace}\n"
                           "      - ${workspace}//out/./data/\n"
                           "    deny:\n"
                           "      - ${workspace}/.git/hooks\n";
  const ParseResult r = parse_policy(yaml, "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  const Policy& p = *r.policy;
  ASSERT_EQ(p.read.size(), 3u);
  EXPECT_EQ(p.read[0].path, "/usr/lib/x86_64-linux-gnu");
  EXPECT_EQ(p.read[1].path, "/");
  EXPECT_FALSE(p.read[1].in_workspace);
  EXPECT_EQ(p.read[2].path, "");
  EXPECT_TRUE(p.read[2].in_workspace);
  ASSERT_EQ(p.write.size(), 2u);
  EXPECT_EQ(p.write[0].path, "");
  EXPECT_TRUE(p.write[0].in_workspace);
  EXPECT_EQ(p.write[1].path, "/out/data");
  EXPECT_TRUE(p.write[1].in_workspace);
  ASSERT_EQ(p.deny.size(), 1u);
  EXPECT_EQ(p.deny[0].path, "/.git/hooks");
  EXPECT_EQ(p.deny[0].pos.line, 15);
  EXPECT_EQ(p.deny[0].pos.column, 9);
}

TEST(PolicyParse, QuotedScalarsAreValues) {
  const ParseResult r = parse_policy(
      "\"apiVersion\": 'agentcage/v1'\nkind: \"Policy\"\nmetadata: {name: \"q\"}\n"
      "spec: {limits: {pids: '10', memory: \"1G\", cpu: \".5\", timeout: '1h30m'}}\n",
      "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_EQ(*r.policy->limits.pids, 10u);
  EXPECT_EQ(*r.policy->limits.memory_bytes, 1000000000u);
  EXPECT_DOUBLE_EQ(*r.policy->limits.cpus, 0.5);
  EXPECT_EQ(*r.policy->limits.timeout, 90min);
}

TEST(PolicyParse, DiskAndUnlimitedLimits) {
  const ParseResult r = parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: u}\n"
      "spec: {limits: {disk: 64Mi, memory: unlimited, pids: unlimited, timeout: unlimited, cpu: "
      "unlimited}}\n",
      "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  const Limits& l = r.policy->limits;
  EXPECT_EQ(*l.disk_bytes, 64ull << 20);
  EXPECT_FALSE(l.unlimited.disk);
  EXPECT_FALSE(l.memory_bytes);
  EXPECT_TRUE(l.unlimited.memory);
  EXPECT_TRUE(l.unlimited.pids);
  EXPECT_TRUE(l.unlimited.timeout);
  EXPECT_TRUE(l.unlimited.cpu);

  const ParseResult bad = parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: u}\nspec: {limits: {disk: 0, dsik: 1Mi}}\n",
      "p.yaml");
  ASSERT_EQ(bad.errors.size(), 2u) << dump(bad.errors);
  EXPECT_NE(bad.errors[0].format().find("limits.disk"), std::string::npos) << dump(bad.errors);
  EXPECT_NE(dump(bad.errors).find("did you mean 'disk'"), std::string::npos) << dump(bad.errors);
}

TEST(PolicyParse, ExplicitDocumentMarkersAndBom) {
  const ParseResult r = parse_policy(
      "\xef\xbb\xbf# policy\n---\napiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: a}\n...\n",
      "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
}

TEST(PolicyParse, ExecExistsCheckOnARealProgram) {
  // /bin/sh exists on every machine that runs these tests.
  const ParseResult r = parse_policy(kSpec + "  exec: {allow: [/bin/sh]}\n", "p.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_EQ(r.policy->exec_allow[0].path, "/bin/sh");
  EXPECT_EQ(r.policy->exec_allow[0].resolved, std::filesystem::canonical("/bin/sh").string());
}

// ---------------------------------------------------------------------------
// Inputs built to be slow or deep: rejected, with the reason.
// ---------------------------------------------------------------------------

TEST(PolicyBounded, OversizedInputIsNotParsed) {
  // Valid YAML up front, then 300 KiB of list entries.
  std::string yaml = kSpec + "  files:\n    read:\n";
  while (yaml.size() < 300 * 1024) yaml += "      - /usr/lib\n";
  const ParseResult r = parse_policy(yaml, "big.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].pos.line, 0);
  EXPECT_NE(r.errors[0].message.find("the limit is 262144 bytes"), std::string::npos);
}

TEST(PolicyBounded, MaxBytesIsAnOption) {
  ParseOptions o;
  o.max_bytes = 10;
  const ParseResult r = parse_policy(kHead, "p.yaml", o);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("the limit is 10 bytes"), std::string::npos);
}

TEST(PolicyBounded, TenThousandOpenBrackets) {
  const ParseResult r = parse_policy(std::string(10000, '['), "deep.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].format(),
            "deep.yaml:1:33: flow collections ([...] / {...}) nested deeper than 32 levels");
}

TEST(PolicyBounded, BracketsInCommentsAndQuotesDoNotCount) {
  const std::string many(100, '[');
  const std::string yaml = kHead + "# " + many + "\nspec: {mode: audit}   # " + many + "\n" + "x: \"\\\"" +
                           many + "\"\n" +  // x: "\"[[[..."
                           "y: 'it''s " + many + "'\n";
  const ParseResult r = parse_policy(yaml, "p.yaml");
  ASSERT_EQ(r.errors.size(), 2u) << dump(r.errors);
  EXPECT_NE(r.errors[0].message.find("unknown key 'x'"), std::string::npos);
  EXPECT_NE(r.errors[1].message.find("unknown key 'y'"), std::string::npos);
}

TEST(PolicyBounded, AliasBombIsRejectedBeforeExpansion) {
  const ParseResult r = parse_policy(alias_bomb(), "bomb.yaml");
  ASSERT_FALSE(r.errors.empty());
  EXPECT_EQ(r.errors[0].format(),
            "bomb.yaml:1:4: anchor '&a': anchors and aliases are not allowed in policies");
  // Every anchor (9) and alias (8 x 9) is reported.
  EXPECT_EQ(r.errors.size(), 81u);
}

TEST(PolicyBounded, HugeFlatListIsFine) {
  // Close to the size limit, but well-formed: accepted.
  std::string yaml = kSpec + "  files:\n    read:\n";
  while (yaml.size() < 250 * 1024) yaml += "      - /usr/lib\n";
  const ParseResult r = parse_policy(yaml, "big.yaml");
  ASSERT_TRUE(r.ok()) << dump(r.errors);
  EXPECT_GT(r.policy->read.size(), 10000u);
}

TEST(PolicyBounded, LongKeysGetNoSuggestionWork) {
  // (YAML caps implicit keys at 1024 characters; yaml-cpp enforces it.)
  const ParseResult r = parse_policy(kHead + std::string(1000, 'k') + ": 1\n", "p.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("unknown key 'kkkk"), std::string::npos);
  EXPECT_EQ(r.errors[0].message.find("did you mean"), std::string::npos);
}

}  // namespace
}  // namespace agentcage::policy

namespace agentcage::policy {
namespace {

TEST(PolicyParse, NetworkListenEntries) {
  const ParseResult r = parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: dev}\nspec:\n  network:\n    listen:\n"
      "      - {cidr: 127.0.0.1/32, ports: [8000], protocol: tcp}\n"
      "      - {unix: \"@dev-server\"}\n",
      "l.yaml");
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].format());
  ASSERT_EQ(r.policy->network_listen.size(), 2u);
  EXPECT_TRUE(r.policy->network_allow.empty());
  const NetRule& inet = r.policy->network_listen[0];
  EXPECT_EQ(inet.kind, NetRule::Kind::cidr);
  EXPECT_EQ(inet.prefix_len, 32);
  ASSERT_EQ(inet.ports.size(), 1u);
  EXPECT_EQ(inet.ports[0].first, 8000);
  EXPECT_EQ(inet.protocol, Protocol::tcp);
  EXPECT_EQ(r.policy->network_listen[1].kind, NetRule::Kind::unix_abstract);
  EXPECT_EQ(r.policy->network_listen[1].unix_name, "dev-server");
}

TEST(PolicyParse, NetworkListenErrorsAreLocated) {
  const ParseResult r = parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: dev}\nspec:\n  network:\n    listen:\n"
      "      - {unix: /run/dev.sock}\n"
      "      - {cidr: 127.0.0.1/33}\n"
      "      - 8000\n"
      "    lisen: []\n",
      "l.yaml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 4u);
  EXPECT_EQ(r.errors[0].format(),
            "l.yaml:7:9: network.listen[0]: a unix socket at a path is a file; allow creating it with "
            "files.write (network.listen takes a cidr or an abstract name \"@name\")");
  EXPECT_NE(r.errors[1].format().find("l.yaml:8:16: network.listen[1].cidr: "), std::string::npos)
      << r.errors[1].format();
  EXPECT_NE(r.errors[2].format().find("l.yaml:9:9: network.listen[2] must be a mapping"), std::string::npos)
      << r.errors[2].format();
  EXPECT_NE(r.errors[3].format().find("l.yaml:10:5: unknown key 'lisen' in network (did you mean 'listen'?)"),
            std::string::npos)
      << r.errors[3].format();
}

}  // namespace
}  // namespace agentcage::policy
