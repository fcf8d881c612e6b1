"""Cut a short excerpt of a torch.profiler trace: the events (CPU, runtime, GPU, flows) that start
inside the chosen ProfilerStep windows, with the trace's metadata and deviceProperties.

    python tests/data/traces/cut_steps.py SOURCE.json.gz OUT.json.gz FIRST LAST
"""

from __future__ import annotations

import gzip
import json
import sys


def cut(source: str, out: str, first: int, last: int) -> None:
    """Write the events of ProfilerStep#first..#last (by start time) of `source` to `out`."""
    with gzip.open(source, "rt") as fh:
        doc = json.load(fh)
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation" and first <= int(e["name"].split("#")[1]) <= last]
    start = min(e["ts"] for e in steps)
    end = max(e["ts"] + e["dur"] for e in steps)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("ph") == "M" or (isinstance(e.get("ts"), (int, float)) and start <= e["ts"] <= end)]
    with gzip.open(out, "wt", compresslevel=9) as fh:
        json.dump(doc, fh, separators=(",", ":"))


if __name__ == "__main__":
    cut(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
