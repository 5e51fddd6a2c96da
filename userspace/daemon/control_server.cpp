// SPDX-License-Identifier: Apache-2.0
#include "daemon/control_server.h"

#include <grp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "util/fd_passing.h"
#include "util/log.h"
#include "util/text.h"

namespace agentcage::daemon {

using control::kMaxRequestBytes;
using control::Op;
using control::op_allowed_for_group;
using control::op_name;
using control::parse_request;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Result<std::optional<gid_t>> control_gid(const std::optional<std::string>& group) {
  if (!group) return std::optional<gid_t>();
  const std::string& g = *group;
  if (std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::optional<gid_t>(static_cast<gid_t>(std::stoul(g)));
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (::getgrnam_r(g.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || !found)
    return Error{"control_group: no group named '" + g + "'", ENOENT};
  return std::optional<gid_t>(gr.gr_gid);
}

}  // namespace

ControlServer::ControlServer(ControlOptions options, EventLoop& loop, ControlHandler& handler, Closer& closer)
    : opt_(std::move(options)), loop_(loop), handler_(handler), closer_(closer) {}

ControlServer::~ControlServer() {
  for (auto& [fd, c] : clients_) {
    closer_.close(Closer::kConnections, std::move(c.fd));
    closer_.close(c.peer.uid, c.fds);
  }
}

Status ControlServer::listen() {
  const std::string& path = opt_.path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return Error{"control socket path too long: " + path, ENAMETOOLONG};
  std::memcpy(addr.sun_path, path.data(), path.size());
  auto group = control_gid(opt_.group);
  if (!group) return group.error();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  // We hold the instance lock, so whatever is at the path is a leftover of a
  // daemon that died: replace it (only if it is a socket).
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Error{"control socket: " + path + " exists and is not a socket", EEXIST};
    ::unlink(path.c_str());
  }
  listen_fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) return Error::from_errno("control socket: socket");
  // Created 0660 from the start: no window with wider permissions.
  mode_t old = ::umask(0117);
  int rc = ::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  ::umask(old);
  if (rc != 0) return Error::from_errno("control socket: binding " + path, bind_errno);
  if (::chown(path.c_str(), 0, group->value_or(0)) != 0)
    return Error::from_errno("control socket: chown " + path);
  if (::chmod(path.c_str(), *group ? 0660 : 0600) != 0)
    return Error::from_errno("control socket: chmod " + path);
  if (::listen(listen_fd_.get(), 64) != 0) return Error::from_errno("control socket: listen");
  loop_.add(listen_fd_.get(), EPOLLIN, [this](uint32_t) { accept_clients(); });
  gid_ = *group;
  return {};
}

// Whether the peer of `fd` (primary group `peer_gid`) is in `group`: its
// groups as of connect time (SO_PEERGROUPS, Linux 4.13).
bool ControlServer::in_group(int fd, gid_t peer_gid, const std::optional<gid_t>& group) {
  if (!group) return false;
  if (peer_gid == *group) return true;
  std::vector<gid_t> groups(256);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0) return false;
  groups.resize(glen / sizeof(gid_t));
  return std::find(groups.begin(), groups.end(), *group) != groups.end();
}

Status ControlServer::reconfigure(const ControlOptions& next) {
  if (next.path != opt_.path)
    return Error{"control socket: the path cannot change while the daemon runs (restart it)", EINVAL};
  auto group = control_gid(next.group);
  if (!group) return group.error();
  if (*group != gid_) {
    const char* path = opt_.path.c_str();
    // Never wider than either setting on the way: 0600 first, then the new
    // group, then 0660 if there is one.
    if (::chmod(path, 0600) != 0) return Error::from_errno("control socket: chmod " + opt_.path);
    if (::chown(path, 0, group->value_or(0)) != 0) return Error::from_errno("control socket: chown " + opt_.path);
    if (*group && ::chmod(path, 0660) != 0) return Error::from_errno("control socket: chmod " + opt_.path);
    gid_ = *group;
    // Connections whose right came from the old group lose it now (their
    // runs end as on any hang-up).
    std::vector<int> revoked;
    for (const auto& [fd, c] : clients_)
      if (!c.peer.root && !in_group(fd, c.peer.gid, gid_)) revoked.push_back(fd);
    for (int fd : revoked) {
      log::warn("control socket: closing the connection of uid " + std::to_string(clients_.at(fd).peer.uid) +
                ": no longer in the control group");
      close(fd);
    }
  }
  opt_ = next;
  return {};
}

void ControlServer::accept_clients() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      // Out of descriptors: the pending connection keeps the socket
      // readable, so it is not asked again until the next tick.
      if (errno == EMFILE || errno == ENFILE) {
        log::warn("control socket: out of file descriptors (" + std::string(std::strerror(errno)) +
                  "); new connections wait");
        accept_paused_ = true;
        loop_.modify(listen_fd_.get(), 0);
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      closer_.close(Closer::kConnections, std::move(fd));
      continue;
    }
    bool root = cred.uid == 0;
    bool member = root || in_group(fd.get(), cred.gid, gid_);
    // What the peer queued before it was refused may hold descriptors.
    auto refuse = [&](const std::string& why) {
      std::string msg = json{{"ok", false}, {"error", why}}.dump() + "\n";
      (void)!::send(fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      closer_.close(Closer::kConnections, std::move(fd));
    };
    if (!member) {
      log::warn("control socket: refused uid " + std::to_string(cred.uid) + " (pid " + std::to_string(cred.pid) +
                    "): not root and not in the control group",
                {{"PEER_UID", std::to_string(cred.uid)}, {"PEER_PID", std::to_string(cred.pid)}});
      refuse("permission denied: root or the control group only");
      continue;
    }
    // The group's members share max_clients; root has kRootReservedClients
    // more of its own, so that members holding every place (streams, runs)
    // never lock out root's status, attach, reload or its runs' notices.
    size_t members = 0;
    for (const auto& [other_fd, other] : clients_) members += !other.peer.root;
    if (root ? clients_.size() >= opt_.max_clients + kRootReservedClients : members >= opt_.max_clients) {
      refuse("too many clients (max_clients " + std::to_string(opt_.max_clients) + ")");
      continue;
    }
    if (!root) {
      size_t mine = 0;
      for (const auto& [other_fd, other] : clients_) mine += other.peer.uid == cred.uid;
      if (mine >= opt_.max_clients_per_uid) {
        refuse("too many connections of uid " + std::to_string(cred.uid) + " (max_clients_per_uid " +
               std::to_string(opt_.max_clients_per_uid) + ")");
        continue;
      }
    }
    int raw = fd.get();
    Client c;
    c.fd = std::move(fd);
    c.peer = Peer{next_id_++, cred.uid, cred.gid, cred.pid, root};
    c.since = std::chrono::steady_clock::now();
    clients_.emplace(raw, std::move(c));
    loop_.add(raw, EPOLLIN | EPOLLRDHUP, [this, raw](uint32_t events) { on_client(raw, events); });
  }
}

void ControlServer::respond(Client& c, const json& j) {
  c.out += json_display_safe(j.dump(-1, ' ', false, json::error_handler_t::replace)) + "\n";
}

void ControlServer::flush(Client& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    c.close_after_flush = true;  // peer gone
    c.out.clear();
    break;
  }
  bool want = !c.out.empty();
  if (want != c.want_out) {
    c.want_out = want;
    loop_.modify(c.fd.get(), interest(c));
  }
}

uint32_t ControlServer::interest(const Client& c) const {
  // During a run nothing is read (the client may even shut down its
  // writing side): only a hang-up (EPOLLHUP, always reported) ends it. Nor
  // while the client's descriptors wait to be closed (muted).
  const uint32_t in = c.running || c.muted ? 0u : (EPOLLIN | EPOLLRDHUP);
  return in | (c.want_out ? EPOLLOUT : 0u);
}

bool ControlServer::over_pending(const Client& c) const {
  return !c.peer.root && closer_.pending(c.peer.uid, kPendingAfter) >= kMaxPendingDescriptors;
}

void ControlServer::tick() {
  for (auto& [fd, c] : clients_)
    if (c.muted && !over_pending(c)) {
      c.muted = false;
      loop_.modify(c.fd.get(), interest(c));
    }
  if (accept_paused_) {
    accept_paused_ = false;
    loop_.modify(listen_fd_.get(), EPOLLIN);
  }
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> idle;
  for (const auto& [fd, c] : clients_)
    if (!c.running && !c.streaming && c.out.empty() &&
        now - c.since > std::chrono::seconds(kIdleClientSeconds))
      idle.push_back(fd);
  for (int fd : idle) close(fd);
}

void ControlServer::close(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  const bool running = it->second.running;
  const uint64_t id = it->second.peer.id;
  loop_.remove(fd);
  closer_.close(Closer::kConnections, std::move(it->second.fd));
  closer_.close(it->second.peer.uid, it->second.fds);
  clients_.erase(it);
  if (running) handler_.client_gone(id);
}

void ControlServer::finish_run(uint64_t id, const json& reply) {
  for (auto& [fd, c] : clients_) {
    if (c.peer.id != id || !c.running) continue;
    c.running = false;
    loop_.modify(c.fd.get(), interest(c));
    respond(c, reply);
    c.close_after_flush = true;
    flush(c);
    if (c.out.empty()) close(fd);
    return;
  }
}

void ControlServer::on_client(int fd, uint32_t events) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = it->second;
  // Each read may bring descriptors (up to SCM_MAX_FD): none while this
  // client's earlier ones still wait to be closed (a close held by their
  // sender: daemon/closer.h).
  const auto mute_if_over = [&] {
    if (c.running || c.muted || !over_pending(c)) return c.muted;
    c.muted = true;
    loop_.modify(c.fd.get(), interest(c));
    log::warn("control socket: uid " + std::to_string(c.peer.uid) + " has " +
              std::to_string(closer_.pending(c.peer.uid, kPendingAfter)) +
              " descriptors still being closed; its connections are not read until they are");
    return true;
  };
  if ((events & EPOLLIN) && !c.running && !mute_if_over()) {
    char buf[16384];
    // A bounded amount per wake-up: one client cannot hold the loop.
    for (int reads = 0; reads < 16 && !c.running && !mute_if_over(); ++reads) {
      int flags = 0;
      ssize_t n = recv_with_fds(fd, buf, sizeof buf, c.fds, &flags, true);
      if (n < 0) break;
      if (n == 0) {
        // A run's client that hangs up gives up the run (client_gone).
        if (c.streaming || c.running) return close(fd);
        c.close_after_flush = true;
        break;
      }
      if (c.fds.size() > control::kRunDescriptors || (flags & MSG_CTRUNC)) {
        closer_.close(c.peer.uid, c.fds);
        respond(c, {{"ok", false},
                    {"error", "request: at most " + std::to_string(control::kRunDescriptors) +
                                  " descriptors (stdin, stdout, stderr), sent with a run request"}});
        c.close_after_flush = true;
      }
      // Nothing more is read from a stream or during a run (but its end).
      if (c.streaming || c.close_after_flush || c.running) {
        closer_.close(c.peer.uid, c.fds);
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      size_t nl;
      while (!c.close_after_flush && !c.streaming && !c.running &&
             (nl = c.in.find('\n')) != std::string::npos) {
        std::string line = c.in.substr(0, nl);
        c.in.erase(0, nl + 1);
        c.since = std::chrono::steady_clock::now();
        const size_t queued = c.out.size();
        handle_line(c, line);
        // Answers a client does not read are not kept without bound: one
        // answer goes whole whatever its size (a status of many policies),
        // but one that goes past client_buffer_bytes while earlier ones
        // wait drops them all and closes the connection.
        if (!c.streaming && queued > 0 && c.out.size() > opt_.client_buffer_bytes) {
          c.out.clear();
          c.close_after_flush = true;
        }
      }
      if (c.in.size() > kMaxRequestBytes) {
        respond(c, {{"ok", false},
                    {"error", "request: longer than " + std::to_string(kMaxRequestBytes) + " bytes"}});
        c.close_after_flush = true;
        c.in.clear();
      }
    }
  }
  if ((events & (EPOLLHUP | EPOLLERR)) && (c.running || c.muted || !(events & EPOLLIN))) return close(fd);
  flush(c);
  if (c.close_after_flush && c.out.empty()) close(fd);
}

void ControlServer::handle_line(Client& c, const std::string& line) {
  auto req = parse_request(line);
  if (!req) {
    respond(c, {{"ok", false}, {"error", req.error().message}});
    return;
  }
  if (!c.peer.root && !op_allowed_for_group(req->op)) {
    respond(c, {{"ok", false},
                {"error",
                 std::string("permission denied: op ") + std::string(op_name(req->op)) + " needs root"}});
    return;
  }
  if (req->op == Op::run) {
    if (c.fds.size() != control::kRunDescriptors) {
      closer_.close(c.peer.uid, c.fds);
      respond(
          c, {{"ok", false},
              {"error", "request: a run request carries exactly " + std::to_string(control::kRunDescriptors) +
                            " descriptors (stdin, stdout, stderr) as SCM_RIGHTS"},
              {"exit_code", 125}});
      c.close_after_flush = true;
      return;
    }
    std::optional<json> refused = handler_.start_run(*req, c.peer, c.fds);
    closer_.close(c.peer.uid, c.fds);  // the daemon's copies: the runner has its own
    if (refused) {
      respond(c, *refused);
      c.close_after_flush = true;
      return;
    }
    c.running = true;
    loop_.modify(c.fd.get(), interest(c));
    return;
  }
  if (!c.fds.empty()) {
    closer_.close(c.peer.uid, c.fds);
    respond(c, {{"ok", false}, {"error", "request: descriptors go only with a run request"}});
    c.close_after_flush = true;
    return;
  }
  if (req->op != Op::events) {
    respond(c, handler_.handle(*req, c.peer));
    return;
  }
  // The newest of the recent lines this client sees, as many as fit what is
  // left of its buffer (with room for the answer's own line); the others
  // (older, or one too long on its own) are counted as omitted.
  const std::deque<AuditEvent>& recent = handler_.recent_events();
  constexpr size_t kHeadRoom = 256;
  const size_t used = c.out.size() + kHeadRoom;
  const size_t budget = opt_.client_buffer_bytes > used ? opt_.client_buffer_bytes - used : 0;
  size_t visible = 0, bytes = 0;
  for (const auto& e : recent) visible += c.peer.sees(e.owner);
  std::vector<const std::string*> shown;
  for (auto it = recent.rbegin(); it != recent.rend() && bytes < budget; ++it) {
    if (!c.peer.sees(it->owner) || bytes + it->line.size() > budget) continue;
    bytes += it->line.size();
    shown.push_back(&it->line);
  }
  json head = {{"ok", true}, {"recent", shown.size()}, {"follow", req->follow}};
  if (shown.size() < visible) head["omitted"] = visible - shown.size();
  respond(c, head);
  for (auto it = shown.rbegin(); it != shown.rend(); ++it) c.out += **it;
  if (req->follow)
    c.streaming = true;
  else
    c.close_after_flush = true;
}

void ControlServer::stream(const AuditEvent& event) {
  const std::string& line = event.line;
  for (auto& [fd, c] : clients_) {
    if (!c.streaming || !c.peer.sees(event.owner)) continue;
    std::string notice;
    if (c.dropped) notice = json{{"dropped", c.dropped}}.dump() + "\n";
    if (c.out.size() + notice.size() + line.size() > opt_.client_buffer_bytes) {
      ++c.dropped;
      ++stream_dropped_;
      continue;
    }
    c.out += notice;
    c.out += line;
    c.dropped = 0;
  }
}

void ControlServer::flush_streams() {
  for (auto& [fd, c] : clients_)
    if (c.streaming && !c.out.empty()) flush(c);
}

}  // namespace agentcage::daemon
