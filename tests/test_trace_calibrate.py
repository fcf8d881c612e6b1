"""`rooflinekit calibrate --trace`: a trace's achieved fractions as an efficiency source.

- On a hand-made trace, each class's fraction is its kernels' FLOPs at the peak (or bytes at HBM
  bandwidth) over their measured time, worked out here from the shapes and durations.
- On four steps of a real V100 training trace, calibrating from three predicts the fourth's GEMM
  time within 10%.
- The source loads as the expected time's table, and a hardware entry naming it prices `profile`
  with it (no p10-p90 then: the residuals are the committed table's).
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.core.errors import UserError
from rooflinekit.stages.efficiency_table import load_table, table_for
from rooflinekit.stages.hardware import HardwareFileError, hardware_db, load_file
from rooflinekit.trace.calibrate import (
    calibrate_steps,
    efficiency_toml,
    held_out_check,
    load_shapes,
    read_steps,
)
from tests.conftest import ROOT

TRACES = ROOT / "tests" / "data" / "traces"
V100_FOUR_STEPS = TRACES / "v100_training_steps_1011_1014.json.gz"
V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448, "computeMajor": 7,
        "computeMinor": 0, "numSms": 80}
FP32_PEAK, HBM = 15.7e12, 900e9  # the V100 SXM2 16GB entry's (datasheet) figures


def _op(name, ts, ext, dims, types):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5,
            "args": {"External id": ext, "Input Dims": dims, "Input type": types}}


def _launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
            "args": {"correlation": corr}}


def _kernel(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def hand_made(tmp_path):
    """Two steps, each one fp32 mm [256 x 512] @ [512 x 1024] in 100 us and one add of two
    [1024 x 1024] fp32 tensors in 20 us."""
    events = []
    for k, t0 in enumerate((0, 1000)):
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 1}", "pid": 1, "tid": 1,
                    "ts": t0, "dur": 900},
                   _op("aten::mm", t0 + 10, 10 * k + 1, [[256, 512], [512, 1024]], ["float", "float"]), _launch(t0 + 11, 10 * k + 1),
                   _kernel("volta_sgemm_128x64_nn", t0 + 20, 100, 10 * k + 1),
                   _op("aten::add", t0 + 200, 10 * k + 2, [[1024, 1024], [1024, 1024], []], ["float", "float", "Scalar"]),
                   _launch(t0 + 201, 10 * k + 2),
                   _kernel("vectorized_elementwise_kernel<add>", t0 + 210, 20, 10 * k + 2)]
    path = tmp_path / "hand.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"deviceProperties": [V100], "traceEvents": events}).encode()))
    return path


def test_each_fraction_is_ideal_time_over_measured_time(tmp_path):
    cal = calibrate_steps(read_steps(str(hand_made(tmp_path))), (1,))
    gemm = cal.samples[("gemm_large", "fp32")]  # 256 rows: past the 128-row small-GEMM limit
    assert gemm.kernels == 1
    assert gemm.fraction == pytest.approx(2 * 256 * 512 * 1024 / FP32_PEAK / 100e-6, rel=1e-9)
    add = cal.samples[("elementwise", "bandwidth")]  # two inputs read, one output written
    assert add.fraction == pytest.approx(3 * 1024 * 1024 * 4 / HBM / 20e-6, rel=1e-9)
    assert set(cal.samples) == {("gemm_large", "fp32"), ("elementwise", "bandwidth")}


def test_the_source_loads_and_prices_the_other_step_back(tmp_path):
    cal = calibrate_steps(read_steps(str(hand_made(tmp_path))), (1,))
    source = tmp_path / "eff.toml"
    source.write_text(efficiency_toml(cal))
    table = load_table(str(source))
    assert table.classes["gemm_large"].compute_for("fp32") == pytest.approx(cal.samples[("gemm_large", "fp32")].fraction,
                                                                           rel=1e-5)
    assert table.classes["gemm_large"].compute == load_table().classes["gemm_large"].compute  # not measured: kept
    # the launches are not measured either: the committed table's three, the host's issue time included
    # (a file without it would add the 0.9 us queued launch per kernel with no host floor)
    committed = load_table()
    assert (table.launch_decode_s, table.launch_prefill_s, table.launch_host_prefill_s) == \
        (committed.launch_decode_s, committed.launch_prefill_s, committed.launch_host_prefill_s) == (0.5e-6, 0.9e-6, 5e-6)
    assert "not measured" in table.sources["attention_decode.bandwidth"]
    checks, others = held_out_check(cal, source, read_steps(str(hand_made(tmp_path))))
    assert others == (2,)
    for check in checks:  # step 2 runs the same kernels in the same times
        assert check.ratio == pytest.approx(1.0, rel=1e-4)
    assert len(load_shapes(source)) == 2


def test_three_steps_of_a_v100_trace_predict_the_fourth_gemm_time():
    read = read_steps(str(V100_FOUR_STEPS))
    assert tuple(read.by_step) == (1011, 1012, 1013, 1014)
    cal = calibrate_steps(read, (1011, 1012, 1013))
    checks = {c.klass: c for c in calibrate_and_check(cal, read)}
    gemm = [checks[k] for k in ("gemm_large", "gemm_small")]
    expected, measured = sum(c.expected_s for c in gemm), sum(c.measured_s for c in gemm)
    assert expected / measured == pytest.approx(1.0, abs=0.10)
    for c in gemm:
        assert c.ratio == pytest.approx(1.0, abs=0.10), c


def calibrate_and_check(cal, read):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "eff.toml"
        source.write_text(efficiency_toml(cal))
        checks, others = held_out_check(cal, source, read)
    assert others == (1014,)
    return checks


def test_a_hardware_entry_naming_the_source_prices_with_it(tmp_path):
    cal = calibrate_steps(read_steps(str(hand_made(tmp_path))), (1,))
    (tmp_path / "eff.toml").write_text(efficiency_toml(cal))
    sheet = hardware_db().get("V100 SXM2 16GB")
    text = open(sheet.path).read().replace('name = "V100 SXM2 16GB"', 'name = "V100 traced"\nefficiency = "eff.toml"')
    entry = tmp_path / "traced.toml"
    entry.write_text("\n".join(line for line in text.splitlines() if not line.startswith("aliases")))
    hw = load_file(entry)
    assert table_for(hw).classes["gemm_large"].compute_for("fp32") == pytest.approx(
        cal.samples[("gemm_large", "fp32")].fraction, rel=1e-5)
    missing = tmp_path / "missing.toml"
    missing.write_text(entry.read_text().replace('efficiency = "eff.toml"', 'efficiency = "nowhere.toml"'))
    with pytest.raises(HardwareFileError, match="nowhere.toml"):
        load_file(missing)


def test_cli_writes_the_source_and_checks_it(tmp_path):
    out = tmp_path / "eff.toml"
    result = CliRunner().invoke(cli, ["calibrate", "--trace", str(hand_made(tmp_path)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "check on the other steps (2)" in result.output and out.is_file()
    assert max(len(line) for line in result.output.splitlines()) <= 100


@pytest.mark.parametrize("args, words", [
    (["--steps", "9"], "no such ProfilerStep"),
    (["--steps", "x"], "profiler step numbers"),
    (["--device", "cpu"], "nothing is measured here"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, words):
    out = tmp_path / "eff.toml"
    result = CliRunner().invoke(cli, ["calibrate", "--trace", str(hand_made(tmp_path)), "-o", str(out), *args])
    assert result.exit_code != 0 and words in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_steps_without_a_trace_are_refused():
    result = CliRunner().invoke(cli, ["calibrate", "--steps", "1"])
    assert result.exit_code != 0 and "goes with --trace" in result.output


def test_a_bad_source_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("version = 1\n")
    with pytest.raises(UserError, match="efficiency source"):
        load_table(str(bad))
