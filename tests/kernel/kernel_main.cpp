// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "kernel_env.h"
#include "util/log.h"

namespace agentcage::kt {
namespace {
std::unique_ptr<bpf::Enforcer> g_enforcer;
std::string g_skip_reason;
}  // namespace

bpf::Enforcer* enforcer() { return g_enforcer.get(); }
const std::string& skip_reason() { return g_skip_reason; }

bool kernel_required() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0;
  };
  return set("CI") || set("AGENTCAGE_REQUIRE_KERNEL");
}

namespace {

// A test that hangs ends the whole binary after AGENTCAGE_TEST_TIMEOUT
// seconds (600 by default; the slowest test takes about a minute under
// TCG) with its name, rather than the VM's timeout ending everything
// with no name at all.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(std::chrono::seconds limit) : limit_(limit), thread_([this] { watch(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    std::lock_guard<std::mutex> l(mu_);
    name_ = std::string(t.test_suite_name()) + "." + t.name();
    deadline_ = std::chrono::steady_clock::now() + limit_;
    ++generation_;
    cv_.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> l(mu_);
    name_.clear();
    ++generation_;
    cv_.notify_all();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> l(mu_);
    while (!done_) {
      if (name_.empty()) {
        cv_.wait(l);
        continue;
      }
      const auto generation = generation_;
      if (cv_.wait_until(l, deadline_, [&] { return done_ || generation_ != generation; })) continue;
      // write(2), not stdio: the hung test may hold a FILE's lock (a
      // popen'd command it reads).
      const std::string line = "\nagentcage kernel tests: " + name_ + " has run for over " +
                               std::to_string(limit_.count()) + "s: ending the tests\n";
      (void)!::write(2, line.data(), line.size());
      ::_exit(124);
    }
  }
  const std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  unsigned long generation_ = 0;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

}  // namespace agentcage::kt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace agentcage;
  long limit = 600;
  if (const char* v = std::getenv("AGENTCAGE_TEST_TIMEOUT")) {
    char* end = nullptr;
    limit = std::strtol(v, &end, 10);
    if (!*v || *end || limit <= 0) {
      std::fprintf(stderr, "AGENTCAGE_TEST_TIMEOUT must be a positive number of seconds, not '%s'\n", v);
      return 2;
    }
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new kt::Watchdog(std::chrono::seconds(limit)));
  log::set_level(log::Level::warn);
  if (::geteuid() != 0) {
    kt::g_skip_reason =
        "kernel tests need root (run them in the VM: tests/vm/run -- " + std::string(argv[0]) + ")";
  } else {
    auto e = bpf::Enforcer::load();
    if (e)
      kt::g_enforcer = std::move(e).value();
    else
      kt::g_skip_reason = e.error().message;
  }
  if (!kt::g_enforcer)
    std::fprintf(stderr, "agentcage kernel tests: enforcement unavailable: %s (%s)\n",
                 kt::g_skip_reason.c_str(),
                 kt::kernel_required() ? "required here: tests FAIL" : "tests SKIP");
  int rc = RUN_ALL_TESTS();
  kt::g_enforcer.reset();
  return rc;
}
