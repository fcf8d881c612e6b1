"""`rooflinekit trace`: bad input is one line with a non-zero exit and no output file; a hand-made
trace's busy time is the union of its kernels over streams; kernels join to their launches and
the innermost enclosing op; the hardware comes from deviceProperties."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.core.errors import HardwareError
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.trace.device import match_hardware
from rooflinekit.trace.join import join
from rooflinekit.trace.reader import TraceError, read_traces
from rooflinekit.trace.timeline import Window, busy_in, union_length

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448, "computeMajor": 7,
        "computeMinor": 0, "numSms": 80}


def kernel(name, ts, dur, stream, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr}}


def tiny_trace() -> dict:
    """Two streams with overlapping kernels, their launches inside two nested ops, one step."""
    cpu = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
           {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 1, "dur": 20,
            "args": {"External id": 1}},
           {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 2, "dur": 2,
            "args": {"External id": 2}},
           {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 30, "dur": 5,
            "args": {"External id": 3}}]
    runtime = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t,
                "dur": 1, "args": {"correlation": c}} for t, c in ((3, 11), (5, 12), (31, 13))]
    gpu = [kernel("volta_sgemm_128x64_nn", 10, 30, 7, 11),   # [10, 40)
           kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 20, 40, 8, 12),  # [20, 60), overlaps
           kernel("vectorized_elementwise_kernel<relu>", 70, 10, 7, 13),    # [70, 80)
           kernel("mystery_kernel", 85, 5, 9, 99)]  # no launch in the trace
    return {"deviceProperties": [V100], "traceEvents": cpu + runtime + gpu}


def write(path, doc, gz=True):
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_busy_time_is_the_union_over_streams(tmp_path):
    (trace,) = read_traces(str(write(tmp_path / "t.json.gz", tiny_trace())))
    intervals = [(e.ts, e.end) for e in trace.gpu]
    # by hand: [10, 60) from the two overlapping kernels, [70, 80), [85, 90): 50 + 10 + 5
    assert union_length(intervals) == 65
    busy = busy_in(Window("step 7", 0, 100, 7), intervals)
    assert (busy.busy_us, busy.idle_us, busy.kernel_sum_us) == (65, 35, 85)
    assert busy_in(Window("part", 30, 75), intervals).busy_us == 35  # [30, 60) and [70, 75)


def test_kernels_join_their_launch_and_the_innermost_op(tmp_path):
    (trace,) = read_traces(str(write(tmp_path / "t.json", tiny_trace(), gz=False)))
    joined = {x.event.name: x for x in join(trace)}
    assert joined["volta_sgemm_128x64_nn"].op_names == ("aten::addmm", "aten::linear")
    assert joined["ncclKernel_AllReduce_RING_LL_Sum_float"].op_names == ("aten::linear",)
    assert joined["vectorized_elementwise_kernel<relu>"].op_names == ("aten::relu",)
    assert joined["volta_sgemm_128x64_nn"].via == "correlation"
    assert joined["mystery_kernel"].launch is None and joined["mystery_kernel"].ops == ()


def test_hardware_from_device_properties_and_the_h_override(tmp_path):
    traces = read_traces(str(write(tmp_path / "t.json.gz", tiny_trace())))
    db = hardware_db()
    assert match_hardware(traces, None, db).name == "V100 SXM2 16GB"
    assert match_hardware(traces, "A100 SXM 40GB", db).name == "A100 SXM 40GB"
    doc = tiny_trace()
    doc["deviceProperties"] = [{**V100, "name": "AMD Radeon Graphics", "totalGlobalMem": 68702699520}]
    with pytest.raises(HardwareError, match=r"'AMD Radeon Graphics'.*may be MI250 GCD.*pass -H"):
        match_hardware(read_traces(str(write(tmp_path / "amd.json.gz", doc))), None, db)
    del doc["deviceProperties"]
    with pytest.raises(HardwareError, match="no deviceProperties"):
        match_hardware(read_traces(str(write(tmp_path / "none.json.gz", doc))), None, db)


BAD = {
    "empty.json": (b"", "the file is empty"),
    "cut.json.gz": (gzip.compress(json.dumps(tiny_trace()).encode())[:200], "truncated or corrupt gzip"),
    "cut.json": (json.dumps(tiny_trace()).encode()[:300], "truncated JSON"),
    "other.json": (b'{"hello": [1, 2]}', "no traceEvents"),
    "cpu_only.json": (json.dumps({"traceEvents": tiny_trace()["traceEvents"][:4]}).encode(), "holds no GPU kernels"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line_with_no_output_file(tmp_path, name):
    data, message = BAD[name]
    (tmp_path / name).write_bytes(data)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["trace", str(tmp_path / name), "-o", str(out)])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr
    assert not out.exists()
    with pytest.raises(TraceError, match=message):
        read_traces(str(tmp_path / name))


def test_a_step_the_trace_lacks_is_named(tmp_path):
    path = write(tmp_path / "t.json.gz", tiny_trace())
    result = CliRunner().invoke(cli, ["trace", str(path), "--step", "3"])
    assert result.exit_code != 0 and "no ProfilerStep#3; its steps: 7" in result.stderr
