// SPDX-License-Identifier: Apache-2.0
// The daemon and its service manager: what reaches NOTIFY_SOCKET (a socket
// of the test's own, standing in for systemd's), and the journald priority
// prefixes the logger puts on each line when stderr is a journal stream.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "daemon/service_manager.h"
#include "util/log.h"
#include "util/unique_fd.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

// A datagram socket bound at a fresh path, named by NOTIFY_SOCKET while it lives.
class FakeServiceManager {
 public:
  FakeServiceManager() {
    dir_ = fs::temp_directory_path() / ("ac-notify-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string path = (dir_ / "notify").string();
    fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof a.sun_path - 1);
    bound_ = ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  }
  ~FakeServiceManager() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  bool bound() const { return bound_; }
  // Every message received so far.
  std::vector<std::string> messages() {
    std::vector<std::string> out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd_.get(), buf, sizeof buf, 0)) > 0;) out.emplace_back(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  fs::path dir_;
  UniqueFd fd_;
  bool bound_ = false;
};

TEST(ServiceManager, ReadyOnceThenStatusReloadAndStop) {
  FakeServiceManager sm;
  ASSERT_TRUE(sm.bound());
  daemon::ServiceManager service;
  EXPECT_TRUE(service.notifying());
  EXPECT_EQ(service.watchdog_interval().count(), 0);
  service.status("not enforcing: x");
  service.ready("enforcing; 2 policies");
  service.ready("enforcing; 2 policies");  // unchanged: nothing sent
  service.ready("enforcing; 3 policies");  // READY=1 only once
  service.keep_alive();                   // no watchdog: nothing
  service.reloading("reloading");
  service.ready("enforcing; 3 policies");  // the reload is over: READY=1 again
  service.stopping("stopping");
  std::vector<std::string> got = sm.messages();
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0], "STATUS=not enforcing: x");
  EXPECT_EQ(got[1], "READY=1\nSTATUS=enforcing; 2 policies");
  EXPECT_EQ(got[2], "STATUS=enforcing; 3 policies");
  EXPECT_EQ(got[3].rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << got[3];
  EXPECT_NE(got[3].find("\nSTATUS=reloading"), std::string::npos) << got[3];
  EXPECT_EQ(got[4], "READY=1\nSTATUS=enforcing; 3 policies");
  EXPECT_EQ(got[5], "STOPPING=1\nSTATUS=stopping");
}

TEST(ServiceManager, WatchdogKeepAlivesAtHalfTheInterval) {
  FakeServiceManager sm;
  ASSERT_TRUE(sm.bound());
  ::setenv("WATCHDOG_USEC", "200000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  daemon::ServiceManager service;
  EXPECT_EQ(service.watchdog_interval(), std::chrono::microseconds(100000));
  service.keep_alive();
  service.keep_alive();  // too soon: not sent
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  service.keep_alive();
  EXPECT_EQ(sm.messages(), (std::vector<std::string>{"WATCHDOG=1", "WATCHDOG=1"}));
  // Another process's watchdog is not ours.
  ::setenv("WATCHDOG_PID", "1", 1);
  daemon::ServiceManager other;
  EXPECT_EQ(other.watchdog_interval().count(), 0);
}

TEST(ServiceManager, WithoutNotifySocketNothingIsSent) {
  ::unsetenv("NOTIFY_SOCKET");
  daemon::ServiceManager service;
  EXPECT_FALSE(service.notifying());
  service.ready("x");  // must not fail or block
}

// stderr redirected to a file that JOURNAL_STREAM names: each line of a
// message carries its priority; without the variable, plain lines.
TEST(Log, JournalPrioritiesOnEveryLine) {
  const fs::path file = fs::temp_directory_path() / ("ac-journal-" + std::to_string(::getpid()));
  UniqueFd out(::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(out);
  std::fflush(stderr);
  UniqueFd saved(::fcntl(2, F_DUPFD_CLOEXEC, 3));
  ASSERT_EQ(::dup2(out.get(), 2), 2);
  struct stat st {};
  ASSERT_EQ(::fstat(2, &st), 0);
  const log::Level before = log::level();
  log::set_level(log::Level::debug);
  ::setenv("JOURNAL_STREAM", (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str(), 1);
  log::detect_journal();
  const bool detected = log::to_journal();
  log::error("two\nlines");
  log::warn("w");
  log::info("i");
  ::setenv("JOURNAL_STREAM", "1:2", 1);  // another stream: not ours
  log::detect_journal();
  const bool other = log::to_journal();
  log::error("plain");
  ::unsetenv("JOURNAL_STREAM");
  log::detect_journal();
  log::set_level(before);
  std::fflush(stderr);
  ::dup2(saved.get(), 2);
  std::string text;
  char buf[512];
  ::lseek(out.get(), 0, SEEK_SET);
  for (ssize_t n; (n = ::read(out.get(), buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  fs::remove(file);
  EXPECT_TRUE(detected);
  EXPECT_FALSE(other);
  EXPECT_EQ(text,
            "<3>agentcage: error: two\n<3>agentcage: error: lines\n<4>agentcage: warning: w\n"
            "<6>agentcage: info: i\nagentcage: error: plain\n");
}

}  // namespace
}  // namespace agentcage
