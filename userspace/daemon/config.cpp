// SPDX-License-Identifier: Apache-2.0
#include "daemon/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include <agentcage/abi.h>

#include "policy/name.h"
#include "policy/values.h"
#include "util/text.h"
#include "yaml/document.h"

namespace agentcage::daemon {
namespace {

using yaml::pos_of;
using yaml::Reporter;

constexpr size_t kMaxConfigBytes = 64 * 1024;
static_assert(kMaxBindingPath == AC_BINDING_PATH_MAX - 2, "what the kernel's binding key can tell apart");
// The same input guard as policies; an empty file (or only comments) is
// valid and means "all defaults".
constexpr yaml::InputKind kConfigInput{.noun = "configuration",
                                       .place = "the daemon configuration",
                                       .max_bytes = kMaxConfigBytes,
                                       .empty_is_valid = true};

bool parse_port(std::string_view text) {
  if (text.empty() || text.size() > 5) return false;
  unsigned v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && p == text.data() + text.size() && v <= 65535;
}

// Absolute, no NUL, bounded.
bool absolute_path(const std::string& s) { return !s.empty() && s.front() == '/' && s.size() < 4096; }

constexpr std::array<std::string_view, 3> kTlsKeys = {"cert_file", "key_file", "client_ca_file"};
constexpr std::array<std::string_view, 1> kBasicAuthKeys = {"users_file"};
// A binding's cgroup path as written (`cgroup:`): below the cgroup2 root,
// with or without a leading '/', plain components. Normalised to "/a/b".
std::optional<std::string> cgroup_key_path(const std::string& text) {
  std::string out;
  size_t at = text.starts_with('/') ? 1 : 0;
  if (at >= text.size()) return std::nullopt;
  while (at <= text.size()) {
    size_t end = text.find('/', at);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(at, end - at);
    if (part.empty() || part == "." || part == "..") return std::nullopt;
    for (char c : part)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return std::nullopt;
    out += "/" + part;
    at = end + 1;
  }
  return out;
}

// `attach:`, a list of {unit: NAME [, slice: NAME] | cgroup: PATH, policy:
// NAME [, workspace: DIR]}.
void parse_bindings(const YAML::Node& list, const std::string& key, Reporter& rep,
                    std::vector<BindingConfig>& out) {
  if (list.IsNull()) return;
  if (!list.IsSequence()) {
    rep.error(pos_of(list.Mark()), key + ": expected a list of {unit: NAME, policy: NAME} or {cgroup: PATH, "
                                         "policy: NAME} entries (each with an optional workspace: DIR)");
    return;
  }
  static constexpr std::string_view kKeys[] = {"unit", "slice", "cgroup", "policy", "workspace"};
  for (const auto& entry : list) {
    const auto pos = pos_of(entry.Mark());
    if (!entry.IsMap()) {
      rep.error(pos, key + ": each entry is a mapping {unit: NAME, policy: NAME}");
      continue;
    }
    const auto fields = yaml::mapping_fields(entry, {kKeys, "key", "in an attach entry"}, rep);
    auto text = [&](std::string_view k) -> std::optional<std::string> {
      const yaml::Field* f = yaml::find(fields, k);
      if (!f) return std::nullopt;
      if (!f->value.IsScalar() || f->value.Scalar().empty()) {
        rep.error(pos_of(f->value.Mark()), std::string(k) + ": expected a single value");
        return std::nullopt;
      }
      return f->value.Scalar();
    };
    auto at = [&](std::string_view k) { return pos_of(yaml::find(fields, k)->value.Mark()); };
    BindingConfig b;
    b.pos = pos;
    const auto unit = text("unit"), slice = text("slice"), cgroup = text("cgroup"), policy = text("policy"),
               workspace = text("workspace");
    if (unit.has_value() == cgroup.has_value()) {
      rep.error(pos, key + ": an entry names exactly one of unit: (a systemd unit) or cgroup: (a path below the "
                           "cgroup2 mount, for hosts without systemd)");
    } else if (unit) {
      if (auto path = unit_cgroup_path(*unit, slice.value_or("")); !path) {
        rep.error(at(slice && !path.error().message.starts_with("unit") ? "slice" : "unit"),
                  path.error().message);
      } else {
        b.name = *unit;
        b.cgroup = *path;
      }
    } else {
      if (slice) rep.error(at("slice"), "slice: goes with unit:, not with cgroup: (write the whole path)");
      if (auto path = cgroup_key_path(*cgroup); !path) {
        rep.error(at("cgroup"), "cgroup: expected a path below the cgroup2 mount (e.g. agents/runner), with no "
                                "empty, '.' or '..' component, got " + quote(*cgroup));
      } else {
        b.name = *cgroup;
        b.cgroup = *path;
      }
    }
    if (!b.cgroup.empty() && b.cgroup.size() > kMaxBindingPath)
      rep.error(pos, "the cgroup path " + b.cgroup + " is longer than " + std::to_string(kMaxBindingPath) +
                         " bytes, the most a binding takes");
    if (!policy) {
      rep.error(pos, key + ": the entry needs policy: NAME (a policy of policy_dir)");
    } else if (!policy::valid_policy_name(*policy)) {
      rep.error(at("policy"), "policy: " + quote(*policy) + " is not a policy name (" +
                                  std::string(policy::kPolicyNameRule) + ")" +
                                  policy::did_you_mean_policy_name(*policy));
    } else {
      b.policy = *policy;
    }
    if (workspace) {
      if (!absolute_path(*workspace) || *workspace == "/")
        rep.error(at("workspace"), "workspace: expected an absolute directory other than /, got " + quote(*workspace));
      else
        b.workspace = *workspace;
    }
    if (b.cgroup.empty() || b.policy.empty()) continue;
    // One binding per cgroup, and none inside another's: scopes do not nest.
    bool clash = false;
    for (const auto& other : out) {
      auto inside = [](const std::string& inner, const std::string& outer) {
        return inner == outer ||
               (inner.size() > outer.size() && inner.starts_with(outer) && inner[outer.size()] == '/');
      };
      if (inside(b.cgroup, other.cgroup) || inside(other.cgroup, b.cgroup)) {
        rep.error(pos, key + ": " + b.cgroup + (b.cgroup == other.cgroup ? " is bound already" : " and " + other.cgroup +
                       " nest") + " (line " + std::to_string(other.pos.line) +
                       "); scopes do not nest: bind the outer one only");
        clash = true;
        break;
      }
    }
    if (!clash) out.push_back(std::move(b));
  }
}

}  // namespace

policy::Limits Config::default_run_caps() {
  policy::Limits caps;
  caps.memory_bytes = uint64_t{4} << 30;  // 4Gi
  caps.pids = 4096;
  caps.timeout = std::chrono::hours(1);
  caps.disk_bytes = uint64_t{4} << 30;  // 4Gi
  return caps;
}

Result<std::string> unit_cgroup_path(std::string_view unit, std::string_view slice) {
  // systemd's unit name rules (systemd.unit(5)): at most 255 bytes of
  // letters, digits and ":-_.\\", an "@" before an instance, a type suffix.
  auto bad = [&](const std::string& why) {
    return Error{"unit " + quote(std::string(unit)) + ": " + why, EINVAL};
  };
  if (unit.empty() || unit.size() > 255) return bad("a unit name is 1 to 255 bytes");
  const size_t dot = unit.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return bad("expected NAME.service, NAME.scope or NAME.slice");
  const std::string_view type = unit.substr(dot + 1), prefix = unit.substr(0, dot);
  if (type != "service" && type != "scope" && type != "slice")
    return bad("only services, scopes and slices have cgroups of their own (a ." + std::string(type) +
               " unit has none to bind)");
  size_t ats = 0;
  for (char c : prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ':' ||
                    c == '-' || c == '_' || c == '.' || c == '\\' || c == '@';
    if (!ok) return bad("'" + std::string(1, c) + "' is not allowed in a unit name (letters, digits, \":-_.\\\" and @)");
    ats += c == '@';
  }
  if (ats > 1 || prefix.front() == '@') return bad("a unit name has at most one '@', after its name");
  if (ats && prefix.back() == '@')
    return bad("a template has no cgroup; bind an instance (e.g. " + std::string(prefix) + "1." +
               std::string(type) + ")");
  if (type == "slice") {
    if (ats) return bad("a slice has no instances");
    if (prefix == "-") return bad("the root slice is the whole host; bind a slice below it");
    // "a-b-c.slice" lives in "a.slice/a-b.slice/a-b-c.slice".
    std::string path;
    for (size_t at = 0;;) {
      size_t dash = prefix.find('-', at);
      if (dash == at || (dash == std::string_view::npos && at == prefix.size()))
        return bad("a slice name's '-'-separated parts are not empty");
      if (dash == std::string_view::npos) break;
      path += "/" + std::string(prefix.substr(0, dash)) + ".slice";
      at = dash + 1;
    }
    return path + "/" + std::string(unit);
  }
  std::string parent = "/system.slice";
  if (!slice.empty()) {
    auto slice_path = unit_cgroup_path(slice, "");
    if (!slice_path || !slice.ends_with(".slice"))
      return Error{"slice " + quote(std::string(slice)) + ": expected a slice unit (NAME.slice)" +
                       (slice_path ? std::string() : ": " + slice_path.error().message),
                   EINVAL};
    parent = *slice_path;
  }
  return parent + "/" + std::string(unit);
}

bool valid_listen_address(std::string_view a) {
  if (a.empty() || a.size() > 255) return false;
  size_t colon = a.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view host = a.substr(0, colon), port = a.substr(colon + 1);
  if (!parse_port(port)) return false;
  if (host.empty()) return true;
  if (host.front() == '[') return host.size() > 2 && host.back() == ']';
  for (char c : host)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '-'))
      return false;
  return true;
}

ConfigResult parse_config(std::string_view text, const std::string& filename) {
  Reporter rep(filename);
  ConfigResult out;
  const auto root = yaml::load_document(text, kConfigInput, rep);
  if (!root) {
    out.errors = rep.take();
    return out;
  }
  Config cfg;
  if (root->IsNull()) {
    out.config = cfg;  // an empty file: all defaults
    return out;
  }
  if (!root->IsMap()) {
    rep.error(pos_of(root->Mark()),
              "the daemon configuration must be a mapping of settings (see docs/daemon.md)");
    out.errors = rep.take();
    return out;
  }

  auto scalar = [&](const YAML::Node& v, const std::string& key) -> std::optional<std::string> {
    if (!v.IsScalar()) {
      rep.error(pos_of(v.Mark()), key + ": expected a single value");
      return std::nullopt;
    }
    return v.Scalar();
  };
  auto path_setting = [&](std::string& field) {
    return [&](const YAML::Node& v, const std::string& key) {
      if (auto s = scalar(v, key)) {
        if (!absolute_path(*s))
          rep.error(pos_of(v.Mark()), key + ": expected an absolute path, got " + quote(*s));
        else
          field = *s;
      }
    };
  };
  auto count_setting = [&](size_t& field, size_t lo, size_t hi) {
    return [&, lo, hi](const YAML::Node& v, const std::string& key) {
      auto s = scalar(v, key);
      if (!s) return;
      size_t n = 0;
      auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), n);
      if (ec != std::errc() || p != s->data() + s->size() || n < lo || n > hi)
        rep.error(pos_of(v.Mark()), key + ": expected a whole number from " + std::to_string(lo) + " to " +
                                        std::to_string(hi) + ", got " + quote(*s));
      else
        field = n;
    };
  };

  // A mapping of absolute paths (metrics_tls, metrics_basic_auth): the
  // first `required` of `keys` must be there. The paths by key; empty on error.
  auto path_mapping = [&](const YAML::Node& v, const std::string& key, std::span<const std::string_view> keys,
                          size_t required) -> std::map<std::string_view, std::string> {
    std::map<std::string_view, std::string> paths;
    if (!v.IsMap()) {
      std::string shape;
      for (size_t i = 0; i < required; ++i) shape += (i ? ", " : "") + std::string(keys[i]) + ": /path";
      rep.error(pos_of(v.Mark()), key + ": expected a mapping {" + shape + "}");
      return paths;
    }
    const size_t errors = rep.count();
    const yaml::Fields fields = yaml::mapping_fields(v, {keys, "setting", "in " + key}, rep);
    for (size_t i = 0; i < keys.size(); ++i) {
      const yaml::Field* f = yaml::find(fields, keys[i]);
      if (!f) {
        if (i < required) rep.error(pos_of(v.Mark()), key + ": " + std::string(keys[i]) + " is required");
        continue;
      }
      const std::string name = key + "." + std::string(keys[i]);
      if (auto s = scalar(f->value, name)) {
        if (!absolute_path(*s))
          rep.error(pos_of(f->value.Mark()), name + ": expected an absolute path, got " + quote(*s));
        else
          paths[keys[i]] = *s;
      }
    }
    if (rep.count() != errors) paths.clear();
    return paths;
  };

  // A cap on runs through the daemon: a limit as a policy writes it, or
  // "unlimited" for none.
  auto cap_setting = [&](auto& field, auto parse) {
    return [&, parse](const YAML::Node& v, const std::string& key) {
      auto s = scalar(v, key);
      if (!s) return;
      if (*s == policy::kUnlimited) {
        field.reset();
        return;
      }
      auto parsed = parse(*s);
      if (!parsed)
        rep.error(pos_of(v.Mark()), key + ": " + parsed.error().message + " (or \"unlimited\")");
      else
        field = *parsed;
    };
  };

  using Handler = std::function<void(const YAML::Node&, const std::string&)>;
  const std::map<std::string, Handler> handlers = {
      {"policy_dir", path_setting(cfg.policy_dir)},
      {"control_socket", path_setting(cfg.control_socket)},
      {"pin_root", path_setting(cfg.pin_root)},
      {"state_dir", path_setting(cfg.state_dir)},
      {"metrics_address",
       [&](const YAML::Node& v, const std::string& key) {
         auto s = scalar(v, key);
         if (!s) return;
         if (s->empty() || *s == "off")
           cfg.metrics_address.clear();
         else if (!valid_listen_address(*s))
           rep.error(pos_of(v.Mark()),
                     key + ": expected HOST:PORT (e.g. 127.0.0.1:9477) or \"off\", got " + quote(*s));
         else
           cfg.metrics_address = *s;
       }},
      {"metrics_tls",
       [&](const YAML::Node& v, const std::string& key) {
         auto files = path_mapping(v, key, kTlsKeys, 2);
         if (!files.empty())
           cfg.metrics_tls = telemetry::TlsFiles{.cert_file = files["cert_file"],
                                                 .key_file = files["key_file"],
                                                 .client_ca_file = files["client_ca_file"]};
       }},
      {"metrics_basic_auth",
       [&](const YAML::Node& v, const std::string& key) {
         auto files = path_mapping(v, key, kBasicAuthKeys, 1);
         if (!files.empty()) cfg.metrics_users_file = files["users_file"];
       }},
      {"control_group",
       [&](const YAML::Node& v, const std::string& key) {
         auto s = scalar(v, key);
         if (!s) return;
         bool ok = !s->empty() && s->size() <= 32;
         for (char c : *s)
           ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '-' || c == '.');
         if (!ok)
           rep.error(pos_of(v.Mark()), key + ": expected a group name or number, got " + quote(*s));
         else
           cfg.control_group = *s;
       }},
      {"audit_log",
       [&](const YAML::Node& v, const std::string& key) {
         auto s = scalar(v, key);
         if (!s) return;
         if (*s != "-" && !absolute_path(*s))
           rep.error(pos_of(v.Mark()),
                     key + ": expected an absolute file path or \"-\" (stdout), got " + quote(*s));
         else
           cfg.audit_log = *s;
       }},
      {"cgroup_parent",
       [&](const YAML::Node& v, const std::string& key) {
         auto s = scalar(v, key);
         if (!s) return;
         bool ok = !s->empty() && s->front() != '/' && s->find("..") == std::string::npos && s->size() < 1024;
         if (!ok)
           rep.error(pos_of(v.Mark()),
                     key + ": expected a path relative to the cgroup2 mount (e.g. agentcage/runs), got " +
                         quote(*s));
         else
           cfg.cgroup_parent = *s;
       }},
      {"cgroup_layout",
       [&](const YAML::Node& v, const std::string& key) {
         auto s = scalar(v, key);
         if (!s) return;
         if (auto layout = cgroup::parse_layout_setting(*s))
           cfg.cgroup_layout = *layout;
         else
           rep.error(pos_of(v.Mark()), key + ": expected auto, delegated or fixed, got " + quote(*s));
       }},
      {"recent_events", count_setting(cfg.recent_events, 0, 65536)},
      {"ring_buffer_size",
       [&](const YAML::Node& v, const std::string& key) {
         auto s = scalar(v, key);
         if (!s) return;
         auto bytes = policy::parse_size(*s);
         const bool power_of_two = bytes && *bytes && (*bytes & (*bytes - 1)) == 0;
         if (!bytes || !power_of_two || *bytes < (64u << 10) || *bytes > (1u << 30))
           rep.error(pos_of(v.Mark()),
                     key + ": expected a power of two from 64Ki to 1Gi (e.g. 4Mi), got " + quote(*s));
         else
           cfg.ring_buffer_bytes = static_cast<uint32_t>(*bytes);
       }},
      {"client_buffer_bytes", count_setting(cfg.client_buffer_bytes, 4096, 64u << 20)},
      {"max_clients", count_setting(cfg.max_clients, 1, 1024)},
      {"max_clients_per_uid", count_setting(cfg.max_clients_per_uid, 1, 1024)},
      {"max_runs", count_setting(cfg.max_runs, 0, 4096)},
      {"max_runs_per_client", count_setting(cfg.max_runs_per_client, 1, 4096)},
      {"run_max_memory", cap_setting(cfg.run_caps.memory_bytes, policy::parse_size)},
      {"run_max_pids", cap_setting(cfg.run_caps.pids, policy::parse_pids)},
      {"run_max_cpu", cap_setting(cfg.run_caps.cpus, policy::parse_cpus)},
      {"run_max_timeout", cap_setting(cfg.run_caps.timeout, policy::parse_duration)},
      {"run_max_disk", cap_setting(cfg.run_caps.disk_bytes, policy::parse_size)},
      {"attach", [&](const YAML::Node& v, const std::string& key) { parse_bindings(v, key, rep, cfg.attach); }},
  };
  std::vector<std::string_view> known;
  for (const auto& [k, h] : handlers) known.push_back(k);
  for (const auto& [key, field] : yaml::mapping_fields(*root, {known, "setting"}, rep)) {
    handlers.at(key)(field.value, key);
  }
  // TLS or basic auth for an endpoint that is off would protect nothing:
  // likely a mistake that would leave the operator believing it is on.
  if (cfg.metrics_address.empty() && (cfg.metrics_tls || cfg.metrics_users_file)) {
    const std::string key = cfg.metrics_tls ? "metrics_tls" : "metrics_basic_auth";
    rep.error(
        pos_of((*root)[key].Mark()),
        key + ": set, but metrics_address is \"off\"; give metrics_address a HOST:PORT or remove " + key);
  }
  if (rep.has_errors()) {
    out.errors = rep.take();
    return out;
  }
  out.config = cfg;
  return out;
}

std::vector<ConfigChange> config_changes(const Config& a, const Config& b) {
  struct Setting {
    const char* key;
    bool live;
    bool same;
  };
  const policy::Limits &ca = a.run_caps, &cb = b.run_caps;
  const Setting settings[] = {
      {"policy_dir", false, a.policy_dir == b.policy_dir},
      {"control_socket", false, a.control_socket == b.control_socket},
      {"pin_root", false, a.pin_root == b.pin_root},
      {"state_dir", false, a.state_dir == b.state_dir},
      {"cgroup_layout", false, a.cgroup_layout == b.cgroup_layout},
      {"cgroup_parent", false, a.cgroup_parent == b.cgroup_parent},
      {"ring_buffer_size", false, a.ring_buffer_bytes == b.ring_buffer_bytes},
      {"metrics_address", true, a.metrics_address == b.metrics_address},
      {"metrics_tls", true, a.metrics_tls == b.metrics_tls},
      {"metrics_basic_auth", true, a.metrics_users_file == b.metrics_users_file},
      {"control_group", true, a.control_group == b.control_group},
      {"audit_log", true, a.audit_log == b.audit_log},
      {"recent_events", true, a.recent_events == b.recent_events},
      {"client_buffer_bytes", true, a.client_buffer_bytes == b.client_buffer_bytes},
      {"max_clients", true, a.max_clients == b.max_clients},
      {"max_clients_per_uid", true, a.max_clients_per_uid == b.max_clients_per_uid},
      {"max_runs", true, a.max_runs == b.max_runs},
      {"max_runs_per_client", true, a.max_runs_per_client == b.max_runs_per_client},
      {"run_max_memory", true, ca.memory_bytes == cb.memory_bytes},
      {"run_max_pids", true, ca.pids == cb.pids},
      {"run_max_cpu", true, ca.cpus == cb.cpus},
      {"run_max_timeout", true, ca.timeout == cb.timeout},
      {"run_max_disk", true, ca.disk_bytes == cb.disk_bytes},
      {"attach", true,
       std::equal(a.attach.begin(), a.attach.end(), b.attach.begin(), b.attach.end(),
                  [](const BindingConfig& x, const BindingConfig& y) {
                    return x.name == y.name && x.cgroup == y.cgroup && x.policy == y.policy &&
                           x.workspace == y.workspace;
                  })},
  };
  std::vector<ConfigChange> out;
  for (const Setting& s : settings)
    if (!s.same) out.push_back({s.key, s.live});
  return out;
}

ConfigResult load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ConfigResult r;
    r.errors.push_back({path, {}, "cannot read the configuration: " + std::string(std::strerror(errno))});
    return r;
  }
  std::string text;
  text.resize(kMaxConfigBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return parse_config(text, path);
}

}  // namespace agentcage::daemon
