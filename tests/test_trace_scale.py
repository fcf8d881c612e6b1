"""Traces at scale: the streamed read gives the same report as reading the file whole on every test
trace, whatever the chunk size; top-level keys in any order; an unknown schemaVersion is one line;
a folder of rank files is read by worker processes and summarised across ranks (straggler per step,
slowest collective call) as computed by hand. Memory figures live in benchmarks/trace_cost.py."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.trace import analyse as analyse_module
from rooflinekit.trace import stream
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.ranks import analyse_ranks
from rooflinekit.trace.reader import TraceError, read_traces
from rooflinekit.trace.render import render

DATA = Path(__file__).parent / "data" / "traces"
HARDWARE = {"sampled_ranks": "A100 SXM 40GB", "mi250_minitoy_train.json.gz": "MI250 GCD"}
TRACES = sorted(p.name for p in DATA.iterdir() if p.name.endswith(".json.gz") or p.is_dir())


def _report(path: Path, monkeypatch, whole: bool) -> dict | str:
    """The JSON report (or the error line) with the reader streaming or reading whole."""
    monkeypatch.setattr(analyse_module, "read_traces", functools.partial(read_traces, whole=whole))
    try:
        return analyse(str(path), HARDWARE.get(path.name)).to_dict()
    except TraceError as exc:
        return str(exc)


@pytest.mark.parametrize("name", TRACES)
def test_streamed_read_reports_as_the_whole_file_read(name, monkeypatch):
    streamed = _report(DATA / name, monkeypatch, whole=False)
    assert streamed == _report(DATA / name, monkeypatch, whole=True)


def _fields(trace) -> tuple:
    return (list(trace.ops), list(trace.runtime), list(trace.gpu), trace.flows, trace.steps, trace.rank,
            trace.devices, trace.other)


def test_tiny_chunks_read_the_same_events(monkeypatch):
    """Every value cut at every place a chunk can end: 7-byte chunks."""
    path = DATA / "mi250_minitoy_train.json.gz"
    (whole,) = read_traces(str(path), whole=True)
    monkeypatch.setattr(stream, "CHUNK", 7)
    (streamed,) = read_traces(str(path))
    assert _fields(streamed) == _fields(whole)
    assert len(whole.gpu) == 16 and whole.steps


def _doc(version=1) -> dict:
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2,
              "args": {"device": 0, "stream": 7, "correlation": 1}}
    return {"traceName": "x", "traceEvents": [kernel], "schemaVersion": version,
            "distributedInfo": {"rank": 3, "world_size": 4}}


def test_top_level_keys_in_any_order(tmp_path):
    """distributedInfo and schemaVersion after traceEvents are read all the same."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc()))
    (trace,) = read_traces(str(path))
    assert (trace.rank, trace.world_size, trace.schema, len(trace.gpu)) == (3, 4, 1, 1)


def test_unknown_schema_version_is_one_line(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_doc(version=99)).encode()))
    result = CliRunner().invoke(cli, ["trace", str(path), "-H", "H100 SXM5"])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "schemaVersion 99 is not one this reader knows" in lines[0]


@pytest.mark.parametrize("text, message", [
    ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "not JSON (Expecting ',' delimiter at line 1)"),
    ('{"traceEvents": [{"ph": "X"},\n{"ph": ', "truncated JSON"),
    ('[1, 2]', "no traceEvents"),
    ('{"traceEvents": 3}', "no traceEvents"),
    ('{"traceEvents": []} x', "not JSON (Extra data at line 1)"),
])
def test_bad_json_is_one_line_when_streamed(tmp_path, text, message):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_traces(str(path))


STEP_1 = [100, 102, 98, 100, 130, 101]  # us, ranks 0-5: rank 4 straggles
STEP_2 = [200, 200, 260, 200, 200, 200]  # rank 2 straggles
SLOW_REDUCE = (3, 1, 70)  # rank 3's second all-reduce (step 2) takes 70 us, every other one 20


def rank_doc(rank: int) -> dict:
    """Two steps; in each a 40 us GEMM at +5 us and an all-reduce at +50 us, on two streams."""
    events, start = [], 0.0
    for number, spans in ((1, STEP_1), (2, STEP_2)):
        span = spans[rank]
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
                       "ts": start, "dur": span})
        reduce_us = SLOW_REDUCE[2] if (rank, number - 1) == SLOW_REDUCE[:2] else 20
        for name, at, dur, lane in (("volta_sgemm_128x64_nn", 5, 40, 7),
                                      ("ncclKernel_AllReduce_RING_LL_Sum_float", 50, reduce_us, 20)):
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": lane, "ts": start + at,
                           "dur": dur, "args": {"device": 0, "stream": lane}})
        start += span
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 6}, "traceEvents": events}


def test_a_folder_of_ranks_is_compared_across_ranks(tmp_path):
    for rank in range(6):
        (tmp_path / f"rank-{rank}.json.gz").write_bytes(gzip.compress(json.dumps(rank_doc(rank)).encode()))
    report = analyse_ranks(str(tmp_path), "H100 SXM5", workers=2)
    a = report.across
    assert (a.ranks, a.workers, len(report.ranks), len(a.steps)) == (6, 2, 6, 12)
    first, second = a.stragglers
    # by hand: step 1's spans sorted 98 100 100 101 102 130: median 100.5, rank 4 slowest
    assert (first.slowest_rank, first.median_s, first.slowest_s, first.fastest_s) == \
        ("rank 4", pytest.approx(100.5e-6), pytest.approx(130e-6), pytest.approx(98e-6))
    assert first.over_median == pytest.approx(29.5 / 100.5)
    assert (second.slowest_rank, second.median_s, second.over_median) == \
        ("rank 2", pytest.approx(200e-6), pytest.approx(0.3))
    slow = a.slowest_calls[0]
    assert (slow.collective, slow.call, slow.rank, slow.ranks) == ("all_reduce", 1, "rank 3", 6)
    assert (slow.time_s, slow.median_s) == (pytest.approx(70e-6), pytest.approx(20e-6))
    # rank 3, step 2: busy = GEMM 40 + all-reduce 70 (no overlap), idle = 200 - 110
    row = next(s for s in a.steps if (s.rank, s.step) == ("rank 3", 2))
    assert (row.busy_s, row.idle_s) == (pytest.approx(110e-6), pytest.approx(90e-6))
    data = report.to_dict()["across"]
    assert data["stragglers"][1]["slowest_rank"] == "rank 2" and data["slowest_calls"][0]["call"] == 1
    text = render(report, "table", 100)
    assert "Across 6 ranks: the straggler of each step" in text
    assert max(len(line) for line in text.splitlines()) <= 100
