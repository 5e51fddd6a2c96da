// SPDX-License-Identifier: Apache-2.0
// Where `agentcage run` delivers its result document: a file (--result FILE,
// replaced atomically), stdout (--result -) or a descriptor the caller
// passed down (--result-fd N, e.g. a pipe an agent framework reads).
// Opened before anything runs: a run whose result cannot be delivered does
// not start.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::run {

class ResultSink {
 public:
  // No result requested: write() does nothing.
  ResultSink() = default;
  // --result FILE ("-": stdout). FILE is written to a temporary file in the
  // same directory and renamed over FILE at the end, so a reader sees the
  // old file or the whole new one. FILE must not be a symbolic link (the
  // rename would replace the link, not write where it points: refused, with
  // the fix) nor anything but a regular file.
  static Result<ResultSink> to_file(const std::string& path);
  // What --result FILE / --result-fd N ask for (neither: a sink that writes
  // nothing; both: an error).
  static Result<ResultSink> for_options(const std::optional<std::string>& file, const std::optional<int>& fd);
  // --result-fd N: N must be open for writing. agentcage keeps it from
  // COMMAND (close-on-exec), writes the document to it and closes it.
  static Result<ResultSink> to_fd(int fd);

  ResultSink(ResultSink&& other) noexcept { *this = std::move(other); }
  ResultSink& operator=(ResultSink&& other) noexcept;
  ResultSink(const ResultSink&) = delete;
  ResultSink& operator=(const ResultSink&) = delete;
  // Removes the temporary file if the document was never written.
  ~ResultSink();

  // Delivers `text` (the whole document). On an error nothing is left
  // behind but what the caller already had at FILE.
  Status write(const std::string& text);
  // For messages: "FILE", "stdout" or "descriptor N".
  const std::string& name() const { return name_; }

 private:
  UniqueFd fd_;
  std::string name_;
  std::string path_;  // FILE; empty for stdout and descriptors
  std::string tmp_;   // the temporary file next to FILE until renamed
  bool is_stdout_ = false;
};

}  // namespace agentcage::run
