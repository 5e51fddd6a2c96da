// SPDX-License-Identifier: Apache-2.0
#include "oci/hooks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "oci/annotations.h"
#include "oci/bundle.h"
#include "oci/json.h"
#include "util/file.h"
#include "util/unique_fd.h"

namespace agentcage::oci {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

Error bad(const std::string& msg) { return Error{"config.json: " + msg, EINVAL}; }

ordered_json hook_json(const Hook& h) {
  ordered_json j = ordered_json::object();
  j["path"] = h.path;
  j["args"] = h.args;
  if (h.timeout) j["timeout"] = *h.timeout;
  return j;
}

// Whether STAGE (an array, checked) has an entry with H's path and args.
bool has_hook(const ordered_json& stage, const Hook& h) {
  for (const ordered_json& e : stage) {
    if (!e.is_object()) continue;
    auto path = e.find("path");
    auto args = e.find("args");
    if (path == e.end() || !path->is_string() || path->get<std::string>() != h.path) continue;
    const ordered_json want = h.args;
    if ((args == e.end() && h.args.empty()) || (args != e.end() && *args == want)) return true;
  }
  return false;
}

// Adds H to hooks[STAGE]; returns whether it was added.
Result<bool> add_to_stage(ordered_json& hooks, const char* stage, const Hook& h) {
  if (h.path.empty() || h.path.front() != '/') return Error{"hook path must be absolute: " + h.path, EINVAL};
  auto it = hooks.find(stage);
  if (it == hooks.end() || it->is_null()) {
    hooks[stage] = ordered_json::array();
    it = hooks.find(stage);
  }
  if (!it->is_array()) return bad(std::string("hooks.") + stage + " must be an array, not " + json_type(*it));
  if (has_hook(*it, h)) return false;
  it->push_back(hook_json(h));
  return true;
}

}  // namespace

Result<std::optional<std::string>> edit_config(std::string_view config, const HookEdit& edit) {
  auto parsed = parse_json(config, "config.json");
  if (!parsed) return parsed.error();
  ordered_json doc = std::move(*parsed);
  if (!doc.is_object()) return bad("must be a JSON object, not " + json_type(doc));

  bool changed = false;
  if (!doc.contains("hooks") || doc["hooks"].is_null()) doc["hooks"] = ordered_json::object();
  ordered_json& hooks = doc["hooks"];
  if (!hooks.is_object()) return bad("\"hooks\" must be an object, not " + json_type(hooks));
  for (auto [stage, hook] : {std::pair{"createRuntime", &edit.create_runtime}, std::pair{"poststop", &edit.poststop}}) {
    auto added = add_to_stage(hooks, stage, *hook);
    if (!added) return added.error();
    changed = changed || *added;
  }

  if (edit.policy) {
    if (!doc.contains("annotations") || doc["annotations"].is_null()) doc["annotations"] = ordered_json::object();
    ordered_json& annotations = doc["annotations"];
    if (!annotations.is_object()) return bad("\"annotations\" must be an object, not " + json_type(annotations));
    const std::string key(kPolicyAnnotation);
    auto it = annotations.find(key);
    if (it == annotations.end() || *it != *edit.policy) {
      annotations[key] = *edit.policy;
      changed = true;
    }
  }
  if (!changed) return std::optional<std::string>{};
  return std::optional<std::string>{doc.dump()};
}

Result<bool> add_hooks(const fs::path& dir, const HookEdit& edit) {
  const std::string file = (dir / "config.json").string();
  const std::string tmp = file + ".tmp";
  mode_t mode = 0;
  auto text = read_regular_file(file, kMaxConfigBytes, O_NOFOLLOW, [&](const struct stat& st) {
    mode = st.st_mode & 07777;
    return Status{};
  });
  if (!text) return text.error();
  auto edited = edit_config(*text, edit);
  if (!edited) return edited.error().wrap(file);
  if (!*edited) return false;

  if (Status st = replace_file(file, **edited, mode); !st) return st.error();
  return true;
}

}  // namespace agentcage::oci
