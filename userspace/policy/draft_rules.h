// SPDX-License-Identifier: Apache-2.0
// Internal to policy/draft*.cpp: the rules a draft holds, with the
// operations behind each, as the planning (draft.cpp) hands them to the
// rendering (draft_yaml.cpp). draft.h is the interface.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "policy/draft.h"

namespace agentcage::policy::draft {

// Observations under one label ("file_open read", "exec", "socket_connect
// tcp"): who, how often, on what.
struct Tally {
  std::set<std::string> comms, targets;
  uint64_t count = 0;
  void add(const Observation& o, const std::string& target) {
    if (!o.comm.empty()) comms.insert(o.comm);
    if (!target.empty()) targets.insert(target);
    count += o.count;
  }
};

// "file_open read by python3 (12×): a, b, c (+9 more)", every byte of it
// escaped for one comment line.
std::string describe(const std::string& label, const Tally& tally);

// An observation's label: its hook, with the access of an open and the
// protocol of an address.
std::string label(const Observation& o);

// Consecutive ports as ranges: {80, 443, 444} -> {80-80, 443-444}, as the
// YAML writes them and the compiler counts them.
std::vector<std::pair<uint16_t, uint16_t>> port_ranges(const std::set<uint16_t>& ports);

struct Rules {
  std::string name;  // a valid policy name
  std::set<std::string> exec;
  std::set<std::string> read, write;   // as written: "/usr/lib", "${workspace}/out"
  std::set<std::string> unix_sockets;  // "/run/x.sock" or "@name"
  std::map<std::pair<std::string, std::string>, std::set<uint16_t>> net;  // (cidr, protocol or "") -> ports
  // Each rule's operations by label. A rule is named "exec PATH", "read
  // PATH", "write PATH" (PATH as written), "unix NAME" or "net CIDR
  // PROTOCOL".
  std::map<std::string, std::map<std::string, Tally>> why;
  // What a rule allows beyond what was observed, one comment line each
  // under its operations: "a directory: ...", "no protocol: ...".
  std::map<std::string, std::set<std::string>> caution;
  std::map<std::pair<std::string, std::string>, Tally> left;    // (label, why not) -> operations
  std::map<std::pair<std::string, std::string>, Tally> review;  // (label, what to check) -> operations
  std::set<std::string> assumed;
};

// The policy document, with the header draft.h describes.
std::string render_yaml(const Rules& rules, const DraftOptions& options);
// What was left denied, what was allowed but deserves a second look, then
// what was assumed; every byte escaped (util/text.h escape).
std::vector<std::string> render_notes(const Rules& rules);

}  // namespace agentcage::policy::draft
