// SPDX-License-Identifier: Apache-2.0
// The DNS section's worker (`agentcage-bench --worker-dns`): a long-lived
// process that times name queries and TCP connects on command, one command
// per line on stdin, one answer per line on stdout. The same binary runs
// unscoped (the direct side) and inside `agentcage run` (the scoped side and
// the runs that fill ac_pins), so both sides time the same process image.
//
//   query SERVER PORT NAME N   N queries for NAME's A records, each as glibc
//                              sends one: a fresh UDP socket, connect, send,
//                              wait for the answer (5 s), close
//   connect ADDR PORT N        N TCP connects, each on a fresh socket, to a
//                              port nothing listens on (ECONNREFUSED: the
//                              connect was allowed), then close
//
// Answer: `ok MEDIAN_NS FAILURES ANSWERS ERROR` (ANSWERS: A records in the
// last answer; ERROR: the first failure, or `-`), or `bad COMMAND`.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "dns/message.h"

namespace agentcage::bench {

namespace {

std::optional<sockaddr_in> ipv4(const std::string& addr, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) return std::nullopt;
  return a;
}

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// One query as glibc's resolver sends it over UDP; "" when answered with
// NOERROR, else what went wrong. `answers`: A records in the answer.
std::string one_query(const sockaddr_in& server, const std::string& name, uint16_t id, unsigned& answers) {
  using namespace dns::detail;
  Rdf qname(ldns_dname_new_frm_str(name.c_str()));
  if (!qname) return "bad name " + name;
  const std::vector<uint8_t> wire = upstream_query(qname.get(), LDNS_RR_TYPE_A, id);
  if (wire.empty()) return "ldns could not build the query";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_text("socket", errno);
  std::string err;
  uint8_t buf[4096];
  ssize_t n = -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&server), sizeof server) != 0) {
    err = errno_text("connect", errno);
  } else if (::send(fd, wire.data(), wire.size(), 0) != static_cast<ssize_t>(wire.size())) {
    err = errno_text("send", errno);
  } else {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1)
      err = "no answer within 5 s";
    else if ((n = ::recv(fd, buf, sizeof buf, 0)) < 0)
      err = errno_text("recv", errno);
  }
  ::close(fd);
  if (!err.empty()) return err;
  Pkt reply = parse({buf, static_cast<size_t>(n)});
  if (!reply || !answers_query(reply.get(), qname.get(), LDNS_RR_TYPE_A, id))
    return "not an answer to the query";
  if (ldns_pkt_get_rcode(reply.get()) != LDNS_RCODE_NOERROR)
    return "rcode " + std::to_string(static_cast<int>(ldns_pkt_get_rcode(reply.get())));
  answers = 0;
  for (size_t i = 0; i < ldns_pkt_ancount(reply.get()); i++)
    answers += ldns_rr_get_type(ldns_rr_list_rr(ldns_pkt_answer(reply.get()), i)) == LDNS_RR_TYPE_A;
  return {};
}

// A TCP connect to a port nothing listens on: "" when refused (allowed),
// else what happened (EPERM/EACCES: denied).
std::string one_connect(const sockaddr_in& to) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_text("socket", errno);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  const int err = errno;
  ::close(fd);
  if (rc == 0) return "connected: something listens on the port";
  return err == ECONNREFUSED ? std::string() : errno_text("connect", err);
}

struct Batch {
  std::vector<double> ns;
  unsigned failures = 0;
  unsigned answers = 0;
  std::string first_error;
  void count(const std::string& err) {
    if (err.empty()) return;
    if (failures++ == 0) first_error = err;
  }
};

std::string answer(const Batch& b) {
  std::string err = b.first_error.empty() ? "-" : b.first_error;
  return "ok " + fmt("%.0f", median(b.ns)) + " " + std::to_string(b.failures) + " " +
         std::to_string(b.answers) + " " + err;
}

std::string handle(const std::string& line) {
  std::istringstream in(line);
  std::string verb, addr;
  unsigned port = 0, n = 0;
  in >> verb >> addr >> port;
  std::string name;
  if (verb == "query") in >> name;
  in >> n;
  auto to = ipv4(addr, static_cast<uint16_t>(port));
  if (!in || !to || port == 0 || port > 65535 || n == 0 || (verb != "query" && verb != "connect"))
    return "bad " + line;
  Batch b;
  b.ns.reserve(n);
  for (unsigned i = 0; i < n; i++) {
    const uint64_t t0 = now_ns();
    const std::string err =
        verb == "query" ? one_query(*to, name, static_cast<uint16_t>(i + 1), b.answers) : one_connect(*to);
    b.ns.push_back(static_cast<double>(now_ns() - t0));
    b.count(err);
  }
  return answer(b);
}

}  // namespace

int dns_worker_main() {
  std::cout << "ready" << std::endl;
  for (std::string line; std::getline(std::cin, line);) std::cout << handle(line) << std::endl;
  return 0;
}

}  // namespace agentcage::bench
