"""Terminal tables that fit: columns left out by priority, the name column shortened, colour optional.

Every text table of profile and sweep goes through `table()`: it lays the rows out with tabulate,
and where the result is wider than the terminal budget (100 columns unless `--wide`) it leaves out
the optional columns, lowest priority first, then shortens the first column in its middle. It
returns the headers it left out so that the report can say `--wide` shows them.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import click
from tabulate import tabulate

#: The width the default text report fits.
WIDTH = 100
#: A name column is never shortened below this.
MIN_NAME = 32
#: Gap tabulate's "simple" format puts between columns.
GAP = 2

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COUNT = re.compile(r" \(x\d+\)$")
_NUMBER_SPACE = re.compile(r"(?<=\d) (?=[A-Za-z%])")


@dataclass(frozen=True)
class Column:
    """A column: header, alignment, and when it may be left out (None: always shown; a lower
    number is left out first; `wide_only`: shown only with --wide)."""

    header: str
    align: str = "right"
    drop: int | None = None
    wide_only: bool = False


def visible(text: str) -> int:
    """Width of `text` on a terminal (colour codes take none)."""
    return len(_ANSI.sub("", text))


def shorten(text: str, width: int) -> str:
    """`text` in `width` characters: leading path components first give way to '..'
    ('model.layers.*.self_attn (x28)' -> '..layers.*.self_attn (x28)'), then the middle."""
    if len(text) <= width:
        return text
    match = _COUNT.search(text)
    count = match.group() if match else ""
    path = text[: len(text) - len(count)]
    parts = path.split(".")
    for k in range(1, len(parts)):
        candidate = ".." + ".".join(parts[k:]) + count
        if len(candidate) <= width:
            return candidate
    head = max(1, (width - 2) // 2)
    return text[:head] + ".." + text[len(text) - max(1, width - 2 - head):]


@dataclass(frozen=True)
class Style:
    """How text is decorated: colour (ANSI, for a terminal) or not."""

    colour: bool = False

    def bound(self, text: str) -> str:
        if not self.colour:
            return text
        return click.style(text, fg={"memory": "yellow", "compute": "green"}.get(text, None))

    def title(self, text: str) -> str:
        return click.style(text, bold=True) if self.colour else text

    def warning(self, text: str) -> str:
        return click.style(text, fg="yellow") if self.colour else text

    def header(self, text: str) -> str:
        return click.style(text, bold=True) if self.colour else text


#: No decoration (the default of every table).
PLAIN = Style()


def _pad(text: str, width: int, align: str) -> str:
    gap = " " * (width - visible(text))
    return text + gap if align == "left" else gap + text


def _render(columns: Sequence[Column], keep: list[int], rows: Sequence[Sequence[str]], markdown: bool,
            style: Style) -> str:
    headers = [columns[i].header for i in keep]
    body = [[r[i] for i in keep] for r in rows]
    if markdown:
        return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
    widths = [max([visible(h)] + [visible(r[k]) for r in body]) for k, h in enumerate(headers)]
    aligns = [columns[i].align for i in keep]
    sep = " " * GAP
    lines = [sep.join(style.header(_pad(h, w, a)) for h, w, a in zip(headers, widths, aligns, strict=True)),
             sep.join("-" * w for w in widths)]
    lines += [sep.join(_pad(c, w, a) for c, w, a in zip(r, widths, aligns, strict=True)).rstrip() for r in body]
    return "\n".join(line.rstrip() for line in lines)


def _width(text: str) -> int:
    return max((visible(line) for line in text.splitlines()), default=0)


def table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, width: int | None = WIDTH,
          markdown: bool = False, style: Style = PLAIN) -> tuple[str, list[str]]:
    """Rows laid out under `columns`, fitted into `width` (None: no limit, every column).

    Returns (text, headers left out).
    """
    keep = [i for i, c in enumerate(columns) if width is None or not c.wide_only]
    left_out = [c.header for c in columns if width is not None and c.wide_only]
    rows = [[str(cell) for cell in row] for row in rows]
    text = _render(columns, keep, rows, markdown, style)
    if width is None or markdown:
        return text, left_out
    def shortened(limit: int) -> list[list[str]]:
        return [[shorten(r[0], limit)] + r[1:] for r in rows]

    name_width = max([visible(r[0]) for r in rows] + [visible(columns[0].header)]) if rows else 0
    named = keep and keep[0] == 0 and rows
    if named and _width(text) > width:  # first the name column, down to MIN_NAME
        rows = shortened(max(MIN_NAME, name_width - (_width(text) - width)))
        text = _render(columns, keep, rows, markdown, style)
    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop is not None and i in keep)
    while _width(text) > width and droppable:  # then the optional columns, lowest priority first
        _, i = droppable.pop(0)
        keep.remove(i)
        left_out.append(columns[i].header)
        text = _render(columns, keep, rows, markdown, style)
    over = _width(text) - width
    if over > 0 and named:  # and last the name column again
        rows = shortened(max(MIN_NAME // 2, max(visible(r[0]) for r in rows) - over))
        text = _render(columns, keep, rows, markdown, style)
    return text, left_out


#: What each abbreviated header means: the legend line under a table names the ones it shows.
ABBREVIATIONS = {
    "FLOP/B": "arithmetic intensity (FLOP per byte moved)",
    "t bound": "time bound (sum of its ops' roofline bounds)",
    "share": "share of the predicted step",
    "MFU bd": "MFU bound (model FLOPs over peak at the time bound)",
    "x bound": "measured time / time bound",
    "MFU": "model FLOP/s over peak", "MBU": "achieved bandwidth over peak",
    "H": "query heads", "Hkv": "key/value heads", "d": "head dim",
    "cache/tok": "cache bytes per token per layer",
    "KV min": "architecture-minimum KV bytes (cache read once)",
    "KV exec": "KV bytes the code moves", "ampl": "amplification, KV exec / KV min",
    "FLOP model": "model FLOPs (what the architecture needs)", "FLOP exec": "FLOPs executed",
    "I min": "intensity at the minimum KV bytes (FLOP/B)",
    "attn I min": "attention intensity at the minimum KV bytes",
    "attn I ex": "attention intensity as executed",
    "tok/s": "tokens per second", "pred. step": "predicted step (sum of op bounds)",
    "coll.": "collective calls", "wire B": "bytes on the links", "wire B/GPU": "bytes on the links per GPU",
    "mb": "micro-batch", "FLOP/mb": "FLOPs per micro-batch", "bytes/mb": "bytes per micro-batch",
    "t bound/mb": "time bound per micro-batch", "t exp./mb": "expected time per micro-batch",
    "t expected": "expected time (achievable fractions)",
    "B": "batch", "S": "context",
}


def legend(headers: Sequence[str], left_out: Sequence[str] = (), meanings: dict[str, str] | None = None) -> str:
    """'legend: KV min = ...; ampl = ...' for the abbreviated headers among `headers` that are
    shown ('' when none is); `meanings` adds or overrides a table's own."""
    known = {**ABBREVIATIONS, **(meanings or {})}
    parts = [f"{h} = {known[h]}" for h in dict.fromkeys(headers) if h in known and h not in left_out]
    return "legend: " + "; ".join(parts) if parts else ""


def wrap(line: str, width: int | None, indent: str = "  ") -> str:
    """One report line wrapped at `width` (None: as it is), continuation lines indented."""
    if width is None or visible(line) <= width:
        return line
    glued = _NUMBER_SPACE.sub("\0", line)  # a number stays with its unit: '6.91 MB', not '6.91' / 'MB'
    return textwrap.fill(glued, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False).replace("\0", " ")
