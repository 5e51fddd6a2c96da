// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

#include "bpf/keys.h"

namespace agentcage::bpf {
namespace {

std::string key_text(const ac_path_key& k) {
  return std::string(reinterpret_cast<const char*>(k.path), (k.prefixlen - 32) / 8);
}

TEST(PathKey, AppendsSeparatorSoPrefixesStopAtComponentBoundaries) {
  auto k = make_path_key(7, "/usr/lib");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(key_text(*k), "/usr/lib/");
  EXPECT_EQ(ntohl(k->rules_id_be), 7u);
  EXPECT_EQ(k->prefixlen, 32u + 8u * 9u);
  // "/usr/lib64/" does not start with "/usr/lib/": no accidental match.
  EXPECT_NE(std::string("/usr/lib64/").rfind(key_text(*k), 0), 0u);
}

TEST(PathKey, RootIsASingleSlash) {
  auto k = make_path_key(1, "/");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(key_text(*k), "/");
}

TEST(PathKey, RejectsRelativeAndOverlongPaths) {
  EXPECT_FALSE(make_path_key(1, "").ok());
  EXPECT_FALSE(make_path_key(1, "usr/lib").ok());
  std::string longest = "/" + std::string(AC_PATH_KEY_MAX - 2, 'a');  // + '/' = KEY_MAX
  EXPECT_TRUE(make_path_key(1, longest).ok());
  auto too_long = make_path_key(1, longest + "b");
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().code, ENAMETOOLONG);
}

}  // namespace
}  // namespace agentcage::bpf
