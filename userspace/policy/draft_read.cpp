// SPDX-License-Identifier: Apache-2.0
// read_observations (draft.h): a run's result document or audit log lines
// as observed operations. The shape read is bpf::record_json's, as JSON:
// policy/ sits below userspace/bpf and must not include it.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "policy/draft.h"
#include "util/text.h"

namespace agentcage::policy {
namespace {

using nlohmann::json;

// Everything that makes two records the same operation.
using Key = std::tuple<std::string, std::string, std::string, uint8_t, std::string, std::string, std::string,
                       bool, std::string>;

Key key_of(const Observation& o) {
  return {o.hook, o.target_kind, o.target, o.access, o.protocol, o.reason, o.comm, o.directory, o.workspace};
}

class Collector {
 public:
  void add(Observation o) {
    records_ += o.count;
    auto [it, fresh] = index_.try_emplace(key_of(o), items_.size());
    if (fresh)
      items_.push_back(std::move(o));
    else
      items_[it->second].count += o.count;
  }
  uint64_t records() const { return records_; }
  // The index is in key order already.
  std::vector<Observation> sorted() && {
    std::vector<Observation> out;
    out.reserve(items_.size());
    for (const auto& [key, at] : index_) out.push_back(std::move(items_[at]));
    return out;
  }

 private:
  std::map<Key, size_t> index_;
  std::vector<Observation> items_;
  uint64_t records_ = 0;
};

// A string field: missing is `fallback` when one is given, else an error.
Result<std::string> string_field(const json& j, const char* name, const char* fallback = nullptr) {
  auto it = j.find(name);
  if (it == j.end() || (fallback && it->is_null())) {
    if (fallback) return std::string(fallback);
    return Error{"not a decision record: no '" + std::string(name) + "'", EINVAL};
  }
  if (!it->is_string())
    return Error{"not a decision record: '" + std::string(name) + "' is not a string", EINVAL};
  return it->get<std::string>();
}

// One record, or nullopt for a decision that is not an observation (allow).
Result<std::optional<Observation>> parse_record(const json& j, const std::string& origin) {
  if (!j.is_object()) return Error{"not a decision record: not a JSON object", EINVAL};
  Observation o;
  auto decision = string_field(j, "decision");
  if (!decision) return decision.error();
  if (*decision == "allow") return std::optional<Observation>{};
  if (*decision != "deny" && *decision != "audit")
    return Error{"not a decision record: unknown decision " + quote(*decision), EINVAL};
  struct Field {
    const char* name;
    std::string* out;
    const char* fallback;
  };
  for (const Field f :
       {Field{"hook", &o.hook, nullptr}, Field{"target", &o.target, nullptr},
        Field{"target_kind", &o.target_kind, nullptr}, Field{"reason", &o.reason, "default_deny"},
        Field{"comm", &o.comm, ""}, Field{"protocol", &o.protocol, ""}}) {
    auto v = string_field(j, f.name, f.fallback);
    if (!v) return v.error();
    *f.out = std::move(*v);
  }
  if (o.hook.empty()) return Error{"not a decision record: 'hook' is empty", EINVAL};
  if (auto it = j.find("access"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return Error{"not a decision record: 'access' is not a list", EINVAL};
    for (const json& a : *it) {
      const std::string s = a.is_string() ? a.get<std::string>() : a.dump();
      if (s == "read")
        o.access |= kAccessRead;
      else if (s == "write")
        o.access |= kAccessWrite;
      else if (s == "exec")
        o.access |= kAccessExec;
      else
        return Error{
            "not a decision record: unknown access " + escape(s, 64) + " (expected read, write or exec)",
            EINVAL};
    }
  }
  if (auto it = j.find("directory"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return Error{"not a decision record: 'directory' is not true or false", EINVAL};
    o.directory = it->get<bool>();
  }
  if (auto it = j.find("count"); it != j.end()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0)
      return Error{"not a decision record: 'count' is not a positive integer", EINVAL};
    o.count = it->get<uint64_t>();
  }
  o.origin = origin;
  return std::optional<Observation>{std::move(o)};
}

uint64_t count_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it != obj.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

std::optional<std::string> text_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_string() || it->get<std::string>().empty()) return std::nullopt;
  return it->get<std::string>();
}

// A workspace as records show paths: resolved, so a trailing '/' would
// never match them.
std::string trimmed(std::string ws) {
  while (ws.size() > 1 && ws.back() == '/') ws.pop_back();
  return ws;
}

Result<Observations> read_result(const json& doc, const std::string& source,
                                 const std::optional<std::string>& run_id) {
  Observations out;
  out.workspace = text_field(doc, "workspace");
  if (out.workspace) out.workspace = trimmed(*out.workspace);
  out.policy = text_field(doc, "policy");
  out.run_id = text_field(doc, "run_id");
  if (run_id && out.run_id != run_id)
    return Error{source + ": the result is of run " + out.run_id.value_or("(none)") + ", not " + *run_id,
                 EINVAL};

  const json* records = nullptr;
  std::string where;
  if (auto rec = doc.find("recording"); rec != doc.end() && rec->is_object()) {
    auto complete = rec->find("complete");
    if (complete == rec->end() || !complete->is_boolean())
      return Error{source + ": recording.complete is not true or false", EINVAL};
    out.complete = complete->get<bool>();
    if (!out.complete)
      out.incomplete = "the recording lost " + std::to_string(count_field(*rec, "lost")) + " of " +
                       std::to_string(count_field(*rec, "total")) + " records";
    records = rec->contains("records") ? &(*rec)["records"] : nullptr;
    where = "recording.records";
  } else if (auto den = doc.find("denials"); den != doc.end() && den->is_object()) {
    records = den->contains("records") ? &(*den)["records"] : nullptr;
    where = "denials.records";
    const uint64_t total = count_field(*den, "records_total");
    const uint64_t suppressed = count_field(*den, "events_suppressed");
    const size_t kept = records && records->is_array() ? records->size() : 0;
    if (den->contains("reported") && (*den)["reported"] == false) {
      out.complete = false;
      out.incomplete = "the result has no report of the run's decisions";
    } else if (total > kept || suppressed > 0) {
      out.complete = false;
      out.incomplete = "the result keeps only the first " + std::to_string(kept) + " of " +
                       std::to_string(std::max<uint64_t>(total, kept)) + " records" +
                       (suppressed ? " (" + std::to_string(suppressed) + " more suppressed)" : "");
    }
  } else {
    return Error{source + ": neither a run's result (no 'recording' or 'denials') nor an audit log line",
                 EINVAL};
  }
  if (!records || !records->is_array()) return Error{source + ": " + where + " is not a list", EINVAL};

  Collector c;
  for (size_t i = 0; i < records->size(); ++i) {
    auto o = parse_record((*records)[i], source);
    if (!o) return o.error().wrap(source + ": " + where + "[" + std::to_string(i) + "]");
    if (!*o) continue;
    (*o)->workspace = out.workspace.value_or("");
    c.add(std::move(**o));
  }
  out.records = c.records();
  out.items = std::move(c).sorted();
  return out;
}

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

// The workspace of a run the log names: WORKSPACE_ROOT/RUN_ID, when the run
// id is one path component.
std::string run_workspace(const std::string& root, const std::string& run) {
  if (root.empty() || run.empty() || run == "." || run == ".." ||
      run.find_first_of(std::string_view("/\0", 2)) != std::string::npos)
    return "";
  return (root == "/" ? "" : root) + "/" + run;
}

Result<Observations> read_log(std::string_view text, const std::string& source,
                              const std::optional<std::string>& run_id, const std::string& workspace_root) {
  Observations out;
  Collector c;
  std::set<std::string> policies;
  bool unnamed_policy = false;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (blank(line)) continue;
    const std::string at = source + ":" + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      return Error{at + ": not JSON (at byte " + std::to_string(e.byte) + ")", EINVAL};
    }
    if (!j.is_object()) return Error{at + ": not a decision record: not a JSON object", EINVAL};
    auto run = j.find("run_id");
    const bool has_run = run != j.end() && run->is_string();
    if (run_id && (!has_run || run->get<std::string>() != *run_id)) continue;
    auto o = parse_record(j, at);
    if (!o) return o.error().wrap(at);
    if (!*o) continue;
    if (has_run) (*o)->workspace = run_workspace(workspace_root, run->get<std::string>());
    if (auto p = text_field(j, "policy"))
      policies.insert(*p);
    else
      unnamed_policy = true;
    c.add(std::move(**o));
  }
  if (policies.size() == 1 && !unnamed_policy) out.policy = *policies.begin();
  out.run_id = run_id;
  if (run_id) {
    if (std::string ws = run_workspace(workspace_root, *run_id); !ws.empty()) out.workspace = ws;
  }
  out.records = c.records();
  out.items = std::move(c).sorted();
  return out;
}

}  // namespace

Result<Observations> read_observations(std::string_view text, std::string_view source_name,
                                       const std::optional<std::string>& run_id,
                                       std::string_view workspace_root) {
  const std::string source(source_name);
  // A result is one document (over many lines); an audit log is one object
  // a line, which parses as a whole only when it has one line.
  json whole = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!whole.is_discarded()) {
    if (!whole.is_object()) return Error{source + ": neither a run's result nor an audit log", EINVAL};
    if (!whole.contains("hook")) return read_result(whole, source, run_id);
  }
  return read_log(text, source, run_id, trimmed(std::string(workspace_root)));
}

}  // namespace agentcage::policy
