// SPDX-License-Identifier: Apache-2.0
// The daemon's control socket: a unix stream socket, 0600 root (0660 with
// control_group), one JSON request per line (protocol.h). It accepts clients
// (root, or members of the control group by their peer credentials), keeps a
// bounded input and output buffer per client, answers the events op itself
// (the recent events, then the live stream when asked to follow), and hands
// every other request to the daemon (ControlHandler).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/protocol.h"
#include "daemon/audit_event.h"
#include "daemon/closer.h"
#include "daemon/loop.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace agentcage::daemon {

// Who sent a request: the connection (ids are never reused) and its peer
// credentials at connect time.
struct Peer {
  uint64_t id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  bool root = false;
  // Whether this peer may see what concerns a run of `owner` (none: root's
  // runs, containers, the daemon's own): root sees everything, a member of
  // the control group its own runs only.
  bool sees(std::optional<uid_t> owner) const { return root || (owner && *owner == uid); }
};

class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // The answer to a request the client may make (any op but events and run).
  virtual nlohmann::json handle(const control::Request& request, const Peer& peer) = 0;
  // A run with the client's stdin, stdout and stderr: a refusal now, or
  // nullopt when it started (the answer comes with ControlServer::finish_run).
  // It moves out of `stdio` what it keeps; the caller has the rest closed
  // off the loop (daemon/closer.h).
  virtual std::optional<nlohmann::json> start_run(const control::Request& request, const Peer& peer,
                                                  std::vector<UniqueFd>& stdio) = 0;
  // The client of a started run closed its connection or died.
  virtual void client_gone(uint64_t id) = 0;
  // The ring of recent audit lines, for the events op.
  virtual const std::deque<AuditEvent>& recent_events() = 0;
};

struct ControlOptions {
  std::string path;
  std::optional<std::string> group;  // name or number; unset: root only
  size_t max_clients = 0;
  size_t max_clients_per_uid = 0;  // for a uid other than 0
  size_t client_buffer_bytes = 0;  // a client's output limit (streams drop, others are closed)
};

// Connections only root may open beyond max_clients (which counts the
// control group's members).
inline constexpr size_t kRootReservedClients = 16;

// A connection that has not sent a whole request for this long (and is not
// streaming or waiting for its run) is closed.
inline constexpr int kIdleClientSeconds = 30;

// A member with this many descriptors still waiting to be closed after
// kPendingAfter (a close takes microseconds unless its sender holds it) is
// not read from until they are fewer (daemon/closer.h).
inline constexpr size_t kMaxPendingDescriptors = 32;
inline constexpr std::chrono::milliseconds kPendingAfter{100};

class ControlServer {
 public:
  // Connections and the descriptors clients send are closed by `closer`
  // (daemon/closer.h), never by the loop.
  ControlServer(ControlOptions options, EventLoop& loop, ControlHandler& handler, Closer& closer);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Binds and listens (replacing a socket a dead daemon left), and registers
  // with the loop.
  Status listen();
  // New options while listening (the daemon's configuration read again):
  // the limits apply to new connections; a new control_group changes the
  // socket's group and mode, and closes the connections of peers that are
  // no longer allowed. The path cannot change. An error leaves the old
  // options, and the socket no wider than before (root-only at worst).
  Status reconfigure(const ControlOptions& next);
  // One audit line to every streaming client that sees it (Peer::sees); a
  // client whose buffer is full misses it, and is told how many it missed
  // before its next line.
  void stream(const AuditEvent& event);
  // Sends what the streaming clients have buffered.
  void flush_streams();
  // Once a second: closes idle connections.
  void tick();
  size_t clients() const { return clients_.size(); }
  // The answer to the run of client `id` (nothing when it is gone); the
  // connection closes after it.
  void finish_run(uint64_t id, const nlohmann::json& reply);
  uint64_t stream_dropped() const { return stream_dropped_; }

 private:
  struct Client {
    UniqueFd fd;
    Peer peer;
    std::vector<UniqueFd> fds;                    // descriptors received and not yet taken by a run
    bool running = false;                         // a run is in flight: its answer is awaited
    std::chrono::steady_clock::time_point since;  // connected, or its last request
    std::string in, out;
    bool streaming = false;
    bool close_after_flush = false;
    bool want_out = false;  // EPOLLOUT registered
    uint64_t dropped = 0;   // events not queued since the last notice
    bool muted = false;     // not read: too many of its uid's descriptors wait to be closed
  };

  static bool in_group(int fd, gid_t peer_gid, const std::optional<gid_t>& group);
  void accept_clients();
  void on_client(int fd, uint32_t events);
  void handle_line(Client& c, const std::string& line);
  void respond(Client& c, const nlohmann::json& j);
  void flush(Client& c);
  void close(int fd);
  // The events to wait for: nothing but a hang-up during a run, else input,
  // and output while some is queued.
  uint32_t interest(const Client& c) const;
  // A member with kMaxPendingDescriptors or more waiting in the Closer.
  bool over_pending(const Client& c) const;

  ControlOptions opt_;
  EventLoop& loop_;
  ControlHandler& handler_;
  Closer& closer_;
  UniqueFd listen_fd_;
  std::optional<gid_t> gid_;
  std::map<int, Client> clients_;
  uint64_t next_id_ = 1;
  uint64_t stream_dropped_ = 0;
  bool accept_paused_ = false;  // out of descriptors: accepting again at the next tick
};

}  // namespace agentcage::daemon
