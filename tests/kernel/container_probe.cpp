// SPDX-License-Identifier: Apache-2.0
// agentcage-container-probe: what a container's entrypoint tries, one
// operation per word pair, each answered on its own line as "OP ARG: ok" or
// "OP ARG: ERRNONAME" (container_test.cpp reads them). Plain libc: it runs
// inside containers whose policy allows little.
//
//   agentcage-container-probe read PATH | write PATH | connect IPV4:PORT |
//                             wait PATH ...
// (wait: until PATH exists, at most 60 s; it answers ok or ETIMEDOUT.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int probe(const char* op, const char* arg) {
  if (std::strcmp(op, "read") == 0) {
    int fd = ::open(arg, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    char b;
    const ssize_t n = ::read(fd, &b, 1);
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    return err;
  }
  if (std::strcmp(op, "write") == 0) {
    int fd = ::open(arg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    const ssize_t n = ::write(fd, "probe\n", 6);
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    return err;
  }
  if (std::strcmp(op, "wait") == 0) {
    for (int i = 0; i < 600; ++i) {
      if (::access(arg, F_OK) == 0) return 0;
      ::usleep(100000);
    }
    return ETIMEDOUT;
  }
  if (std::strcmp(op, "connect") == 0) {
    const char* colon = std::strrchr(arg, ':');
    if (!colon) return EINVAL;
    char host[64] = {};
    std::memcpy(host, arg, std::min<size_t>(static_cast<size_t>(colon - arg), sizeof host - 1));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(colon + 1)));
    if (::inet_pton(AF_INET, host, &a.sin_addr) != 1) return EINVAL;
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    const int r = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const int err = r < 0 ? errno : 0;
    ::close(fd);
    return err;
  }
  return EINVAL;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (argc - 1) % 2 != 0) {
    std::fprintf(stderr, "usage: %s read PATH | write PATH | connect IPV4:PORT | wait PATH ...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const int err = probe(argv[i], argv[i + 1]);
    std::printf("%s %s: %s\n", argv[i], argv[i + 1], err ? strerrorname_np(err) : "ok");
    std::fflush(stdout);
  }
  return 0;
}
