// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: what a container engine hands agentcage. The container
// state on a hook's stdin (oci::parse_state), a bundle's config.json
// (oci::parse_bundle, and the shim's edit of it, oci::edit_config) and the
// runtime's command line (oci::parse_runtime_args) come from whoever creates
// the container: none of it may crash, hang or trip a sanitizer, an error
// must say what is wrong on one printable line, and what is accepted must
// hold what the callers rely on.
//
// The first byte picks the parser; the rest is its input (for the command
// line: words separated by NUL bytes).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checks.h"
#include "oci/annotations.h"
#include "oci/bundle.h"
#include "oci/hooks.h"
#include "oci/runtime_args.h"
#include "oci/state.h"

namespace {

using namespace agentcage;
using fuzz::check;
using fuzz::check_printable;

template <class T>
void check_error(const Result<T>& r) {
  if (!r) {
    check(!r.error().message.empty());
    check_printable(r.error().message);
  }
}

void state(std::string_view text) {
  auto s = oci::parse_state(text);
  check_error(s);
  if (!s) return;
  check(!s->id.empty());
  check(s->bundle.is_absolute());
  check(s->pid >= 0);
  (void)oci::check_container_id(s->id);
  (void)oci::is_sandbox_container(s->annotations, s->id);
}

void bundle(std::string_view text) {
  auto b = oci::parse_bundle(text, "/bundle");
  check_error(b);
  if (b) {
    check(b->root.empty() || b->root.is_absolute());
    (void)oci::bind_mount_at(*b, "/workspace");
  }
  // The shim's edit: a config it changes stays a JSON object that parses
  // as the same bundle, and editing it again adds nothing.
  oci::HookEdit edit;
  edit.create_runtime = {"/usr/bin/agentcage", {"agentcage", "oci-hook", "create-runtime"}, 30};
  edit.poststop = {"/usr/bin/agentcage", {"agentcage", "oci-hook", "poststop"}, 30};
  edit.policy = "fuzz";
  auto edited = oci::edit_config(text, edit);
  check_error(edited);
  if (!edited || !*edited) return;
  const nlohmann::json j = nlohmann::json::parse(**edited, nullptr, /*allow_exceptions=*/false);
  check(j.is_object());
  auto again = oci::edit_config(**edited, edit);
  check(again.ok() && !*again);
  if (b) {
    auto after = oci::parse_bundle(**edited, "/bundle");
    check(after.ok());
    check(after->root == b->root && after->args == b->args && after->cgroups_path == b->cgroups_path);
    check(after->annotations.at("io.agentcage.policy") == "fuzz");
  }
}

void runtime_args(std::string_view text) {
  std::vector<std::string> argv{"agentcage-runc"};
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == '\0') {
      argv.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  auto a = oci::parse_runtime_args(std::span<const std::string>(argv));
  check_error(a);
  if (!a) return;
  // What the real runtime gets is the command line without the shim's own
  // flags, one word each, and nothing else dropped or changed.
  const size_t taken = (a->policy ? 1 : 0) + (a->default_policy ? 1 : 0) + (a->real_runtime ? 1 : 0);
  check(a->runtime_argv.size() + taken == argv.size());
  size_t k = 0;
  for (const auto& w : argv) {
    if (k < a->runtime_argv.size() && a->runtime_argv[k] == w) {
      ++k;
      continue;
    }
    // (-flag and --flag alike, as runc and crun read their own flags.)
    check(w.starts_with("--agentcage-") || w.starts_with("-agentcage-"));
  }
  check(k == a->runtime_argv.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      state(text);
      break;
    case 1:
      bundle(text);
      break;
    default:
      runtime_args(text);
  }
  return 0;
}
