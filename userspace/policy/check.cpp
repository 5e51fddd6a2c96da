// SPDX-License-Identifier: Apache-2.0
// Reading policy files and `agentcage policy check`.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

#include "policy/name.h"
#include "policy/policy.h"
#include "util/file.h"
#include "util/unique_fd.h"

namespace agentcage::policy {

namespace {

ParseResult read_failure(const std::string& path, std::string message) {
  ParseResult result;
  result.errors.push_back(yaml::Diagnostic{path, {}, std::move(message)});
  return result;
}

}  // namespace

Result<std::string> read_policy_text(const std::string& path, const ParseOptions& options) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is rejected
  // below as not a regular file anyway.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return Error{std::string("cannot open: ") + std::strerror(errno), errno};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error{std::string("cannot stat: ") + std::strerror(errno), errno};
  if (S_ISDIR(st.st_mode)) return Error{"is a directory, not a policy file", EISDIR};
  if (!S_ISREG(st.st_mode)) return Error{"not a regular file", EINVAL};
  if (static_cast<uint64_t>(st.st_size) > options.max_bytes) {
    return Error{"policy is " + std::to_string(st.st_size) + " bytes; the limit is " +
                     std::to_string(options.max_bytes) + " bytes",
                 EFBIG};
  }
  // Read at most one byte more than allowed, whatever the size said: the
  // file may grow while we read, and parse_policy reports the overflow.
  auto text = read_up_to(fd.get(), options.max_bytes + 1);
  if (!text) return Error{std::string("cannot read: ") + std::strerror(text.error().code), text.error().code};
  return text;
}

ParseResult load_policy_file(const std::string& path, const ParseOptions& options) {
  auto text = read_policy_text(path, options);
  if (!text) return read_failure(path, text.error().message);
  return parse_policy(*text, path, options);
}

ParseResult load_policy_dir_file(const std::string& path, const ParseOptions& options) {
  ParseResult result = load_policy_file(path, options);
  const std::filesystem::path file(path);
  const std::string stem = file.stem().string();
  if (valid_policy_name(stem)) {
    if (result.policy && result.policy->name != stem) {
      result.errors.push_back(yaml::Diagnostic{
          path, result.policy->name_pos,
          "metadata.name " + quote(result.policy->name) +
              " does not match the file name (the daemon names a policy by its file: expected " +
              quote(stem) + ")"});
      result.policy.reset();
    }
    return result;
  }
  const auto guess = likely_policy_name(stem);
  const std::string rename =
      guess && *guess != stem ? " (rename it to " + quote(*guess + file.extension().string()) + ")" : "";
  result.errors.insert(result.errors.begin(),
                       yaml::Diagnostic{path,
                                        {},
                                        "the file name " + quote(file.filename().string()) +
                                            " does not name a policy: the daemon names a policy by its file "
                                            "(NAME.yaml), and a policy name is " +
                                            std::string(kPolicyNameRule) + rename});
  result.policy.reset();
  return result;
}

namespace {

struct Checked {
  std::string file;
  std::optional<Policy> policy;
  std::vector<yaml::Diagnostic> errors;
};

Checked check_one(const std::string& file, bool in_dir, const Compiler& compile) {
  ParseResult parsed = in_dir ? load_policy_dir_file(file) : load_policy_file(file);
  Checked c{file, std::move(parsed.policy), std::move(parsed.errors)};
  if (c.policy && c.errors.empty()) {
    if (auto problem = compile(*c.policy)) {
      c.errors.push_back(std::move(*problem));
      c.policy.reset();
    }
  }
  return c;
}

nlohmann::json rules_json(const Policy& p) {
  return {{"exec", p.exec_allow.size()},       {"read", p.read.size()},
          {"write", p.write.size()},           {"deny", p.deny.size() + p.deny_names.size()},
          {"deny_names", p.deny_names.size()}, {"network", p.network_allow.size()},
          {"listen", p.network_listen.size()}, {"syscalls", p.syscalls_allow.size()}};
}

}  // namespace

int check_command(const CheckOptions& options, const Compiler& compile, std::ostream& out,
                  std::ostream& err) {
  std::vector<std::pair<std::string, bool>> files;  // path, in the policy directory
  for (const auto& f : options.files) files.emplace_back(f, false);
  if (options.dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(*options.dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      // As the daemon: regular files (a symbolic link to one counts) named NAME.yaml.
      const std::string name = it->path().filename().string();
      std::error_code type_ec;
      if (is_policy_file_name(name) && it->is_regular_file(type_ec)) names.push_back(it->path().string());
    }
    if (ec) {
      err << "policy check: cannot list the policy directory " << quote(*options.dir) << ": " << ec.message()
          << "\n";
      return 2;
    }
    std::sort(names.begin(), names.end());
    for (auto& n : names) files.emplace_back(std::move(n), true);
  }
  if (files.empty() && !options.dir) {
    err << "policy check: no policy files given (name FILEs, or --dir DIR)\n";
    return 2;
  }
  int status = 0;
  nlohmann::json report = nlohmann::json::array();
  for (const auto& [file, in_dir] : files) {
    const Checked c = check_one(file, in_dir, compile);
    if (!c.policy) status = 1;
    if (options.json) {
      nlohmann::json errors = nlohmann::json::array();
      for (const auto& d : c.errors)
        errors.push_back(
            {{"file", d.file}, {"line", d.pos.line}, {"column", d.pos.column}, {"message", d.message}});
      nlohmann::json entry = {{"file", file}, {"ok", c.policy.has_value()}, {"errors", std::move(errors)}};
      if (c.policy) {
        entry["policy"] = c.policy->name;
        entry["mode"] = to_string(c.policy->mode);
        entry["rules"] = rules_json(*c.policy);
        nlohmann::json includes = nlohmann::json::array();
        for (const auto& inc : c.policy->includes) includes.push_back(inc.path);
        entry["includes"] = std::move(includes);
      }
      report.push_back(std::move(entry));
      continue;
    }
    if (!c.policy) {
      for (const yaml::Diagnostic& d : c.errors) err << d.format() << '\n';
      continue;
    }
    const Policy& p = *c.policy;
    out << file << ": ok (policy " << p.name << ", mode " << to_string(p.mode) << ", " << p.exec_allow.size()
        << " exec, " << p.read.size() << " read, " << p.write.size() << " write, "
        << p.deny.size() + p.deny_names.size() << " deny";
    if (!p.deny_names.empty()) out << " (" << p.deny_names.size() << " by name)";
    out << ", " << p.network_allow.size() << " network rules";
    if (!p.network_listen.empty()) out << ", " << p.network_listen.size() << " listen rules";
    if (!p.includes.empty()) {
      out << "; includes";
      for (const auto& inc : p.includes) out << " " << inc.path;
    }
    out << ")\n";
  }
  if (options.json)
    out << nlohmann::json{{"ok", status == 0}, {"files", std::move(report)}}.dump(
               2, ' ', false, nlohmann::json::error_handler_t::replace)
        << '\n';
  return status;
}

}  // namespace agentcage::policy
