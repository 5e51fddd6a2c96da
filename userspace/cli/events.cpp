// SPDX-License-Identifier: Apache-2.0
// `agentcage events`: the daemon's recent audit events, and with --follow
// the stream of new ones.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "control/client.h"

namespace agentcage::cli {
namespace {

struct EventsArgs {
  bool follow = false;
  std::string socket = control::default_control_socket();
};

int events_command(bool follow, const std::string& socket_path) {
  auto stream = control::open_stream(socket_path, {{"op", "events"}, {"follow", follow}}, 5000);
  if (!stream) {
    std::cerr
        << "agentcage events: the daemon is not reachable (" << stream.error().message
        << "); events come only through it (the ring buffer has one consumer): start `agentcage daemon`\n";
    return 1;
  }
  if (!stream->head.value("ok", false)) {
    const auto error = stream->head.find("error");
    std::cerr << "agentcage events: "
              << (error != stream->head.end() && error->is_string() ? error->get<std::string>()
                                                                    : stream->head.dump())
              << "\n";
    return 1;
  }
  if (const auto omitted = stream->head.find("omitted");
      omitted != stream->head.end() && omitted->is_number())
    std::cerr << "agentcage events: the " << omitted->dump()
              << " oldest recent events did not fit the daemon's client_buffer_bytes; shown: the newest "
              << stream->head.value("recent", nlohmann::json()).dump() << "\n";
  for (;;) {
    auto line = control::read_line(stream->fd.get(), stream->buffer, -1);
    if (!line) {
      std::cerr << "agentcage events: " << line.error().message << "\n";
      return 1;
    }
    if (line->empty()) return 0;  // the daemon closed the stream
    std::cout << *line << "\n" << std::flush;
  }
}

}  // namespace

void add_events(CLI::App& app, const Globals& /*globals*/, Commands& commands) {
  auto* events =
      app.add_subcommand("events", "Print the daemon's recent audit events; --follow streams new ones");
  events->footer(
      "Prints the daemon's most recent decision events (JSON lines, the audit log's format; see "
      "docs/daemon.md)\n"
      "and with --follow keeps streaming new ones. Needs the daemon: it is the ring buffer's only consumer.\n"
      "A line {\"dropped\":N} means N events were not queued for this client because it read too slowly.\n\n"
      "Exit status: 0 at the end of the stream, 1 when the daemon is not reachable.");
  auto args = std::make_shared<EventsArgs>();
  events->add_flag("-f,--follow", args->follow, "Keep streaming new events");
  events->add_option("--socket", args->socket, "The daemon's control socket")->type_name("PATH");
  commands.add(events, [args] { return events_command(args->follow, args->socket); });
}

}  // namespace agentcage::cli
