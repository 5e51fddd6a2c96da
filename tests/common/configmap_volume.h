// SPDX-License-Identifier: Apache-2.0
// A directory laid out and updated the way the kubelet projects a Kubernetes
// ConfigMap volume (its atomic writer), for the tests of the daemon's policy
// directory (unit: tests/unit/policy_dir_test.cpp; real daemon:
// tests/kernel/daemon_test.cpp). The layout:
//
//   DIR/KEY                -> ..data/KEY          one symbolic link per key
//   DIR/..data             -> ..2026_11_26_19_40_45.1
//   DIR/..2026_11_26_19_40_45.1/KEY                the files themselves
//
// An update, step by step as the kubelet takes it:
//   1. writes every key into a new ..TIMESTAMP directory and points a
//      ..data_tmp link at it;
//   2. renames ..data_tmp over ..data: the one atomic switch, after which
//      every existing KEY link reads the new content;
//   3. links the keys that are new (kubelets before 1.2x did this before
//      step 2, with the links dangling until the switch: `links_first`);
//   4. removes the links of keys that are gone (dangling since step 2);
//   5. removes the old ..TIMESTAMP directory.
// `after(step)` runs after each step, so a test can look at what a watcher
// saw in between.
#pragma once

#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

namespace agentcage::test_support {

class ConfigMapVolume {
 public:
  enum class Step { wrote_data_dir, switched, linked_new_keys, unlinked_old_keys, removed_old_dir };
  using Payload = std::map<std::string, std::string>;  // key -> content

  explicit ConfigMapVolume(std::filesystem::path dir) : dir_(std::move(dir)) {}

  void write(const Payload& payload, const std::function<void(Step)>& after = {}, bool links_first = false) {
    namespace fs = std::filesystem;
    auto step = [&](Step s) {
      if (after) after(s);
    };
    fs::create_directories(dir_);
    std::error_code ec;
    const fs::path old_ts = fs::read_symlink(dir_ / "..data", ec);  // empty on the first write
    const std::string ts = timestamp_dir();
    fs::create_directory(dir_ / ts);
    for (const auto& [key, text] : payload) std::ofstream(dir_ / ts / key) << text;
    fs::create_directory_symlink(ts, dir_ / "..data_tmp");
    step(Step::wrote_data_dir);
    auto link_new_keys = [&] {
      for (const auto& [key, text] : payload)
        if (!fs::is_symlink(dir_ / key)) fs::create_symlink(fs::path("..data") / key, dir_ / key);
    };
    if (links_first) link_new_keys();
    fs::rename(dir_ / "..data_tmp", dir_ / "..data");
    step(Step::switched);
    if (!links_first) link_new_keys();
    step(Step::linked_new_keys);
    for (const auto& key : keys_)
      if (!payload.count(key)) fs::remove(dir_ / key);
    step(Step::unlinked_old_keys);
    if (!old_ts.empty()) fs::remove_all(dir_ / old_ts);
    step(Step::removed_old_dir);
    keys_.clear();
    for (const auto& [key, text] : payload) keys_.insert(key);
  }

 private:
  // ..YYYY_MM_DD_HH_MM_SS.N, as the kubelet names them (it adds a random
  // suffix; a counter keeps these unique).
  std::string timestamp_dir() {
    char buf[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    std::strftime(buf, sizeof buf, "..%Y_%m_%d_%H_%M_%S.", &tm);
    return buf + std::to_string(++writes_);
  }

  std::filesystem::path dir_;
  std::set<std::string> keys_;
  int writes_ = 0;
};

}  // namespace agentcage::test_support
