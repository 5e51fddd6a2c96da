// SPDX-License-Identifier: Apache-2.0
// Errors as values for fallible setup steps (see ARCHITECTURE.md, pattern 6).
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace agentcage {

// What went wrong, with a subsystem prefix ("cgroup: ...") and the errno, if
// any, so callers can both print it and branch on it.
struct Error {
  std::string message;
  int code = 0;  // errno value, 0 when not an OS error

  // "prefix: what: strerror(code)"
  static Error from_errno(std::string what, int err = errno) {
    return Error{std::move(what) + ": " + std::strerror(err), err};
  }
  Error wrap(const std::string& context) const { return Error{context + ": " + message, code}; }
};

// A value or an Error. Minimal stand-in for C++23 std::expected.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result of a step that yields nothing but may fail.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT
  static Status success() { return {}; }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool failed_ = false;
};

}  // namespace agentcage
