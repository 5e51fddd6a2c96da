#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The bench's client of `agentcage daemon` (section `run`): one long-lived
process, as an agent framework calls agentcage, with the Python client of
clients/python. Reads commands on stdin, answers one line each on stdout:

  run                  one run of /usr/bin/true; answers the call's time in
                       ns (time.perf_counter_ns around Client.run), or
                       "error MESSAGE"
  throughput N SECONDS N threads (one Client each) run /usr/bin/true back to
                       back for SECONDS; answers "runs R seconds S errors E"
  quit

Usage: daemon_client.py SOCKET POLICY (clients/python on PYTHONPATH).
"""
import sys
import threading
import time

from agentcage_client import AgentcageError, Client

ARGV = ["/usr/bin/true"]


def one(client: Client, policy: str) -> str:
    t0 = time.perf_counter_ns()
    try:
        r = client.run(ARGV, policy=policy)
    except AgentcageError as e:
        return "error " + str(e).replace("\n", " ")
    t1 = time.perf_counter_ns()
    if r.exit_code != 0:
        return "error exit code %d: %s" % (r.exit_code, r.stderr.decode(errors="replace").strip()[:200])
    return str(t1 - t0)


def throughput(socket_path: str, policy: str, threads: int, seconds: float) -> str:
    runs = [0] * threads
    errors = [0] * threads
    first_error = []
    deadline = time.monotonic() + seconds

    def worker(i: int) -> None:
        client = Client(socket_path)
        while time.monotonic() < deadline:
            answer = one(client, policy)
            if answer.startswith("error"):
                errors[i] += 1
                if not first_error:
                    first_error.append(answer)
            else:
                runs[i] += 1

    t0 = time.monotonic()
    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0
    line = "runs %d seconds %.3f errors %d" % (sum(runs), elapsed, sum(errors))
    return line + (" first " + first_error[0] if first_error else "")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    socket_path, policy = sys.argv[1], sys.argv[2]
    client = Client(socket_path)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "run":
            answer = one(client, policy)
        elif words[0] == "throughput" and len(words) == 3:
            answer = throughput(socket_path, policy, int(words[1]), float(words[2]))
        else:
            answer = "error unknown command " + line.strip()
        print(answer, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
