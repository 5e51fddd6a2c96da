// SPDX-License-Identifier: Apache-2.0
// The benchmark's environment: cgroups, workspaces, the policy, and the
// Enforcer that exists only in phase B.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "bench.h"
#include "bpf/compile.h"
#include "policy/policy.h"

namespace agentcage::bench {

namespace {

// Everything the mixed workload does, allowed: reads under /usr/lib (the
// libraries /usr/bin/true maps, /usr/lib/os-release), the loader cache,
// writes in the workspace, exec of /usr/bin/true, loopback TCP/UDP and the
// workload's unix socket.
std::string make_policy(const fs::path& unix_socket) {
  return "apiVersion: agentcage/v1\n"
         "kind: Policy\n"
         "metadata:\n"
         "  name: bench\n"
         "spec:\n"
         "  mode: enforce\n"
         "  exec:\n"
         "    allow: [/usr/bin/true]\n"
         "  files:\n"
         "    read: [/usr/lib, /etc/ld.so.cache]\n"
         "    write: [\"${workspace}\"]\n"
         "  network:\n"
         "    allow:\n"
         "      - {cidr: 127.0.0.1/32, protocol: any}\n"
         "      - {unix: " +
         unix_socket.string() + "}\n";
}

}  // namespace

Result<std::unique_ptr<Fixture>> Fixture::create(const Options& opts) {
  std::unique_ptr<Fixture> fx(new Fixture());
  fx->opts_ = opts;

  auto root = cgroup::find_cgroup2_root();
  if (!root) return root.error().wrap("bench: no cgroup v2 hierarchy");
  fx->cg_root_ = *root;

  char tmpl[] = "/tmp/agentcage-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) return Error::from_errno("bench: mkdtemp /tmp/agentcage-bench-XXXXXX");
  fx->base_dir_ = tmpl;
  fx->workspace_ = fx->base_dir_ / "scoped";
  std::error_code ec;
  fs::create_directories(fx->workspace_, ec);
  if (ec) return Error{"bench: creating " + fx->workspace_.string() + ": " + ec.message(), ec.value()};
  // The file the workload opens for writing; must exist (no O_CREAT).
  std::ofstream(fx->workspace_ / "data.txt") << "bench\n";

  fx->policy_yaml_ = make_policy(fx->workspace_ / "bench.sock");
  auto parsed = policy::parse_policy(fx->policy_yaml_, "bench-policy.yaml");
  if (!parsed.ok())
    return Error{"bench: the benchmark policy does not parse: " +
                     (parsed.errors.empty() ? std::string("?") : parsed.errors[0].format()),
                 EINVAL};
  auto compiled = bpf::compile(*parsed.policy);
  if (!compiled) return compiled.error().wrap("bench: compiling the benchmark policy");
  fx->policy_ = *compiled;

  auto parent =
      cgroup::Cgroup::create(fx->cg_root_, fx->cg_root_, "agentcage-bench-" + std::to_string(::getpid()));
  if (!parent) return parent.error().wrap("bench");
  fx->parent_ = std::move(parent).value();
  auto mk = [&](const std::string& name) {
    return cgroup::Cgroup::create(fx->cg_root_, fx->parent_.path(), name);
  };
  auto unscoped = mk("unscoped");
  if (!unscoped) return unscoped.error().wrap("bench");
  fx->unscoped_ = std::move(unscoped).value();
  auto scoped = mk("scoped");
  if (!scoped) return scoped.error().wrap("bench");
  fx->scoped_ = std::move(scoped).value();
  for (unsigned i = 0; i < opts.scopes; i++) {
    char name[32];
    std::snprintf(name, sizeof name, "live-%03u", i);
    auto cg = mk(name);
    if (!cg) return cg.error().wrap("bench");
    fx->live_.push_back(std::move(cg).value());
  }
  return fx;
}

Fixture::~Fixture() {
  unload();
  live_.clear();
  scoped_ = cgroup::Cgroup();
  unscoped_ = cgroup::Cgroup();
  parent_ = cgroup::Cgroup();
  std::error_code ec;
  if (!base_dir_.empty()) fs::remove_all(base_dir_, ec);
}

Status Fixture::load() {
  unload();
  auto before = agentcage_programs();
  if (!before) return before.error();
  auto t0 = std::chrono::steady_clock::now();
  auto e = bpf::Enforcer::load();
  if (!e) return e.error();
  enforcer_ = std::move(e).value();
  load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (auto st = enforcer_->put_policy(kSlot, policy_); !st.ok())
    return st.error().wrap("bench: installing the policy");
  uint64_t scope_id = 1;
  if (auto st = enforcer_->add_scope({scoped_.fd(), scoped_.id(), scoped_.level()}, scope_id++, kSlot,
                                     workspace_.string());
      !st.ok())
    return st.error().wrap("bench: registering the scoped cgroup");
  for (const auto& cg : live_) {
    // A workspace per scope, as real runs have; the directory need not exist.
    auto ws = base_dir_ / cg.path().filename();
    if (auto st = enforcer_->add_scope({cg.fd(), cg.id(), cg.level()}, scope_id++, kSlot, ws.string());
        !st.ok())
      return st.error().wrap("bench: registering live scope " + cg.path().string());
  }

  auto after = agentcage_programs();
  if (!after) return after.error();
  prog_ids_.clear();
  for (const auto& [id, stat] : *after)
    if (!before->count(id)) prog_ids_.push_back(id);
  if (prog_ids_.empty())
    return Error{
        "bench: the Enforcer loaded but no new ac_* LSM program is visible through bpf_prog_get_next_id",
        ENOENT};
  return Status::success();
}

void Fixture::unload() {
  enforcer_.reset();  // detaches the programs and frees the maps
  prog_ids_.clear();
}

}  // namespace agentcage::bench
