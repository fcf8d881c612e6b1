"""Reports read back by plot and compare: negative counts, numbers that are not finite (NaN and
Infinity literals, 1e400 overflowing to inf), absurd magnitudes, implausible hardware ceilings,
JSON nested past any report's depth, and a top level that is no object. Each is one line naming
the file and the field, never an OverflowError, a RecursionError or matplotlib's axis-limit error.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

from bad_inputs.case import Case

CAT = "reports"

#: A real profile report (schema 1.0, read and upgraded by plot and compare) as the base of every case.
BASE_FILE = Path(__file__).resolve().parents[1] / "data" / "report-1.0-gqa.json"
BASE = json.loads(BASE_FILE.read_text())
GOOD = json.dumps(BASE)


def changed(edit: Callable[[dict], object]) -> str:
    """The base report with one edit applied, as JSON text."""
    data = copy.deepcopy(BASE)
    edit(data)
    return json.dumps(data)


def literal(key_path: list, text: str) -> str:
    """The base report with the number at `key_path` replaced by raw JSON text (NaN, Infinity, 1e400)."""
    marker = "__RK_LITERAL__"
    data = copy.deepcopy(BASE)
    target = data
    for k in key_path[:-1]:
        target = target[k]
    target[key_path[-1]] = marker
    return json.dumps(data).replace(f'"{marker}"', text)


#: A real sweep report (schema 3.0: a tiny llama_gqa.py, batches 1 and 4 at context 4096, written by
#: `rooflinekit sweep examples/llama_gqa.py -O layers=1 -O hidden=256 -O heads=8 -O kv_heads=2
#: -O head_dim=32 -O intermediate=512 -O vocab=1000 -b 1,4 -s 4096 --no-critical -H H800 -f json`).
SWEEP_FILE = BASE_FILE.parent / "sweep-3.0-gqa.json"


def sweep(edit: Callable[[dict], object] | None = None) -> str:
    """A small sweep report (every field the schema requires), optionally edited."""
    data = json.loads(SWEEP_FILE.read_text())
    if edit:
        edit(data)
    return json.dumps(data)


def plot(name: str, content: str, needles: list[str], **kw) -> Case:
    return Case(f"plot-{name}", CAT, ["plot", "r.json", "-o", "r.png"], ["r.json", *needles],
                files={"r.json": content}, **kw)


def compare(name: str, content: str, needles: list[str], **kw) -> Case:
    """compare A.json (good) with B.json (bad): the line names B."""
    return Case(f"compare-{name}", CAT, ["compare", "a.json", "b.json"], ["b.json", *needles],
                files={"a.json": GOOD, "b.json": content}, **kw)


CASES = [
    plot("negative-total-flops", changed(lambda d: d["totals"].update(flops=-5e30)), ["totals.flops: negative"]),
    compare("negative-module-bytes", changed(lambda d: d["modules"][0].update(bytes=-1.0)),
            ["modules[0].bytes: negative"]),
    plot("negative-op-time", changed(lambda d: d["ops"][3].update(time_bound_s=-1e-6)), ["ops[3].time_bound_s: negative"]),
    compare("negative-peak-in-table", changed(lambda d: d["hardware"]["peaks"].update(fp8=-1.0)),
            ["hardware.peaks.fp8: negative"]),
    plot("overflow-1e400", literal(["totals", "flops"], "1e400"), ["totals.flops: not a finite number (inf)"]),
    compare("overflow-in-an-op", literal(["ops", 0, "bytes_read"], "-1e400"), ["ops[0].bytes_read: not a finite"]),
    plot("nan-literal", literal(["totals", "intensity"], "NaN"), ["totals.intensity: not a finite number (nan)"]),
    compare("infinity-literal-bandwidth", literal(["hardware", "bandwidth"], "Infinity"),
            ["hardware.bandwidth: not a finite"]),
    compare("huge-kv-bytes", changed(lambda d: d["attention_totals"].update(kv_bytes_min=1e300)),
            ["attention_totals.kv_bytes_min: implausibly large"]),
    plot("hardware-peak-absurdly-small", changed(lambda d: d["hardware"].update(peak_flops=1e-300)),
         ["hardware.peak_flops", "implausible"]),
    compare("hardware-bandwidth-absurdly-large", changed(lambda d: d["hardware"].update(bandwidth=1.7e308)),
            ["hardware.bandwidth: implausibly large"]),
    plot("hardware-bandwidth-gb-for-bytes", changed(lambda d: d["hardware"].update(bandwidth=3350.0)),
         ["hardware.bandwidth", "implausible"]),
    plot("deeply-nested-json", "[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
    compare("nested-past-any-report", changed(lambda d: d.update(extra_section=json.loads("[" * 200 + "]" * 200))),
            ["extra_section[0][0]", "nested too deeply"]),
    plot("root-is-array", "[1, 2, 3]", ["top level is a JSON array, not an object"]),
    compare("root-is-string", '"a report"', ["top level is a JSON string"]),
    plot("root-is-null", "null", ["top level is a JSON null"]),
    Case("plot-ops-on-sweep", CAT, ["plot", "s.json", "--plot-ops", "-o", "s.png"],
         ["--plot-ops applies to a profile report, not a sweep"], files={"s.json": sweep()}),
    plot("sweep-negative-intensity", sweep(lambda d: d["points"][1].update(intensity=-3.0)),
         ["points[1].intensity: negative"]),
    plot("sweep-infinite-attention", sweep(lambda d: d["points"][0]["attention"].update(intensity_min=float("inf"))),
         ["points[0].attention.intensity_min: not a finite"]),
]
