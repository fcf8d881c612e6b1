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
from rooflinekit.trace.reader import TraceError, read_traces

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
