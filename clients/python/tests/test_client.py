# SPDX-License-Identifier: Apache-2.0
"""The client against a stand-in daemon on a unix socket: what it sends
(the request, exactly three descriptors), what it makes of the answers, and
that giving up on a run closes the connection (which makes the real daemon
end the run). The real daemon is tested in the VM: test_daemon.py."""

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from agentcage_client import AgentcageError, AsyncClient, Client, build_request  # noqa: E402


class FakeDaemon:
    """Accepts one connection at a time and hands (request, fds, conn) to `serve`."""

    def __init__(self, serve):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "control.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.serve = serve
        self.requests = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)
                while not msg.endswith(b"\n"):
                    more = conn.recv(1 << 20)
                    if not more:
                        break
                    msg += more
                req = json.loads(msg)
                self.requests.append((req, len(fds)))
                try:
                    self.serve(req, fds, conn)
                finally:
                    for fd in fds:
                        os.close(fd)

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


def result_doc(**extra):
    doc = {"version": 1, "run_id": "0123456789abcdef", "exit_code": 0,
           "denials": {"total": 0, "records": []}}
    doc.update(extra)
    return doc


def answer(conn, reply):
    conn.sendall((json.dumps(reply) + "\n").encode())


class RequestTest(unittest.TestCase):
    def test_limits_are_written_as_agentcage_run_takes_them(self):
        req = build_request(["python3", "x.py"], policy="python-sandbox", timeout=1.5, memory=256 << 20,
                            cpu=0.5, pids="64", labels={"task": "t-1"}, env={"A": "1"})
        self.assertEqual(req["op"], "run")
        self.assertEqual(req["limits"], {"timeout": "1500ms", "memory": str(256 << 20), "cpu": "0.5",
                                         "pids": "64"})
        self.assertEqual(req["labels"], {"task": "t-1"})
        self.assertEqual(req["env"], ["A=1"])
        self.assertNotIn("workspace", req)

    def test_argv_must_be_a_list(self):
        with self.assertRaises(ValueError):
            build_request("python3 x.py", policy="p")
        with self.assertRaises(ValueError):
            build_request([], policy="p")


class RunTest(unittest.TestCase):
    def setUp(self):
        self.daemon = None

    def tearDown(self):
        if self.daemon:
            self.daemon.close()

    def start(self, serve):
        self.daemon = FakeDaemon(serve)
        return Client(self.daemon.path)

    def test_output_result_and_artifacts(self):
        def serve(req, fds, conn):
            stdin, stdout, stderr = fds
            data = os.read(stdin, 100)
            os.write(stdout, b"got " + data)
            os.write(stderr, b"warn\n")
            # The run's files come back into the client's directory.
            with open(os.path.join(req["workspace"], "out.txt"), "w") as f:
                f.write("made")
            answer(conn, {"ok": True, "exit_code": 3, "result": result_doc(exit_code=3)})

        client = self.start(serve)
        r = client.run(["cat"], policy="p", stdin=b"input", files={"in.txt": "x", "sub/data.bin": b"\x00\x01"},
                       labels={"k": "v"})
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.stdout, b"got input")
        self.assertEqual(r.stderr, b"warn\n")
        self.assertEqual(r.result["version"], 1)
        # Only what differs from what went in.
        self.assertEqual(r.artifacts, {"out.txt": b"made"})
        req, nfds = self.daemon.requests[0]
        self.assertEqual(nfds, 3)
        self.assertEqual(req["labels"], {"k": "v"})
        # The temporary workspace is gone afterwards.
        self.assertFalse(os.path.exists(req["workspace"]))

    def test_run_python_sends_the_code_as_main_py(self):
        seen = {}

        def serve(req, fds, conn):
            with open(os.path.join(req["workspace"], "main.py")) as f:
                seen["code"] = f.read()
            seen["argv"] = req["argv"]
            answer(conn, {"ok": True, "exit_code": 0, "result": result_doc()})

        client = self.start(serve)
        r = client.run_python("print(1)\n")
        self.assertTrue(r.ok)
        self.assertEqual(seen, {"code": "print(1)\n", "argv": ["python3", "main.py"]})
        self.assertEqual(self.daemon.requests[0][0]["policy"], "python-sandbox")

    def test_a_refusal_raises_with_the_daemons_reason(self):
        client = self.start(lambda req, fds, conn: answer(
            conn, {"ok": False, "exit_code": 125, "error": "limit memory 9Gi is over this daemon's cap"}))
        with self.assertRaises(AgentcageError) as cm:
            client.run(["true"], policy="p", memory="9Gi")
        self.assertEqual(cm.exception.exit_code, 125)
        self.assertIn("over this daemon's cap", str(cm.exception))

    def test_a_daemon_that_hangs_up_is_an_error_not_a_result(self):
        client = self.start(lambda req, fds, conn: None)
        with self.assertRaises(AgentcageError) as cm:
            client.run(["true"], policy="p")
        self.assertIn("closed the connection", str(cm.exception))

    def test_no_daemon(self):
        with self.assertRaises(AgentcageError) as cm:
            Client("/nonexistent/agentcage.sock").run(["true"], policy="p")
        self.assertIn("cannot reach", str(cm.exception))

    def test_output_beyond_the_limit_is_cut_and_said(self):
        def serve(req, fds, conn):
            os.write(fds[1], b"x" * 5000)
            answer(conn, {"ok": True, "exit_code": 0, "result": result_doc()})

        self.daemon = FakeDaemon(serve)
        r = Client(self.daemon.path, max_output=1000).run(["true"], policy="p")
        self.assertEqual(len(r.stdout), 1000)
        self.assertTrue(r.output_truncated)

    def test_files_are_not_written_through_links_a_run_left(self):
        # A run left main.py -> a file of the caller's and sub -> a directory
        # of the caller's in the workspace; the next run's files replace the
        # links and leave their targets alone.
        outside = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, outside, True)
        victim = os.path.join(outside, "bashrc")
        with open(victim, "w") as f:
            f.write("mine")
        os.mkdir(os.path.join(outside, "ssh"))
        ws = os.path.join(outside, "ws")
        os.mkdir(ws)
        os.symlink(victim, os.path.join(ws, "main.py"))
        os.symlink(os.path.join(outside, "ssh"), os.path.join(ws, "sub"))
        client = self.start(lambda req, fds, conn: answer(conn, {"ok": True, "exit_code": 0,
                                                                  "result": result_doc()}))
        client.run(["true"], policy="p", workspace=ws, files={"main.py": "code", "sub/key": "k"})
        with open(victim) as f:
            self.assertEqual(f.read(), "mine")
        self.assertEqual(os.listdir(os.path.join(outside, "ssh")), [])
        self.assertFalse(os.path.islink(os.path.join(ws, "main.py")))
        with open(os.path.join(ws, "main.py")) as f:
            self.assertEqual(f.read(), "code")
        with open(os.path.join(ws, "sub", "key")) as f:
            self.assertEqual(f.read(), "k")

    def test_a_huge_sparse_file_the_run_left_is_not_read(self):
        ws = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, ws, True)

        def serve(req, fds, conn):
            with open(os.path.join(req["workspace"], "huge"), "wb") as f:
                f.truncate(1 << 40)  # a terabyte of holes
            with open(os.path.join(req["workspace"], "small"), "wb") as f:
                f.write(b"ok")
            answer(conn, {"ok": True, "exit_code": 0, "result": result_doc()})

        client = self.start(serve)
        r = client.run(["true"], policy="p", workspace=ws)
        self.assertEqual(r.artifacts, {"small": b"ok"})

    def test_file_names_stay_inside_the_workspace(self):
        client = Client("/nonexistent.sock")
        for bad in ("../x", "/etc/passwd", "a/../../x"):
            with self.assertRaises(ValueError):
                client.run(["true"], policy="p", files={bad: "x"})


class AsyncRunTest(unittest.TestCase):
    def test_async_run_and_cancel_closes_the_connection(self):
        hung_up = threading.Event()

        def serve(req, fds, conn):
            if req["argv"] == ["sleep"]:
                # A long run: the client gives up; we see the connection close.
                conn.settimeout(10)
                if conn.recv(1) == b"":
                    hung_up.set()
                return
            os.write(fds[1], b"async\n")
            answer(conn, {"ok": True, "exit_code": 0, "result": result_doc()})

        daemon = FakeDaemon(serve)
        try:
            client = AsyncClient(daemon.path)

            async def main():
                r = await client.run(["echo"], policy="p")
                self.assertEqual(r.stdout, b"async\n")
                task = asyncio.ensure_future(client.run(["sleep"], policy="p"))
                await asyncio.sleep(0.3)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task

            asyncio.run(main())
            self.assertTrue(hung_up.wait(10))
        finally:
            daemon.close()


if __name__ == "__main__":
    unittest.main()
