"""The example third-party plugin (examples/plugins/rooflinekit-swa), pip-installed into a fresh venv.

The venv is fresh (``python -m venv --without-pip``) and rooflinekit, rooflinekit-swa and a broken
plugin distribution are pip-installed into it, non-editable, from copies of their source trees.
torch and rooflinekit's other dependencies are *not* installed again (a CUDA build of torch is
several GB): a ``.pth`` file in the venv's site-packages appends the running interpreter's
site-packages to ``sys.path``. A path added by a ``.pth`` line is searched after the venv's own
site-packages and its own ``.pth`` files are not processed, so ``rooflinekit`` (and the
``rooflinekit`` distribution's entry points) resolve to the venv's fresh install even when the
running environment has an editable one; the test checks that. pip itself comes through the same
path, and runs with ``--no-index --no-deps --no-build-isolation``: nothing is downloaded.

Then the ``rooflinekit`` command of that venv shows each contribution: ``plugins`` lists the four
plugins, a profile of the sliding-window model has its KV cache capped at the window (closed form
below) and the plugin's what-if window overrides rooflinekit's built-in one, ``--hardware "H100
NVL"`` finds the plugin's entry, grouped-mm FLOPs are counted (torch >= 2.8), the broken plugin is
named in one warning while the rest goes on; and the plugin's own tests pass against the installed
distribution.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from conftest import write_distribution

from tests import warm_python
from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PLUGIN_SRC = ROOT / "examples" / "plugins" / "rooflinekit-swa"
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".tox")
SMALL = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512,
         "vocab": 1000}


def _broken_distribution(root: Path) -> Path:
    return write_distribution(root, "rk-broken", "rk_broken",
                              {"__init__": "raise ImportError('this plugin fails on import on purpose')\n"},
                              {"rk_broken": "rk_broken"}, version="1.0")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(run, plugin source copy, venv dir): `run(*args)` runs the venv's `rooflinekit` command."""
    base = tmp_path_factory.mktemp("fresh")
    core = base / "src" / "rooflinekit"
    core.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, core / name)
    for name in ("rooflinekit", "plugins", "hardware_db"):
        shutil.copytree(ROOT / name, core / name, ignore=IGNORE)
    plugin = base / "src" / "rooflinekit-swa"
    shutil.copytree(PLUGIN_SRC, plugin, ignore=IGNORE)
    broken = _broken_distribution(base / "src")

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    host = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "_rooflinekit_test_host.pth").write_text("".join(f"{p}\n" for p in host))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ROOFLINEKIT_", "VIRTUAL_ENV"))}
    env.update(ROOFLINEKIT_HOME=str(base / "home"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
         "--ignore-installed", "--quiet", str(core), str(plugin), str(broken)],
        capture_output=True, text=True, env=env, cwd=base,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    def run(*args, exe="rooflinekit", **extra_env):
        """The venv's `exe` (its `rooflinekit` script, or `python`), in a child of the venv's python."""
        command = [*map(str, args)] if exe == "python" else [str(venv / "bin" / exe), *map(str, args)]
        return warm_python.run(command, python=python, capture_output=True, text=True, env={**env, **extra_env},
                               cwd=base)

    return run, plugin, venv


@pytest.mark.slow
def test_installed_not_editable_and_from_the_venv(fresh):
    run, _, venv = fresh
    where = run("-c", "import rooflinekit, rooflinekit_swa, rooflinekit_plugins; "
                "print(rooflinekit.__file__); print(rooflinekit_swa.__file__)", exe="python")
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).resolve().is_relative_to(venv.resolve()), line


@pytest.mark.slow
def test_plugins_lists_the_distribution_and_names_the_broken_one(fresh):
    run, _, _ = fresh
    listed = run("plugins", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    info = {p["name"]: p for p in data["plugins"]}
    expected = {"swa_attention": "rooflinekit_attention_window", "swa_grouped_mm": "rooflinekit_op_formulas",
                "swa_hardware": "rooflinekit_hardware_dirs", "swa_card": "rooflinekit_workload_loader"}
    for name, hook in expected.items():
        assert info[name]["distribution"] == "rooflinekit-swa" and info[name]["version"] == "0.1.0"
        assert hook in info[name]["hooks"]
    assert info["sliding_window"]["distribution"] == "rooflinekit"  # built-ins: same entry-point group
    assert "rooflinekit_attention_window" in info["sliding_window"]["hooks"]  # the hook swa_attention overrides
    assert "rk_broken" not in info
    assert [w for w in data["warnings"] if "rk_broken" in w] == [
        "plugin 'rk_broken' (rk-broken) failed to load: ImportError: this plugin fails on import on purpose"
    ]
    table = run("plugins")
    assert "swa_attention" in table.stdout and "rooflinekit-swa" in table.stdout
    assert table.stderr.count("rk_broken") == 1


@pytest.mark.slow
def test_profile_caps_kv_bytes_at_the_window_on_the_plugins_hardware(fresh, tmp_path):
    run, plugin, _ = fresh
    batch, context, window = 4, 1024, 256
    options = dict(SMALL, sliding_window=window)
    out = tmp_path / "swa.json"
    args = [f"-O{k}={v}" for k, v in options.items()]
    result = run("profile", plugin / "examples" / "mistral_swa.py", "--phase", "decode", "--batch", batch,
                 "--context", context, "--hardware", "H100 NVL", *args, "-f", "json", "-o", out)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["hardware"]["name"] == "H100 NVL"
    assert report["hardware"]["bandwidth"] == 3.9e12
    (row,) = report["attention"]
    assert row["window"] == window  # the model's own window, read by the built-in sliding_window plugin
    cache_bytes_per_token = SMALL["kv_heads"] * 2 * SMALL["head_dim"] * 2  # K and V, bf16
    assert row["cache_bytes_per_token"] == cache_bytes_per_token
    assert row["kv_bytes_min"] == batch * window * cache_bytes_per_token  # context > window
    assert row["kv_read_bytes"] == batch * window * cache_bytes_per_token  # the rolling cache
    # the broken plugin: one warning line, and the run completed
    assert result.stderr.count("rk_broken") == 1
    assert any("rk_broken" in w for w in report["warnings"])

    # the plugin's what-if window overrides the built-in's answer (tryfirst)
    what_if = tmp_path / "what_if.json"
    result = run("profile", plugin / "examples" / "mistral_swa.py", "--phase", "decode", "--batch", batch,
                 "--context", context, *args, "-f", "json", "-o", what_if, ROOFLINEKIT_SWA_WINDOW="64")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(what_if.read_text())["attention"]
    assert row["window"] == 64 and row["kv_bytes_min"] == batch * 64 * cache_bytes_per_token

    table = run("profile", plugin / "examples" / "mistral_swa.py", "--phase", "decode", "--context", context,
                "-H", "NVIDIA GH200 480GB", *args)
    assert table.returncode == 0, table.stderr
    assert "GH200 96GB" in table.stdout


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch._grouped_mm needs torch >= 2.8")
def test_model_card_loader_and_grouped_mm_flops(fresh, tmp_path):
    run, plugin, _ = fresh
    out = tmp_path / "moe.json"
    card = plugin / "examples" / "mixtral-8x7b-swa.swa.toml"
    batch = 2
    # rooflinekit's built-in `moe` plugin would replace the experts with its expected-load model;
    # disabled, the two grouped multiplies run on meta and the plugin's formula counts them.
    result = run("profile", card, "-O", "layers=1", "--phase", "decode", "--batch", batch, "--context", 8192,
                 "-f", "json", "-o", out, ROOFLINEKIT_DISABLE_PLUGINS="moe")
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["model"]["kind"] == "swa model card"
    grouped = [op for op in report["ops"] if op["name"] == "aten._grouped_mm"]
    assert len(grouped) == 2 and all(op["counted"] for op in grouped)
    c = tomllib.loads(card.read_text())
    # decode: T = batch tokens, each to top_k experts; every row through [hidden -> 2*inter] (gate and
    # up) and [inter -> hidden]: 2*rows*hidden*(2*inter) + 2*rows*inter*hidden
    rows, hidden, inter = batch * c["top_k"], c["hidden"], c["intermediate"]
    assert sum(op["flops"] for op in grouped) == 2 * rows * hidden * 2 * inter + 2 * rows * inter * hidden
    assert "aten._grouped_mm" not in {u["name"] for u in report["uncounted_ops"]}
    # context 8192 > the window: B * window * (K and V) * kv_heads * head_dim * 2 B (bf16)
    assert report["attention"][0]["kv_bytes_min"] == (
        batch * min(8192, c["sliding_window"]) * 2 * c["kv_heads"] * c["head_dim"] * 2)


@pytest.mark.slow
def test_plugin_tests_pass_against_the_installed_distribution(fresh):
    run, plugin, _ = fresh
    result = run("-m", "pytest", "-q", "-p", "no:cacheprovider", plugin / "tests", exe="python")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
