// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace agentcage::kt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace agentcage;
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
