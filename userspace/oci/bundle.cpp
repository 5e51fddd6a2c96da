// SPDX-License-Identifier: Apache-2.0
#include "oci/bundle.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>

#include "oci/json.h"
#include "util/file.h"
#include "util/text.h"

namespace agentcage::oci {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

Error bad(const std::string& msg) { return Error{"config.json: " + msg, EINVAL}; }

Error wrong_type(const std::string& field, const char* want, const ordered_json& v) {
  return bad(field + " must be " + want + ", not " + json_type(v));
}

// The member NAME of OBJ when present and not null, else nullptr.
const ordered_json* member(const ordered_json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status get_string(const ordered_json& obj, const char* name, const std::string& field, std::string& out) {
  const ordered_json* v = member(obj, name);
  if (!v) return {};
  if (!v->is_string()) return wrong_type(field, "a string", *v);
  out = v->get<std::string>();
  if (out.find('\0') != std::string::npos) return bad(field + " contains a NUL byte");
  return {};
}

Status get_strings(const ordered_json& obj, const char* name, const std::string& field,
                   std::vector<std::string>& out) {
  const ordered_json* v = member(obj, name);
  if (!v) return {};
  if (!v->is_array()) return wrong_type(field, "an array of strings", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const ordered_json& e = (*v)[i];
    if (!e.is_string()) return wrong_type(field + "[" + std::to_string(i) + "]", "a string", e);
    out.push_back(e.get<std::string>());
  }
  return {};
}

Status get_object(const ordered_json& obj, const char* name, const std::string& field, const ordered_json*& out) {
  out = member(obj, name);
  if (out && !out->is_object()) return wrong_type(field, "an object", *out);
  return {};
}

Status parse_mounts(const ordered_json& doc, std::vector<Mount>& out) {
  const ordered_json* mounts = member(doc, "mounts");
  if (!mounts) return {};
  if (!mounts->is_array()) return wrong_type("\"mounts\"", "an array", *mounts);
  for (size_t i = 0; i < mounts->size(); ++i) {
    const std::string at = "mounts[" + std::to_string(i) + "]";
    const ordered_json& m = (*mounts)[i];
    if (!m.is_object()) return wrong_type(at, "an object", m);
    Mount mount;
    for (auto [name, out_field] : {std::pair{"destination", &mount.destination}, std::pair{"type", &mount.type},
                                   std::pair{"source", &mount.source}})
      if (Status st = get_string(m, name, at + "." + name, *out_field); !st) return st;
    if (mount.destination.empty()) return bad(at + ".destination is missing or empty");
    if (Status st = get_strings(m, "options", at + ".options", mount.options); !st) return st;
    out.push_back(std::move(mount));
  }
  return {};
}

// DESTINATION as the one text every destination of the same place has:
// absolute (runc reads a relative destination against the root), no "." or
// ".." steps, no trailing or repeated '/'.
std::string normal_destination(std::string_view destination) {
  std::string text(destination);
  if (text.empty() || text.front() != '/') text.insert(0, 1, '/');
  std::string out = fs::path(text).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace

Result<Bundle> parse_bundle(std::string_view text, const fs::path& dir) {
  auto parsed = parse_json(text, "config.json");
  if (!parsed) return parsed.error();
  const ordered_json& doc = *parsed;
  if (!doc.is_object()) return bad("must be a JSON object, not " + json_type(doc));

  Bundle b;
  b.dir = dir;

  const ordered_json* root = nullptr;
  if (Status st = get_object(doc, "root", "\"root\"", root); !st) return st.error();
  if (!root) return bad("\"root\" is missing (the container's root file system)");
  std::string root_path;
  if (Status st = get_string(*root, "path", "root.path", root_path); !st) return st.error();
  if (root_path.empty()) return bad("root.path is missing or empty");
  b.root = (dir / root_path).lexically_normal();  // an absolute root_path replaces dir
  if (const ordered_json* ro = member(*root, "readonly")) {
    if (!ro->is_boolean()) return wrong_type("root.readonly", "true or false", *ro);
    b.root_readonly = ro->get<bool>();
  }

  const ordered_json* annotations = nullptr;
  if (Status st = get_object(doc, "annotations", "\"annotations\"", annotations); !st) return st.error();
  if (annotations)
    for (const auto& [key, value] : annotations->items()) {
      if (!value.is_string()) return wrong_type("annotation " + quote(key), "a string", value);
      b.annotations.emplace(key, value.get<std::string>());
    }

  if (Status st = parse_mounts(doc, b.mounts); !st) return st.error();

  const ordered_json* process = nullptr;
  if (Status st = get_object(doc, "process", "\"process\"", process); !st) return st.error();
  if (process)
    if (Status st = get_strings(*process, "args", "process.args", b.args); !st) return st.error();

  const ordered_json* linux_section = nullptr;
  if (Status st = get_object(doc, "linux", "\"linux\"", linux_section); !st) return st.error();
  if (linux_section)
    if (Status st = get_string(*linux_section, "cgroupsPath", "linux.cgroupsPath", b.cgroups_path); !st)
      return st.error();
  return b;
}

Result<Bundle> read_bundle(const fs::path& dir) {
  if (dir.empty()) return Error{"bundle: no directory given", EINVAL};
  const fs::path abs = fs::absolute(dir).lexically_normal();
  const std::string file = (abs / "config.json").string();
  auto text = read_regular_file(file, kMaxConfigBytes, O_NOFOLLOW);
  if (!text) return text.error();
  auto b = parse_bundle(*text, abs);
  if (!b) return b.error().wrap(abs.string());
  return b;
}

const Mount* bind_mount_at(const Bundle& b, std::string_view destination) {
  // Mounts are made in order, so the last one at a destination is the one
  // seen there: a bind hidden by a later mount at the same place is none.
  const std::string want = normal_destination(destination);
  for (auto it = b.mounts.rbegin(); it != b.mounts.rend(); ++it) {
    if (normal_destination(it->destination) != want) continue;
    const bool bind = it->type == "bind" || std::any_of(it->options.begin(), it->options.end(), [](const std::string& o) {
                        return o == "bind" || o == "rbind";
                      });
    return bind ? &*it : nullptr;
  }
  return nullptr;
}

}  // namespace agentcage::oci
