"""`rooflinekit trace --profile REPORT`: the model's FLOPs give each step an MFU, and kernels no
aten op launched take the profile's predicted kernels' work, matched in order within each class
(only where the counts agree)."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.predicted import PREDICTED, Prediction

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448, "computeMajor": 7,
        "computeMinor": 0, "numSms": 80}
FP32_PEAK = 15.7e12


def replayed(tmp_path, gemms: int = 2):
    """One step of `gemms` GEMM kernels and one element-wise kernel, none with a launch in the trace
    (a CUDA-graph replay's kernels), each 100 us, back to back on one stream."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0,
               "dur": 1000}]
    names = [f"sm90_xmma_gemm_{k}" for k in range(gemms)] + ["vectorized_elementwise_kernel<add>"]
    for k, name in enumerate(names):
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10 + 100 * k, "dur": 100,
                       "args": {"device": 0, "stream": 7}})
    path = tmp_path / "replay.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"deviceProperties": [V100], "traceEvents": events}).encode()))
    return path


PREDICTION = Prediction("p.json", 6.28e9, "fp32", {"gemm": [(1.0e9, 4.0e6, "aten.mm"), (3.0e9, 8.0e6, "aten.addmm")],
                                                    "elementwise": [(0.0, 2.0e6, "aten.add")]})


def test_unplaced_kernels_take_the_predicted_work_in_order(tmp_path):
    (rank,) = analyse(str(replayed(tmp_path)), prediction=PREDICTION, top=None).ranks
    kernels = {r.name: r.rates for r in rank.kernels}
    assert kernels["sm90_xmma_gemm_0"].flops == 1.0e9 and kernels["sm90_xmma_gemm_1"].flops == 3.0e9
    assert kernels["vectorized_elementwise_kernel<add>"].bytes == 2.0e6
    assert kernels["sm90_xmma_gemm_1"].flops_per_s == pytest.approx(3.0e9 / 100e-6)
    # MFU: the model's FLOPs over (busy time x the fp32 peak); busy = 300 us of kernels back to back
    assert rank.total.mfu == pytest.approx(6.28e9 / (300e-6 * FP32_PEAK))


def test_counts_that_differ_match_nothing_and_say_so(tmp_path):
    (rank,) = analyse(str(replayed(tmp_path, gemms=3)), prediction=PREDICTION, top=None).ranks
    assert all(r.rates.flops == 0 for r in rank.kernels if "gemm" in r.name)
    assert any("3 gemm kernels without a launching op against 2 predicted" in n for n in rank.notes)
    assert {r.status for r in rank.unplaced} != {PREDICTED}


def test_cli_takes_a_profile_report_and_refuses_another_kind(tmp_path):
    trace = replayed(tmp_path)
    profile = tmp_path / "p.json"
    result = CliRunner().invoke(cli, ["profile", "examples/llama_gqa.py", "-O", "layers=1", "--phase", "decode",
                                      "-b", "1", "-s", "64", "-H", "V100 SXM2 16GB", "--dtype", "fp32", "-f", "json",
                                      "-o", str(profile)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["trace", str(trace), "--profile", str(profile)])
    assert result.exit_code == 0, result.output
    assert "MFU" in result.output and "--profile" in result.output
    bad = CliRunner().invoke(cli, ["trace", str(trace), "--profile", str(trace)])
    assert bad.exit_code != 0 and "Traceback" not in bad.output
