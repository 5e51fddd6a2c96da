// SPDX-License-Identifier: Apache-2.0
#include "oci/state.h"

#include <cerrno>
#include <climits>

#include "oci/json.h"
#include "util/text.h"

namespace agentcage::oci {
namespace {

using nlohmann::ordered_json;

Error bad(const std::string& msg) { return Error{"container state: " + msg, EINVAL}; }

Error wrong_type(const char* field, const char* want, const ordered_json& v) {
  return bad(std::string("\"") + field + "\" must be " + want + ", not " + json_type(v));
}

// FIELD as a string into OUT; REQUIRED says whether its absence is an error.
Status string_field(const ordered_json& doc, const char* field, bool required, std::string& out) {
  auto it = doc.find(field);
  if (it == doc.end()) {
    if (required) return bad(std::string("\"") + field + "\" is missing");
    return {};
  }
  if (!it->is_string()) return wrong_type(field, "a string", *it);
  out = it->get<std::string>();
  if (out.find('\0') != std::string::npos) return bad(std::string("\"") + field + "\" contains a NUL byte");
  return {};
}

}  // namespace

Result<State> parse_state(std::string_view text) {
  if (text.size() > kMaxStateBytes)
    return bad("larger than " + std::to_string(kMaxStateBytes) + " bytes");
  auto parsed = parse_json(text, "container state");
  if (!parsed) return parsed.error();
  const ordered_json& doc = *parsed;
  if (!doc.is_object()) return bad("must be a JSON object, not " + json_type(doc));

  State s;
  std::string bundle;
  for (auto [field, required, out] : {std::tuple{"ociVersion", false, &s.oci_version},
                                      std::tuple{"id", true, &s.id}, std::tuple{"status", false, &s.status},
                                      std::tuple{"bundle", true, &bundle}})
    if (Status st = string_field(doc, field, required, *out); !st) return st.error();
  if (s.id.empty()) return bad("\"id\" is empty");
  if (bundle.empty() || bundle.front() != '/')
    return bad("\"bundle\" must be an absolute path, not " + quote(bundle));
  s.bundle = bundle;

  if (auto it = doc.find("pid"); it != doc.end()) {
    if (!it->is_number_integer()) return wrong_type("pid", "an integer", *it);
    if (it->is_number_unsigned() ? it->get<unsigned long long>() > INT_MAX
                                 : (it->get<long long>() < 0 || it->get<long long>() > INT_MAX))
      return bad("\"pid\" " + it->dump() + " is not a process id (0 to " + std::to_string(INT_MAX) + ")");
    s.pid = static_cast<int>(it->get<long long>());
  }

  if (auto it = doc.find("annotations"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return wrong_type("annotations", "an object of strings", *it);
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string())
        return bad("annotation " + quote(key) + " must be a string, not " + json_type(value));
      s.annotations.emplace(key, value.get<std::string>());
    }
  }
  return s;
}

}  // namespace agentcage::oci
