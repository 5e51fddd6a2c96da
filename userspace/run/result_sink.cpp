// SPDX-License-Identifier: Apache-2.0
#include "run/result_sink.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "util/file.h"
#include "util/text.h"

namespace agentcage::run {
namespace {

Status write_all(int fd, const std::string& text) {
  // A reader that went away (a closed pipe) is an error to report, not a
  // SIGPIPE that kills agentcage before it has cleaned up.
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  Status st = write_all_to(fd, text);
  ::sigaction(SIGPIPE, &old, nullptr);
  if (!st) return Error::from_errno("writing", st.error().code);
  return {};
}

}  // namespace

Result<ResultSink> ResultSink::for_options(const std::optional<std::string>& file,
                                           const std::optional<int>& fd) {
  if (file && fd) return Error{"--result and --result-fd are alternatives: give one", EINVAL};
  if (file) return to_file(*file);
  if (fd) return to_fd(*fd);
  return ResultSink();
}

Result<ResultSink> ResultSink::to_file(const std::string& path) {
  ResultSink sink;
  if (path == "-") {
    sink.name_ = "stdout";
    sink.is_stdout_ = true;
    return sink;
  }
  sink.name_ = path;
  const std::string shown = quote(path, 200);
  if (path.empty()) return Error{"--result: empty file name (use --result - for stdout)", EINVAL};
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      return Error{"--result " + shown +
                       " is a symbolic link: agentcage replaces the result file atomically (rename), which "
                       "would replace the link itself; give the file it points to (realpath), or pass a "
                       "descriptor with --result-fd",
                   ELOOP};
    if (!S_ISREG(st.st_mode))
      return Error{"--result " + shown +
                       " exists and is not a regular file; for a pipe or a terminal use --result-fd N or "
                       "--result - (stdout)",
                   EINVAL};
  } else if (errno != ENOENT) {
    return Error::from_errno("--result " + shown);
  }
  // The temporary file: same directory (so the rename is atomic), a fresh
  // name nobody else can have made (O_EXCL), mode as a new file would get.
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + p.filename().string() + ".XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  UniqueFd fd(::mkostemp(buf.data(), O_CLOEXEC));
  if (!fd)
    return Error::from_errno("--result " + shown + ": cannot create a file in " + quote(dir.string(), 200));
  sink.tmp_.assign(buf.data());
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd.get(), 0666 & ~mask) != 0) return Error::from_errno("--result " + shown + ": fchmod");
  sink.fd_ = std::move(fd);
  sink.path_ = path;
  return sink;
}

Result<ResultSink> ResultSink::to_fd(int fd) {
  ResultSink sink;
  sink.name_ = "descriptor " + std::to_string(fd);
  const int flags = fd < 0 ? -1 : ::fcntl(fd, F_GETFL);
  if (flags < 0)
    return Error{"--result-fd " + std::to_string(fd) +
                     " is not an open descriptor: open it in the calling process and leave it open across "
                     "exec (e.g. 3>result.json, or a pipe without O_CLOEXEC)",
                 EBADF};
  if ((flags & O_ACCMODE) == O_RDONLY)
    return Error{
        "--result-fd " + std::to_string(fd) + " is open read-only: pass a descriptor open for writing",
        EBADF};
  // COMMAND must not inherit it (nor anything agentcage starts), unless it
  // is one of COMMAND's own 0, 1, 2.
  if (fd > STDERR_FILENO && ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
    return Error::from_errno("--result-fd " + std::to_string(fd));
  sink.fd_.reset(fd);
  return sink;
}

ResultSink& ResultSink::operator=(ResultSink&& other) noexcept {
  if (this != &other) {
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    fd_ = std::move(other.fd_);
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
    tmp_ = std::exchange(other.tmp_, std::string());
    is_stdout_ = std::exchange(other.is_stdout_, false);
  }
  return *this;
}

ResultSink::~ResultSink() {
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Status ResultSink::write(const std::string& text) {
  if (is_stdout_) return write_all(STDOUT_FILENO, text);
  if (!fd_) return {};
  Status st = write_all(fd_.get(), text);
  if (path_.empty()) {
    // A descriptor: close it so a reader of the pipe sees the end.
    if (::close(fd_.release()) != 0 && st) st = Error::from_errno("closing");
    return st;
  }
  if (st && ::fsync(fd_.get()) != 0) st = Error::from_errno("fsync");
  if (::close(fd_.release()) != 0 && st) st = Error::from_errno("closing");
  if (st && ::rename(tmp_.c_str(), path_.c_str()) != 0) st = Error::from_errno("renaming it into place");
  if (st) tmp_.clear();  // renamed: nothing to remove
  return st;
}

}  // namespace agentcage::run
