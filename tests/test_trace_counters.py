"""CUPTI counter ranges: each kernel's measured FLOPs per precision (add + mul + 2 x fma SASS
thread instructions), summed by kernel name, worked out here from the trace's own JSON."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.counters import range_flops
from tests.conftest import ROOT

TRACE = ROOT / "tests" / "data" / "traces" / "a100_cupti_counters.json.gz"
M = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"


def test_flops_per_precision_of_one_range():
    counters = {M.format("ffma"): 10, M.format("fadd"): 3, M.format("fmul"): 4, M.format("hfma"): 7,
                M.format("dadd"): 0, M.format("dmul"): 0, M.format("dfma"): 0}
    assert range_flops(counters) == {"fp64": 0.0, "fp32": 2 * 10 + 3 + 4, "fp16": 2 * 7}
    assert range_flops({}) == {"fp64": None, "fp32": None, "fp16": None}


def test_a_counters_only_trace_reports_each_kernels_measured_flops():
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    by_name: dict[str, float] = defaultdict(float)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_profiler_range":
            a = e["args"]
            by_name[e["name"]] += 2 * a[M.format("ffma")] + a[M.format("fadd")] + a[M.format("fmul")]
    (rank,) = analyse(str(TRACE), top=None).ranks
    assert rank.timing == "counters" and rank.total.busy_s == 0
    assert {c.name: c.fp32 for c in rank.counters} == pytest.approx(dict(by_name))
    assert sum(c.ranges for c in rank.counters) == sum(1 for e in doc["traceEvents"]
                                                        if e.get("cat") == "cuda_profiler_range")
    assert all(c.counted is None for c in rank.counters)  # no kernel activity to join


def test_the_command_runs_and_says_what_the_counters_miss():
    result = CliRunner().invoke(cli, ["trace", str(TRACE)])
    assert result.exit_code == 0, result.output
    assert "CUPTI counters" in result.output and "tensor-core" in result.output
    assert "no kernel activity" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100


def test_a_trace_without_shapes_says_what_to_record_and_still_times_the_classes():
    result = CliRunner().invoke(cli, ["trace", str(ROOT / "tests" / "data" / "traces" /
                                                   "v100_no_shapes_steps_101_102.json.gz")])
    assert result.exit_code == 0, result.output
    assert "record_shapes=True" in result.output and "GPU time by kernel class" in result.output
    (rank,) = analyse(str(ROOT / "tests" / "data" / "traces" / "v100_no_shapes_steps_101_102.json.gz")).ranks
    assert rank.counted_coverage == 0 and sum(c.time_s for c in rank.total.by_class) > 0
