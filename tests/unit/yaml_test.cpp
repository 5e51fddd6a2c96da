// SPDX-License-Identifier: Apache-2.0
// The YAML front end shared by policies and the daemon configuration
// (yaml/): loading through the input guard, and a mapping's fields checked
// against the allowed keys. The guard's many rejections are tested through
// both users (policy_parse_test.cpp, daemon_test.cpp); this file pins the
// module's own contract.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "yaml/document.h"

namespace agentcage::yaml {
namespace {

constexpr InputKind kThing{.noun = "thing", .place = "things", .max_bytes = 1024};
constexpr InputKind kOptional{.noun = "thing", .place = "things", .max_bytes = 1024, .empty_is_valid = true};

std::vector<std::string> formatted(Reporter& reporter) {
  std::vector<std::string> out;
  for (const Diagnostic& d : reporter.take()) out.push_back(d.format());
  return out;
}

TEST(YamlDocument, LoadsOneDocumentOfPlainNodes) {
  Reporter r("t.yaml");
  auto root = load_document("a: 1\nb: [x, y]\n", kThing, r);
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->IsMap());
  EXPECT_EQ((*root)["b"][1].Scalar(), "y");
  EXPECT_FALSE(r.has_errors());
}

TEST(YamlDocument, EmptyInputIsAnErrorUnlessAllowed) {
  Reporter r("t.yaml");
  EXPECT_FALSE(load_document("# nothing\n", kThing, r));
  EXPECT_EQ(formatted(r),
            std::vector<std::string>{
                "t.yaml:1:1: empty thing: the file has no YAML content (only whitespace or comments)"});
  auto root = load_document("# nothing\n", kOptional, r);
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->IsNull());
  EXPECT_FALSE(r.has_errors());
}

TEST(YamlDocument, GuardMessagesNameTheKindOfFile) {
  Reporter r("t.yaml");
  EXPECT_FALSE(load_document(std::string(1025, ' '), kOptional, r));
  EXPECT_FALSE(load_document("a: !x 1\n", kThing, r));
  EXPECT_FALSE(load_document("a: 1\n---\n", kThing, r));
  EXPECT_FALSE(load_document("a: \x01\n", kThing, r));
  EXPECT_EQ(formatted(r),
            (std::vector<std::string>{
                "t.yaml: thing is 1025 bytes; the limit is 1024 bytes",
                "t.yaml:1:4: YAML tag '!x' is not allowed in things",
                "t.yaml:1:4: control character 0x01: thing files are UTF-8 text (is this a binary file?)",
                "t.yaml:2:1: a second YAML document: a thing file holds exactly one document",
            }));
}

constexpr std::array<std::string_view, 3> kAllowed = {"name", "mode", "limits"};

TEST(YamlFields, KnownFieldsWithKeyPositions) {
  Reporter r("t.yaml");
  auto root = load_document("name: x\nlimits: {a: 1}\n", kThing, r);
  ASSERT_TRUE(root);
  const Fields fields = mapping_fields(*root, {kAllowed}, r);
  EXPECT_FALSE(r.has_errors());
  ASSERT_EQ(fields.size(), 2u);
  const Field* limits = find(fields, "limits");
  ASSERT_NE(limits, nullptr);
  EXPECT_EQ(limits->key_pos.line, 2);
  EXPECT_EQ(limits->key_pos.column, 1);
  EXPECT_TRUE(limits->value.IsMap());
  EXPECT_EQ(find(fields, "mode"), nullptr);
}

TEST(YamlFields, ReportsBadKeysWithTheNounAndPlace) {
  Reporter r("t.yaml");
  auto root = load_document("name: x\nnmae: y\nname: z\n[a]: 1\nMode: m\nzzzzzz: 1\n", kThing, r);
  ASSERT_TRUE(root);
  const Fields fields = mapping_fields(*root, {kAllowed, "setting", "in spec"}, r);
  EXPECT_EQ(fields.size(), 1u);  // the first "name"
  EXPECT_EQ(find(fields, "name")->value.Scalar(), "x");
  EXPECT_EQ(formatted(r), (std::vector<std::string>{
                              "t.yaml:2:1: unknown setting 'nmae' in spec (did you mean 'name'?)",
                              "t.yaml:3:1: duplicate setting 'name' in spec (first at 1:1)",
                              "t.yaml:4:1: keys must be strings, got a list in spec",
                              "t.yaml:5:1: unknown setting 'Mode' in spec (did you mean 'mode'?)",
                              "t.yaml:6:1: unknown setting 'zzzzzz' in spec",
                          }));
}

TEST(YamlFields, NoSuggestionOnceTheErrorListIsFull) {
  Reporter r("t.yaml");
  for (size_t i = 0; i < Reporter::kMaxErrors; ++i) r.error({1, 1}, "filler");
  auto root = load_document("nmae: x\n", kThing, r);
  ASSERT_TRUE(root);
  (void)mapping_fields(*root, {kAllowed}, r);
  EXPECT_EQ(r.count(), Reporter::kMaxErrors + 1);
  const auto errors = r.take();
  EXPECT_EQ(errors.back().message, "1 more errors not shown");
}

}  // namespace
}  // namespace agentcage::yaml
