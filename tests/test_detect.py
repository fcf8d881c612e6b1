"""GPU detection through NVML (faked here), matching to the database, and clear failures without one."""

from __future__ import annotations

import json
import types

import pytest
import torch

from rooflinekit.core.errors import UserError
from rooflinekit.stages.detect import auto_hardware, detect, implied_bandwidth
from rooflinekit.stages.hardware import hardware_db
from tests.conftest import EXAMPLES

GQA = EXAMPLES / "llama_gqa.py"


class NVMLError(Exception):
    pass


def fake_nvml(name="NVIDIA H800", count=1, mem_clock=2619, bus=5120, sm_clock=1980, fail=None):
    """A stand-in for the pynvml module with one kind of GPU."""
    m = types.SimpleNamespace(NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVMLError=NVMLError)

    def init():
        if fail:
            raise NVMLError(fail)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlSystemGetDriverVersion = lambda: "550.54"
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: name
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=85899345920)
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: sm_clock if kind == 1 else mem_clock
    m.nvmlDeviceGetMemoryBusWidth = lambda h: bus
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    return m


def test_implied_bandwidth_is_ddr_clock_times_bus_width():
    # H100/H800 SXM5: 2619 MHz HBM3 clock, 5120-bit bus -> 3.35 TB/s (the datasheet figure)
    assert implied_bandwidth(2619, 5120) == pytest.approx(2 * 2619e6 * 5120 / 8)
    assert implied_bandwidth(2619, 5120) == pytest.approx(3.35e12, rel=0.001)
    assert implied_bandwidth(None, 5120) is None and implied_bandwidth(2619, 0) is None


@pytest.mark.parametrize("name,entry", [
    ("NVIDIA H800", "H800 SXM5"),
    (b"NVIDIA H100 80GB HBM3", "H100 SXM5"),  # old nvidia-ml-py returns bytes
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA L4", None),
])
def test_detect_reads_nvml_and_matches_by_alias(name, entry):
    gpus = detect(hardware_db(), fake_nvml(name=name, count=2))
    assert len(gpus) == 2
    g = gpus[0]
    assert g.name == (name.decode() if isinstance(name, bytes) else name)
    assert g.entry == entry
    assert g.memory_bytes == 85899345920 and g.sm_clock_max_mhz == 1980 and g.mem_clock_max_mhz == 2619
    assert g.bus_width_bits == 5120 and g.compute_capability == "9.0" and g.driver == "550.54"
    assert g.bandwidth == pytest.approx(2 * 2619e6 * 5120 / 8)
    assert g.to_dict()["bandwidth"] == g.bandwidth


def test_no_driver_is_one_clear_user_error():
    with pytest.raises(UserError) as err:
        detect(hardware_db(), fake_nvml(fail="NVML Shared Library Not Found"))
    text = str(err.value)
    assert text == ("no NVIDIA GPU or driver found (NVML: NVML Shared Library Not Found); "
                    "reports use the default hardware H800 SXM5")
    with pytest.raises(UserError, match="0 devices"):
        detect(hardware_db(), fake_nvml(count=0))


def test_auto_hardware_picks_the_detected_entry_else_the_default():
    db = hardware_db()
    spec, note = auto_hardware(db, "H800 SXM5", fake_nvml(name="NVIDIA H200"))
    assert spec.name == "H200 SXM" and "NVIDIA H200" in note
    spec, note = auto_hardware(db, "H800 SXM5", fake_nvml(fail="Driver Not Loaded"))
    assert spec.name == "H800 SXM5" and "Driver Not Loaded" in note
    spec, note = auto_hardware(db, "H800 SXM5", fake_nvml(name="NVIDIA L4"))
    assert spec.name == "H800 SXM5" and "no database entry" in note


def test_cli_detect_with_a_fake_gpu(invoke, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake_nvml(name="NVIDIA H800"))
    result = invoke("hardware", "detect", "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data[0]["entry"] == "H800 SXM5" and data[0]["entry_bandwidth"] == 3.35e12
    table = invoke("hardware", "detect")
    assert table.exit_code == 0 and "3.35 TB/s" in table.stdout and "H800 SXM5" in table.stdout
    # and profile's default hardware (auto) follows the detected GPU
    result = invoke("profile", GQA, "-O", "layers=1", "--context", "128", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["hardware"]["name"] == "H800 SXM5"
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake_nvml(name="NVIDIA H200"))
    report = json.loads(invoke("profile", GQA, "-O", "layers=1", "--context", "128", "-f", "json").stdout)
    assert report["hardware"]["name"] == "H200 SXM"
    assert any("detected 'NVIDIA H200'" in n for n in report["notes"])


def _real_nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_real_nvml_works(), reason="an NVIDIA driver is present")
def test_cli_detect_without_gpu_is_one_line_nonzero(invoke):
    result = invoke("hardware", "detect")
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rooflinekit: error: no NVIDIA GPU or driver found (NVML: ")
    assert lines[0].endswith("reports use the default hardware H800 SXM5")
    assert "Traceback" not in result.stderr + result.stdout and result.stdout == ""
    # profile still works, on the default hardware, and says why
    result = invoke("profile", GQA, "-O", "layers=1", "--context", "128", "-f", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hardware"]["name"] == "H800 SXM5"
    assert any(n.startswith("hardware auto: no NVIDIA GPU or driver found") for n in report["notes"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cli_device_cuda_without_cuda_is_one_line_nonzero(invoke):
    result = invoke("profile", GQA, "--device", "cuda", "-O", "layers=1")
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no CUDA device is available" in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_gpu_check_script_without_cuda_exits_with_one_line(capsys):
    from benchmarks.gpu_check import main

    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no CUDA device" in err and "--device cpu --small" in err


@pytest.mark.slow
def test_gpu_check_script_cpu_smoke(tmp_path, monkeypatch):
    from benchmarks.gpu_check import main

    monkeypatch.setenv("ROOFLINEKIT_HOME", str(tmp_path / "home"))
    out = tmp_path / "check.md"
    assert main(["--device", "cpu", "--small", "--output", str(out), "--batches", "1",
                 "--warmup", "0", "--repeats", "1", "--json-dir", str(tmp_path / "json")]) == 0
    text = out.read_text()
    assert "## Whole step" in text and "## Attention layers" in text
    assert "| GQA " in text and "| MLA " in text and "layers.1.self_attn" in text and "mla/absorbed" in text
    reports = sorted(p.name for p in (tmp_path / "json").iterdir())
    assert reports == ["gqa_b1_s64.json", "mla_b1_s64.json"]


@pytest.mark.parametrize("name,entry", [
    ("NVIDIA H800", "H800 SXM5"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("H200", "H200 SXM"),  # no prefix to strip
    ("NVIDIA L4", None),
])
def test_calibrate_matches_torchs_device_name_as_detect_matches_nvmls(monkeypatch, name, entry):
    from rooflinekit.analyses.calibrate import datasheet_entry
    from rooflinekit.stages.detect import find_entry

    db = hardware_db()
    assert detect(db, fake_nvml(name=name))[0].entry == entry
    found = find_entry(name, db)
    assert (found.name if found else None) == entry
    # without NVML, calibrate falls back to torch's name for the device
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake_nvml(fail="Driver Not Loaded"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert datasheet_entry("cuda", db) == entry
    assert datasheet_entry("cpu", db) is None


@pytest.mark.parametrize("batches,needle", [("1,x", "'x' is not an integer"), ("4,0", "0: every batch must be at least 1")])
def test_gpu_check_script_bad_batches_is_a_usage_error(capsys, batches, needle):
    from benchmarks.gpu_check import main

    with pytest.raises(SystemExit) as exc:
        main(["--device", "cpu", "--small", "--batches", batches])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --batches: {needle}" in err and "Traceback" not in err, err


def test_gpu_check_script_removes_its_temporary_entry_on_error(tmp_path, monkeypatch, capsys):
    import tempfile

    import rooflinekit.analyses.calibrate as cal_mod
    import rooflinekit.analyses.profile as profile_module
    from benchmarks.gpu_check import main
    from rooflinekit.analyses.calibrate import Calibration, Timing

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    fixed = Calibration(device="cpu", device_name="test CPU", date="2026-01-02", bandwidth=1e10,
                        bandwidth_median=1e10, copy_bytes=32_000_000, copy=Timing(0.0064, 0.0064, 5, 2),
                        peaks={"fp32": 1e11}, peaks_median={"fp32": 1e11}, matmul_n={"fp32": 512},
                        matmul={"fp32": Timing(0.0027, 0.0027, 3, 5)})
    monkeypatch.setattr(cal_mod, "calibrate", lambda *args, **kwargs: fixed)
    saved = []
    real_save = cal_mod.save

    def save(*args, **kwargs):
        saved.append(real_save(*args, **kwargs))
        return saved[-1]

    def failing_profile(*args, **kwargs):
        assert saved[0].exists()  # the entry is there while the check runs
        raise UserError("the forward failed")

    monkeypatch.setattr(cal_mod, "save", save)
    monkeypatch.setattr(profile_module, "run_profile", failing_profile)
    with pytest.raises(SystemExit) as exc:
        main(["--device", "cpu", "--small", "--output", str(tmp_path / "check.md")])
    assert exc.value.code == 2 and "gpu_check: the forward failed" in capsys.readouterr().err
    assert len(saved) == 1 and not saved[0].exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary folder is gone too
    assert not (tmp_path / "check.md").exists()
