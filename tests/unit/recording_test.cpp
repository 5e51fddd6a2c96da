// SPDX-License-Identifier: Apache-2.0
// `agentcage run --record`: the set a recording folds records into.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "run/recording.h"

namespace agentcage::run {
namespace {

ac_event_decision path_record(uint8_t hook, const std::string& path, uint32_t access, uint32_t pid = 7) {
  ac_event_decision r{};
  r.hdr.type = AC_EVENT_DECISION;
  r.hdr.size = sizeof r;
  r.hook = hook;
  r.decision = AC_DECISION_AUDIT;
  r.reason = AC_REASON_DEFAULT_DENY;
  r.target_kind = AC_TARGET_PATH;
  r.access = access;
  r.pid = pid;
  std::memcpy(r.comm, "python3", 8);
  std::memcpy(r.target, path.data(), path.size());
  r.target_len = static_cast<uint16_t>(path.size());
  return r;
}

TEST(RecordSet, KeepsEachOperationOnceWithItsCountWhoeverMadeIt) {
  RecordSet set;
  set.add(path_record(AC_HOOK_FILE_OPEN, "/etc/hosts", AC_ACCESS_READ, 1));
  set.add(path_record(AC_HOOK_FILE_OPEN, "/etc/hosts", AC_ACCESS_READ, 2));  // another process
  set.add(path_record(AC_HOOK_FILE_OPEN, "/etc/hosts", AC_ACCESS_WRITE));    // another access
  set.add(path_record(AC_HOOK_FILE_STAT, "/etc/hosts", AC_ACCESS_READ));     // another hook
  set.add(path_record(AC_HOOK_FILE_OPEN, "/etc/hostname", AC_ACCESS_READ));  // another target
  EXPECT_EQ(set.total(), 5u);
  EXPECT_EQ(set.distinct(), 4u);
  const auto j = set.json(0);
  EXPECT_TRUE(j["complete"].get<bool>());
  EXPECT_EQ(j["total"], 5);
  EXPECT_EQ(j["distinct"], 4);
  EXPECT_EQ(j["lost"], 0);
  ASSERT_EQ(j["records"].size(), 4u);
  // First-seen order; the first record's own fields (pid 1), its count.
  EXPECT_EQ(j["records"][0]["target"], "/etc/hosts");
  EXPECT_EQ(j["records"][0]["pid"], 1);
  EXPECT_EQ(j["records"][0]["count"], 2);
  EXPECT_EQ(j["records"][0]["access"], nlohmann::json::array({"read"}));
  EXPECT_EQ(j["records"][1]["access"], nlohmann::json::array({"write"}));
  EXPECT_EQ(j["records"][2]["hook"], "file_stat");
  EXPECT_EQ(j["records"][3]["target"], "/etc/hostname");
  EXPECT_FALSE(j["records"][0].contains("directory"));
}

TEST(RecordSet, SaysWhichTargetsAreDirectories) {
  RecordSet set;
  set.add(path_record(AC_HOOK_FILE_STAT, "/home/me/.aws", AC_ACCESS_READ | AC_RECORD_DIRECTORY));
  const auto j = set.json(0);
  EXPECT_EQ(j["records"][0]["directory"], true);
  EXPECT_EQ(j["records"][0]["access"], nlohmann::json::array({"read"}));
}

TEST(RecordSet, AddressesDifferByAddressPortAndProtocol) {
  auto connect = [](uint8_t last, uint16_t port, uint16_t proto) {
    ac_event_decision r{};
    r.hook = AC_HOOK_SOCKET_CONNECT;
    r.decision = AC_DECISION_DENY;
    r.target_kind = AC_TARGET_INET;
    r.family = AF_INET;
    r.addr[0] = 10;
    r.addr[3] = last;
    r.port = port;
    r.protocol = proto;
    return r;
  };
  RecordSet set;
  set.add(connect(1, 443, IPPROTO_TCP));
  set.add(connect(1, 443, IPPROTO_TCP));
  set.add(connect(2, 443, IPPROTO_TCP));
  set.add(connect(1, 80, IPPROTO_TCP));
  set.add(connect(1, 443, IPPROTO_UDP));
  EXPECT_EQ(set.distinct(), 4u);
  const auto j = set.json(0);
  EXPECT_EQ(j["records"][0]["target"], "10.0.0.1:443");
  EXPECT_EQ(j["records"][0]["protocol"], "tcp");
  EXPECT_EQ(j["records"][0]["count"], 2);
  EXPECT_EQ(j["records"][3]["protocol"], "udp");
}

TEST(RecordSet, IsIncompleteWhenAnythingWasLost) {
  RecordSet set;
  set.add(path_record(AC_HOOK_EXEC, "/usr/bin/id", AC_ACCESS_EXEC));
  const auto lost = set.json(3);  // e.g. the kernel's ring buffer was full
  EXPECT_FALSE(lost["complete"].get<bool>());
  EXPECT_EQ(lost["lost"], 3);
  EXPECT_EQ(lost["records"][0]["access"], nlohmann::json::array({"exec"}));
}

TEST(RecordSet, StopsKeepingNewOperationsAtItsCapAndSaysSo) {
  RecordSet set;
  for (size_t i = 0; i <= kRecordingMaxDistinct; ++i)
    set.add(path_record(AC_HOOK_FILE_OPEN, "/f" + std::to_string(i), AC_ACCESS_READ));
  set.add(path_record(AC_HOOK_FILE_OPEN, "/f0", AC_ACCESS_READ));  // a known one still counts
  EXPECT_EQ(set.distinct(), kRecordingMaxDistinct);
  EXPECT_EQ(set.dropped(), 1u);
  const auto j = set.json(0);
  EXPECT_FALSE(j["complete"].get<bool>());
  EXPECT_EQ(j["lost"], 1);
  EXPECT_EQ(j["records"][0]["count"], 2);
}

}  // namespace
}  // namespace agentcage::run
