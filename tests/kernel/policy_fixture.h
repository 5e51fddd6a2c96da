// SPDX-License-Identifier: Apache-2.0
// The fixture of the kernel tests that enforce a YAML policy on a cgroup of
// their own: a fresh cgroup under agentcage-kt/, a scratch directory with a
// workspace/ inside, a policy slot of the test file's own, and the counters
// of that slot. Derived fixtures add the files their tests need in SetUp
// (after calling this one) and wrap apply() with their YAML header.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "bpf/compile.h"
#include "cgroup/cgroup.h"
#include "kernel_env.h"
#include "policy/policy.h"
#include "probes.h"

namespace agentcage::kt {

class PolicyScopeTest : public ::testing::Test {
 protected:
  // `slot`: a policy slot no other test file uses; `name`: names the cgroup
  // and the scratch directory.
  PolicyScopeTest(uint32_t slot, std::string name) : slot_(slot), name_(std::move(name)) {}

  void SetUp() override {
    AC_REQUIRE_ENFORCER();
    static std::atomic<int> n{0};
    auto root = cgroup::find_cgroup2_root();
    ASSERT_TRUE(root.ok()) << root.error().message;
    root_ = *root;
    std::filesystem::create_directories(root_ / "agentcage-kt");
    auto cg = cgroup::Cgroup::create(root_, root_ / "agentcage-kt",
                                     name_ + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    cg_ = std::move(cg).value();
    std::string tmpl = "/tmp/agentcage-" + name_ + "-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    ws_ = base_ / "workspace";
    std::filesystem::create_directories(ws_);
  }

  void TearDown() override {
    if (scoped_) {
      EXPECT_TRUE(enforcer()->remove_scope(kt::scope_cgroup(cg_)).ok());
    }
    if (enforcer()) static_cast<void>(enforcer()->remove_policy(slot_));
    if (cg_.fd() >= 0) {
      EXPECT_TRUE(cg_.remove().ok());
    }
    if (!base_.empty()) std::filesystem::remove_all(base_);
  }

  // Parse and compile a whole policy document; nullopt (and a test failure)
  // when it does not compile.
  std::optional<bpf::CompiledPolicy> compile_yaml(const std::string& yaml) {
    auto parsed = policy::parse_policy(yaml, name_ + ".yaml");
    EXPECT_TRUE(parsed.ok()) << (parsed.errors.empty() ? "" : parsed.errors[0].format());
    if (!parsed.ok()) return std::nullopt;
    auto compiled = bpf::compile(*parsed.policy);
    EXPECT_TRUE(compiled.ok()) << (compiled ? "" : compiled.error().message);
    if (!compiled) return std::nullopt;
    return *compiled;
  }

  // Install (or swap in) the policy `yaml` in this test's slot; the first
  // call also makes the cgroup a scope, with `workspace` as its ${workspace}.
  void apply_yaml(const std::string& yaml, const std::string& workspace) {
    auto compiled = compile_yaml(yaml);
    ASSERT_TRUE(compiled.has_value());
    auto st = enforcer()->put_policy(slot_, *compiled);
    ASSERT_TRUE(st.ok()) << st.error().message;
    if (!scoped_) {
      st = enforcer()->add_scope(kt::scope_cgroup(cg_), cg_.id(), slot_, workspace);
      ASSERT_TRUE(st.ok()) << st.error().message;
      scoped_ = true;
    }
  }

  // fn in a new process started inside the scoped cgroup; its exit code.
  int scoped(const std::function<int()>& fn) { return run_in_cgroup(cg_.fd(), fn); }

  // This slot's decision counters for one hook.
  ac_counters hook(ac_hook h) {
    auto c = enforcer()->counters(slot_);
    EXPECT_TRUE(c.ok());
    return c ? c->hooks[h] : ac_counters{};
  }
  uint64_t denied(ac_hook h) { return hook(h).decisions[AC_DECISION_DENY]; }
  uint64_t reason(ac_hook h, ac_reason r) { return hook(h).reasons[r]; }

  std::string base(const std::string& rel) const { return (base_ / rel).string(); }
  std::string ws(const std::string& rel) const { return (ws_ / rel).string(); }

  const uint32_t slot_;
  const std::string name_;
  std::filesystem::path root_, base_, ws_;
  cgroup::Cgroup cg_;
  bool scoped_ = false;
};

}  // namespace agentcage::kt
