// SPDX-License-Identifier: Apache-2.0
// agentcage-runc: an OCI runtime in front of runc or crun for engines that
// have no hooks.d (Docker, containerd). For `create` and `run` of a
// container whose policy is known, it adds `agentcage oci-hook` to the
// bundle's config.json (createRuntime and poststop); then, for every call,
// it execs the real runtime with the same arguments minus its own. See
// docs/containers.md.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "oci/bundle.h"
#include "oci/hooks.h"
#include "oci/runtime_args.h"
#include "shim/decide.h"

#ifndef AGENTCAGE_VERSION
#define AGENTCAGE_VERSION "0.0.0"
#endif

namespace {

namespace fs = std::filesystem;
using namespace agentcage;

constexpr const char* kDefaultRuntime = "/usr/sbin/runc";

void print_help() {
  std::printf(
      "Usage: agentcage-runc [--agentcage-OPTION=VALUE...] [RUNTIME-ARGS...]\n"
      "\n"
      "An OCI runtime that confines containers with agentcage, for container engines\n"
      "without OCI hooks directories (Docker, containerd). Configure it as the\n"
      "engine's runtime; it runs the real runtime (runc or crun) for every call.\n"
      "\n"
      "For `create` and `run`, it reads the bundle's config.json (the --bundle\n"
      "directory, else the current one). When the container's policy is known, it\n"
      "adds two hooks to config.json before the runtime reads it: `agentcage oci-hook\n"
      "--stage createRuntime`, which confines the container's cgroup before its first\n"
      "instruction, and `--stage poststop`, which releases it. The policy is, in\n"
      "order: --agentcage-policy, the container's io.agentcage.policy annotation,\n"
      "--agentcage-default-policy. A container with none of them, a pod's sandbox\n"
      "(pause) container and every other subcommand are passed on unchanged.\n"
      "\n"
      "It fails closed: when the bundle of a create or run cannot be read or\n"
      "rewritten, it says why on stderr and exits 1 without running the runtime.\n"
      "\n"
      "Options (before the subcommand; removed before the real runtime runs):\n"
      "  --agentcage-runtime=PATH         the real runtime (default %s)\n"
      "  --agentcage-policy=NAME          confine every container under policy NAME,\n"
      "                                   whatever its annotation says\n"
      "  --agentcage-default-policy=NAME  the policy of a container without an\n"
      "                                   io.agentcage.policy annotation (needed where\n"
      "                                   whoever starts containers must not be able\n"
      "                                   to run one unconfined, e.g. a Kubernetes\n"
      "                                   RuntimeClass)\n"
      "  -h, --help                       print this help and exit\n"
      "  -v, --version                    print the version, then the real runtime's\n"
      "\n"
      "The hooks run the agentcage binary in agentcage-runc's own directory\n"
      "(/usr/bin/agentcage when installed from the package).\n"
      "\n"
      "Exit status: the real runtime's; 1 when agentcage-runc refuses the call.\n",
      kDefaultRuntime);
}

[[noreturn]] void refuse(const std::string& message) {
  std::fprintf(stderr, "agentcage-runc: %s\n", message.c_str());
  std::exit(1);
}

// The directory this binary is in, from /proc/self/exe.
fs::path own_directory() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) refuse("cannot read /proc/self/exe: " + ec.message());
  return self.parent_path();
}

// The real runtime: an absolute path to an executable that is not this binary.
std::string real_runtime(const oci::RuntimeArgs& args) {
  const std::string path = args.real_runtime.value_or(kDefaultRuntime);
  if (path.empty() || path.front() != '/') refuse("--agentcage-runtime must be an absolute path, not '" + path + "'");
  struct stat real {}, self {};
  if (::stat(path.c_str(), &real) != 0)
    refuse("the real runtime " + path + ": " + std::strerror(errno) + " (set it with --agentcage-runtime=PATH)");
  if (::stat("/proc/self/exe", &self) == 0 && real.st_dev == self.st_dev && real.st_ino == self.st_ino)
    refuse("--agentcage-runtime=" + path + " is agentcage-runc itself: name runc or crun");
  return path;
}

[[noreturn]] void exec_runtime(const std::string& path, std::vector<std::string> argv) {
  argv[0] = path;  // crun changes behaviour by its argv[0] (krun): give it its own name
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execv(path.c_str(), cargv.data());
  refuse("cannot run " + path + ": " + std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> words(argv, argv + argc);
  auto args = oci::parse_runtime_args(words);
  if (!args) refuse(args.error().message);

  if (args->subcommand.empty()) {
    for (size_t i = 1; i < args->runtime_argv.size(); ++i) {
      const std::string& w = args->runtime_argv[i];
      if (w == "-h" || w == "--help") {
        print_help();
        return 0;
      }
      if (w == "-v" || w == "--version") {
        // Ours first: engines that parse `RUNTIME --version` (Docker) keep the
        // last "version" line, which is then the real runtime's.
        std::printf("agentcage-runc version %s\n", AGENTCAGE_VERSION);
        std::fflush(stdout);
        const std::string path = args->real_runtime.value_or(kDefaultRuntime);
        if (::access(path.c_str(), X_OK) != 0) {
          std::fprintf(stderr, "agentcage-runc: the real runtime %s: %s\n", path.c_str(), std::strerror(errno));
          return 0;
        }
        exec_runtime(real_runtime(*args), {"", "--version"});
      }
    }
  }

  const std::string runtime = real_runtime(*args);
  if (oci::starts_from_bundle(args->subcommand)) {
    const fs::path dir = args->bundle.empty() ? fs::path(".") : args->bundle;
    const Result<oci::Bundle> bundle = oci::read_bundle(dir);
    const fs::path agentcage = own_directory() / "agentcage";
    auto edit = shim::decide(*args, &bundle, agentcage);
    if (!edit) refuse(edit.error().message);
    if (*edit) {
      if (::access(agentcage.c_str(), X_OK) != 0)
        refuse("the hook " + agentcage.string() + " cannot be run: " + std::strerror(errno));
      auto changed = oci::add_hooks(bundle->dir, **edit);
      if (!changed) refuse(changed.error().message);
    }
  }
  exec_runtime(runtime, args->runtime_argv);
}
