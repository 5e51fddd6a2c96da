// SPDX-License-Identifier: Apache-2.0
// Policy validation: walks the yaml-cpp tree of a document that the YAML
// front end (yaml/document.h) loaded safely and builds the model, reporting
// every problem with the position of the offending key or value.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "policy/name.h"
#include "policy/policy.h"

#include "policy/include.h"
#include "policy/syscalls.h"
#include "util/suggest.h"
#include "yaml/document.h"

namespace agentcage::policy {

const char* to_string(Mode mode) { return mode == Mode::audit ? "audit" : "enforce"; }

const char* to_string(Permit permit) { return permit == Permit::allow ? "allow" : "deny"; }

const char* to_string(Protocol protocol) {
  switch (protocol) {
    case Protocol::tcp:
      return "tcp";
    case Protocol::udp:
      return "udp";
    case Protocol::any:
      break;
  }
  return "any";
}

namespace {

using yaml::describe;
using yaml::Field;
using yaml::Fields;
using yaml::find;
using yaml::pos_of;
using yaml::Reporter;

constexpr std::string_view kTopKeys[] = {"apiVersion", "kind", "metadata", "include", "spec"};
constexpr std::string_view kMetadataKeys[] = {"name"};
constexpr std::string_view kSpecKeys[] = {"mode", "exec", "files", "network", "syscalls", "limits"};
constexpr std::string_view kSyscallsKeys[] = {"allow"};
constexpr std::string_view kExecKeys[] = {"allow", "native_code", "debugging"};
constexpr std::string_view kFilesKeys[] = {"read", "write", "deny"};
constexpr std::string_view kNetworkKeys[] = {"allow", "listen"};
// Ports of one domain rule: each is pinned for each address of the name.
constexpr size_t kMaxDomainPorts = 16;
constexpr std::string_view kRuleKeys[] = {"cidr", "domain", "ports", "protocol", "unix"};
constexpr std::string_view kLimitsKeys[] = {"memory", "pids", "cpu", "timeout", "disk"};

class Validator {
 public:
  Validator(Reporter& reporter, std::string_view text, const ParseOptions& options)
      : reporter_(reporter), text_(text), options_(options) {}

  std::optional<Policy> run(const YAML::Node& root) {
    if (!root.IsMap()) {
      // A null root (e.g. a lone "---") has no useful mark.
      const Position pos = root.IsNull() ? Position{1, 1} : pos_of(root.Mark());
      error(pos,
            "a policy must be a mapping with apiVersion, kind, metadata and spec, got " + describe(root));
      return std::nullopt;
    }
    Policy policy;
    policy.source = reporter_.file();
    const Position root_pos = pos_of(root.Mark());
    const Fields top = fields(root, kTopKeys, "at top level");

    if (const Field* f = find(top, "apiVersion")) {
      if (auto v = scalar(*f, "apiVersion"); v && *v != "agentcage/v1") {
        error(value_pos(*f), "unsupported apiVersion " + quote(*v) + " (expected 'agentcage/v1')");
      }
    } else {
      error(root_pos, "missing required key 'apiVersion' (apiVersion: agentcage/v1)");
    }
    if (const Field* f = find(top, "kind")) {
      if (auto v = scalar(*f, "kind"); v && *v != "Policy") {
        error(value_pos(*f), "kind must be 'Policy', got " + quote(*v));
      }
    } else {
      error(root_pos, "missing required key 'kind' (kind: Policy)");
    }
    if (const Field* f = find(top, "metadata")) {
      metadata(*f, policy);
    } else {
      error(root_pos, "missing required key 'metadata' (metadata: {name: ...})");
    }
    if (const Field* f = find(top, "include")) include(*f);
    if (const Field* f = find(top, "spec")) spec(*f, policy);

    if (reporter_.has_errors()) return std::nullopt;
    return policy;
  }

  // The `include:` entries, as written (resolved by parse_policy).
  const std::vector<IncludeRef>& include_refs() const { return include_refs_; }

 private:
  void error(Position pos, std::string message) { reporter_.error(pos, std::move(message)); }

  static Position value_pos(const Field& f) { return pos_of(f.value.Mark()); }

  Fields fields(const YAML::Node& map, std::span<const std::string_view> allowed, std::string_view where) {
    return yaml::mapping_fields(map, {allowed, "key", where}, reporter_);
  }

  // Checks that a field holds the kind of node wanted. A null value (key
  // with nothing after it) is reported at the key: yaml-cpp marks an empty
  // value at wherever the next token starts.
  bool expect(const Field& f, YAML::NodeType::value type, const std::string& name, bool required = false) {
    const char* wanted = type == YAML::NodeType::Map        ? "a mapping"
                         : type == YAML::NodeType::Sequence ? "a list"
                                                            : "a scalar";
    if (f.value.IsNull()) {
      const char* hint = type == YAML::NodeType::Map        ? " (write a mapping, or remove the key)"
                         : type == YAML::NodeType::Sequence ? " (write a list such as [], or remove the key)"
                                                            : "";
      error(f.key_pos, name + " has no value" + (required ? "" : hint));
      return false;
    }
    if (f.value.Type() != type) {
      error(value_pos(f), name + " must be " + wanted + ", got " + describe(f.value));
      return false;
    }
    return true;
  }

  std::optional<std::string> scalar(const Field& f, const std::string& name) {
    if (!expect(f, YAML::NodeType::Scalar, name)) return std::nullopt;
    return f.value.Scalar();
  }

  // Where a null list entry is. yaml-cpp marks an empty entry ("- " with
  // nothing after it) at the next token, so trust the mark only when an
  // explicit null literal is written there; otherwise point at the list.
  Position null_item_pos(const YAML::Node& list, const YAML::Node& item) const {
    const YAML::Mark mark = item.Mark();
    if (!mark.is_null() && mark.pos >= 0 && static_cast<size_t>(mark.pos) < text_.size()) {
      const std::string_view at = text_.substr(static_cast<size_t>(mark.pos));
      for (std::string_view literal : {"~", "null", "Null", "NULL"}) {
        if (at.starts_with(literal)) return pos_of(mark);
      }
    }
    return pos_of(list.Mark());
  }

  // Calls fn(text, position, name) for each scalar of a list; reports the
  // other entries.
  template <class Fn>
  void for_each_scalar(const YAML::Node& list, const std::string& name, Fn&& fn) {
    size_t index = 0;
    for (const auto& item : list) {
      const std::string item_name = name + "[" + std::to_string(index++) + "]";
      if (item.IsScalar()) {
        fn(item.Scalar(), pos_of(item.Mark()), item_name);
      } else if (item.IsNull()) {
        error(null_item_pos(list, item), item_name + " is empty (null)");
      } else {
        error(pos_of(item.Mark()), item_name + " must be a string, got " + describe(item));
      }
    }
  }

  void metadata(const Field& f, Policy& policy) {
    if (!expect(f, YAML::NodeType::Map, "metadata", /*required=*/true)) return;
    const Fields meta = fields(f.value, kMetadataKeys, "in metadata");
    const Field* name = find(meta, "name");
    if (!name) {
      error(f.key_pos, "missing required key 'name' in metadata");
      return;
    }
    auto v = scalar(*name, "metadata.name");
    if (!v) return;
    if (!valid_policy_name(*v)) {
      error(value_pos(*name), "invalid metadata.name " + quote(*v) + ": use " + std::string(kPolicyNameRule) +
                                  did_you_mean_policy_name(*v));
      return;
    }
    policy.name = *v;
    policy.name_pos = value_pos(*name);
  }

  // include: [FILE, ...]: other policy files whose rules this one takes
  // (policy.h, "Includes"). A path: relative to this file's directory, or
  // absolute; a YAML file.
  void include(const Field& f) {
    if (!expect(f, YAML::NodeType::Sequence, "include")) return;
    for_each_scalar(f.value, "include", [&](const std::string& text, Position pos, const std::string& name) {
      const std::filesystem::path p(text);
      const std::string ext = p.extension().string();
      if (text.empty() || p.filename().empty() || (ext != ".yaml" && ext != ".yml")) {
        error(pos, name + ": " + quote(text) +
                       " is not a policy file (FILE.yaml, relative to this file's "
                       "directory or absolute)");
        return;
      }
      for (const auto& r : include_refs_)
        if (r.path == text) {
          error(pos, name + ": " + quote(text) + " is included twice");
          return;
        }
      include_refs_.push_back(IncludeRef{text, pos});
    });
  }

  void spec(const Field& f, Policy& policy) {
    if (!expect(f, YAML::NodeType::Map, "spec")) return;
    const Fields keys = fields(f.value, kSpecKeys, "in spec");
    if (const Field* mode = find(keys, "mode")) {
      if (auto v = scalar(*mode, "mode")) {
        if (auto m = parse_mode(*v))
          policy.mode = *m;
        else
          error(value_pos(*mode), m.error().message);
      }
    }
    if (const Field* exec = find(keys, "exec")) this->exec(*exec, policy);
    if (const Field* files = find(keys, "files")) this->files(*files, policy);
    if (const Field* network = find(keys, "network")) this->network(*network, policy);
    if (const Field* syscalls = find(keys, "syscalls")) this->syscalls(*syscalls, policy);
    if (const Field* limits = find(keys, "limits")) this->limits(*limits, policy.limits);
  }

  void exec(const Field& f, Policy& policy) {
    if (!expect(f, YAML::NodeType::Map, "exec")) return;
    const Fields keys = fields(f.value, kExecKeys, "in exec");
    permit(keys, "native_code", policy.native_code);
    permit(keys, "debugging", policy.debugging);
    const Field* allow = find(keys, "allow");
    if (!allow || !expect(*allow, YAML::NodeType::Sequence, "exec.allow")) return;
    for_each_scalar(allow->value, "exec.allow",
                    [&](const std::string& text, Position pos, const std::string& name) {
                      auto path = parse_exec_path(text);
                      if (!path) {
                        error(pos, name + ": " + path.error().message);
                        return;
                      }
                      ExecEntry entry{*path, *path, pos};
                      if (options_.check_exec_exists && !check_program(entry, name)) return;
                      if (is_dynamic_loader(entry.path) || is_dynamic_loader(entry.resolved)) {
                        error(pos, name + ": " + quote(entry.path) +
                                       " is the dynamic loader: allowing it lets the sandbox run any "
                                       "program it can read (`ld.so /path/to/program`); allow the "
                                       "programs themselves");
                        return;
                      }
                      policy.exec_allow.push_back(std::move(entry));
                    });
  }

  // exec.native_code / exec.debugging: 'deny' or 'allow', nothing else.
  void permit(const Fields& keys, const char* key, Permit& out) {
    const Field* f = find(keys, key);
    if (!f) return;
    const std::string name = std::string("exec.") + key;
    auto v = scalar(*f, name);
    if (!v) return;
    if (*v == "deny") {
      out = Permit::deny;
    } else if (*v == "allow") {
      out = Permit::allow;
    } else {
      static constexpr std::string_view kPermits[] = {"deny", "allow"};
      error(value_pos(*f), name + ": invalid value " + quote(*v) + " (expected 'deny' or 'allow')" +
                               did_you_mean(*v, kPermits));
    }
  }

  // ld-linux-x86-64.so.2, ld-linux-aarch64.so.1, ld64.so.2, ld-musl-*.so.1,
  // Where the ELF interpreters of the ABIs Debian ships live.
  static constexpr const char* kDynamicLoaders[] = {
      "/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux.so.2",
      "/libx32/ld-linux-x32.so.2",   "/lib/ld-linux-armhf.so.3",   "/lib/ld-musl-x86_64.so.1",
      "/lib/ld-musl-aarch64.so.1"};

  // The program must be there now: a policy naming a missing interpreter is
  // a typo or a policy for another machine, and either way it would deny
  // what its author wanted to allow. Records the realpath, the file the
  // kernel will see being executed.
  bool check_program(ExecEntry& entry, const std::string& name) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(entry.path, ec);
    if (st.type() == fs::file_type::not_found) {
      error(entry.pos, name + ": program " + quote(entry.path) + " does not exist");
      return false;
    }
    if (ec) {
      error(entry.pos, name + ": cannot check program " + quote(entry.path) + ": " + ec.message());
      return false;
    }
    if (st.type() == fs::file_type::directory) return check_program_directory(entry, name);
    if (st.type() != fs::file_type::regular) {
      error(entry.pos, name + ": " + quote(entry.path) + " is neither a program nor a directory of programs");
      return false;
    }
    constexpr auto any_exec = fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec;
    if ((st.permissions() & any_exec) == fs::perms::none) {
      error(entry.pos, name + ": " + quote(entry.path) + " is not executable (no execute permission)");
      return false;
    }
    const fs::path real = fs::canonical(entry.path, ec);
    if (ec) {
      error(entry.pos, name + ": cannot resolve " + quote(entry.path) + ": " + ec.message());
      return false;
    }
    entry.resolved = real.string();
    return true;
  }

  // A directory: every program installed under it may run (a coding
  // agent's /usr/bin). Not "/", and not a directory that holds the dynamic
  // loader, which would run any file the run can read.
  bool check_program_directory(ExecEntry& entry, const std::string& name) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path real = fs::canonical(entry.path, ec);
    if (ec) {
      error(entry.pos, name + ": cannot resolve " + quote(entry.path) + ": " + ec.message());
      return false;
    }
    if (real == "/") {
      error(entry.pos, name + ": " + quote(entry.path) +
                           " is the root directory: that would allow every file " +
                           "to run; name the directories of programs (e.g. /usr/bin)");
      return false;
    }
    const std::string dir = real.string();
    for (const char* loader : kDynamicLoaders) {
      const fs::path l = fs::canonical(loader, ec);
      if (ec) continue;
      const std::string lp = l.string();
      if (lp.size() > dir.size() && lp.compare(0, dir.size(), dir) == 0 && lp[dir.size()] == '/') {
        error(entry.pos, name + ": the directory " + quote(entry.path) + " holds the dynamic loader " + lp +
                             ": allowing it lets the sandbox run any program it can read (`ld.so "
                             "/path/to/program`); allow the directories of programs (e.g. /usr/bin)");
        return false;
      }
    }
    // Any ELF interpreter under it (a runtime's own glibc, a sysroot), by
    // name as for a single program, within a bound: a tree too large to
    // look through is refused rather than trusted.
    constexpr size_t kMaxEntries = 100000;
    size_t seen = 0;
    ec.clear();
    for (auto it = fs::recursive_directory_iterator(real, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (++seen > kMaxEntries) {
        error(entry.pos, name + ": the directory " + quote(entry.path) + " holds more than " +
                             std::to_string(kMaxEntries) +
                             " entries, too many to check for a dynamic loader; allow a narrower directory");
        return false;
      }
      std::error_code type_ec;
      if (it->is_regular_file(type_ec) && !it->is_symlink(type_ec) &&
          is_dynamic_loader(it->path().filename().string())) {
        error(entry.pos, name + ": the directory " + quote(entry.path) + " holds the dynamic loader " +
                             it->path().string() +
                             ": allowing it lets the sandbox run any program it can read (`ld.so "
                             "/path/to/program`); allow the directories of programs (e.g. /usr/bin)");
        return false;
      }
    }
    if (ec) {
      error(entry.pos,
            name + ": cannot look through the directory " + quote(entry.path) + ": " + ec.message());
      return false;
    }
    entry.resolved = dir;
    entry.directory = true;
    return true;
  }

  void files(const Field& f, Policy& policy) {
    if (!expect(f, YAML::NodeType::Map, "files")) return;
    const Fields keys = fields(f.value, kFilesKeys, "in files");
    struct List {
      const char* key;
      std::vector<PathEntry>* out;
    };
    for (const List list :
         {List{"read", &policy.read}, List{"write", &policy.write}, List{"deny", &policy.deny}}) {
      const Field* field = find(keys, list.key);
      const std::string name = std::string("files.") + list.key;
      if (!field || !expect(*field, YAML::NodeType::Sequence, name)) continue;
      for_each_scalar(
          field->value, name, [&](const std::string& text, Position pos, const std::string& item) {
            if (list.out == &policy.deny) {
              auto pattern = parse_name_pattern(text);
              if (!pattern) {
                error(pos, item + ": " + pattern.error().message);
                return;
              }
              if (*pattern) {
                policy.deny_names.push_back(
                    NamePattern{(*pattern)->suffix ? NamePattern::Kind::suffix : NamePattern::Kind::name,
                                std::move((*pattern)->text), pos});
                return;
              }
            }
            auto path = parse_file_path(text);
            if (!path) {
              error(pos, item + ": " + path.error().message);
              return;
            }
            list.out->push_back(PathEntry{std::move(path->path), path->in_workspace, pos});
          });
    }
  }

  void network(const Field& f, Policy& policy) {
    if (!expect(f, YAML::NodeType::Map, "network")) return;
    const Fields keys = fields(f.value, kNetworkKeys, "in network");
    if (const Field* allow = find(keys, "allow")) net_rules(*allow, "network.allow", policy.network_allow);
    if (const Field* listen = find(keys, "listen"))
      net_rules(*listen, "network.listen", policy.network_listen);
  }

  // network.allow (destinations) or network.listen (local addresses): the
  // same entry shape; listen entries name what a run may bind and listen
  // on, so a unix path there is refused (files.write decides socket files).
  void net_rules(const Field& list, const std::string& key, std::vector<NetRule>& out) {
    if (!expect(list, YAML::NodeType::Sequence, key)) return;
    const bool listen = key == "network.listen";
    size_t index = 0;
    for (const auto& item : list.value) {
      const std::string name = key + "[" + std::to_string(index++) + "]";
      if (item.IsNull()) {
        error(null_item_pos(list.value, item), name + " is empty (null)");
      } else if (!item.IsMap()) {
        error(pos_of(item.Mark()),
              name + " must be a mapping such as " +
                  (listen ? "{cidr: 127.0.0.1/32, ports: [8000], protocol: tcp} or {unix: \"@name\"}"
                          : "{cidr: 10.0.0.0/8, ports: [443]} or {unix: /run/app.sock}") +
                  ", got " + describe(item));
      } else if (auto rule = net_rule(item, name)) {
        if (listen && rule->kind == NetRule::Kind::domain) {
          error(rule->pos, name +
                               ": a domain names a destination; network.listen takes a cidr or an "
                               "abstract name \"@name\"");
        } else if (listen && rule->kind == NetRule::Kind::unix_path) {
          error(rule->pos, name + ": a unix socket at a path is a file; allow creating it with files.write " +
                               "(network.listen takes a cidr or an abstract name \"@name\")");
        } else {
          out.push_back(std::move(*rule));
        }
      }
    }
  }

  std::optional<NetRule> net_rule(const YAML::Node& item, const std::string& name) {
    const size_t errors_before = reporter_.count();
    const Fields rule_fields = fields(item, kRuleKeys, "in network rule");
    NetRule rule;
    rule.pos = pos_of(item.Mark());
    const Field* cidr = find(rule_fields, "cidr");
    const Field* unix_socket = find(rule_fields, "unix");
    const Field* domain = find(rule_fields, "domain");
    const Field* ports = find(rule_fields, "ports");
    const Field* protocol = find(rule_fields, "protocol");

    if (int(cidr != nullptr) + int(unix_socket != nullptr) + int(domain != nullptr) > 1) {
      error((domain ? domain : unix_socket)->key_pos,
            name + ": a rule has one of 'cidr', 'domain' or 'unix', not several");
    } else if (!cidr && !unix_socket && !domain) {
      error(rule.pos,
            name + ": a rule needs 'cidr' or 'domain' (with optional ports and protocol) or 'unix'");
    }
    if (domain) {
      if (auto v = scalar(*domain, name + ".domain")) {
        if (auto parsed = parse_domain(*v)) {
          rule.kind = NetRule::Kind::domain;
          rule.domain = std::move(parsed->name);
          rule.wildcard = parsed->wildcard;
        } else {
          error(value_pos(*domain), name + ".domain: " + parsed.error().message);
        }
      }
    }
    if (unix_socket) {
      // A unix socket has no ports and one protocol family of its own.
      if (ports) error(ports->key_pos, name + ": unix rules take no 'ports'");
      if (protocol) error(protocol->key_pos, name + ": unix rules take no 'protocol'");
      if (auto v = scalar(*unix_socket, name + ".unix")) {
        if (auto target = parse_unix_target(*v)) {
          rule.kind = target->abstract ? NetRule::Kind::unix_abstract : NetRule::Kind::unix_path;
          rule.unix_name = std::move(target->name);
        } else {
          error(value_pos(*unix_socket), name + ".unix: " + target.error().message);
        }
      }
    }
    if (cidr) {
      if (auto v = scalar(*cidr, name + ".cidr")) {
        if (auto parsed = parse_cidr(*v)) {
          rule.kind = NetRule::Kind::cidr;
          rule.family = parsed->family;
          rule.addr = parsed->addr;
          rule.prefix_len = parsed->prefix_len;
        } else {
          error(value_pos(*cidr), name + ".cidr: " + parsed.error().message);
        }
      }
    }
    if (ports && !unix_socket && expect(*ports, YAML::NodeType::Sequence, name + ".ports")) {
      if (ports->value.size() == 0) {
        error(value_pos(*ports), name + ".ports is empty (omit 'ports' to allow all ports)");
      }
      for_each_scalar(ports->value, name + ".ports",
                      [&](const std::string& text, Position pos, const std::string& item_name) {
                        if (auto range = parse_port_range(text)) {
                          if (domain && range->first != range->last) {
                            error(pos, item_name +
                                           ": a domain rule lists single ports, not a range (each "
                                           "port is pinned for each address the name resolves to)");
                          } else if (domain && rule.ports.size() >= kMaxDomainPorts) {
                            error(pos, item_name + ": a domain rule lists at most " +
                                           std::to_string(kMaxDomainPorts) + " ports");
                          }
                          rule.ports.push_back(*range);
                        } else {
                          error(pos, item_name + ": " + range.error().message);
                        }
                      });
    }
    if (protocol && !unix_socket) {
      if (auto v = scalar(*protocol, name + ".protocol")) {
        if (*v == "tcp") {
          rule.protocol = Protocol::tcp;
        } else if (*v == "udp") {
          rule.protocol = Protocol::udp;
        } else if (*v == "any") {
          rule.protocol = Protocol::any;
        } else {
          static constexpr std::string_view kProtocols[] = {"tcp", "udp", "any"};
          error(value_pos(*protocol), name + ".protocol: invalid protocol " + quote(*v) +
                                          " (expected 'tcp', 'udp' or 'any')" + did_you_mean(*v, kProtocols));
        }
      }
    }
    if (reporter_.count() != errors_before) return std::nullopt;
    return rule;
  }

  // syscalls.allow: names of groups in policy/syscalls.h.
  void syscalls(const Field& f, Policy& policy) {
    if (!expect(f, YAML::NodeType::Map, "syscalls")) return;
    const Fields keys = fields(f.value, kSyscallsKeys, "in syscalls");
    const Field* allow = find(keys, "allow");
    if (!allow || !expect(*allow, YAML::NodeType::Sequence, "syscalls.allow")) return;
    const std::vector<std::string_view> names = syscall_group_names();
    for_each_scalar(allow->value, "syscalls.allow",
                    [&](const std::string& text, Position pos, const std::string& name) {
                      if (!find_syscall_group(text)) {
                        std::string known;
                        for (std::string_view n : names)
                          known += (known.empty() ? "" : ", ") + std::string(n);
                        error(pos, name + ": unknown system-call group " + quote(text) +
                                       did_you_mean(text, names) + "; groups: " + known);
                        return;
                      }
                      if (std::find(policy.syscalls_allow.begin(), policy.syscalls_allow.end(), text) ==
                          policy.syscalls_allow.end())
                        policy.syscalls_allow.push_back(text);
                    });
  }

  // One limits value: a scalar given to its value parser, or `unlimited`.
  template <class T, class Parse>
  void limit(const Fields& keys, const char* key, std::optional<T>& out, bool& unlimited, Parse parse) {
    const Field* f = find(keys, key);
    if (!f) return;
    const std::string name = std::string("limits.") + key;
    auto v = scalar(*f, name);
    if (!v) return;
    if (*v == kUnlimited) {
      unlimited = true;
      return;
    }
    auto parsed = parse(*v);
    if (!parsed) {
      error(value_pos(*f), name + ": " + parsed.error().message);
      return;
    }
    out = *parsed;
  }

  void limits(const Field& f, Limits& out) {
    if (!expect(f, YAML::NodeType::Map, "limits")) return;
    const Fields keys = fields(f.value, kLimitsKeys, "in limits");
    limit(keys, "memory", out.memory_bytes, out.unlimited.memory, parse_size);
    limit(keys, "pids", out.pids, out.unlimited.pids, parse_pids);
    limit(keys, "cpu", out.cpus, out.unlimited.cpu, parse_cpus);
    limit(keys, "timeout", out.timeout, out.unlimited.timeout, parse_duration);
    limit(keys, "disk", out.disk_bytes, out.unlimited.disk, parse_size);
  }

  Reporter& reporter_;
  std::string_view text_;
  const ParseOptions& options_;
  std::vector<IncludeRef> include_refs_;
};

// One document and, depth first, what it includes. `chain`: the files
// being included on the way here (a cycle is an error).
ParseResult parse_document(std::string_view text, const std::string& filename, const ParseOptions& options,
                           std::vector<std::string>& chain) {
  Reporter reporter(filename);
  ParseResult result;
  const yaml::InputKind kind{.noun = "policy", .place = "policies", .max_bytes = options.max_bytes};
  std::vector<IncludeRef> refs;
  if (const auto root = yaml::load_document(text, kind, reporter)) {
    Validator v(reporter, text, options);
    result.policy = v.run(*root);
    refs = v.include_refs();
  }
  result.errors = reporter.take();
  if (!result.errors.empty() || !result.policy) {
    result.policy.reset();
    return result;
  }
  Policy& policy = *result.policy;
  IncludedLimits from_includes;
  for (const IncludeRef& ref : refs) {
    auto fail = [&](const std::string& message) {
      result.errors.push_back(
          yaml::Diagnostic{filename, ref.pos, "include " + quote(ref.path) + ": " + message});
    };
    const std::string path = resolve_include(filename, ref.path);
    if (std::find(result.included_files.begin(), result.included_files.end(), path) ==
        result.included_files.end())
      result.included_files.push_back(path);
    if (std::find(chain.begin(), chain.end(), path) != chain.end()) {
      std::string cycle;
      for (const auto& c : chain) cycle += c + " -> ";
      fail("an include cycle (" + cycle + path + ")");
      continue;
    }
    if (chain.size() > kMaxIncludeDepth) {
      fail("includes nest deeper than " + std::to_string(kMaxIncludeDepth) + " files");
      continue;
    }
    auto included_text = read_policy_text(path, options);
    if (!included_text) {
      fail(path + ": " + included_text.error().message);
      continue;
    }
    chain.push_back(path);
    ParseResult sub = parse_document(*included_text, path, options, chain);
    chain.pop_back();
    for (const auto& f : sub.included_files)
      if (std::find(result.included_files.begin(), result.included_files.end(), f) ==
          result.included_files.end())
        result.included_files.push_back(f);
    if (!sub.ok()) {
      result.errors.insert(result.errors.end(), sub.errors.begin(), sub.errors.end());
      fail(path + " is not valid (errors above)");
      continue;
    }
    merge_included(policy, std::move(*sub.policy), path, std::move(*included_text), ref.pos, from_includes);
  }
  if (!result.errors.empty()) {
    result.policy.reset();
    return result;
  }
  apply_included_limits(policy, from_includes);
  return result;
}

}  // namespace

ParseResult parse_policy(std::string_view text, const std::string& filename, const ParseOptions& options) {
  std::vector<std::string> chain{resolve_include("", filename)};
  return parse_document(text, filename, options, chain);
}

}  // namespace agentcage::policy
