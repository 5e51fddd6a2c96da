// SPDX-License-Identifier: Apache-2.0
#include "run/remote.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <ostream>

#include "control/client.h"
#include "control/protocol.h"
#include "policy/name.h"
#include "run/result_sink.h"

namespace agentcage::run {

std::string remote_refusal(const RunOptions& o, bool policy_dir_given) {
  if (!policy::valid_policy_name(o.policy))
    return "--policy " + o.policy +
           ": without root, a run goes through the daemon and takes a policy of its policy directory by name "
           "(fix: install the file there as NAME.yaml, or run as root)";
  if (policy_dir_given) return "--policy-dir: a run through the daemon uses the daemon's policy directory";
  if (o.user) return "--user: a run through the daemon always gets a uid of its own";
  if (o.mode)
    return "--mode: a run through the daemon takes its policy's mode (fix: ask root to install an audit-mode "
           "copy of the policy in the daemon's policy directory, or run as root)";
  if (o.record)
    return "--record: a run through the daemon is recorded by the daemon's audit log (fix: run as root to "
           "record it completely)";
  if (o.keep)
    return "--keep: a run through the daemon keeps nothing of its own (fix: pass --workspace DIR: its "
           "contents are "
           "copied into the run's workspace and the workspace's back into DIR)";
  if (o.io_dir || o.io_owner)
    return "--io-dir/--io-owner are root's: without root, --workspace DIR does this";
  return "";
}

int run_via_daemon(const RunOptions& opts, const std::string& control_socket, std::ostream& err) {
  auto opened = ResultSink::for_options(opts.result_file, opts.result_fd);
  if (!opened) {
    err << "agentcage: " << opened.error().message << "\n";
    return kExitSetup;
  }
  ResultSink sink = std::move(*opened);
  control::Request req;
  req.op = control::Op::run;
  req.policy = opts.policy;
  req.argv = opts.command;
  req.env = opts.env;
  req.labels = opts.labels;
  req.limits = {opts.timeout, opts.memory, opts.pids, opts.cpu, opts.disk};
  if (opts.workspace) {
    // The real path, resolved as this user: the daemon opens it as this
    // user too, refusing symbolic links.
    std::error_code ec;
    auto dir = std::filesystem::canonical(*opts.workspace, ec);
    if (ec) {
      err << "agentcage: --workspace " << *opts.workspace << ": " << ec.message() << "\n";
      return kExitSetup;
    }
    req.workspace = dir.string();
  }
  if (req.argv.empty() || req.argv.front().empty()) {
    err << "agentcage: no COMMAND given\nagentcage: fix: agentcage run --policy NAME -- COMMAND [ARGS...]\n";
    return kExitSetup;
  }
  const int stdio[3] = {0, 1, 2};
  auto answer = control::call_with_fds(control_socket, control::to_json(req), stdio, 3, -1);
  if (!answer) {
    struct stat st {};
    if (answer.error().code == EACCES) {
      err << "agentcage: permission denied: the daemon's control socket " << control_socket
          << " takes root and members of its control_group only\n"
          << "agentcage: fix: run as root, or ask an operator to add you to the daemon's control_group\n";
      return kExitSetup;
    }
    err << "agentcage: " << answer.error().message << "\n";
    if (::stat(control_socket.c_str(), &st) != 0)
      err << "agentcage: fix: agentcage run needs root, or the agentcage daemon (no socket at "
          << control_socket << "): start it (systemctl start agentcage) or run as root\n";
    return kExitSetup;
  }
  const nlohmann::json& a = *answer;
  int code = kExitSetup;
  if (a.contains("exit_code") && a["exit_code"].is_number_integer()) code = a["exit_code"].get<int>();
  if (code < 0 || code > 255) code = kExitSetup;
  if (!a.value("ok", false)) {
    err << "agentcage: "
        << (a.contains("error") && a["error"].is_string() ? a["error"].get<std::string>()
                                                          : std::string("the daemon refused the run"))
        << "\n";
    if (a.value("error", std::string()).rfind("permission denied", 0) == 0)
      err << "agentcage: fix: run as root, or ask an operator to add you to the daemon's control_group\n";
  }
  if ((opts.result_file || opts.result_fd) && a.contains("result") && a["result"].is_object()) {
    const std::string text = a["result"].dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (Status st = sink.write(text); !st)
      err << "agentcage: writing the result to " << sink.name() << ": " << st.error().message << "\n";
  }
  return code;
}

}  // namespace agentcage::run
