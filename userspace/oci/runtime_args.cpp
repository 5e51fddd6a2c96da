// SPDX-License-Identifier: Apache-2.0
#include "oci/runtime_args.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <string_view>

#include "util/text.h"

namespace agentcage::oci {
namespace {

using namespace std::string_view_literals;

Error bad(const std::string& msg) { return Error{"runtime arguments: " + msg, EINVAL}; }

// The global flags of runc 1.1 and crun 1.8 that take a value, and those that
// do not. runc (urfave/cli) also accepts each with one dash ("-root").
constexpr std::array kGlobalWithValue = {"root"sv, "log"sv, "log-format"sv, "criu"sv, "rootless"sv,
                                         "cgroup-manager"sv, "log-level"sv};
constexpr std::array kGlobalSwitches = {"debug"sv, "systemd-cgroup"sv, "help"sv, "version"sv, "usage"sv};
constexpr std::array kGlobalShort = {"-h"sv, "-v"sv, "-V"sv, "-?"sv};

// The flags of create, run and restore that take a value (runc and crun),
// besides the bundle's; a word after one of them is its value, never the
// bundle or id.
constexpr std::array kCreateWithValue = {"console-socket"sv,      "pid-file"sv,  "preserve-fds"sv,
                                         "image-path"sv,          "work-path"sv, "parent-path"sv,
                                         "manage-cgroups-mode"sv, "empty-ns"sv,  "lsm-profile"sv,
                                         "lsm-mount-context"sv,   "status-fd"sv, "page-server"sv,
                                         "pidfd-socket"sv};

template <size_t N>
bool among(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// A flag word split into its name (without dashes) and its "=value", if any.
struct Flag {
  std::string_view name;
  std::optional<std::string_view> value;
};

std::optional<Flag> as_flag(std::string_view word) {
  if (word.size() < 2 || word.front() != '-' || word == "--") return std::nullopt;
  word.remove_prefix(word[1] == '-' ? 2 : 1);
  Flag f;
  if (auto eq = word.find('='); eq != std::string_view::npos) {
    f.name = word.substr(0, eq);
    f.value = word.substr(eq + 1);
  } else {
    f.name = word;
  }
  return f;
}

Status shim_flag(const Flag& f, const std::string& word, RuntimeArgs& out) {
  std::optional<std::string>* slot = nullptr;
  if (f.name == "agentcage-runtime") slot = &out.real_runtime;
  if (f.name == "agentcage-policy") slot = &out.policy;
  if (f.name == "agentcage-default-policy") slot = &out.default_policy;
  if (!slot)
    return bad("unknown flag " + quote(word) +
               " (agentcage-runc takes --agentcage-runtime=PATH, --agentcage-policy=NAME and "
               "--agentcage-default-policy=NAME)");
  if (!f.value || f.value->empty()) return bad(quote(word) + " needs a value: --" + std::string(f.name) + "=VALUE");
  if (*slot) return bad(quote(word) + " given twice");
  *slot = std::string(*f.value);
  return {};
}

// The bundle and the container id among the words after create/run/restore.
Status find_bundle(std::span<const std::string> words, RuntimeArgs& out) {
  bool given = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") {
      // What follows is positional: the id first.
      if (out.container_id.empty() && i + 1 < words.size()) out.container_id = words[i + 1];
      break;
    }
    auto f = as_flag(w);
    if (!f) {
      if (out.container_id.empty()) out.container_id = w;
      continue;
    }
    if (f->name == "config" || f->name == "f")
      return bad(quote(w) + ": a config file other than the bundle's config.json is not supported");
    const bool bundle = f->name == "bundle" || f->name == "b";
    if (!bundle && !among(kCreateWithValue, f->name)) continue;
    std::string value;
    if (f->value) {
      value = std::string(*f->value);
    } else {
      if (i + 1 >= words.size()) return bad(quote(w) + " needs a value");
      value = words[++i];
    }
    if (!bundle) continue;
    if (given) return bad("the bundle is given twice");
    if (value.empty()) return bad(quote(w) + " needs a directory");
    out.bundle = value;
    given = true;
  }
  return {};
}

}  // namespace

bool creates_container(const std::string& subcommand) { return subcommand == "create" || subcommand == "run"; }

bool starts_from_bundle(const std::string& subcommand) {
  return creates_container(subcommand) || subcommand == "restore";
}

Result<RuntimeArgs> parse_runtime_args(std::span<const std::string> argv) {
  RuntimeArgs out;
  if (argv.empty()) return bad("empty command line");
  out.runtime_argv.push_back(argv[0]);
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    auto f = as_flag(w);
    if (!f) break;  // the subcommand
    if (f->name.starts_with("agentcage-")) {
      if (Status st = shim_flag(*f, w, out); !st) return st.error();
      continue;
    }
    out.runtime_argv.push_back(w);
    if (among(kGlobalShort, w) || among(kGlobalSwitches, f->name)) continue;  // "--debug=false" too
    if (among(kGlobalWithValue, f->name)) {
      if (f->value) continue;
      if (i + 1 >= argv.size()) return bad(quote(w) + " needs a value");
      out.runtime_argv.push_back(argv[++i]);
      continue;
    }
    return bad("unknown global flag " + quote(w) +
               " (neither runc nor crun has it; whether a value follows it, and so which word is the "
               "subcommand, cannot be told)");
  }
  if (i == argv.size()) return out;
  // An empty word would read as no subcommand at all (RuntimeArgs).
  if (argv[i].empty()) return bad("an empty word where the subcommand goes");
  out.subcommand = argv[i];
  out.runtime_argv.insert(out.runtime_argv.end(), argv.begin() + static_cast<std::ptrdiff_t>(i), argv.end());
  if (starts_from_bundle(out.subcommand))
    if (Status st = find_bundle(argv.subspan(i + 1), out); !st) return st.error();
  return out;
}

}  // namespace agentcage::oci
