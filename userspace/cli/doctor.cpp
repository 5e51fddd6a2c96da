// SPDX-License-Identifier: Apache-2.0
// `agentcage doctor`: can this host enforce policies?
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "doctor/doctor.h"
#include "util/log.h"

namespace agentcage::cli {

void add_doctor(CLI::App& app, const Globals& globals, Commands& commands) {
  auto* doctor = app.add_subcommand("doctor", "Check whether this host can enforce policies");
  doctor->footer(
      "Check whether this host can enforce agentcage policies: kernel version, BTF, the BPF LSM in\n"
      "the active LSM list, cgroup v2 and its memory/pids/cpu controllers, privileges, bpffs, and\n"
      "finally a trial load + attach of the LSM programs with a real process denied in a scoped\n"
      "cgroup. Every failed check prints the fix.\n\n"
      "Exit status: 0 when enforcement works, 1 when it does not.");
  auto json = std::make_shared<bool>(false);
  doctor->add_flag("--json", *json, "Print the report as JSON");
  commands.add(doctor, [json, &globals] {
    // The doctor reports libbpf's failures itself; only show libbpf chatter on -v.
    if (globals.verbosity == 0) log::set_level(log::Level::off);
    auto report = doctor::run();
    std::cout << (*json ? doctor::format_json(report) : doctor::format_text(report));
    return report.ready() ? 0 : 1;
  });
}

}  // namespace agentcage::cli
