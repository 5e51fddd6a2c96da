// SPDX-License-Identifier: Apache-2.0
#include "daemon/containers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "oci/annotations.h"
#include "util/file.h"

namespace agentcage::daemon {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxRecordBytes = 64 * 1024;
constexpr const char* kSuffix = ".json";

Error bad(const std::string& why) { return Error{"container record: " + why, EINVAL}; }

}  // namespace

std::string to_record_json(const ContainerScope& c) {
  json j = {{"container_id", c.id}, {"cgroup_id", c.cgroup_id}, {"cgroup", c.cgroup},
            {"policy", c.policy},   {"slot", c.slot},           {"workspace", c.workspace},
            {"labels", c.labels},   {"attached_ns", c.attached_ns}};
  return j.dump() + "\n";
}

Result<ContainerScope> parse_record_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  auto str = [&](const char* key, std::string& out) -> Status {
    if (!j.contains(key) || !j[key].is_string()) return bad(std::string("\"") + key + "\" must be a string");
    out = j[key].get<std::string>();
    return {};
  };
  ContainerScope c;
  if (Status s = str("container_id", c.id); !s) return s.error();
  if (Status s = oci::check_container_id(c.id); !s) return bad(s.error().message);
  if (Status s = str("cgroup", c.cgroup); !s) return s.error();
  if (Status s = str("policy", c.policy); !s) return s.error();
  if (Status s = str("workspace", c.workspace); !s) return s.error();
  if (!j.contains("cgroup_id") || !j["cgroup_id"].is_number_unsigned() || j["cgroup_id"].get<uint64_t>() == 0)
    return bad("\"cgroup_id\" must be a cgroup id");
  c.cgroup_id = j["cgroup_id"].get<uint64_t>();
  if (!j.contains("slot") || !j["slot"].is_number_unsigned() || j["slot"].get<uint64_t>() > UINT32_MAX)
    return bad("\"slot\" must be a slot number");
  c.slot = static_cast<uint32_t>(j["slot"].get<uint64_t>());
  if (!j.contains("attached_ns") || !j["attached_ns"].is_number_integer())
    return bad("\"attached_ns\" must be an integer");
  c.attached_ns = j["attached_ns"].get<int64_t>();
  if (!j.contains("labels") || !j["labels"].is_object()) return bad("\"labels\" must be an object");
  for (const auto& [k, v] : j["labels"].items()) {
    if (!v.is_string()) return bad("label " + k + " must be a string");
    c.labels[k] = v.get<std::string>();
  }
  return c;
}

std::vector<std::string> ContainerIndex::load() {
  std::vector<std::string> warnings;
  by_id_.clear();
  by_scope_.clear();
  DIR* d = ::opendir(dir_.c_str());
  if (!d) {
    if (errno != ENOENT) warnings.push_back("cannot read " + dir_ + ": " + std::strerror(errno));
    return warnings;
  }
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    if (name.size() <= std::strlen(kSuffix) || name.compare(name.size() - 5, 5, kSuffix) != 0) continue;
    const std::string path = dir_ + "/" + name;
    auto text = read_regular_file(path, kMaxRecordBytes, O_NOFOLLOW);
    if (!text) {
      warnings.push_back(text.error().message);
      continue;
    }
    auto c = parse_record_json(*text);
    if (!c) {
      warnings.push_back(path + ": " + c.error().message);
      continue;
    }
    if (c->id + kSuffix != name) {
      warnings.push_back(path + ": its container_id is " + c->id);
      continue;
    }
    by_scope_[c->cgroup_id] = c->id;
    by_id_[c->id] = std::move(*c);
  }
  ::closedir(d);
  return warnings;
}

Status ContainerIndex::add(const ContainerScope& c) {
  if (Status s = oci::check_container_id(c.id); !s) return bad(s.error().message);
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return Error::from_errno("mkdir " + dir_);
  if (Status s = replace_file(dir_ + "/" + c.id + kSuffix, to_record_json(c), 0600); !s) return s;
  by_scope_[c.cgroup_id] = c.id;
  by_id_[c.id] = c;
  return {};
}

Status ContainerIndex::remove(const std::string& id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return {};
  const std::string path = dir_ + "/" + id + kSuffix;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Error::from_errno("remove " + path);
  by_scope_.erase(it->second.cgroup_id);
  by_id_.erase(it);
  return {};
}

const ContainerScope* ContainerIndex::find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::string ContainerIndex::id_of_scope(uint64_t scope_id) const {
  auto it = by_scope_.find(scope_id);
  return it == by_scope_.end() ? std::string() : it->second;
}

}  // namespace agentcage::daemon
