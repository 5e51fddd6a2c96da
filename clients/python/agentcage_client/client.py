# SPDX-License-Identifier: Apache-2.0
"""Run code under agentcage through its daemon, from Python.

The daemon (``agentcage daemon``) listens on a unix socket; a user in its
``control_group`` may ask it to run a command under a policy of its policy
directory, by name. The command's stdin, stdout and stderr are this
process's pipes, passed as file descriptors (SCM_RIGHTS); its workspace is a
fresh one the daemon makes, into which a directory of the caller is copied
before the run and from which everything is copied back after it. The answer
carries the exit status and the result document (limits, measurements and
every denial). See docs/daemon.md ("Runs through the daemon") and
docs/schema/ for the protocol.

Standard library only. ``run``/``run_python`` block; ``AsyncClient`` has the
same calls as coroutines. Closing the connection (an exception, a cancelled
task, the process dying) ends the run: the daemon kills its cgroup.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import selectors
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

PROTOCOL = 1
CLIENT_NAME = "agentcage-client-py/0.1.0"
DEFAULT_SOCKET = "/run/agentcage/control.sock"

Bytesish = Union[bytes, str]


def default_socket() -> str:
    """``$AGENTCAGE_CONTROL_SOCKET``, else the daemon's default socket."""
    return os.environ.get("AGENTCAGE_CONTROL_SOCKET") or DEFAULT_SOCKET


class AgentcageError(Exception):
    """The daemon refused the run or could not be asked; no result document.

    ``exit_code`` is what ``agentcage run`` would have exited with (125 for
    a refusal), ``reply`` the daemon's answer when there was one.
    """

    def __init__(self, message: str, exit_code: int = 125, reply: Optional[dict] = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.reply = reply


@dataclass
class RunResult:
    """How a run ended.

    ``exit_code`` is ``agentcage run``'s exit status (the command's own, or
    124 timeout, 125 refused to run unconfined, 126 denied, 127 not found,
    128+N killed by signal N). ``result`` is the result document
    (docs/run.md). ``artifacts`` holds the files the run left in its
    workspace that differ from what went in (path relative to the
    workspace -> contents).
    """

    exit_code: int
    stdout: bytes
    stderr: bytes
    result: Dict[str, Any]
    artifacts: Dict[str, bytes] = field(default_factory=dict)
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def denials(self) -> List[Dict[str, Any]]:
        """The first denial records (hook, target, reason, errno, ...)."""
        return list(self.result.get("denials", {}).get("records", []))

    @property
    def denied(self) -> int:
        """How many operations the policy denied in all."""
        return int(self.result.get("denials", {}).get("total", 0))

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


# ---- the request ---------------------------------------------------------------


def _limit_text(value: Union[None, int, float, str], unit: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    if unit == "s":  # seconds -> milliseconds
        return "%dms" % max(1, int(round(float(value) * 1000)))
    if unit == "cpu":
        return ("%.3f" % float(value)).rstrip("0").rstrip(".")
    return str(int(value))


def build_request(
    argv: Sequence[str],
    *,
    policy: str,
    workspace: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    labels: Optional[Mapping[str, str]] = None,
    timeout: Union[None, int, float, str] = None,
    memory: Union[None, int, str] = None,
    pids: Union[None, int, str] = None,
    cpu: Union[None, int, float, str] = None,
    disk: Union[None, int, str] = None,
) -> Dict[str, Any]:
    """The ``run`` request as the daemon takes it (docs/schema/run-request.schema.json).

    Limits are ``agentcage run``'s: a string (``"512Mi"``, ``"30s"``,
    ``"unlimited"``) or a number (bytes; seconds for ``timeout``; CPUs).
    """
    if isinstance(argv, (str, bytes)) or not argv:
        raise ValueError("argv must be a non-empty sequence of strings (COMMAND and its arguments)")
    req: Dict[str, Any] = {"op": "run", "policy": policy, "argv": [str(a) for a in argv]}
    if env:
        req["env"] = ["%s=%s" % (k, v) for k, v in env.items()]
    if workspace:
        req["workspace"] = workspace
    limits = {
        k: v
        for k, v in (
            ("timeout", _limit_text(timeout, "s")),
            ("memory", _limit_text(memory, "b")),
            ("pids", _limit_text(pids, "n")),
            ("cpu", _limit_text(cpu, "cpu")),
            ("disk", _limit_text(disk, "b")),
        )
        if v is not None
    }
    if limits:
        req["limits"] = limits
    if labels:
        req["labels"] = dict(labels)
    return req


# ---- the workspace ---------------------------------------------------------------


def _safe_relative(name: str) -> str:
    norm = os.path.normpath(name)
    if not name or os.path.isabs(name) or norm == "." or norm.startswith(".." + os.sep) or norm == "..":
        raise ValueError("file name %r must be a relative path inside the workspace" % name)
    return norm


def _digests(root: str, max_size: int) -> Dict[str, str]:
    """The SHA-256 of each regular file under ROOT of at most MAX_SIZE bytes.

    A larger one can never be an artifact, and is not read: a run may leave
    a sparse file of a petabyte.
    """
    out: Dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > max_size:
                continue
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 16), b""):
                    h.update(chunk)
            out[os.path.relpath(path, root)] = h.hexdigest()
    return out


def _write_under(root: str, rel: str, data: bytes) -> None:
    """Writes ROOT/REL as a new regular file, never through a symbolic link.

    A workspace used again holds what the last run left there, links among
    them: a link at REL or at a directory on the way to it (`main.py` ->
    ~/.bashrc, `sub` -> ~/.ssh) is replaced, not followed.
    """
    parts = rel.split(os.sep)
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                if stat.S_ISLNK(os.stat(part, dir_fd=dfd, follow_symlinks=False).st_mode):
                    os.unlink(part, dir_fd=dfd)
            except FileNotFoundError:
                pass
            try:
                os.mkdir(part, 0o777, dir_fd=dfd)
            except FileExistsError:
                pass
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            os.close(dfd)
            dfd = sub
        name = parts[-1]
        try:
            if not stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=dfd)  # a directory there is an error (IsADirectoryError)
        except FileNotFoundError:
            pass
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                     dir_fd=dfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    finally:
        os.close(dfd)


class _Workspace:
    """The caller's directory the run's workspace is copied from and back to."""

    def __init__(self, workspace: Optional[str], files: Optional[Mapping[str, Bytesish]], max_artifacts: int):
        self.created = False
        self.path: Optional[str] = None
        self.max_artifacts = max_artifacts
        if workspace is None and not files:
            self.before: Dict[str, str] = {}
            return
        if workspace is None:
            workspace = tempfile.mkdtemp(prefix="agentcage-")
            self.created = True
        # The daemon opens it by a path without symbolic links.
        self.path = os.path.realpath(workspace)
        for name, content in (files or {}).items():
            _write_under(self.path, _safe_relative(name), content.encode() if isinstance(content, str) else content)
        self.before = _digests(self.path, max_artifacts)

    def artifacts(self) -> Dict[str, bytes]:
        if self.path is None:
            return {}
        out: Dict[str, bytes] = {}
        budget = self.max_artifacts
        for rel, digest in sorted(_digests(self.path, self.max_artifacts).items()):
            if self.before.get(rel) == digest:
                continue
            path = os.path.join(self.path, rel)
            size = os.path.getsize(path)
            if size > budget:
                continue
            with open(path, "rb") as f:
                out[rel] = f.read(size)
            budget -= size
        return out

    def close(self) -> None:
        if self.created and self.path:
            shutil.rmtree(self.path, ignore_errors=True)


# ---- one run's descriptors ---------------------------------------------------------


class _RunIO:
    """The connection and the stdout/stderr pipes of one run, read without blocking."""

    def __init__(self, stdin: Optional[Bytesish], max_output: int) -> None:
        self.max_output = max_output
        self.truncated = False
        self.reply_buf = b""
        self.reply: Optional[dict] = None
        self.out = bytearray()
        self.err = bytearray()
        self._to_close: List[int] = []
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        if stdin is None:
            in_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        else:
            # A file, not a pipe: the whole input is there at once, however
            # large, and the run reads it at its own pace.
            f = tempfile.TemporaryFile()
            f.write(stdin.encode() if isinstance(stdin, str) else stdin)
            f.flush()
            f.seek(0)
            in_fd = os.dup(f.fileno())
            f.close()
        self.child_fds = [in_fd, out_w, err_w]
        for fd in (self.out_r, self.err_r):
            os.set_blocking(fd, False)
        self.open_fds = {self.out_r, self.err_r}
        self.sock: Optional[socket.socket] = None

    def sent(self) -> None:
        """The daemon has the descriptors: ours go, so EOF comes when the run's do."""
        for fd in self.child_fds:
            os.close(fd)
        self.child_fds = []

    def on_pipe(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            self.open_fds.discard(fd)
            os.close(fd)
            return
        buf = self.out if fd == self.out_r else self.err
        room = self.max_output - len(buf)
        if room < len(data):
            self.truncated = True
            data = data[: max(room, 0)]
        buf += data

    def on_socket(self) -> None:
        assert self.sock is not None
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        if not data:
            raise AgentcageError("the daemon closed the connection without an answer (did it stop or restart?)")
        self.reply_buf += data
        if len(self.reply_buf) > (64 << 20):
            raise AgentcageError("the daemon's answer is larger than 64 MiB")
        if b"\n" in self.reply_buf:
            line = self.reply_buf.split(b"\n", 1)[0]
            try:
                reply = json.loads(line)
            except ValueError as e:
                raise AgentcageError("the daemon's answer is not JSON: %s" % e) from None
            if not isinstance(reply, dict):
                raise AgentcageError("the daemon's answer is not a JSON object")
            self.reply = reply

    def close(self) -> None:
        for fd in list(self.open_fds) + self.child_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.open_fds.clear()
        self.child_fds = []
        if self.sock is not None:
            self.sock.close()


def _send_request(sock: socket.socket, req: Dict[str, Any], fds: Sequence[int]) -> None:
    line = (json.dumps(req) + "\n").encode()
    sent = socket.send_fds(sock, [line], list(fds))
    if sent < len(line):
        sock.sendall(line[sent:])


def _finish(io: _RunIO, ws: _Workspace) -> RunResult:
    reply = io.reply or {}
    code = reply.get("exit_code", 125)
    document = reply.get("result")
    if not isinstance(document, dict):
        raise AgentcageError(str(reply.get("error", "the daemon refused the run")), int(code), reply)
    return RunResult(
        exit_code=int(code),
        stdout=bytes(io.out),
        stderr=bytes(io.err),
        result=document,
        artifacts=ws.artifacts(),
        output_truncated=io.truncated,
    )


def _python_argv(code: str, files: Optional[Mapping[str, Bytesish]], args: Sequence[str]) -> Tuple[list, dict]:
    all_files = dict(files or {})
    all_files["main.py"] = code
    return ["python3", "main.py", *args], all_files


# ---- the blocking client ---------------------------------------------------------


class Client:
    """A client of one daemon; cheap to make, safe to share between threads
    (each call opens its own connection)."""

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        connect_timeout: float = 5.0,
        max_output: int = 16 << 20,
        max_artifacts: int = 64 << 20,
    ) -> None:
        self.socket_path = socket_path or default_socket()
        self.connect_timeout = connect_timeout
        self.max_output = max_output
        self.max_artifacts = max_artifacts

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.connect_timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as e:
            sock.close()
            raise AgentcageError("cannot reach the agentcage daemon at %s: %s" % (self.socket_path, e)) from None
        return sock

    def hello(self) -> Dict[str, Any]:
        """The daemon's protocol version, its version and the ops this caller may use."""
        sock = self._connect()
        try:
            sock.sendall((json.dumps({"op": "hello", "protocol": PROTOCOL, "client": CLIENT_NAME}) + "\n").encode())
            buf = b""
            while b"\n" not in buf:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
        finally:
            sock.close()
        reply = json.loads(buf.split(b"\n", 1)[0] or b"{}")
        if not reply.get("ok"):
            raise AgentcageError(str(reply.get("error", "the daemon refused hello")), reply=reply)
        return reply

    def run(
        self,
        argv: Sequence[str],
        *,
        policy: str,
        stdin: Optional[Bytesish] = None,
        timeout: Union[None, int, float, str] = None,
        workspace: Optional[str] = None,
        files: Optional[Mapping[str, Bytesish]] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        memory: Union[None, int, str] = None,
        pids: Union[None, int, str] = None,
        cpu: Union[None, int, float, str] = None,
        disk: Union[None, int, str] = None,
    ) -> RunResult:
        """Runs ``argv`` under ``policy`` (a name in the daemon's policy directory).

        ``files`` (name -> contents) are written into ``workspace`` (a
        directory of yours; a temporary one when not given), which is copied
        into the run's workspace before it starts and back after it ends.
        ``timeout`` is the run's wall-clock limit (seconds or ``"30s"``).
        Raises AgentcageError when the daemon refuses (no result document).
        """
        ws = _Workspace(workspace, files, self.max_artifacts)
        io = _RunIO(stdin, self.max_output)
        try:
            req = build_request(argv, policy=policy, workspace=ws.path, env=env, labels=labels, timeout=timeout,
                                memory=memory, pids=pids, cpu=cpu, disk=disk)
            io.sock = self._connect()
            _send_request(io.sock, req, io.child_fds)
            io.sent()
            io.sock.setblocking(False)
            with selectors.DefaultSelector() as sel:
                sel.register(io.sock, selectors.EVENT_READ)
                for fd in io.open_fds:
                    sel.register(fd, selectors.EVENT_READ)
                while io.reply is None or io.open_fds:
                    # Once answered, what is left in the pipes is there now.
                    events = sel.select(timeout=None if io.reply is None else 1.0)
                    if not events and io.reply is not None:
                        break
                    for key, _ in events:
                        if key.fileobj is io.sock:
                            io.on_socket()
                            if io.reply is not None:
                                sel.unregister(io.sock)
                        else:
                            fd = key.fd
                            io.on_pipe(fd)
                            if fd not in io.open_fds:
                                sel.unregister(fd)
            return _finish(io, ws)
        finally:
            io.close()
            ws.close()

    def run_python(
        self,
        code: str,
        *,
        policy: str = "python-sandbox",
        files: Optional[Mapping[str, Bytesish]] = None,
        args: Sequence[str] = (),
        **kwargs: Any,
    ) -> RunResult:
        """Runs Python ``code`` (as ``main.py`` in the workspace, with
        ``files`` beside it) under ``policy``: a replacement for an agent
        framework's in-process ``exec()`` with the kernel as the boundary.
        Files the code writes come back in ``artifacts``."""
        argv, all_files = _python_argv(code, files, args)
        return self.run(argv, policy=policy, files=all_files, **kwargs)


# ---- the asyncio client ---------------------------------------------------------


class AsyncClient(Client):
    """``Client`` with ``run``/``run_python``/``hello`` as coroutines. A
    cancelled call closes its connection, which ends the run."""

    async def hello(self) -> Dict[str, Any]:  # type: ignore[override]
        return await asyncio.get_running_loop().run_in_executor(None, super().hello)

    async def run(self, argv: Sequence[str], *, policy: str, **kwargs: Any) -> RunResult:  # type: ignore[override]
        loop = asyncio.get_running_loop()
        ws = _Workspace(kwargs.pop("workspace", None), kwargs.pop("files", None), self.max_artifacts)
        io = _RunIO(kwargs.pop("stdin", None), self.max_output)
        done: asyncio.Future = loop.create_future()
        readers: List[int] = []
        try:
            req = build_request(argv, policy=policy, workspace=ws.path, **kwargs)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            io.sock = sock
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, self.socket_path), self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as e:
                raise AgentcageError("cannot reach the agentcage daemon at %s: %s" % (self.socket_path, e)) from None
            sock.setblocking(True)  # a request of a few KiB: sent at once
            _send_request(sock, req, io.child_fds)
            sock.setblocking(False)
            io.sent()

            def check() -> None:
                if io.reply is not None and not io.open_fds and not done.done():
                    done.set_result(None)

            def on_sock() -> None:
                try:
                    io.on_socket()
                except AgentcageError as e:
                    if not done.done():
                        done.set_exception(e)
                    return
                if io.reply is not None:
                    loop.remove_reader(sock.fileno())
                    readers.remove(sock.fileno())
                    # What is left in the pipes is there now.
                    loop.call_later(1.0, lambda: done.done() or done.set_result(None))
                check()

            def on_pipe(fd: int) -> None:
                io.on_pipe(fd)
                if fd not in io.open_fds:
                    loop.remove_reader(fd)
                    readers.remove(fd)
                check()

            loop.add_reader(sock.fileno(), on_sock)
            readers.append(sock.fileno())
            for fd in list(io.open_fds):
                loop.add_reader(fd, on_pipe, fd)
                readers.append(fd)
            await done
            return _finish(io, ws)
        finally:
            for fd in readers:
                loop.remove_reader(fd)
            io.close()
            ws.close()

    async def run_python(  # type: ignore[override]
        self,
        code: str,
        *,
        policy: str = "python-sandbox",
        files: Optional[Mapping[str, Bytesish]] = None,
        args: Sequence[str] = (),
        **kwargs: Any,
    ) -> RunResult:
        argv, all_files = _python_argv(code, files, args)
        return await self.run(argv, policy=policy, files=all_files, **kwargs)


# ---- module-level calls -------------------------------------------------------------


def run(argv: Sequence[str], *, policy: str, **kwargs: Any) -> RunResult:
    """``Client().run(...)`` with the default socket."""
    return Client().run(argv, policy=policy, **kwargs)


def run_python(code: str, **kwargs: Any) -> RunResult:
    """``Client().run_python(...)`` with the default socket."""
    return Client().run_python(code, **kwargs)
