"""The across-ranks section of a folder's trace report as text or Markdown (fits 100 columns):
each step's straggler, the slowest collective calls, and each rank's busy and idle time per step."""

from __future__ import annotations

from rooflinekit.core.units import seconds, share
from rooflinekit.outputs.tables import Column, table, wrap
from rooflinekit.trace.report import AcrossRanks

#: Ranks whose full per-rank tables the text report prints; beyond, the JSON report holds them.
FULL_RANKS = 8


def _put(out: list[str], title: str, columns, rows, width: int | None, markdown: bool) -> None:
    if rows:
        out.append(f"\n## {title}\n" if markdown else f"\n{title}")
        out.append(table(columns, rows, width=width, markdown=markdown)[0])


def render_across(a: AcrossRanks, width: int | None, markdown: bool) -> list[str]:
    """Stragglers per step, slowest collective calls, then each rank's steps."""
    out: list[str] = []
    _put(out, f"Across {a.ranks} ranks: the straggler of each step (read by {a.workers} worker processes)",
         [Column("step"), Column("ranks"), Column("median"), Column("fastest"), Column("slowest rank", "left"),
          Column("slowest"), Column("over median")],
         [[str(s.step), str(s.ranks), seconds(s.median_s), seconds(s.fastest_s), s.slowest_rank,
           seconds(s.slowest_s), share(s.over_median)] for s in a.stragglers], width, markdown)
    _put(out, "Slowest collective calls (the Nth call of each collective on every rank)",
         [Column("collective", "left"), Column("call"), Column("slowest rank", "left"), Column("time"),
          Column("median"), Column("ranks")],
         [[c.collective, str(c.call), c.rank, seconds(c.time_s), seconds(c.median_s), str(c.ranks)]
          for c in a.slowest_calls], width, markdown)
    _put(out, "Busy and idle GPU time per rank and step",
         [Column("rank", "left"), Column("step"), Column("span"), Column("busy"), Column("idle"), Column("busy %")],
         [[s.rank, str(s.step), seconds(s.span_s), seconds(s.busy_s), seconds(s.idle_s),
           share(s.busy_s / s.span_s) if s.span_s else "-"] for s in a.steps], width, markdown)
    out += [wrap(f"note: left out {s}", width) for s in a.skipped]
    return out
