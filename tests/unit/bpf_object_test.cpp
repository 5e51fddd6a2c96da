// SPDX-License-Identifier: Apache-2.0
// The BPF object this binary carries, and the digest that names its pinned set.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "bpf/enforcer.h"
#include "bpf/skeleton.h"
#include "../common/temp_dir.h"

namespace agentcage::bpf {
namespace {

// The digest is computed when the object is built (cmake/object_digest.cmake),
// not per run: it must still be the digest of exactly the bytes this binary
// embeds, or two builds with different programs would adopt one pinned set.
TEST(BpfObject, DigestIsTheSha256OfTheEmbeddedObject) {
  size_t size = 0;
  const void* data = agentcage_bpf__elf_bytes(&size);
  ASSERT_GT(size, 0U);
  testing::TempDir dir("ac-digest");
  const auto file = dir.path() / "object.o";
  std::ofstream(file, std::ios::binary).write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  const std::string command = "sha256sum '" + file.string() + "'";
  FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char hex[65] = {};
  ASSERT_EQ(std::fread(hex, 1, 64, p), 64U);
  ASSERT_EQ(::pclose(p), 0);
  EXPECT_EQ(Enforcer::object_digest(), std::string(hex, 16));
  EXPECT_EQ(Enforcer::shared_pin_dir("/sys/fs/bpf/agentcage"),
            "/sys/fs/bpf/agentcage/" + std::string(hex, 16));
}

}  // namespace
}  // namespace agentcage::bpf
