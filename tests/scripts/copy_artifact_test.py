#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/copy-artifact against what a hostile run can leave in its
workspace: a link to a host file, a linked workspace, a FIFO, a directory,
a name that climbs out, a file too big; and the plain file it must copy."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "copy-artifact")


class CopyArtifact(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.mkdir(self.ws)
        self.secret = os.path.join(self.tmp.name, "host-secret")
        with open(self.secret, "w") as f:
            f.write("host secret\n")
        self.dest = os.path.join(self.tmp.name, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def copy(self, name, ws=None):
        return subprocess.run([SCRIPT, ws or self.ws, name, self.dest], capture_output=True, text=True,
                              timeout=20)

    def refused(self, name, why, ws=None):
        r = self.copy(name, ws)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(why, r.stderr)
        self.assertFalse(os.path.exists(self.dest), "something was written for a refused artifact")

    def test_a_plain_file_is_copied_byte_for_byte(self):
        data = bytes(range(256)) * 1000
        with open(os.path.join(self.ws, "plot.png"), "wb") as f:
            f.write(data)
        r = self.copy("plot.png")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.dest, "rb") as f:
            self.assertEqual(f.read(), data)

    def test_a_link_to_a_host_file_is_not_followed(self):
        os.symlink(self.secret, os.path.join(self.ws, "plot.png"))
        self.refused("plot.png", "symbolic link")

    def test_a_linked_workspace_is_not_followed(self):
        elsewhere = os.path.join(self.tmp.name, "elsewhere")
        os.mkdir(elsewhere)
        os.symlink(self.secret, os.path.join(elsewhere, "plot.png"))
        link = os.path.join(self.tmp.name, "ws-link")
        os.symlink(elsewhere, link)
        self.refused("plot.png", "symbolic link", ws=link)

    def test_a_fifo_is_refused_without_blocking(self):
        os.mkfifo(os.path.join(self.ws, "plot.png"))
        self.refused("plot.png", "not a regular file")

    def test_a_directory_is_refused(self):
        os.mkdir(os.path.join(self.ws, "plot.png"))
        self.refused("plot.png", "not a regular file")

    def test_names_that_leave_the_workspace_are_refused(self):
        for name in ("../host-secret", "sub/plot.png", "..", ".", ""):
            with self.subTest(name=name):
                self.refused(name, "a plain file name in the workspace")

    def test_a_file_over_64_mib_is_refused(self):
        with open(os.path.join(self.ws, "plot.png"), "wb") as f:
            f.truncate((64 << 20) + 1)
        self.refused("plot.png", "more than the 64 MiB expected")

    def test_usage(self):
        r = subprocess.run([SCRIPT, self.ws], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        self.assertIn("copy-artifact WORKSPACE NAME DEST", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
