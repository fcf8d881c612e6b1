"""Output files: checked before any work, written atomically (no half-written output, ever)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rooflinekit.core.errors import OutputError


def check_writable(path: str) -> None:
    """Fail before any work if `path` cannot be written (probing the folder for real)."""
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
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


def write_atomic(path: str, text: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename: no half-written output, ever.

    A symlink is followed (its target is replaced); the file gets the mode a plain open() would
    give it (an existing file keeps its mode).
    """
    check_writable(path)
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    if target.exists():
        file_mode = target.stat().st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        file_mode = 0o666 & ~umask
    mode = "wb" if isinstance(text, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(text)
        os.chmod(tmp, file_mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
