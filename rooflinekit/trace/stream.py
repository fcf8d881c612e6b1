"""Read a trace file's JSON incrementally: its top-level keys in any order, and the objects of its
`traceEvents` array one at a time, so that a trace of gigabytes never sits in memory whole.

The file (gunzipped when it starts with gzip's magic number) is read a chunk at a time into a text
buffer; each value is decoded by the standard json module's `raw_decode` at the buffer's position,
and a value that runs past the buffer's end is decoded again once the next chunk is in.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rooflinekit.core.errors import RooflineError

#: Bytes read from the file at a time.
CHUNK = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class TraceError(RooflineError):
    """A trace file that cannot be read: missing, empty, truncated, not JSON or not a trace."""


class _Source:
    """The decoded text of a trace file, a chunk at a time, with the line the buffer starts on."""

    def __init__(self, path: Path, progress: Callable[[int], None] | None):
        self.path, self.progress = path, progress
        try:
            self.raw = open(path, "rb")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
        self.gzipped = self.raw.read(2) == b"\x1f\x8b"
        self.raw.seek(0)
        self.file = gzip.GzipFile(fileobj=self.raw) if self.gzipped else self.raw
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.line, self.eof, self.read_any = "", 0, 1, False, False

    def close(self) -> None:
        self.file.close()
        self.raw.close()

    def _chunk(self) -> bytes:
        """The next bytes of the (gunzipped) file; TraceError for a cut or corrupt gzip stream."""
        try:
            return self.file.read(CHUNK)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"{self.path}: truncated or corrupt gzip file ({exc})") from None

    def more(self) -> bool:
        """Drop the consumed text, append the next chunk; False when the file is done."""
        if self.eof:
            return False
        data = self._chunk()
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise TraceError(f"{self.path}: not a JSON trace (not UTF-8 text)") from None
        self.eof = not data
        self.read_any = self.read_any or bool(data)
        self.line += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = self.buf[self.pos:] + text, 0
        if self.progress is not None:
            self.progress(self.raw.tell())
        return bool(data)

    def peek(self) -> str:
        """The next character that is not whitespace ('' at the end of the file), not consumed."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def fail(self, message: str, at: int | None = None) -> TraceError:
        """The one-line error for bad JSON at `at` (default: the position), or for a cut file."""
        at = self.pos if at is None else at
        if at >= len(self.buf.rstrip()) - 1 and self.eof:
            return TraceError(f"{self.path}: truncated JSON (it ends mid-document)")
        line = self.line + self.buf.count("\n", 0, at)
        return TraceError(f"{self.path}: not JSON ({message} at line {line})")

    def value(self) -> Any:
        """The next JSON value, reading on while it runs to the buffer's end."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._may_continue(exc.pos, exc.msg) and self.more():
                    continue
                raise self.fail(exc.msg, exc.pos) from None
            except RecursionError:
                raise TraceError(f"{self.path}: not a usable JSON trace: nested too deeply") from None
            if end < len(self.buf) or not self.more():  # a number at the end may go on
                self.pos = end
                return value

    def _may_continue(self, at: int, message: str) -> bool:
        """Whether a decode error may be the buffer's end rather than bad JSON."""
        return at >= len(self.buf) - 1 or message.startswith("Unterminated string")

    def expect(self, allowed: str, message: str) -> str:
        """Consume the next character, one of `allowed`; the one-line error otherwise."""
        char = self.peek()
        if not char or char not in allowed:
            raise self.fail(message)
        self.pos += 1
        return char


def _events(src: _Source, on_event: Callable[[Any], None]) -> None:
    """Each value of the traceEvents array (the '[' consumed) to on_event, up to its ']'."""
    if src.peek() == "]":
        src.pos += 1
        return
    decode, space = _DECODER.raw_decode, _WS.match
    while True:
        buf, start = src.buf, space(src.buf, src.pos).end()
        try:
            event, end = decode(buf, start)
        except (json.JSONDecodeError, RecursionError):
            end = len(buf)
        if end >= len(buf) - 1:  # near the buffer's end: the careful way, reading on
            src.pos = start
            event = src.value()
        else:
            src.pos = space(buf, end).end()
        on_event(event)
        if src.buf[src.pos:src.pos + 1] == ",":
            src.pos += 1
        elif src.expect(",]", "Expecting ',' delimiter") == "]":
            return


def _members(src: _Source, on_event: Callable[[Any], None]) -> tuple[dict, bool]:
    """The top-level object's members but traceEvents, and whether traceEvents was an array."""
    header: dict = {}
    saw = False
    if src.peek() == "}":
        src.pos += 1
        return header, saw
    while True:
        if src.peek() != '"':
            raise src.fail("Expecting property name enclosed in double quotes")
        key = src.value()
        src.expect(":", "Expecting ':' delimiter")
        if key == "traceEvents" and src.peek() == "[":
            src.pos += 1
            _events(src, on_event)
            saw = True
        else:
            header[key] = src.value()
        if src.expect(",}", "Expecting ',' delimiter") == "}":
            return header, saw


def read_document(path: Path, on_event: Callable[[Any], None],
                  progress: Callable[[int], None] | None = None) -> tuple[dict, bool]:
    """Stream the trace at `path`: each traceEvents value to on_event; returns the other top-level
    members and whether a traceEvents array was there. `progress` gets the file bytes read so far."""
    src = _Source(path, progress)
    try:
        first = src.peek()
        if not src.read_any:
            raise TraceError(f"{path}: the file is empty" + (" (an empty gzip stream)" if src.gzipped else ""))
        if first != "{":
            src.value()  # other JSON, or not JSON: its own line
            return {}, False
        src.pos += 1
        header, saw = _members(src, on_event)
        if src.peek():
            raise src.fail("Extra data")
        return header, saw
    finally:
        src.close()
