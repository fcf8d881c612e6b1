"""Validation where the right outcome is a run that goes on with a warning: a bad hardware file
skipped and the rest loaded, a plugin's unusable answer ignored and named. (Failures with one
error line are in the bad-input matrix, tests/bad_inputs/.)"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from bad_inputs.hardware import GOOD, entry
from bad_inputs.plugins import BAD_ENTRY, GOOD_ENTRY, installed_site

from rooflinekit.analyses import calibrate as cal_mod
from rooflinekit.analyses.calibrate import Timing, measure_matmul
from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.errors import UserError
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.outputs.report_io import check_values, load_report
from rooflinekit.stages.formulas import FormulaBook, flops_problem
from rooflinekit.stages.hardware import BOUNDS, HardwareDB, check_value, hardware_db
from rooflinekit.stages.model_source import load_source
from rooflinekit_hardware_db import DB_DIR
from tests import warm_python
from tests.conftest import EXAMPLES, ROOT, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
DATA = Path(__file__).resolve().parent / "data"


# -- hardware: a bad file is skipped with one warning naming it, the rest of the folder loads ----------

BAD_FILES: dict[str, str | bytes] = {
    "aliases_int.toml": entry(name="Aliases Int", extra="aliases = 5\n"),
    "blob.toml": b"\x89PNG\r\n\x1a\n\x00\xff\xfe",
    "broken.toml": 'name = "Broken"\nmemory_bandwidth = [1, 2\n',
    "nan_bw.toml": entry(name="NaN BW", bandwidth="nan"),
    "tiny_peak.toml": entry(name="Tiny Peak", peaks="bf16 = 1e-300"),
    "neg_mem.toml": entry(name="Neg Mem").replace("memory_bytes = 80e9", "memory_bytes = -1"),
}
EXPECTED = {
    "aliases_int.toml": "aliases must be a list of strings",
    "blob.toml": "not a TOML text file",
    "broken.toml": "not valid TOML",
    "nan_bw.toml": "memory_bandwidth must be a finite number",
    "tiny_peak.toml": "peak_flops.bf16 1e-300 FLOP/s is implausible",
    "neg_mem.toml": "memory_bytes must be positive",
}


@pytest.fixture
def hw_folder(tmp_path, monkeypatch):
    folder = tmp_path / "hw"
    folder.mkdir()
    (folder / "good_accel.toml").write_text(GOOD)
    for name, content in BAD_FILES.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.setenv("ROOFLINEKIT_HARDWARE_PATH", str(folder))
    return folder


def test_each_bad_file_is_one_problem_and_the_rest_loads(hw_folder):
    db = HardwareDB.from_dirs([DB_DIR, hw_folder])
    assert db.find("Good Accel") is not None and db.find("H800") is not None
    for name, needle in EXPECTED.items():
        mine = [p for p in db.problems if name in p]
        assert len(mine) == 1 and needle in mine[0], (name, db.problems)
    assert len(db.problems) == len(BAD_FILES)
    # asked for, a skipped entry names its file and field: by name, file stem, or path
    for ask, file in (("NaN BW", "nan_bw.toml"), ("aliases_int", "aliases_int.toml"), ("blob", "blob.toml"),
                      (str(hw_folder / "tiny_peak.toml"), "tiny_peak.toml")):
        with pytest.raises(UserError, match=file):
            db.get(ask)


def test_hardware_list_warns_per_bad_file_and_lists_the_good_ones(hw_folder, invoke):
    result = invoke("hardware", "list")
    assert result.exit_code == 0, result.stderr
    assert "Good Accel" in result.stdout and "H800 SXM5" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.strip()]
    assert all(w.startswith("rooflinekit: warning: ") for w in warnings), warnings
    for name, needle in EXPECTED.items():
        assert sum(name in w and needle in w for w in warnings) == 1, (name, warnings)
    listed = invoke("hardware", "list", "-f", "json")
    assert listed.exit_code == 0 and "Good Accel" in {e["name"] for e in json.loads(listed.stdout)}


def test_profile_on_a_good_entry_beside_bad_ones_warns_and_runs(hw_folder, invoke):
    result = invoke("profile", GQA, *[f"-O{k}={v}" for k, v in TINY_LLAMA.items()], "-H", "Good Accel",
                    "-f", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hardware"]["name"] == "Good Accel"
    assert any("nan_bw.toml" in w for w in report["warnings"])
    assert "Traceback" not in result.stderr


def test_missing_folder_on_the_hardware_path_is_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINEKIT_HARDWARE_PATH", str(tmp_path / "nope"))
    db = hardware_db(PluginHost())
    assert db.find("H800") is not None
    assert any("ROOFLINEKIT_HARDWARE_PATH" in p and "nope" in p and "no such" in p for p in db.problems)


@pytest.mark.parametrize("field_name", list(BOUNDS))
def test_bounds_are_inclusive_and_refuse_the_rest(field_name):
    lo, hi, _ = BOUNDS[field_name]
    assert check_value(field_name, lo) is None and check_value(field_name, hi) is None
    for bad, why in ((lo / 2, "implausible"), (hi * 2, "implausible"), (0, "positive"), (-lo, "positive"),
                     (math.nan, "finite"), (math.inf, "finite"), ("1e12", "number"), (True, "number")):
        assert why in (check_value(field_name, bad) or ""), (field_name, bad)


def test_every_shipped_entry_is_within_the_bounds():
    db = HardwareDB.from_dirs([DB_DIR])
    assert db.problems == [] and len(db.entries) >= 10


# -- plugins: an unusable answer is ignored and named ----------------------------------------------


class _Dirs:
    def __init__(self, folder):
        self.folder = folder

    @hookimpl
    def rooflinekit_hardware_dirs(self):
        return [None, 5, "/nonexistent/rk-dirs", self.folder]


def test_hardware_dirs_answer_with_non_paths_is_one_warning_and_the_folder_loads(tmp_path):
    (tmp_path / "good_accel.toml").write_text(GOOD)
    host = PluginHost()
    host.register(_Dirs(str(tmp_path)), "rk_dirs", "tests", "0")
    db = hardware_db(host)
    assert db.find("Good Accel") is not None and db.find("H800") is not None
    (warning,) = [p for p in db.problems if "rk_dirs" in p]
    assert "None (not a path)" in warning and "5 (not a path)" in warning and "/nonexistent/rk-dirs" in warning


def _formula_plugin(answer):
    class Formulas:
        @hookimpl
        def rooflinekit_op_formulas(self):
            def mm(a, b, out=None, **kwargs):
                if answer == "raise":
                    raise ValueError("no count on purpose")
                return answer

            return {"aten.mm": mm}  # (a formula that is not callable: the hook-answer rules, tests/bad_inputs/hooks.py)

    return Formulas()


def _profile(host, path=GQA, hardware="H800", tp=1, **extra):
    options = dict(TINY_LLAMA, **extra)
    workload = Workload("decode", 1, 64, "bf16", "meta", tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options, host), workload, Deployment(hardware, tp=tp), host=host).report


@pytest.mark.parametrize("answer,why", [
    (-5e30, "negative"), (math.nan, "NaN"), (math.inf, "not finite"), ("many", "non-number"),
    (None, "non-number"), (1e40, "implausible"), ("raise", "ValueError: no count on purpose"),
])
def test_formula_answering_no_count_leaves_the_op_uncounted_with_one_warning(answer, why):
    host = PluginHost()
    host.register(_formula_plugin(answer), "rk_formula", "tests", "0")
    report = _profile(host)
    assert math.isfinite(report.totals.flops) and report.totals.flops > 0  # attention and the rest still count
    mm = [op for op in report.ops if op.name == "aten.mm"]
    assert mm and all(not op.counted and op.flops == 0 and why in op.formula_error for op in mm)
    (row,) = [u for u in report.uncounted_ops if u.name == "aten.mm"]
    assert why in row.formula_error
    mine = [w for w in report.warnings if "rk_formula" in w and "aten.mm" in w]
    assert len(mine) == 1 and why in mine[0] and "uncounted" in mine[0], report.warnings


def test_flops_problem_accepts_counts_only():
    assert flops_problem(0) is None and flops_problem(12) is None and flops_problem(3.5e20) is None
    for bad in (-1, math.nan, -math.inf, "3", b"3", True, None, object(), 1e31):
        assert flops_problem(bad), bad
    book = FormulaBook()  # no plugin, no host: a bad answer still leaves the op uncounted
    assert book.evaluate("aten.x", lambda *a, out=None, **k: -1, (), {}, None) == (0.0, "formula returned "
                                                                                       "a negative count (-1)")


class _DictLoader:
    @hookimpl
    def rooflinekit_workload_loader(self, path, options):
        return {"name": "not a ModelSource"}


def test_loader_answering_a_dict_is_named_and_the_next_loader_loads():
    host = PluginHost()
    host.register(_DictLoader(), "rk_dict", "tests", "0")
    source = load_source(str(GQA), dict(TINY_LLAMA), host)
    assert source.name
    assert any("rk_dict" in w and "returned dict" in w and "ModelSource" in w for w in host.warnings)


class _Plan:
    @hookimpl
    def rooflinekit_tp_plan(self, model, workload, attention):
        return {"layers.*.self_attn.q_proj": "diagonal", 7: "colwise", "layers.*.mlp.down_proj": "rowwise"}


def test_unknown_tp_style_is_named_and_ignored():
    host = PluginHost()
    host.register(_Plan(), "rk_plan", "tests", "0")
    report = _profile(host, tp=2)
    plan = {p["module"]: p["style"] for p in report.parallel["plan"]}
    assert plan["layers.0.self_attn.q_proj"] == "colwise"  # the structural rules, not "diagonal"
    assert plan["layers.0.mlp.down_proj"] == "rowwise"
    (style,) = [w for w in report.warnings if "rk_plan" in w and "'diagonal'" in w]
    assert "layers.*.self_attn.q_proj" in style and "ignored" in style
    assert any("rk_plan" in w and "no module path" in w and "7" in w for w in report.warnings)


@pytest.mark.slow
def test_installed_broken_distribution_warns_and_runs(tmp_path):
    """The same faults from the pip-installed distribution of the bad-input matrix, on the command line."""
    site = installed_site()
    (tmp_path / "rkhw").mkdir()
    (tmp_path / "rkhw" / "rk_nan.toml").write_text(BAD_ENTRY)
    (tmp_path / "rkhw" / "rk_good.toml").write_text(GOOD_ENTRY)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), PYTHONDONTWRITEBYTECODE="1",
               RKBAD_DIRS="rkhw", RKBAD_FORMULA="negative")

    def run(*args):
        return warm_python.run(["-m", "rooflinekit", *map(str, args)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=240)

    listed = run("hardware", "list")
    assert listed.returncode == 0, listed.stderr
    assert "RK Good" in listed.stdout and "RK NaN" not in listed.stdout
    assert "plugin 'rkbad_dirs'" in listed.stderr and "rk_nan.toml: memory_bandwidth" in listed.stderr
    out = tmp_path / "r.json"
    ran = run("profile", GQA, *[f"-O{k}={v}" for k, v in TINY_LLAMA.items()], "-H", "RK Good", "-f", "json",
              "-o", out)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.count("plugin 'rkbad_formulas': FLOP formula for aten.mm returned a negative count") == 1
    report = json.loads(out.read_text())
    assert report["totals"]["flops"] > 0
    assert any(u["name"] == "aten.mm" and "negative" in u["formula_error"] for u in report["uncounted_ops"])


# -- reports read back ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["report-1.0-gqa.json", "report-1.0-mla.json"])
def test_real_reports_hold_no_implausible_number(name):
    assert check_values(json.loads((DATA / name).read_text()), limit=100) == []
    load_report(str(DATA / name))


def test_a_fresh_report_with_measurement_and_parallel_sections_passes(tmp_path, invoke):
    out = tmp_path / "r.json"
    args = [f"-O{k}={v}" for k, v in TINY_LLAMA.items()]
    result = invoke("profile", GQA, *args, "--tp", "2", "-f", "json", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert check_values(json.loads(out.read_text()), limit=100) == []


def test_values_name_their_field():
    data = {"totals": {"flops": -1.0, "bytes": math.inf}, "ops": [{"time_bound_s": 1e31}],
            "workload": {"options": {"offset": -3}}, "attention": [{"extra": {"shift": -2}}],
            "measured": {"unattributed_s": -0.001}}
    assert check_values(data, limit=10) == ["totals.flops: negative (-1)", "totals.bytes: not a finite number (inf)",
                                           "ops[0].time_bound_s: implausibly large (1e+31)"]


def test_plot_skips_a_point_whose_intensity_overflows(tmp_path, invoke):
    pytest.importorskip("matplotlib")
    data = json.loads((DATA / "report-1.0-gqa.json").read_text())
    data["modules"][0].update(flops=1e29, bytes=1e-300)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    result = invoke("plot", path, "-o", tmp_path / "r.png")
    assert result.exit_code == 0, result.stderr
    assert "not plotted" in result.stderr and (tmp_path / "r.png").exists()


# -- calibrate ------------------------------------------------------------------------------------


@pytest.mark.timing
def test_size_probe_warms_up_before_timing(monkeypatch):
    """Each size the CPU probe tries gets an untimed product before its timed ones (the first pays
    for thread start-up and allocation), and a warm 256 x 256 product is fast enough that the probe
    moves past 256.

    The order is read, not inferred from a time: every matmul and every timed interval is logged.
    The time is judged on one intra-op thread (two threads on a 2-core machine shared with other
    jobs wait on each other's time slices, tens of ms for a sub-ms product), and the probe gets up
    to three tries: on any CPU that multiplies at more than ~2 GFLOP/s a warm 256 x 256 product
    takes under 20 ms, so a machine too loaded for one try passes the next."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    log: list[tuple[str, int]] = []  # ("mm", n) untimed, ("timed mm", n) inside a timed interval
    timing = [False]
    real_timer = cal_mod._timer

    def logging_timer(device):
        run = real_timer(device)

        def timed(fn, iters):
            timing[0] = True
            try:
                return run(fn, iters)
            finally:
                timing[0] = False

        return timed

    class Products(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in (torch.ops.aten.mm.default, torch.ops.aten.mm.out):
                log.append(("timed mm" if timing[0] else "mm", args[0].shape[0]))
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(cal_mod, "_timer", logging_timer)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sizes = []
        for _ in range(3):
            log.clear()
            with Products():
                _, _, n, _ = measure_matmul("cpu", "fp32", trials=1)
            sizes.append(n)
            # the sizes the probe timed: each one's first product is the untimed warm-up
            probed = [size for kind, size in log if kind == "timed mm"]
            probed = list(dict.fromkeys(size for size in probed if size < n or n < 2048))
            assert probed[0] == 256, log
            for size in probed:
                first = next(kind for kind, s in log if s == size)
                assert first == "mm", (size, log)
            if n > 256:
                break
    finally:
        torch.set_num_threads(previous)
    assert sizes[-1] > 256, sizes


def test_implausible_measured_bandwidth_is_refused_not_saved(monkeypatch, tmp_path):
    monkeypatch.setattr(cal_mod, "measure_bandwidth", lambda device, size: (5.8e6, 5.8e6, Timing(1.0, 1.0, 1, 1)))
    with pytest.raises(UserError, match=r"memory bandwidth 5.8e\+06 B/s is implausible.*not saved"):
        cal_mod.calibrate("cpu", size_mb=16, dtypes=("fp32",))


def test_implausible_measured_peak_is_dropped_and_named(monkeypatch):
    monkeypatch.setattr(cal_mod, "measure_bandwidth", lambda device, size: (2e10, 1.9e10, Timing(1.0, 1.0, 1, 1)))
    rates = {"fp32": 5e10, "bf16": 3e19}
    monkeypatch.setattr(cal_mod, "measure_matmul",
                        lambda device, key: (rates[key], rates[key], 512, Timing(1.0, 1.0, 1, 1)))
    cal = cal_mod.calibrate("cpu", size_mb=16, dtypes=("fp32", "bf16"))
    assert cal.peaks == {"fp32": 5e10}
    assert "refused" in cal.skipped["bf16"] and "implausible" in cal.skipped["bf16"]
    monkeypatch.setitem(rates, "fp32", 0.0)
    with pytest.raises(UserError, match="no matmul dtype could be measured.*fp32: measured rate refused"):
        cal_mod.calibrate("cpu", size_mb=16, dtypes=("fp32", "bf16"))
