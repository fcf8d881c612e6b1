"""Output files: checked before any work, written atomically (no half-written output, ever).

Only a regular file (or a new path) is written by a temporary file renamed over it. Anything else
that already exists there (a device such as /dev/null, a FIFO, a terminal, or a symlink to one) is
written through, opened and written like a shell's `>` would, and never replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from rooflinekit.core.errors import OutputError


def _mode(path: str) -> int | None:
    """The st_mode of what `path` names, symlinks followed; None if nothing is there."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def is_special(path: str) -> bool:
    """True when `path` exists and is neither a regular file nor a folder (a device, a FIFO...)."""
    mode = _mode(path)
    return mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_writable(path: str) -> None:
    """Fail before any work if `path` cannot be written (probing the folder for real)."""
    mode = _mode(path)
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
    if mode is not None and not stat.S_ISREG(mode):  # written through: no temporary file beside it
        if not os.access(path, os.W_OK):
            raise OutputError(f"cannot write {path}: permission denied")
        return
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"cannot write {path}: folder {folder} does not exist")
    if target.exists() and not os.access(target, os.W_OK):
        raise OutputError(f"cannot write {path}: permission denied")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: symlinks and hard links resolved where both exist."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def check_not_input(path: str, inputs: Iterable[tuple[str, str | None]], option: str = "--output") -> None:
    """Refuse an output path that names one of the command's inputs (given as (what, path) pairs:
    ("the model file", "model.py")): writing it would replace the input. A device or FIFO is
    written through, replacing nothing: two outputs may both be /dev/null."""
    if is_special(path):
        return
    for what, source in inputs:
        if source and same_file(path, source):
            raise OutputError(f"{option} {path} is the same file as {what} {source}: writing it would replace "
                              "it; give another file")


def write_atomic(path: str, text: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename: no half-written output, ever.

    A symlink is followed (its target is replaced); the file gets the mode a plain open() would
    give it (an existing file keeps its mode). Something that exists and is not a regular file
    (/dev/null, a FIFO, a terminal) is opened and written instead, never renamed over.
    """
    check_writable(path)
    mode = "wb" if isinstance(text, bytes) else "w"
    if is_special(path):
        try:
            with open(path, mode) as fh:
                fh.write(text)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    if target.exists():
        file_mode = target.stat().st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        file_mode = 0o666 & ~umask
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(text)
        os.chmod(tmp, file_mode)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):  # a full disk, a file-size limit: the file named, nothing half-written
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def partial_path(path: str) -> str:
    """Where an interrupted run's partial output goes, beside `path`: out.json -> out.partial.json
    (the file `path` names is left as it was)."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}.partial{p.suffix}"))
