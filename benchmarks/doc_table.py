"""Put a generated table between its markers in a doc page (the benchmarks' shared helper)."""

from __future__ import annotations

from pathlib import Path


def put_between(doc: Path, begin: str, end: str, table: str) -> bool:
    """Replace what stands between `begin` and `end` in `doc` with `table`; False (the page left as
    it was) when either marker is missing."""
    text = doc.read_text()
    if begin not in text or end not in text:
        return False
    head, rest = text.split(begin, 1)
    doc.write_text(head + begin + "\n" + table + "\n" + end + rest.split(end, 1)[1])
    return True
