// SPDX-License-Identifier: Apache-2.0
// What the container kernel tests share (container_test.cpp with podman,
// docker_test.cpp with Docker): the probe their containers run, the policies
// ctest-a and ctest-b, what an entrypoint tries, and reading a --cidfile.
#pragma once

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "run_helpers.h"

namespace agentcage::kt {

// The directory of the kernel test binary and its probes (bound read-only
// into containers at the same path, so the policies can name the probe).
inline std::filesystem::path tests_dir() {
  return std::filesystem::canonical("/proc/self/exe").parent_path();
}
inline std::string container_probe() { return (tests_dir() / "agentcage-container-probe").string(); }

// A policy for containers: sh and the probe may run, the C library may be
// read, the workspace written; `extra_read` adds a read rule.
inline std::string container_policy(const std::string& name, const std::string& extra_read = "") {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: " + name +
         "}\nspec:\n"
         "  exec: {allow: [/usr/bin/sh, " +
         container_probe() +
         "]}\n"
         "  files:\n"
         "    read: [/usr/lib, /usr/lib64, /etc/ld.so.cache, \"${workspace}\"" +
         (extra_read.empty() ? "" : ", " + extra_read) +
         "]\n"
         "    write: [\"${workspace}\"]\n";
}

// What an entrypoint tries: the probe's five operations, then a program the
// policies do not allow (its exit status: "id-exit N").
inline std::vector<std::string> container_attempts() {
  return {"/usr/bin/sh", "-c",
          container_probe() +
              " read /secret/token write /workspace/out write /tmp/x read /usr/lib/os-release "
              "connect 127.0.0.1:9; /usr/bin/id -u; echo id-exit $?"};
}

// The options of `podman run` and `docker run` alike, for the container
// TAG of a test whose directory is `dir`: removed when it exits, named
// ctest-TAG, its id written to dir/TAG.cid (read_cidfile), its workspace
// dir/ws-TAG (created here) at /workspace, dir/secret read-only at
// /secret, and the probe's directory read-only at its own path.
inline std::vector<std::string> container_run_options(const std::filesystem::path& dir,
                                                      const std::string& tag) {
  const std::filesystem::path ws = dir / ("ws-" + tag);
  std::filesystem::create_directories(ws);
  return {"run",       "--rm",
          "--name",    "ctest-" + tag,
          "--cidfile", (dir / (tag + ".cid")).string(),
          "-v",        ws.string() + ":/workspace",
          "-v",        (dir / "secret").string() + ":/secret:ro",
          "-v",        tests_dir().string() + ":" + tests_dir().string() + ":ro"};
}

// The container id an engine wrote to a --cidfile ("" when none).
inline std::string read_cidfile(const std::filesystem::path& file) {
  std::string id = slurp(file);
  while (!id.empty() && std::isspace(static_cast<unsigned char>(id.back()))) id.pop_back();
  return id;
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace agentcage::kt
