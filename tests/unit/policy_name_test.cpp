// SPDX-License-Identifier: Apache-2.0
// The one policy-name rule (policy/name.h) and every place that checks a
// policy name with it: metadata.name, `--policy NAME`, the daemon's
// policy-directory file names, control requests and run notifications. They
// once disagreed: the control protocol and the notifications accepted a
// leading or trailing '-' that the parser refuses, and `--policy My_Policy`
// looked up My_Policy.yaml, a file no valid policy can be in.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/client.h"
#include "control/notify.h"
#include "control/protocol.h"
#include "policy/locate.h"
#include "policy/name.h"
#include "policy/policy.h"
#include "run/result.h"
#include "util/unique_fd.h"

namespace agentcage {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(PolicyName, Rule) {
  for (const std::string& ok :
       std::vector<std::string>{"a", "0", "python-sandbox", "a-b-c", "x1", "1x", std::string(63, 'a')}) {
    EXPECT_TRUE(policy::valid_policy_name(ok)) << ok;
  }
  for (const std::string& bad :
       std::vector<std::string>{"", "-x", "x-", "-", "My_Policy", "Python", "a_b", "a.b", ".hidden", "a b",
                                "../etc", "a/b", "é", std::string(64, 'a'), std::string("a\0b", 3)}) {
    EXPECT_FALSE(policy::valid_policy_name(bad)) << bad;
  }
}

TEST(PolicyName, LikelyName) {
  EXPECT_EQ(policy::likely_policy_name("My_Policy"), "my-policy");
  EXPECT_EQ(policy::likely_policy_name("PYTHON"), "python");
  EXPECT_EQ(policy::likely_policy_name("ok"), "ok");
  EXPECT_EQ(policy::likely_policy_name("_x"), std::nullopt);  // "-x" is not valid either
  EXPECT_EQ(policy::likely_policy_name("a.b"), std::nullopt);
  EXPECT_EQ(policy::likely_policy_name(std::string(64, 'A')), std::nullopt);
  EXPECT_EQ(policy::did_you_mean_policy_name("My_Policy"), " (did you mean 'my-policy'?)");
  EXPECT_EQ(policy::did_you_mean_policy_name("ok"), "");
  EXPECT_EQ(policy::did_you_mean_policy_name("a b"), "");
}

// ---- metadata.name -------------------------------------------------------------

std::string metadata_name_error(const std::string& name) {
  policy::ParseOptions o;
  o.check_exec_exists = false;
  auto r = policy::parse_policy(
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: \"" + name + "\"\n", "p.yaml", o);
  return r.ok() ? "" : r.errors.at(0).format();
}

TEST(PolicyName, MetadataName) {
  EXPECT_EQ(metadata_name_error("my-policy"), "");
  EXPECT_EQ(metadata_name_error("My_Policy"),
            "p.yaml:4:9: invalid metadata.name 'My_Policy': use 1 to 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (did you mean 'my-policy'?)");
  EXPECT_NE(metadata_name_error("-x").find("invalid metadata.name '-x'"), std::string::npos);
}

// ---- --policy NAME|FILE -----------------------------------------------------------

TEST(PolicyName, PolicyOptionNamesMustBeValid) {
  EXPECT_EQ(*policy::resolve_policy("my-policy", "/p"), "/p/my-policy.yaml");
  // Before: My_Policy.yaml was looked up; no valid policy can be in it.
  auto upper = policy::resolve_policy("My_Policy", "/p");
  ASSERT_FALSE(upper);
  EXPECT_EQ(upper.error().code, EINVAL);
  EXPECT_EQ(
      upper.error().message,
      "--policy: 'My_Policy' is neither a policy name (1 to 63 lowercase letters, digits and '-', starting "
      "and ending with a letter or digit) nor a file path (one with a '/' or ending in .yaml or .yml) (did "
      "you mean 'my-policy'?)");
  for (const char* bad : {"Python", "a.b", "-x", "x-", "a_b", ".hidden"}) {
    auto r = policy::resolve_policy(bad, "/p");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("is neither a policy name (1 to 63"), std::string::npos)
        << r.error().message;
  }
  // File references are used as given, whatever their name.
  EXPECT_EQ(*policy::resolve_policy("./My_Policy.yaml", "/p"), "./My_Policy.yaml");
  EXPECT_EQ(*policy::resolve_policy("My_Policy.yml", "/p"), "My_Policy.yml");
  // locate_policy fails the same way before touching the file system.
  auto located = policy::locate_policy("My_Policy", "/nonexistent");
  ASSERT_FALSE(located);
  EXPECT_NE(located.error().message.find("did you mean 'my-policy'?"), std::string::npos);
}

// ---- the daemon's policy directory --------------------------------------------------

class PolicyDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agentcage-policy-name-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& file, const std::string& name) {
    const fs::path p = dir_ / file;
    std::ofstream(p, std::ios::binary)
        << "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: " << name << "}\nspec: {}\n";
    return p.string();
  }
  fs::path dir_;
};

TEST_F(PolicyDir, ValidStemLoads) {
  auto r = policy::load_policy_dir_file(write("my-policy.yaml", "my-policy"));
  ASSERT_TRUE(r.ok()) << r.errors.at(0).format();
  EXPECT_EQ(r.policy->name, "my-policy");
}

TEST_F(PolicyDir, InvalidStemIsRejectedWithTheRule) {
  // Before, the daemon blamed metadata.name ("does not match the file name:
  // expected 'My_Policy'"), a name no policy may have.
  const std::string path = write("My_Policy.yaml", "my-policy");
  auto r = policy::load_policy_dir_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.policy);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(
      r.errors[0].format(),
      path +
          ": the file name 'My_Policy.yaml' does not name a policy: the daemon names a policy by its file "
          "(NAME.yaml), and a policy name is 1 to 63 lowercase letters, digits and '-', starting and ending "
          "with a letter or digit (rename it to 'my-policy.yaml')");
  for (const char* file : {"-x.yaml", "x-.yaml", "a.b.yaml", "a_b.yaml"}) {
    auto bad = policy::load_policy_dir_file(write(file, "x"));
    ASSERT_FALSE(bad.ok()) << file;
    EXPECT_EQ(bad.errors.at(0).pos.line, 0) << file;
    EXPECT_NE(bad.errors[0].message.find("does not name a policy"), std::string::npos)
        << bad.errors[0].message;
  }
}

TEST_F(PolicyDir, InvalidStemAndContentAreBothReported) {
  const fs::path p = dir_ / "Bad.yaml";
  std::ofstream(p) << "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: bad}\nspec: {mdoe: audit}\n";
  auto r = policy::load_policy_dir_file(p.string());
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_NE(r.errors[0].message.find("(rename it to 'bad.yaml')"), std::string::npos) << r.errors[0].message;
  EXPECT_EQ(r.errors[1].pos.line, 4);
}

// ---- control requests ------------------------------------------------------------------

TEST(PolicyName, ControlRequestsUseTheRule) {
  // Before, the protocol accepted a leading or trailing '-'.
  for (const char* bad : {"-x", "x-", "My_Policy", "a.b"}) {
    for (const std::string& line :
         {std::string(R"({"op":"attach","cgroup":"a","policy":")") + bad + "\"}",
          std::string(R"({"op":"run_start","run_id":"0123456789abcdef","scope_id":1,"policy":")") + bad +
              "\"}"}) {
      auto r = control::parse_request(line);
      ASSERT_FALSE(r.ok()) << line;
      EXPECT_EQ(r.error().message,
                "request: \"policy\" must be a policy name (1 to 63 lowercase letters, digits and '-', "
                "starting and "
                "ending with a letter or digit)");
    }
  }
  EXPECT_TRUE(control::parse_request(R"({"op":"attach","cgroup":"a","policy":"my-policy"})").ok());
}

// ---- run notifications --------------------------------------------------------------

// A one-request control socket: records the request line, answers ok.
class FakeDaemon {
 public:
  FakeDaemon() {
    path_ =
        (fs::temp_directory_path() / ("agentcage-notify-" + std::to_string(::getpid()) + ".sock")).string();
    ::unlink(path_.c_str());
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    ok_ = fd_ && ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
          ::listen(fd_.get(), 1) == 0;
    ::setenv("AGENTCAGE_CONTROL_SOCKET", path_.c_str(), 1);
  }
  ~FakeDaemon() {
    ::unsetenv("AGENTCAGE_CONTROL_SOCKET");
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // The policy of the one request sent while `send` runs.
  std::string policy_of(const std::function<void()>& send) {
    std::string line;
    std::thread server([&] {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) return;  // nothing sent: the test fails, never hangs
      UniqueFd c(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) return;
      std::string buffer;
      if (auto l = control::read_line(c.get(), buffer, 5000)) line = *l;
      (void)control::write_all(c.get(), "{\"ok\":true}\n", 5000);
    });
    send();
    server.join();
    const json j = json::parse(line, nullptr, false);
    return j.is_object() ? j.value("policy", "") : "";
  }

 private:
  std::string path_;
  UniqueFd fd_;
  bool ok_ = false;
};

TEST(PolicyName, RunNotificationsUseTheRule) {
  FakeDaemon fake;
  ASSERT_TRUE(fake.ok());
  auto start = [&](const std::string& name) {
    return fake.policy_of([&] { control::notify_run_start("0123456789abcdef", name, 1, {}); });
  };
  EXPECT_EQ(start("my-policy"), "my-policy");
  // Before, "-x" and "x-" were sent as they are, and the daemon refused the
  // request: the run went uncounted instead of counted as "unknown".
  EXPECT_EQ(start("-x"), "unknown");
  EXPECT_EQ(start("x-"), "unknown");
  EXPECT_EQ(start("My_Policy"), "unknown");
  run::RunResult res;
  res.run_id = "0123456789abcdef";
  res.policy_name = "-x";
  EXPECT_EQ(fake.policy_of([&] { control::notify_run_end(run::run_end_notice(res)); }), "unknown");
}

}  // namespace
}  // namespace agentcage
