// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

TEST(PathKey, NameRuleKeysAreExactByTheirLengthByte) {
  auto k = make_name_key(5, NameRule{NameRule::Kind::suffix, ".pem"});
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(ntohl(k->rules_id_be), 5u | AC_RULES_NS_NAME);
  EXPECT_EQ(key_text(*k), std::string("\x02\x04.pem", 6));
  auto e = make_name_key(5, NameRule{NameRule::Kind::exact, ".env"});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(key_text(*e), std::string("\x01\x04.env", 6));
  EXPECT_FALSE(make_name_key(5, NameRule{NameRule::Kind::exact, ""}).ok());
  EXPECT_FALSE(
      make_name_key(5, NameRule{NameRule::Kind::exact, std::string(AC_NAME_RULE_MAX + 1, 'a')}).ok());
  EXPECT_TRUE(make_name_key(5, NameRule{NameRule::Kind::exact, std::string(AC_NAME_RULE_MAX, 'a')}).ok());
  auto l = make_name_lengths_key(5);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(key_text(*l), std::string("\x03", 1));
}

TEST(PathKey, NameLengthsAreTheDistinctSuffixLengthsAscending) {
  auto l = name_lengths({{NameRule::Kind::suffix, ".tar.gz"},
                         {NameRule::Kind::exact, "id_rsa"},
                         {NameRule::Kind::suffix, ".pem"},
                         {NameRule::Kind::suffix, ".key"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->len[0], 4);
  EXPECT_EQ(l->len[1], 7);
  EXPECT_EQ(l->len[2], 0);
  std::vector<NameRule> many;
  for (int i = 1; i <= AC_NAME_SUFFIX_LENGTHS + 1; ++i)
    many.push_back({NameRule::Kind::suffix, "." + std::string(static_cast<size_t>(i), 'x')});
  EXPECT_FALSE(name_lengths(many).ok());
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

TEST(PathKey, AncestorsAreTheDirectoriesAboveRootFirst) {
  EXPECT_EQ(ancestors_of("/a/b/c"), (std::vector<std::string>{"/", "/a", "/a/b"}));
  EXPECT_EQ(ancestors_of("/a"), (std::vector<std::string>{"/"}));
  EXPECT_TRUE(ancestors_of("/").empty());
  EXPECT_TRUE(ancestors_of("rel/x").empty());
}

TEST(PathKey, AncestorEntriesCoverAllowedRulesOnlyAndAreExact) {
  std::vector<PathRule> rules = {
      {"/usr/lib", AC_ACCESS_READ, RuleSpace::absolute},
      {"/usr/share/fonts", AC_ACCESS_READ, RuleSpace::absolute},
      {"/home/x/secret", AC_ACCESS_DENY, RuleSpace::absolute},
      {"/data", AC_ACCESS_READ, RuleSpace::workspace},
      {"llm", AC_ACCESS_CONNECT, RuleSpace::abstract_unix},
  };
  auto anc = ancestor_rules(rules);
  std::vector<std::string> paths;
  for (const auto& r : anc) {
    EXPECT_EQ(r.space, RuleSpace::ancestor);
    EXPECT_EQ(r.access, AC_ACCESS_TRAVERSE);
    paths.push_back(r.path);
  }
  // Deduplicated; nothing for the deny rule (/home, /home/x), the workspace
  // or abstract names.
  EXPECT_EQ(paths, (std::vector<std::string>{"/", "/usr", "/usr/share"}));
  auto key = make_path_key(9, anc[1]);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(ntohl(key->rules_id_be), 9u | AC_RULES_NS_ANCESTOR);
  EXPECT_EQ(key_text(*key), "/usr/");
  EXPECT_EQ(path_key_bytes(anc[0]), 1u);  // "/"
  EXPECT_EQ(path_key_bytes(anc[1]), 5u);  // "/usr/"
}

}  // namespace
}  // namespace agentcage::bpf
