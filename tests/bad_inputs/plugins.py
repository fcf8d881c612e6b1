"""Plugin faults, from a broken plugin distribution pip-installed for the test (rk-bad): a loader
answering a dict or a ModelSource that cannot build, a hardware folder whose entry is invalid,
a hook calling sys.exit(). Each fault is switched on by an environment variable, so that one
installed distribution serves every case; the installed site is built once and copied into each
case's folder (`site`, on PYTHONPATH; no bytecode written, so the folder stays unchanged).

Faults that leave a usable run (a formula answering a negative count, a hardware hook answering
non-paths, an unknown TP style) are warnings, tested in tests/test_validation.py with the same
distribution.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import textwrap
from pathlib import Path

from conftest import pip_install_site, write_distribution

from bad_inputs.case import GQA, TINY, Case

CAT = "plugins"

FORMULAS = textwrap.dedent(
    '''
    """FLOP formulas that answer no count: RKBAD_FORMULA=negative|nan|inf|str|none|raise."""
    import math
    import os

    from rooflinekit.plugin import hookimpl

    def mm_flops(a, b, out=None, **kwargs):
        mode = os.environ.get("RKBAD_FORMULA", "")
        if mode == "raise":
            raise ValueError("cannot count this on purpose")
        answers = {"negative": -5e30, "nan": math.nan, "inf": math.inf, "str": "many", "none": None}
        return answers.get(mode, 2 * a.shape[0] * a.shape[1] * b.shape[1])

    @hookimpl
    def rooflinekit_op_formulas():
        return {"aten.mm": mm_flops} if os.environ.get("RKBAD_FORMULA") else None
    '''
)
DIRS = textwrap.dedent(
    '''
    """A hardware-folder answer with non-paths and a missing folder, then RKBAD_DIRS (a folder)."""
    import os

    from rooflinekit.plugin import hookimpl

    @hookimpl
    def rooflinekit_hardware_dirs():
        folder = os.environ.get("RKBAD_DIRS")
        return [None, 5, "/nonexistent/rkbad-hardware", folder] if folder else None
    '''
)
LOADER = textwrap.dedent(
    '''
    """Loads *.rkdict (answering a dict) and *.rknocall (a ModelSource that cannot build)."""
    from rooflinekit.plugin import hookimpl
    from rooflinekit.core.request import ModelSource

    @hookimpl
    def rooflinekit_workload_loader(path, options):
        if str(path).endswith(".rkdict"):
            return {"name": "card", "build_model": None}
        if str(path).endswith(".rknocall"):
            return ModelSource("card", str(path), build_model=5, make_inputs="not a function")
        return None
    '''
)
EXIT = textwrap.dedent(
    '''
    """Ends the process from inside a hook when RKBAD_EXIT is set."""
    import os
    import sys

    from rooflinekit.plugin import hookimpl

    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(module, path, call):
        if os.environ.get("RKBAD_EXIT"):
            sys.exit(3)
        return None
    '''
)
TP = textwrap.dedent(
    '''
    """A TP plan with a style rooflinekit does not know, and a key that is no path (RKBAD_TP)."""
    import os

    from rooflinekit.plugin import hookimpl

    @hookimpl
    def rooflinekit_tp_plan(model, workload, attention):
        if not os.environ.get("RKBAD_TP"):
            return None
        return {"layers.*.self_attn.q_proj": "diagonal", 5: "colwise", "layers.*.mlp.down_proj": "rowwise"}
    '''
)
MODEL = textwrap.dedent(
    '''
    """Models every MLP analytically, emitting a negative FLOP count (RKBAD_MODEL)."""
    import os

    from rooflinekit.plugin import hookimpl
    from rooflinekit.stages.modelled import ModuleModel, OpCounts, Provenance, emit

    class NegativeMLP(ModuleModel):
        assumption = "an MLP costs minus one FLOP"

        def forward(self, module, path, args, kwargs):
            emit("rkbad.mlp", OpCounts(flops=-1.0, bytes_read=0.0, bytes_written=0.0),
                 at=Provenance(module=path, assumption=self.assumption))
            return args[0]

    @hookimpl
    def rooflinekit_module_model(module, path, workload):
        if os.environ.get("RKBAD_MODEL") and path.endswith(".mlp"):
            return NegativeMLP()
        return None
    '''
)
MODULES = {"formulas": FORMULAS, "dirs": DIRS, "loader": LOADER, "exit": EXIT, "tp": TP, "model": MODEL}
ENTRY_POINTS = {f"rkbad_{m}": f"rk_bad.{m}" for m in MODULES}

_BUILT: list[Path] = []


def installed_site() -> Path:
    """rk-bad pip-installed into a folder (once per session); the folder."""
    if not _BUILT:
        root = Path(tempfile.mkdtemp(prefix="rk-bad-plugins-"))
        atexit.register(shutil.rmtree, root, True)
        src = write_distribution(root, "rk-bad", "rk_bad", MODULES, ENTRY_POINTS)
        pip_install_site(src, root / "site")
        _BUILT.append(root / "site")
    return _BUILT[0]


def with_site(folder: Path) -> None:
    """Case setup: the installed distribution in the case's folder, as `site`."""
    shutil.copytree(installed_site(), folder / "site", ignore=shutil.ignore_patterns("__pycache__"))


#: Run in a child Python that sees `site` (relative to the case folder, its working directory).
ENV = {"PYTHONPATH": "site", "PYTHONDONTWRITEBYTECODE": "1"}

BAD_ENTRY = ('name = "RK NaN"\nvendor = "Test"\nmemory_bandwidth = nan\n[peak_flops]\nbf16 = 1e15\n'
             '[sources]\npeak_flops = "test"\nmemory_bandwidth = "test"\n')
GOOD_ENTRY = ('name = "RK Good"\nvendor = "Test"\nmemory_bandwidth = 1e12\n[peak_flops]\nbf16 = 1e14\nfp32 = 1e13\n'
              '[sources]\npeak_flops = "test"\nmemory_bandwidth = "test"\n')
PLUGIN_FOLDER = {"rkhw/rk_nan.toml": BAD_ENTRY, "rkhw/rk_good.toml": GOOD_ENTRY}


def case(name: str, args: list[str], needles: list[str], env: dict[str, str] | None = None,
         files: dict[str, str] | None = None) -> Case:
    return Case(name, CAT, args, needles, files=files or {}, setup=with_site, env={**ENV, **(env or {})},
                subprocess=True)


CASES = [
    case("profile-loader-answers-dict", ["profile", "model.rkdict"],
         ["model.rkdict", "plugin 'rkbad_loader'", "returned dict", "expected ModelSource"],
         files={"model.rkdict": "layers = 2\n"}),
    case("sweep-loader-answers-dict", ["sweep", "model.rkdict", "-b", "1,2"],
         ["model.rkdict", "plugin 'rkbad_loader'", "returned dict"], files={"model.rkdict": "layers = 2\n"}),
    case("profile-loader-source-cannot-build", ["profile", "model.rknocall"],
         ["model.rknocall", "plugin 'rkbad_loader'", "build_model and make_inputs are not callable"],
         files={"model.rknocall": "layers = 2\n"}),
    case("profile-plugin-hardware-entry-nan", ["profile", GQA, *TINY, "-H", "RK NaN"],
         ["rk_nan.toml", "memory_bandwidth", "finite"], env={"RKBAD_DIRS": "rkhw"}, files=PLUGIN_FOLDER),
    case("sweep-plugin-hardware-entry-by-stem", ["sweep", GQA, *TINY, "-b", "1,2", "-H", "rk_nan"],
         ["rk_nan.toml", "memory_bandwidth"], env={"RKBAD_DIRS": "rkhw"}, files=PLUGIN_FOLDER),
    case("hardware-show-plugin-entry-nan", ["hardware", "show", "RK NaN"],
         ["rk_nan.toml", "memory_bandwidth", "finite"], env={"RKBAD_DIRS": "rkhw"}, files=PLUGIN_FOLDER),
    case("profile-hook-calls-sys-exit", ["profile", GQA, *TINY],
         ["plugin 'rkbad_exit'", "sys.exit(3)", "rooflinekit_attention_spec"], env={"RKBAD_EXIT": "1"}),
    case("profile-module-model-emits-negative-flops", ["profile", GQA, *TINY],
         ["NegativeMLP (plugin 'rkbad_model')", "rkbad.mlp", "layers.0.mlp", "flops=-1.0", ">= 0"],
         env={"RKBAD_MODEL": "1"}),
    case("sweep-hook-calls-sys-exit", ["sweep", GQA, *TINY, "-b", "1,2"],
         ["plugin 'rkbad_exit'", "sys.exit(3)"], env={"RKBAD_EXIT": "1"}),
]
