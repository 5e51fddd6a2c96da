// SPDX-License-Identifier: Apache-2.0
// agentcage-arm-probe: the program a process registered as a pending scope's
// arming pid execs in the kernel tests (arm_test.cpp). Usage:
//
//   agentcage-arm-probe SECRET ALLOWED
//
// opens SECRET, then SECRET again in a forked child, then ALLOWED, and
// prints one word per open after its name: "secret=W child-secret=W
// allowed=W", W being ok, denied (EACCES) or errorN. Exit status 0 unless
// it could not run its steps.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace {

std::string try_open(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return "ok";
  }
  return errno == EACCES ? "denied" : "error" + std::to_string(errno);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: agentcage-arm-probe SECRET ALLOWED\n");
    return 2;
  }
  const std::string self = try_open(argv[1]);
  int pipefd[2];
  if (::pipe(pipefd) != 0) return 3;
  pid_t pid = ::fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    const std::string w = try_open(argv[1]);
    ssize_t n = ::write(pipefd[1], w.data(), w.size());
    ::_exit(n == static_cast<ssize_t>(w.size()) ? 0 : 1);
  }
  ::close(pipefd[1]);
  char buf[32] = {};
  ssize_t n = ::read(pipefd[0], buf, sizeof buf - 1);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || n <= 0) return 3;
  std::printf("secret=%s child-secret=%s allowed=%s", self.c_str(), buf, try_open(argv[2]).c_str());
  return 0;
}
