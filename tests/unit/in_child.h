// SPDX-License-Identifier: Apache-2.0
// A unit test's body in a child process of its own: for state a process
// keeps for good (a run's notice channel) or needs alone (the fork server
// starts only in a single-threaded process). The body returns "" when all
// is well, else what went wrong (printed by the failing test).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

namespace agentcage::test {

inline void in_child(const std::function<std::string()>& body) {
  EXPECT_EXIT(
      {
        const std::string problem = body();
        std::fprintf(stderr, "%s\n", problem.empty() ? "all good" : problem.c_str());
        std::fflush(stderr);
        ::_exit(problem.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "all good");
}

}  // namespace agentcage::test
