"""Hardware database: datasheet numbers, lookup by alias, bad files reported with their path."""

from __future__ import annotations

import pytest

from rooflinekit.core.errors import UserError
from rooflinekit.stages.hardware import DTYPE_KEYS, HardwareDB, hardware_db
from rooflinekit_hardware_db import DB_DIR

REQUIRED = ["H800 SXM5", "H100 SXM5", "H100 PCIe", "H200 SXM", "H20", "A100 SXM 80GB", "A800 SXM 80GB",
            "L40S", "RTX 4090", "B200", "MI300X"]


@pytest.fixture(scope="module")
def db():
    return HardwareDB.from_dirs([DB_DIR])


def test_database_loads_cleanly_with_required_devices(db):
    assert db.problems == []
    for name in REQUIRED:
        assert db.find(name) is not None, name


def test_h800_dense_bf16_bandwidth_and_ridge(db):
    h800 = db.get("h800")
    assert h800.peak("bf16") == 989.4e12
    assert h800.memory_bandwidth == 3.35e12
    assert h800.ridge("bf16") == pytest.approx(989.4e12 / 3.35e12)
    assert h800.ridge("bf16") == pytest.approx(295.3, abs=0.05)
    assert h800.ridge("fp8") == pytest.approx(2 * h800.ridge("bf16"), rel=1e-3)


def test_every_entry_has_sources_and_dense_si_numbers(db):
    for spec in db.entries:
        assert "peak_flops" in spec.sources or all(f"peak_flops.{k}" in spec.sources for k in spec.peak_flops)
        assert "memory_bandwidth" in spec.sources
        assert set(spec.peak_flops) <= set(DTYPE_KEYS)
        # SI bytes/s: every device here has between 0.5 and 10 TB/s
        assert 0.5e12 <= spec.memory_bandwidth <= 10e12, spec.name
        # dense bf16 never above 2.5 PFLOP/s for these parts (sparse figures would be)
        assert spec.peak_flops["bf16"] <= 2.5e15, spec.name


@pytest.mark.parametrize("alias", ["NVIDIA H800", "h800-sxm5", "H800 SXM5", "nvidia h800"])
def test_lookup_is_case_insensitive_and_uses_aliases(db, alias):
    assert db.get(alias).name == "H800 SXM5"


def test_unknown_hardware_suggests(db):
    with pytest.raises(UserError, match=r"did you mean .*H800"):
        db.get("H8000")


def test_malformed_file_is_reported_and_rest_loads(tmp_path):
    (tmp_path / "broken.toml").write_text("name = 'X'\npeak_flops = [1,2\n")
    (tmp_path / "nosource.toml").write_text(
        "name = 'Y'\nmemory_bandwidth = 1e12\n[peak_flops]\nbf16 = 1e14\n"
    )
    (tmp_path / "negative.toml").write_text(
        "name = 'Z'\nmemory_bandwidth = -1\n[peak_flops]\nbf16 = 1e14\n[sources]\npeak_flops='a'\nmemory_bandwidth='b'\n"
    )
    db = HardwareDB.from_dirs([DB_DIR, tmp_path])
    assert any("broken.toml" in p and "TOML" in p for p in db.problems)
    assert any("nosource.toml" in p and "no source" in p for p in db.problems)
    assert any("negative.toml" in p and "positive" in p for p in db.problems)
    assert db.find("H800") is not None


def test_user_folder_entry_is_loaded(tmp_path, monkeypatch):
    folder = tmp_path / "hardware"
    folder.mkdir()
    (folder / "mine.toml").write_text(
        "name = 'My Accelerator'\nmemory_bandwidth = 1e12\n[peak_flops]\nbf16 = 1e14\n"
        "[sources]\npeak_flops = 'me'\nmemory_bandwidth = 'me'\n"
    )
    monkeypatch.setenv("ROOFLINEKIT_HOME", str(tmp_path))
    assert hardware_db().get("my accelerator").ridge("bf16") == pytest.approx(100.0)


def test_missing_dtype_peak_falls_back_with_a_note(tmp_path, monkeypatch):
    from tests.conftest import EXAMPLES, TINY_LLAMA, profile_dict

    (tmp_path / "nofp16.toml").write_text(
        "name = 'No FP16'\nmemory_bandwidth = 1e12\n[peak_flops]\nbf16 = 2e14\nfp32 = 5e13\n"
        "[sources]\npeak_flops = 'test'\nmemory_bandwidth = 'test'\n"
    )
    monkeypatch.setenv("ROOFLINEKIT_HARDWARE_PATH", str(tmp_path))
    report = profile_dict(EXAMPLES / "llama_gqa.py", dtype="fp16", hardware="No FP16", **TINY_LLAMA)
    assert report["hardware"]["peak_flops"] == 2e14
    assert any("no dense fp16 peak" in n and "bf16" in n for n in report["notes"])
