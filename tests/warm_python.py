"""`python ARGS` as a real child process that starts warm: forked from a server that has already
imported torch and rooflinekit.

A fresh interpreter spends about 3.5 s of CPU importing torch before rooflinekit does anything; the
tests that need a process of their own (exit codes, a closed or broken stdout, signals, what the
interpreter prints as it shuts down) would spend most of their time there. Here each run is a new
process (``os.fork`` of the server) that takes its standard streams, working directory, environment,
``sys.argv`` and ``sys.path`` as ``python`` would set them, then runs ``-m MODULE``, ``-c CODE`` or a
script at the top level, so that it exits the way python does: SystemExit, an uncaught exception,
KeyboardInterrupt, atexit, the final flush of stdout. What it cannot give is a fresh ``sys.modules``;
tests of what gets imported (tests/test_startup.py) run a fresh interpreter with ``subprocess``.

`Popen` and `run` follow ``subprocess``'s signatures for what the tests use. The ``PYTHON*``
variables python reads at start-up are honoured by starting a server with them (one server per
combination; ``PYTHONPATH`` and ``PYTHONDONTWRITEBYTECODE`` the child applies itself); interpreter
options (``-X``, ``-u``, ...) and a ``sitecustomize`` on the child's path are refused.

Servers are started on first use (about 3 s) and stopped when the test process exits.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import json
import locale
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT
#: A standard stream closed in the child before it starts (a shell's ``>&-``).
CLOSED = "closed"
#: Variables that python reads at start-up which a warm child applies itself.
APPLIED = {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE"}
ROOT = Path(__file__).resolve().parent.parent


def _startup_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k not in APPLIED and v}  # "": unset


# -- client ---------------------------------------------------------------------------------------


class _Server:
    """A fork server of this process for one interpreter: its socket path, environment and process.
    This interpreter's server sees this checkout first (PYTHONPATH); another (a venv's) is started
    with the environment of its first request, so it imports what that environment installs."""

    def __init__(self, python: str, env: Mapping[str, str]):
        self.dir = tempfile.mkdtemp(prefix="rk-warm-")
        self.path = os.path.join(self.dir, "s")
        env = dict(env)
        if python == sys.executable:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.env = env
        self.log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115 - lives with the server
        self.proc = subprocess.Popen(
            [python, __file__, self.path], env=env, stdin=DEVNULL, stdout=PIPE, stderr=self.log,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # python installs its own handler
        )
        ready = self.proc.stdout.readline()
        if ready.strip() != b"ready":
            self.proc.kill()
            raise RuntimeError(f"the warm python server did not start: {Path(self.log.name).read_text()}")
        atexit.register(self.stop)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_SERVERS: dict[tuple, _Server] = {}


def _server(python: str, env: Mapping[str, str]) -> _Server:
    """The server for `python` started with `env`'s start-up variables (one per combination)."""
    key = (python, tuple(sorted(_startup_vars(env).items())))
    server = _SERVERS.get(key)
    if server is None or server.proc.poll() is not None:
        server = _SERVERS[key] = _Server(python, env)
    return server


def _child_end(spec, target: int, opened: list[int], ours: dict[int, int]) -> int | str:
    """The fd the child gets as `target` for a subprocess-style `spec` (or CLOSED / "stdout")."""
    if spec is None:
        return target
    if spec == CLOSED:
        return CLOSED
    if spec == STDOUT and target == 2:
        return "stdout"
    if spec == PIPE:
        read, write = os.pipe()
        child, parent = (read, write) if target == 0 else (write, read)
        opened.append(child)
        ours[target] = parent
        return child
    if spec == DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd
    return spec if isinstance(spec, int) else spec.fileno()


class Popen:
    """A warm child running `python *args`; `pid`, `stdin`/`stdout`/`stderr` (for PIPE), `poll`,
    `wait`, `communicate`, `send_signal`, `terminate`, `kill` as subprocess.Popen has them."""

    def __init__(self, args: Sequence[str], *, cwd=None, env: Mapping[str, str] | None = None, stdin=None,
                 stdout=None, stderr=None, text: bool = False, python: str | os.PathLike = sys.executable):
        args = [str(a) for a in args]
        if not args or (args[0].startswith("-") and args[0] not in ("-m", "-c")):
            raise ValueError(f"warm python runs `-m MODULE`, `-c CODE` or a script, not {args[:1]}")
        env = dict(os.environ if env is None else env)
        server = _server(str(python), env)
        self.args, self.python, self.text, self.returncode = args, str(python), text, None
        opened: list[int] = []
        ours: dict[int, int] = {}
        stdio = [_child_end(spec, target, opened, ours) for target, spec in enumerate((stdin, stdout, stderr))]
        fds = [fd for fd in stdio if isinstance(fd, int)]
        request = {"args": args, "cwd": os.path.abspath(cwd or os.getcwd()), "env": env,
                   "stdio": [fd if isinstance(fd, str) else fds.index(fd) for fd in stdio]}
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(server.path)
            payload = json.dumps(request).encode()
            socket.send_fds(self._sock, [len(payload).to_bytes(8, "big")], fds)
            self._sock.sendall(payload)
        finally:
            for fd in opened:
                os.close(fd)
        self._buffer = b""
        self.pid = int(self._line(None))
        self.stdin = os.fdopen(ours[0], "wb") if 0 in ours else None
        self.stdout = os.fdopen(ours[1], "rb") if 1 in ours else None
        self.stderr = os.fdopen(ours[2], "rb") if 2 in ours else None
        if text:
            encoding = locale.getpreferredencoding(False)
            self.stdin, self.stdout, self.stderr = (
                None if f is None else io.TextIOWrapper(f, encoding=encoding, write_through=True)
                for f in (self.stdin, self.stdout, self.stderr))

    def _line(self, timeout: float | None) -> bytes:
        """The server's next line (the pid, then the exit status); TimeoutExpired past `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._sock], [], [], left)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            chunk = self._sock.recv(64)
            if not chunk:
                raise RuntimeError("the warm python server went away")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.wait(0)
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._line(timeout))
            self._sock.close()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: str | bytes | None = None, timeout: float | None = None):
        """(stdout, stderr) as subprocess's: what the PIPE streams held, decoded with `text`."""
        out: dict[int, bytes] = {}

        def drain(index, stream):
            out[index] = stream.buffer.read() if self.text else stream.read()
            stream.close()

        readers = [threading.Thread(target=drain, args=(i, s), daemon=True)
                   for i, s in ((1, self.stdout), (2, self.stderr)) if s is not None]
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            if input:
                try:
                    self.stdin.write(input)
                except BrokenPipeError:
                    pass
            try:
                self.stdin.close()
            except BrokenPipeError:
                pass
        self.wait(timeout)
        for reader in readers:
            reader.join()

        def decoded(index):
            if index not in out:
                return None
            data = out[index]
            if not self.text:
                return data
            return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")

        return decoded(1), decoded(2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        if self.returncode is None:
            self.wait()


def run(args: Sequence[str], *, input: str | bytes | None = None, capture_output: bool = False,
        timeout: float | None = None, check: bool = False, stdin=None, stdout=None, stderr=None,
        **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(["python", *args], ...) in a warm child."""
    if capture_output:
        stdout = stderr = PIPE
    if input is not None:
        stdin = PIPE
    with Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess([proc.python, *proc.args], proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# -- server ---------------------------------------------------------------------------------------


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _serve(path: str) -> tuple[dict, list[int]]:
    """Accept requests until one forks; returns (request, fds) in the child only."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    listener.settimeout(2.0)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone
                os._exit(0)
            continue
        conn.settimeout(None)
        try:
            head, fds, _, _ = socket.recv_fds(conn, 8, 3)
            request = json.loads(_recv_exactly(conn, int.from_bytes(head, "big")))
        except (EOFError, ValueError, OSError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(f"{pid}\n".encode())
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:
            pass
        conn.close()


def _std_stream(fd: int, template, buffered: bool):
    """sys.stdin/stdout/stderr as python makes them at start-up: None when the fd is closed; the
    server's encoding and errors; stdout and stderr unbuffered (write-through) when the server's are
    (PYTHONUNBUFFERED, which the child shares), else stderr and terminals line-buffered."""
    try:
        os.fstat(fd)
    except OSError:
        return None
    buffered = buffered or fd == 0
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    binary = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw) if buffered else raw
    return io.TextIOWrapper(binary, encoding=template.encoding, errors=template.errors,
                            line_buffering=fd != 0 and buffered and (fd == 2 or raw.isatty()),
                            write_through=not buffered)


def _become(request: dict, fds: list[int]) -> None:
    """Take the request's streams, directory, environment, argv and path, as python would."""
    stdio = request["stdio"]
    for target, spec in enumerate(stdio):
        if spec == CLOSED:
            try:
                os.close(target)
            except OSError:
                pass
        elif spec == "stdout":
            os.dup2(1, 2)
        else:
            os.dup2(fds[spec], target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    server_entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.clear()
    os.environ.update(request["env"])
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    templates, buffered = (sys.__stdin__, sys.__stdout__, sys.__stderr__), not sys.__stdout__.write_through
    sys.stdin, sys.stdout, sys.stderr = (_std_stream(fd, templates[fd], buffered) for fd in range(3))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    base = sys.path[1:]
    for entry in server_entries:
        if entry in base:
            base.remove(entry)
    entries = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # as site does
    for entry in entries:
        if entry not in base and any(os.path.exists(os.path.join(entry, f"{name}.py"))
                                     for name in ("sitecustomize", "usercustomize")):
            raise SystemExit(f"warm python: {entry} has a sitecustomize, which only a fresh python runs")
    args = request["args"]
    first = "" if args[0] == "-c" else request["cwd"] if args[0] == "-m" else \
        os.path.dirname(os.path.abspath(args[0]))
    sys.path[:] = [first, *entries, *base]
    importlib.invalidate_caches()


def _main(args: list[str]) -> None:
    """The child's program, at the top level of the interpreter (how it exits is python's, but for
    the last step: the final collections skip the objects the server made, as `rooflinekit`'s own
    command skips them; walking them would copy every page of the server, 1.5 s per child)."""
    atexit.register(gc.freeze)  # first registered, so it runs after the program's own handlers

    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        runpy._run_module_as_main(args[1], alter_argv=True)  # what `python -m` calls
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(args[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    import torch  # noqa: F401
    import torch.fx.experimental.symbolic_shapes  # noqa: F401 - what the first meta op imports

    from rooflinekit.cli.main import COMMANDS

    for _module, _, _ in COMMANDS.values():  # imported by the command that runs
        importlib.import_module(_module)

    _request, _fds = _serve(sys.argv[1])
    _become(_request, _fds)
    del _fds
    _main(_request["args"])
