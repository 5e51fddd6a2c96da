// SPDX-License-Identifier: Apache-2.0
// agentcage-uring-probe: network operations through io_uring, run as the
// COMMAND of `agentcage run` by the kernel tests (dns_test.cpp). Each
// operation prints one word, separated by spaces:
//
//   connect HOST PORT   resolve HOST (getaddrinfo, IPv4), then an io_uring
//                       connect: connected | denied | nxdomain | errorN
//   query SERVER NAME   an A query for NAME sent with an io_uring sendmsg to
//                       SERVER:53 over UDP; the answer's RCODE@SOURCE, or
//                       denied | errorN (no answer in 5 s: error110)
//
// io_uring that cannot be set up prints "uring-unavailable" and exits 3.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "uring.h"

namespace {

using agentcage::kt::uring_one;

std::string failure(int err) { return err == EACCES || err == EPERM ? "denied" : "error" + std::to_string(err); }

bool uring_unavailable = false;

// One io_uring operation on `fd`; the completion's result (or -errno).
int submit(io_uring_sqe sqe) {
  int res = 0;
  if (int err = uring_one(sqe, 0, &res); err != 0) {
    uring_unavailable = true;
    return -err;
  }
  return res;
}

std::string connect_op(const char* host, const char* port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(host, port, &hints, &ai) != 0 || !ai) return "nxdomain";
  sockaddr_in addr{};
  std::memcpy(&addr, ai->ai_addr, sizeof addr);
  ::freeaddrinfo(ai);
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return failure(errno);
  io_uring_sqe sqe{};
  sqe.opcode = IORING_OP_CONNECT;
  sqe.fd = s;
  sqe.addr = reinterpret_cast<uint64_t>(&addr);
  sqe.off = sizeof addr;  // addrlen
  const int res = submit(sqe);
  ::close(s);
  return res >= 0 ? "connected" : failure(-res);
}

std::string query_op(const char* server, const std::string& name) {
  std::vector<unsigned char> q = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<unsigned char>(dot - start));
    q.insert(q.end(), name.begin() + static_cast<long>(start), name.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  q.insert(q.end(), {0, 0, 1, 0, 1});
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  if (::inet_pton(AF_INET, server, &to.sin_addr) != 1) return "error22";
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return failure(errno);
  int res = 0;
  if (int err = agentcage::kt::uring_sendmsg(s, &to, sizeof to, q.data(), q.size(), &res); err != 0) {
    uring_unavailable = true;
    res = -err;
  }
  if (res < 0) {
    ::close(s);
    return failure(-res);
  }
  timeval tv{5, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  unsigned char reply[512];
  sockaddr_in from{};
  socklen_t len = sizeof from;
  // The ring's teardown may interrupt the wait once (task work): EINTR, since
  // the socket has a timeout.
  ssize_t n;
  do n = ::recvfrom(s, reply, sizeof reply, 0, reinterpret_cast<sockaddr*>(&from), &len);
  while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(s);
  if (n < 0) return failure(err == EAGAIN ? ETIMEDOUT : err);
  if (n < 4 || reply[0] != 0x12 || reply[1] != 0x34) return "bad-reply";
  char src[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &from.sin_addr, src, sizeof src);
  return std::to_string(reply[3] & 0xf) + "@" + src;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  for (int i = 1; i < argc; i += 3) {
    if (i + 2 >= argc) {
      std::fprintf(stderr, "usage: %s {connect HOST PORT | query SERVER NAME}...\n", argv[0]);
      return 2;
    }
    const std::string op = argv[i];
    std::string word;
    if (op == "connect")
      word = connect_op(argv[i + 1], argv[i + 2]);
    else if (op == "query")
      word = query_op(argv[i + 1], argv[i + 2]);
    else {
      std::fprintf(stderr, "%s: unknown operation '%s' (connect, query)\n", argv[0], op.c_str());
      return 2;
    }
    if (uring_unavailable) {
      std::puts("uring-unavailable");
      return 3;
    }
    out += (out.empty() ? "" : " ") + word;
  }
  std::puts(out.c_str());
  return 0;
}
