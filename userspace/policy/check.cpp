// SPDX-License-Identifier: Apache-2.0
// Reading policy files and `agentcage policy check`.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <ostream>

#include "policy/name.h"
#include "policy/policy.h"
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
  std::string text(options.max_bytes + 1, '\0');
  size_t used = 0;
  while (used < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{std::string("cannot read: ") + std::strerror(errno), errno};
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  text.resize(used);
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
  if (valid_policy_name(stem)) return result;
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

int check_command(const std::vector<std::string>& files, std::ostream& out, std::ostream& err) {
  if (files.empty()) {
    err << "policy check: no policy files given\n";
    return 1;
  }
  int status = 0;
  for (const std::string& file : files) {
    const ParseResult result = load_policy_file(file);
    if (!result.ok()) {
      for (const yaml::Diagnostic& d : result.errors) err << d.format() << '\n';
      status = 1;
      continue;
    }
    const Policy& p = *result.policy;
    out << file << ": ok (policy " << p.name << ", mode " << to_string(p.mode) << ", " << p.exec_allow.size()
        << " exec, " << p.read.size() << " read, " << p.write.size() << " write, " << p.deny.size()
        << " deny, " << p.network_allow.size() << " network rules";
    if (!p.network_listen.empty()) out << ", " << p.network_listen.size() << " listen rules";
    out << ")\n";
  }
  return status;
}

}  // namespace agentcage::policy
