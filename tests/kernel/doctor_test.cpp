// SPDX-License-Identifier: Apache-2.0
// `agentcage doctor` through the real binary while a scope is enforcing: the
// probe (a private program set, confined through the scope lifecycle) passes
// and leaves the shared maps as it found them: the slot and the scope of a
// run in progress, even in the last slot, and no scope of its own.
#include <fcntl.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "policy_fixture.h"
#include "probes.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;

using namespace kt;

// The last slot, which the probe once wrote by number.
class DoctorTest : public kt::PolicyScopeTest {
 protected:
  static constexpr uint32_t kSlot = AC_MAX_POLICIES - 1;
  DoctorTest() : PolicyScopeTest(kSlot, "doc") {}
};

std::string doctor_output(int* status) {
  fs::path binary = fs::canonical("/proc/self/exe").parent_path().parent_path() / "agentcage";
  std::string cmd = binary.string() + " doctor 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 512> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = ::pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST_F(DoctorTest, ProbeLeavesOtherScopesPoliciesAlone) {
  fs::create_directories(base_ / "data");
  const std::string file = base("data/readable.txt");
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("x\n", f);
  std::fclose(f);
  apply_yaml("apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: doc\nspec:\n  files:\n    read: [" +
                 base("data") + "]\n",
             ws_.string());
  ASSERT_EQ(scoped([&] { return try_open(file, O_RDONLY); }), kOk);
  auto scopes_before = enforcer()->scopes();
  ASSERT_TRUE(scopes_before.ok());
  auto slot_digest = [&]() -> std::optional<uint64_t> {
    auto policies = enforcer()->policies();
    if (!policies.ok()) return std::nullopt;
    for (const auto& p : *policies)
      if (p.slot == kSlot) return p.digest;
    return std::nullopt;
  };
  const std::optional<uint64_t> digest_before = slot_digest();
  ASSERT_TRUE(digest_before.has_value());

  int status = -1;
  std::string out = doctor_output(&status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("enforcement probe"), std::string::npos) << out;

  // This scope's policy is still in its slot and still allows the read.
  EXPECT_EQ(scoped([&] { return try_open(file, O_RDONLY); }), kOk);
  EXPECT_EQ(slot_digest(), digest_before) << "the doctor's probe replaced or removed slot " << kSlot;
  // And the probe left no scope behind.
  auto scopes_after = enforcer()->scopes();
  ASSERT_TRUE(scopes_after.ok());
  EXPECT_EQ(scopes_after->size(), scopes_before->size());
}

}  // namespace
}  // namespace agentcage
