"""rooflinekit's busy, idle and class times of every test trace with kernels against Holistic Trace
Analysis's temporal breakdown of the same files, HTA (a test dependency) being the independent
second method, run here on the small copies in tests/data/traces.

For the comparison our figures take HTA's definitions, each of which once made them differ:

- the GPU events launched before the last ProfilerStep starts (HTA leaves the last step out; with
  fewer than two steps it keeps everything);
- each event's start rounded up and its end rounded down to whole microseconds (HTA does so when a
  trace has nanosecond fractions; it dropped up to 2 us per event of v100_no_shapes and the MI250
  trace, 8% of their compute time, when we truncated start and duration instead);
- every event with a `stream` argument is a GPU event, also the CPU op a Triton launch records with
  `stream: 0` (HTA's 94 us span of the Triton trace is that op's, not the 1.76 us kernel's);
- the span from the first start to the last end, idle = span - union over all streams, compute =
  the union of the events that are neither communication (nccl kernels) nor memcpy/memset."""

from __future__ import annotations

import gzip
import json
import logging
import math
import shutil
from pathlib import Path

import pytest

from rooflinekit.trace.classes import classify
from rooflinekit.trace.join import join
from rooflinekit.trace.reader import read_traces
from rooflinekit.trace.timeline import SpanBreakdown, span_breakdown

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
GROUP = {"communication": "COMMUNICATION", "memcpy": "MEMORY", "memset": "MEMORY"}
#: Every test trace holding kernels (a100_cupti_counters holds none), one file per rank.
FILES = ["v100_training_steps_1012_1013.json.gz", "v100_no_shapes_steps_101_102.json.gz",
         "sampled_ranks/sampled_rank-0.json.gz", "sampled_ranks/sampled_rank-1.json.gz",
         "mi250_minitoy_train.json.gz", "a100_triton_example.json.gz"]


def inward(ts: float, dur: float) -> tuple[int, int]:
    """An event's start rounded up and end rounded down to whole microseconds, as HTA reads them."""
    return math.ceil(ts), math.floor(ts + dur)


def _streamed_cpu_ops(file: str, last: float | None) -> list[tuple[int, int, str]]:
    """CPU ops that record a `stream` argument (Triton launches), which HTA takes for GPU events
    (read from the file itself: the reader keeps only the arguments the report reads)."""
    events = json.loads(gzip.decompress((TRACES / file).read_bytes()))["traceEvents"]
    return [(*inward(e["ts"], e.get("dur", 0)), "COMPUTATION") for e in events
            if e.get("cat") == "cpu_op" and "stream" in (e.get("args") or {}) and (last is None or e["ts"] < last)]


def hta_view(file: str) -> tuple[int | None, SpanBreakdown]:
    """Our breakdown of one rank file under HTA's definitions."""
    (trace,) = read_traces(str(TRACES / file))
    last = max(s.ts for s in trace.steps) if len(trace.steps) >= 2 else None
    events = [(*inward(x.event.ts, x.event.dur), GROUP.get(classify(x.event.name, x.op_names), "COMPUTATION"))
              for x in join(trace) if last is None or (x.launch is not None and x.launch.ts < last)]
    return trace.rank, span_breakdown(events + _streamed_cpu_ops(file, last))


def hta_temporal(file: str, folder: Path) -> dict:
    """HTA's temporal breakdown of one rank file, read alone from a folder of its own."""
    analysis_mod = pytest.importorskip("hta.trace_analysis")
    shutil.copy(TRACES / file, folder / Path(file).name)
    logging.disable(logging.WARNING)
    try:
        rows = analysis_mod.TraceAnalysis(trace_dir=str(folder)).get_temporal_breakdown(visualize=False)
    finally:
        logging.disable(logging.NOTSET)
    return rows.to_dict("records")[0]


@pytest.mark.parametrize("file", FILES)
def test_span_idle_and_compute_time_agree_with_hta_within_1_percent(file, tmp_path):
    theirs = hta_temporal(file, tmp_path)
    _, ours = hta_view(file)
    compute = ours.by_group_us.get("COMPUTATION", 0)
    assert ours.span_us == pytest.approx(theirs["kernel_time(us)"], rel=0.01)
    assert ours.idle_us == pytest.approx(theirs["idle_time(us)"], rel=0.01, abs=1)
    assert compute == pytest.approx(theirs["compute_time(us)"], rel=0.01)
    non_compute = ours.span_us - ours.idle_us - compute
    assert non_compute == pytest.approx(theirs["non_compute_time(us)"], rel=0.01, abs=1)


def test_rounding_inward_is_what_closed_the_gap_on_nanosecond_traces():
    """Truncating start and duration (our earlier reading) leaves MI250's compute 8% above HTA's."""
    (trace,) = read_traces(str(TRACES / "mi250_minitoy_train.json.gz"))
    fractional = [e for e in trace.gpu if e.ts != int(e.ts) or e.dur != int(e.dur)]
    assert fractional, "the MI250 trace has nanosecond fractions"
    truncated = sum(int(e.dur) for e in trace.gpu if not e.kind.startswith("mem"))
    inward_sum = sum(max(0, b - a) for a, b in (inward(e.ts, e.dur) for e in trace.gpu
                                                 if not e.kind.startswith("mem")))
    assert truncated > inward_sum


def test_communication_time_agrees_with_the_stored_hta_kernel_types():
    """HTA's kernel-type breakdown (benchmarks/trace_vs_hta.json): communication not overlapped."""
    stored = json.loads((ROOT / "benchmarks" / "trace_vs_hta.json").read_text())["cases"]
    _, ours = hta_view(FILES[0])
    kinds = stored["v100_training_steps_1012_1013"]["kernel_types_all_ranks"]
    comm = sum(v for k, v in kinds.items() if "COMMUNICATION" in k)
    assert ours.by_group_us["COMMUNICATION"] == pytest.approx(comm, rel=0.01)
