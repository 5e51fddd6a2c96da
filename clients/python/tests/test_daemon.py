# SPDX-License-Identifier: Apache-2.0
"""The client against the real daemon, as an unprivileged user of its
control group: the seed scenario (agent-written Python that plots a PNG and
reaches for /etc/passwd), stdin/stdout/exit status, timeouts, the network,
and concurrent asyncio calls. Run by the kernel test
DaemonRun.ThePythonClientRunsTheSeedScenarioAsAnUnprivilegedUser inside the
VM, with AGENTCAGE_DAEMON_TEST=1 and a daemon that has python-sandbox."""

import asyncio
import os
import socket
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from agentcage_client import AgentcageError, AsyncClient, Client  # noqa: E402

LIVE = os.environ.get("AGENTCAGE_DAEMON_TEST") == "1"
# docs/schema/ checks every reply and result when the repository's
# tests/scripts/schemas.py is there (it is in the VM's test).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "scripts"))
try:
    import schemas
except ImportError:  # the client installed on its own
    schemas = None


def schema_errors(name, document):
    return schemas.errors(name, document) if schemas else []

SEED = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

plt.plot([1, 2, 3], [1, 4, 9])
plt.savefig("plot.png")
try:
    print(open("/etc/passwd").read()[:40])
except PermissionError as e:
    print("passwd denied", e.errno)
"""


@unittest.skipUnless(LIVE, "needs the real daemon (the VM's kernel test sets AGENTCAGE_DAEMON_TEST=1)")
class DaemonTest(unittest.TestCase):
    def setUp(self):
        self.client = Client()

    def test_hello(self):
        h = self.client.hello()
        self.assertEqual(h["protocol"], 1)
        self.assertIn("run", h["ops"])
        self.assertNotIn("attach", h["ops"])
        self.assertEqual(h["uid"], os.getuid())
        self.assertNotEqual(os.getuid(), 0)
        self.assertEqual(schema_errors("control-reply", h), [])
        if LIVE:
            self.assertIsNotNone(schemas, "tests/scripts/schemas.py (and python3-jsonschema) must be importable")

    def test_seed_scenario_returns_the_png_and_reports_the_denial(self):
        r = self.client.run_python(SEED, labels={"scenario": "seed"})
        self.assertEqual(r.exit_code, 0, r.stderr.decode(errors="replace"))
        self.assertIn("passwd denied 13", r.text)
        self.assertNotIn("root:", r.text)
        self.assertTrue(r.artifacts["plot.png"].startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertNotIn("main.py", r.artifacts)  # unchanged inputs are not artifacts
        targets = [(d["hook"], d["target"]) for d in r.denials]
        self.assertIn(("file_open", "/etc/passwd"), targets)
        self.assertEqual(r.result["labels"], {"scenario": "seed"})
        self.assertEqual(r.result["policy"], "python-sandbox")
        self.assertGreaterEqual(r.result["uid"], 0x70000000)
        self.assertEqual(schema_errors("result", r.result), [])
        self.assertEqual(schema_errors("control-reply", {"ok": True, "exit_code": r.exit_code, "result": r.result}), [])

    def test_stdin_stdout_stderr_and_exit_status(self):
        r = self.client.run(
            ["python3", "-c", "import sys; d = sys.stdin.read(); print(d.upper()); print('e', file=sys.stderr); sys.exit(3)"],
            policy="python-sandbox", stdin="abc")
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.stdout, b"ABC\n")
        self.assertIn(b"e\n", r.stderr)

    def test_timeout_ends_the_run(self):
        r = self.client.run_python("while True: pass", timeout=1)
        self.assertEqual(r.exit_code, 124)
        self.assertTrue(r.result["timed_out"])
        self.assertEqual(schema_errors("result", r.result), [])

    def test_the_network_is_denied(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        try:
            r = self.client.run_python(
                "import socket\n"
                "try:\n"
                "    socket.create_connection(('127.0.0.1', %d), timeout=3)\n"
                "    print('CONNECTED')\n"
                "except OSError as e:\n"
                "    print('refused', e.errno)\n" % port)
        finally:
            srv.close()
        self.assertIn("refused", r.text)
        self.assertNotIn("CONNECTED", r.text)
        self.assertGreaterEqual(r.result["denials"]["by_hook"].get("socket_connect", 0), 1)

    def test_a_policy_the_daemon_does_not_have_is_refused(self):
        with self.assertRaises(AgentcageError) as cm:
            self.client.run(["true"], policy="no-such-policy")
        self.assertEqual(cm.exception.exit_code, 125)
        self.assertIn("no policy named", str(cm.exception))
        self.assertEqual(schema_errors("control-reply", cm.exception.reply), [])

    def test_concurrent_asyncio_calls_each_get_their_own(self):
        client = AsyncClient()

        async def main():
            return await asyncio.gather(*[client.run_python("print(%d * 7)" % i) for i in range(6)])

        results = asyncio.run(main())
        self.assertEqual([r.text for r in results], ["%d\n" % (i * 7) for i in range(6)])
        self.assertEqual(len({r.result["run_id"] for r in results}), 6)


if __name__ == "__main__":
    unittest.main()
