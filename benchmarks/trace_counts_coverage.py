"""Coverage: how many of a real trace's CPU ops rooflinekit.trace.counts counts from their shapes.

For each torch.profiler trace (default: /work/shared/traces/*.json.gz) that recorded Input Dims:
the CPU ops with dims, the share of them (and of their distinct names) counted with FLOPs
("counted"), with bytes only ("no_formula"), free (views, metadata), and neither; the same
shares over aten ops alone; the seconds counting took; then the most frequent names not counted,
with the reason given.

    python benchmarks/trace_counts_coverage.py [TRACE ...] [--top 8]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter
from pathlib import Path

from rooflinekit.trace.counts import RecordedCount, RecordedOp, ShapeCounter, recorded_op

TRACES = Path("/work/shared/traces")
STATUSES = ("counted", "no_formula", "free")


def load_ops(path: Path) -> list[RecordedOp]:
    """The CPU ops of a trace that recorded Input Dims."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    ops = (recorded_op(e) for e in events if "Input Dims" in (e.get("args") or {}))
    return [op for op in ops if op is not None]


def shares(pairs: list[tuple[RecordedOp, RecordedCount]]) -> dict[str, str]:
    """Per status of STATUSES and "other": the share of ops, and of distinct names (by their first count)."""
    if not pairs:
        return {s: "-" for s in (*STATUSES, "other")}
    by_op = Counter(c.status if c.status in STATUSES else "other" for _, c in pairs)
    first: dict[str, str] = {}
    for op, c in pairs:
        first.setdefault(op.name, c.status if c.status in STATUSES else "other")
    by_name = Counter(first.values())
    return {s: f"{by_op[s] / len(pairs):6.1%} {by_name[s] / len(first):6.1%}" for s in (*STATUSES, "other")}


def row(label: str, pairs: list[tuple[RecordedOp, RecordedCount]], seconds: float | None) -> str:
    cells = shares(pairs)
    names = len({op.name for op, _ in pairs})
    took = f"{seconds:6.2f}" if seconds is not None else ""
    return (f"{label:<34} {len(pairs):>6} {names:>5}  " + "  ".join(f"{cells[s]:>13}" for s in (*STATUSES, "other"))
            + f"  {took:>6}")


def uncounted(pairs: list[tuple[RecordedOp, RecordedCount]], top: int) -> list[str]:
    """The most frequent (name, status, reason) of ops neither counted nor free."""
    seen = Counter((op.name, c.status, c.reason) for op, c in pairs if c.status not in ("counted", "free"))
    return [f"    {n:>6}  {name[:48]:<48} {status:<11} {reason[:90]}" for (name, status, reason), n
            in seen.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    paths = args.traces or sorted(TRACES.glob("*.json.gz"))
    head = f"{'trace (ops with dims; aten only)':<34} {'ops':>6} {'names':>5}  " + "  ".join(
        f"{s + ' op/name':>13}" for s in (*STATUSES, "other")) + f"  {'s':>6}"
    print(head)
    print("-" * len(head))
    details = []
    for path in paths:
        ops = load_ops(path)
        if not ops:
            print(f"{path.name:<34} no Input Dims")
            continue
        counter = ShapeCounter()  # a fresh memo per trace: the time is the whole trace's
        start = time.perf_counter()
        pairs = [(op, counter.count(op)) for op in ops]
        seconds = time.perf_counter() - start
        print(row(path.name, pairs, seconds))
        print(row("  aten:: only", [(o, c) for o, c in pairs if o.name.startswith("aten::")], None))
        details.append((path.name, uncounted(pairs, args.top)))
    for name, lines in details:
        print(f"\n{name}: most frequent ops neither counted nor free (count, name, status, reason)")
        print("\n".join(lines) or "    none")


if __name__ == "__main__":
    main()
