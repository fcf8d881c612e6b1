"""The process's own standard output: kept for the report alone.

While user code and plugins run (a model file imported, built and run forward, a plugin loaded or
asked a hook), whatever they print goes to stderr instead: `print()` through `sys.stdout`, and
native code writing to file descriptor 1 (C's printf, C++'s std::cout). The report written to
stdout afterwards (`-f json`) then stays parseable.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile

from rooflinekit.core.swap import swapped

_depth = 0


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@functools.cache
def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no handle on the process's own symbols on this platform
        return None


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers, so that what native code printf'd while fd 1 pointed at stderr
    lands there, not in the report written afterwards."""
    try:
        _libc().fflush(None)
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no libc fflush here
        pass


def _flush(stream) -> None:
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass


class stdout_to_stderr:  # a context manager, named and used as the function it was
    """Send what is printed to stdout (Python's sys.stdout and file descriptor 1) to stderr.

    Nested uses cost nothing (only the outermost one redirects: every plugin hook call enters one,
    thousands per profile); both are restored afterwards, even if the code inside replaced
    sys.stdout.
    """

    __slots__ = ("_saved",)

    def __enter__(self) -> None:
        global _depth
        if _depth:
            _depth += 1
            self._saved = None
            return
        saved_stream = sys.stdout
        _flush(saved_stream)
        saved_fd = os.dup(1) if _fd_open(1) else None
        redirected = saved_fd is not None and _fd_open(2)
        if redirected:
            _flush_c_stdio()
            os.dup2(2, 1)
        stream = swapped(sys, "stdout", sys.stderr if sys.stderr is not None else saved_stream)
        stream.__enter__()
        _depth = 1
        self._saved = (stream, saved_fd, redirected)

    def __exit__(self, *exc_info) -> bool:
        global _depth
        if self._saved is None:
            _depth -= 1
            return False
        stream, saved_fd, redirected = self._saved
        _depth = 0
        _flush(sys.stdout)
        _flush(sys.stderr)
        if redirected:
            _flush_c_stdio()
            os.dup2(saved_fd, 1)
        if saved_fd is not None:
            os.close(saved_fd)
        stream.__exit__(None, None, None)  # sys.stdout as found, whatever the code inside set
        return False


class native_stderr_without:  # a context manager, named and used as a function
    """Hold back the lines native code writes to file descriptor 2 inside the block that start
    with `prefix`; every other line is written to stderr afterwards, as it came.

    Kineto (torch.profiler's back end) logs `USDT: ... profiler_start` and `profiler_stop` from C++
    on every profiler start and stop: measured mode wraps those two calls in this.
    """

    __slots__ = ("_prefix", "_saved")

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._saved = None

    def __enter__(self) -> None:
        if not _fd_open(2):
            return
        _flush(sys.stderr)
        _flush_c_stdio()
        held = tempfile.TemporaryFile()
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        self._saved = (saved, held)

    def __exit__(self, *exc_info) -> bool:
        if self._saved is None:
            return False
        saved, held = self._saved
        self._saved = None
        _flush(sys.stderr)
        _flush_c_stdio()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        text = held.read().decode(errors="replace")
        held.close()
        kept = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(self._prefix))
        if kept and sys.stderr is not None:
            sys.stderr.write(kept)
            _flush(sys.stderr)
        return False
