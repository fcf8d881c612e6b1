"""Calibration: rates recompute from bytes/FLOPs and time, entries load and profile accepts them."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from rooflinekit.analyses import calibrate as cal_mod
from rooflinekit.analyses.calibrate import (
    Calibration,
    Timing,
    measure_bandwidth,
    measure_matmul,
    to_toml,
)
from rooflinekit.stages.hardware import load_file
from tests.conftest import EXAMPLES

GQA = EXAMPLES / "llama_gqa.py"

pytestmark = pytest.mark.timing  # calibrate times copies and products: under xdist, on one worker

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINEKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _fixed_timer(seconds_per_call):
    def timer(device):
        def run(fn, iters):
            for _ in range(iters):
                fn()
            return seconds_per_call * iters

        return run

    return timer


def test_bandwidth_counts_read_and_write_bytes(monkeypatch):
    monkeypatch.setattr(cal_mod, "_timer", _fixed_timer(0.01))
    size = 4_000_000  # bytes: 1e6 float32 elements
    best, median, timing = measure_bandwidth("cpu", size, trials=2, iters=1)
    assert timing.best_s == pytest.approx(0.01)
    assert best == pytest.approx(2 * size / 0.01)  # one read + one write of the buffer per copy
    assert median == pytest.approx(best)


def test_matmul_rate_is_2n3_over_time(monkeypatch):
    monkeypatch.setattr(cal_mod, "_timer", _fixed_timer(0.5))
    best, median, n, timing = measure_matmul("cpu", "fp32", n=64, trials=2)
    assert n == 64 and timing.iters == 1
    assert best == pytest.approx(2 * 64**3 / 0.5)


def _calibration(**kw):
    base = dict(device="cuda", device_name="NVIDIA H800", date="2026-01-02", bandwidth=3.0e12,
                bandwidth_median=2.9e12, copy_bytes=1_000_000_000, copy=Timing(0.001, 0.0011, 5, 10),
                peaks={"bf16": 7.0e14, "fp32": 5.0e13}, peaks_median={"bf16": 6.9e14, "fp32": 4.9e13},
                matmul_n={"bf16": 8192, "fp32": 4096},
                matmul={"bf16": Timing(0.0015, 0.0016, 3, 30), "fp32": Timing(0.003, 0.003, 3, 15)},
                memory_bytes=80e9, datasheet="H800 SXM5")
    base.update(kw)
    return Calibration(**base)


def test_toml_round_trip_exact_numbers_sources_and_provenance(tmp_path):
    text = to_toml(_calibration(), "H800 SXM5 calibrated")
    data = tomllib.loads(text)
    assert data["calibrated"] is True and data["calibrated_from"] == "H800 SXM5"
    assert data["memory_bandwidth"] == 3.0e12 and data["peak_flops"] == {"bf16": 7.0e14, "fp32": 5.0e13}
    assert data["aliases"] == []  # never shadows the datasheet entry's NVML names
    # each number's source, written out from the calibration above (1e9 B = 1000 MB, 5 trials x 10
    # copies, median 2.9e12 B/s; bf16 n = 8192, 3 trials x 30, median 6.9e14 FLOP/s; ...)
    sources = data["sources"]
    assert sources["memory_bandwidth"] == (
        "measured by rooflinekit calibrate on 2026-01-02, device-to-device copy_ of a 1000 MB buffer, "
        "read + write bytes counted (2 x 1000 MB per copy), best of 5 trials x 10 copies (median 2.9e+12 B/s)")
    assert sources["peak_flops.bf16"] == (
        "measured by rooflinekit calibrate on 2026-01-02, torch.mm of two 8192x8192 bf16 matrices "
        "(2*n^3 FLOPs), best of 3 trials x 30 (median 6.9e+14 FLOP/s)")
    assert sources["peak_flops.fp32"] == (
        "measured by rooflinekit calibrate on 2026-01-02, torch.mm of two 4096x4096 fp32 matrices "
        "(2*n^3 FLOPs), best of 3 trials x 15 (median 4.9e+13 FLOP/s)")
    assert sources["memory_bytes"] == "reported by torch.cuda.get_device_properties().total_memory on 2026-01-02"
    assert set(sources) == {"memory_bandwidth", "peak_flops.bf16", "peak_flops.fp32", "memory_bytes"}
    path = tmp_path / "x.toml"
    path.write_text(text)
    spec = load_file(path)
    assert spec.calibrated and spec.name == "H800 SXM5 calibrated"
    assert spec.ridge("bf16") == pytest.approx(7.0e14 / 3.0e12)


@pytest.mark.slow
def test_cli_calibrate_cpu_writes_an_entry_that_profile_accepts(invoke, home, tmp_path):
    result = invoke("calibrate", "--device", "cpu", "--size-mb", "16", "--dtype", "fp32", "-f", "json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    path = home / "hardware" / "cpu_calibrated.toml"
    assert info["path"] == str(path) and path.exists()
    spec = load_file(path)
    assert spec.calibrated and spec.name == "CPU calibrated"
    assert spec.memory_bandwidth == pytest.approx(info["memory_bandwidth"]) and spec.memory_bandwidth > 1e8
    assert set(spec.peak_flops) == {"fp32"} and spec.peak_flops["fp32"] > 1e8
    assert "measured by rooflinekit calibrate on" in spec.sources["memory_bandwidth"]
    assert "calibrated_from" not in tomllib.loads(path.read_text())  # no datasheet for a CPU

    out = tmp_path / "r.json"
    result = invoke("profile", GQA, "-O", "layers=1", "--context", "128", "--dtype", "fp32",
                    "--hardware", "cpu calibrated", "--compare-hardware", "H800", "-f", "json", "-o", out)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["hardware"]["name"] == "CPU calibrated" and report["hardware"]["calibrated"] is True
    assert report["hardware"]["bandwidth"] == spec.memory_bandwidth
    t = report["totals"]
    assert t["time_bound_s"] == pytest.approx(max(t["flops"] / spec.peak_flops["fp32"], t["bytes"] / spec.memory_bandwidth))
    assert report["totals"]["placement_alt"]["hardware"] == "H800 SXM5"
    # the listing shows it too
    listed = invoke("hardware", "list")
    assert "CPU calibrated" in listed.stdout


def _hint(stdout: str) -> list[str]:
    """The --hardware argument of the command's last line, split as a shell would."""
    last = stdout.strip().splitlines()[-1]
    prefix = "use it with: rooflinekit profile MODEL --hardware "
    assert last.startswith(prefix), stdout
    return shlex.split(last[len(prefix):])


def test_cli_calibrate_output_path_and_name(invoke, home, tmp_path):
    folder = tmp_path / "my entries"  # a space: the printed argument must survive the shell
    folder.mkdir()
    target = folder / "mine.toml"
    result = invoke("calibrate", "--device", "cpu", "--size-mb", "8", "--dtype", "fp32", "--name", "box",
                    "--output", target)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {target}" in result.stdout and load_file(target).name == "box"
    assert not (home / "hardware").exists()
    # outside the user folder the name 'box' finds nothing: the hint is the path, and it works
    assert _hint(result.stdout) == [str(target)]
    assert "unknown hardware 'box'" in invoke("profile", GQA, "-O", "layers=1", "--hardware", "box").stderr
    shown = invoke("profile", GQA, "-O", "layers=1", "--dtype", "fp32", "--hardware", str(target), "-f", "json")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["hardware"]["name"] == "box"


def test_cli_calibrate_into_the_user_folder_hints_the_name(invoke, home):
    result = invoke("calibrate", "--device", "cpu", "--size-mb", "8", "--dtype", "fp32", "--name", "my box")
    assert result.exit_code == 0, result.stderr
    assert (home / "hardware" / "my_box.toml").exists()
    assert _hint(result.stdout) == ["my box"]
    shown = invoke("profile", GQA, "-O", "layers=1", "--dtype", "fp32", "--hardware", "my box", "-f", "json")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["hardware"]["name"] == "my box"


@pytest.mark.parametrize("args,needle", [
    (["--device", "tpu"], "unknown device"),
    (["--device", "cpu", "--dtype", "tf32"], "tf32"),
    (["--device", "cpu", "--size-mb", "nan"], "--size-mb must be a finite number of MB, got nan"),
    (["--device", "cpu", "--size-mb", "inf"], "--size-mb must be a finite number of MB, got inf"),
    (["--device", "cpu", "-o", "c.txt"], "the entry must be written to a .toml file"),
])
def test_cli_calibrate_bad_input_is_one_line(invoke, home, args, needle):
    result = invoke("calibrate", *args)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("value", ["-1", "0"])
def test_cli_calibrate_size_out_of_range_is_a_usage_error(invoke, home, value):
    result = invoke("calibrate", "--device", "cpu", "--size-mb", value)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rooflinekit: error: "), result.stderr
    assert "--size-mb" in lines[0] and "x>0" in lines[0]


def test_calibrate_function_checks_size_and_output(tmp_path):
    from rooflinekit.core.errors import UserError

    for bad in (float("nan"), float("inf"), -1.0, 0.0):
        with pytest.raises(UserError, match="--size-mb"):
            cal_mod.calibrate("cpu", size_mb=bad)
    with pytest.raises(UserError, match=r"\.toml"):
        cal_mod.save(_calibration(), "x", tmp_path / "x.txt")
    assert not (tmp_path / "x.txt").exists()


def test_cli_calibrate_cuda_without_cuda_is_one_line(invoke, home):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = invoke("calibrate", "--device", "cuda")
    assert result.exit_code != 0
    assert result.stderr.strip().count("\n") == 0 and "no CUDA device" in result.stderr
