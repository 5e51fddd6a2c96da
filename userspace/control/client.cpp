// SPDX-License-Identifier: Apache-2.0
#include "control/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/paths.h"
#include "util/fd_passing.h"

namespace agentcage::control {

using nlohmann::json;

std::string default_control_socket() {
  const char* env = std::getenv("AGENTCAGE_CONTROL_SOCKET");
  return env && *env ? std::string(env) : std::string(core::kDefaultControlSocket);
}

namespace {

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
          .count();
  return left < 0 ? 0 : static_cast<int>(left);
}

}  // namespace

Result<UniqueFd> connect_control(const std::string& socket_path, int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path)
    return Error{"control socket path too long: " + socket_path, ENAMETOOLONG};
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return Error::from_errno("control socket: socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN)
      return Error::from_errno("control socket: connecting to " + socket_path);
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) <= 0)
      return Error{"control socket: " + socket_path + ": the daemon did not accept in time", ETIMEDOUT};
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) return Error::from_errno("control socket: connecting to " + socket_path, err);
  }
  return fd;
}

Status write_all(int fd, std::string_view data, int timeout_ms) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 1 << 30 : timeout_ms);
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return Error::from_errno("control socket: send");
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0) return Error{"control socket: send timed out", ETIMEDOUT};
  }
  return {};
}

Result<std::string> read_line(int fd, std::string& buffer, int timeout_ms, size_t max) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    if (size_t nl = buffer.find('\n'); nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    if (buffer.size() > max)
      return Error{"control socket: line longer than " + std::to_string(max) + " bytes", EMSGSIZE};
    pollfd p{fd, POLLIN, 0};
    int pr = ::poll(&p, 1, timeout_ms < 0 ? -1 : remaining_ms(deadline));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return Error{"control socket: no answer from the daemon in time", ETIMEDOUT};
    char chunk[8192];
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return Error::from_errno("control socket: recv");
    if (n == 0) {
      if (buffer.empty()) return std::string();
      return Error{"control socket: the daemon closed the connection mid-line", EPIPE};
    }
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

Result<Stream> open_stream(const std::string& socket_path, const json& request, int timeout_ms) {
  Stream stream;
  auto fd = connect_control(socket_path, timeout_ms);
  if (!fd) return fd.error();
  stream.fd = std::move(*fd);
  if (Status st = write_all(stream.fd.get(), request.dump() + "\n", timeout_ms); !st) return st.error();
  auto line = read_line(stream.fd.get(), stream.buffer, timeout_ms);
  if (!line) return line.error();
  if (line->empty())
    return Error{"control socket: the daemon closed the connection without answering", EPIPE};
  stream.head = json::parse(*line, nullptr, false);
  if (!stream.head.is_object())
    return Error{"control socket: the daemon's answer is not a JSON object", EPROTO};
  return stream;
}

Result<json> call_with_fds(const std::string& socket_path, const json& request, const int* fds, size_t count,
                           int timeout_ms) {
  auto fd = connect_control(socket_path, timeout_ms < 0 ? 5000 : timeout_ms);
  if (!fd) return fd.error();
  const std::string line = request.dump() + "\n";
  // The descriptors go with the first bytes; the rest of a long line after.
  ssize_t n = send_with_fds(fd->get(), line.data(), line.size(), fds, count);
  Status sent = n > 0
                    ? write_all(fd->get(), std::string_view(line).substr(static_cast<size_t>(n)), timeout_ms)
                    : Status(Error::from_errno("control socket: sending the request"));
  std::string buffer;
  if (!sent) {
    // A daemon that refused the connection said why before it closed it.
    auto refusal = read_line(fd->get(), buffer, 1000);
    json j = refusal && !refusal->empty() ? json::parse(*refusal, nullptr, false) : json();
    if (j.is_object()) return j;
    return sent.error();
  }
  auto answer = read_line(fd->get(), buffer, timeout_ms, 64u << 20);
  if (!answer) return answer.error();
  if (answer->empty())
    return Error{"control socket: the daemon closed the connection without answering (did it stop?)", EPIPE};
  json j = json::parse(*answer, nullptr, false);
  if (!j.is_object()) return Error{"control socket: the daemon's answer is not a JSON object", EPROTO};
  return j;
}

Result<json> call(const std::string& socket_path, const json& request, int timeout_ms) {
  auto stream = open_stream(socket_path, request, timeout_ms);
  if (!stream) return stream.error();
  return std::move(stream->head);
}

}  // namespace agentcage::control
