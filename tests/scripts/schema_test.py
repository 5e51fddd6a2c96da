# SPDX-License-Identifier: Apache-2.0
"""docs/schema/ against what agentcage really sends and writes: the
schemas are valid; the requests the Python client builds validate, and
requests the daemon refuses do not; a real result document written by
build/agentcage (a run this host refuses: exit 125, fail_closed) validates,
and so does what `agentcage policy check --json` prints.
The daemon's replies and results of real runs are validated in the VM
(clients/python/tests/test_daemon.py). Usage: schema_test.py AGENTCAGE_BINARY"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import schemas  # noqa: E402
from agentcage_client import build_request  # noqa: E402

BINARY = None


class RequestSchemaTest(unittest.TestCase):
    def test_what_the_client_sends_is_valid(self):
        for req in (
            build_request(["python3", "main.py"], policy="python-sandbox"),
            build_request(["sh", "-c", "x"], policy="p", workspace="/home/u/ws", env={"A": "1"},
                          labels={"task": "t-1"}, timeout=2.5, memory="512Mi", pids=64, cpu=0.5, disk="1Gi"),
            {"op": "hello", "protocol": 1, "client": "agentcage-client-py/0.1.0"},
            {"op": "status"},
            {"op": "events", "follow": True},
            {"op": "attach", "cgroup": "/machine.slice/libpod-ab12.scope", "policy": "python-sandbox",
             "workspace": "/workspace", "container_id": "ab12", "arm_pid": 4242, "labels": {"container.name": "web"}},
            {"op": "detach", "container_id": "ab12"},
            {"op": "detach", "cgroup": "system.slice/x.service"},
        ):
            self.assertEqual(schemas.errors("control-request", req), [], req)

    def test_what_the_daemon_refuses_is_invalid(self):
        for req in (
            {"op": "run", "policy": "/tmp/evil.yaml", "argv": ["true"]},
            {"op": "run", "policy": "p", "argv": []},
            {"op": "run", "policy": "p", "argv": [""]},
            {"op": "run", "policy": "p", "argv": ["true"], "user": "root"},
            {"op": "run", "policy": "p", "argv": ["true"], "workspace": "rel"},
            {"op": "run", "policy": "p", "argv": ["true"], "limits": {"swap": "1G"}},
            {"op": "run", "policy": "p", "argv": ["true"], "labels": {"Task": "x"}},
            {"op": "run", "policy": "p", "argv": ["true"], "labels": {"t": "a\nb"}},
            {"op": "hello"},
            {"op": "nope"},
            {"op": "detach", "cgroup": "a", "container_id": "ab"},
            {"op": "detach"},
            {"op": "attach", "cgroup": "a", "policy": "p", "container_id": "../x"},
            {"op": "attach", "cgroup": "a", "policy": "p", "arm_pid": 0},
            {"op": "run_start", "run_id": "0123456789ABCDEF", "policy": "p", "scope_id": 1},
        ):
            self.assertNotEqual(schemas.errors("control-request", req), [], req)


class ResultSchemaTest(unittest.TestCase):
    def test_a_real_result_document_is_valid(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "result.json")
            # This host cannot enforce (or this is not root): agentcage
            # refuses, and still writes the whole document.
            p = subprocess.run([BINARY, "run", "--policy", os.path.join(ROOT, "policies", "python-sandbox.yaml"),
                                "--label", "task=t-1", "--result", out, "--", "true"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            with open(out) as f:
                doc = json.load(f)
        self.assertEqual(schemas.errors("result", doc), [], doc)
        self.assertEqual(doc["labels"], {"task": "t-1"})
        self.assertEqual(doc["exit_code"], p.returncode)
        if p.returncode == 125 and os.geteuid() == 0:
            self.assertIsNotNone(doc["fail_closed"])

    def test_a_wrong_document_is_caught(self):
        self.assertNotEqual(schemas.errors("result", {"version": 2}), [])


class PolicyCheckSchemaTest(unittest.TestCase):
    def test_what_policy_check_prints_is_valid(self):
        with tempfile.TemporaryDirectory() as d:
            pdir = os.path.join(d, "policies")
            os.mkdir(pdir)
            with open(os.path.join(pdir, "bad.yaml"), "w") as f:
                f.write("apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: bad}\n"
                        "spec:\n  files: {deny: [\"${workspace}/*.key\"]}\n")
            with open(os.path.join(pdir, "Misnamed.yaml"), "w") as f:
                f.write("apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: misnamed}\nspec: {}\n")
            p = subprocess.run([BINARY, "policy", "check", "--json", "--dir", pdir,
                                os.path.join(ROOT, "policies", "python-sandbox.yaml")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(schemas.errors("policy-check", doc), [], doc)
        self.assertEqual([f["ok"] for f in doc["files"]], [True, False, False], doc)
        self.assertEqual(doc["files"][1]["errors"][0]["line"], 0, doc)  # Misnamed.yaml: the file name
        self.assertEqual(doc["files"][2]["errors"][0]["line"], 5, doc)  # bad.yaml: the pattern


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
