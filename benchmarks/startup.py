"""Benchmark: start-up. Commands that need no model answer in under 1 s; `profile` of a model file
adds at most 0.5 s to `import torch`.

Every command runs from the shell (a new process each time, as a user runs it), in rounds: one
untimed warm-up round (disk cache), then `--repeats` rounds, each running every command once
(interleaved, so that a change in the machine's load touches every row alike). The table shows
each command's median and best wall time; the no-model commands against the 1 s budget, `profile`
less `import torch` against 0.5 s.

On the meta device torch itself imports `torch.fx.experimental.symbolic_shapes` (and sympy) at
the first Python meta kernel of a forward (`torch._check` imports it on first call), and
`torch._dynamo` too, where its elementwise refs first run (`torch._disable_dynamo`): on the command
line rooflinekit gives those refs their no-compile mark itself, so dynamo is never imported
(rooflinekit.core.compat.mark_not_compiled). The `import torch, ...symbolic_shapes` row measures
torch's unavoidable share, and the last row is what rooflinekit
adds beyond both.

`bare meta forward` is the model file without rooflinekit: `import torch`, then build it and run
one decode step (batch 1, context 4096, bf16, the defaults of `profile`) under
`torch.device("meta")`, with torch's own meta kernels; what `profile` adds over it is rooflinekit's
whole share (its imports, plugins, capture, placement and report).

The saved reports `plot` and `compare` read are made first in a temporary folder. rooflinekit's
sources (and the example's) are byte-compiled first, as installing them does: a checkout run with
PYTHONDONTWRITEBYTECODE set would otherwise compile every module from source at every start.

    python benchmarks/startup.py [--repeats 5]

Exit status 1 when a budget is exceeded.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "examples/llama_gqa.py"
#: Commands that need no model: each answers within this many seconds.
NO_MODEL_BUDGET = 1.0
#: What `profile` of a model file may add to `import torch`.
PROFILE_BUDGET = 0.5


#: The model file's decode step on meta without rooflinekit, as `profile` runs it by default.
BARE_FORWARD = f"""
import runpy, torch
m = runpy.run_path({str(ROOT / MODEL)!r})
torch.set_default_dtype(torch.bfloat16)
with torch.device("meta"), torch.no_grad():
    model = m["build_model"](layers=1)
    model(**m["make_inputs"](1, 4096, "decode", layers=1))
"""


def rooflinekit() -> list[str]:
    """The installed `rooflinekit` script beside this Python, else `python -m rooflinekit`."""
    script = Path(sys.executable).parent / "rooflinekit"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "rooflinekit"]


def run(argv: list[str], cwd: Path) -> float:
    """Wall seconds of one run of `argv` (output discarded); a failure stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (the median is reported)")
    args = parser.parse_args()
    rk, py = rooflinekit(), sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="rooflinekit-startup-"))
    try:
        a, b = tmp / "a.json", tmp / "b.json"
        run(rk + ["profile", str(ROOT / MODEL), "-O", "layers=1", "-f", "json", "-o", str(a)], ROOT)
        run(rk + ["profile", str(ROOT / MODEL), "-O", "layers=1", "--batch", "8", "-f", "json", "-o", str(b)], ROOT)
        for folder in ("rooflinekit", "examples"):  # what an install does; a no-op when already compiled
            compileall.compile_dir(str(ROOT / folder), quiet=1)
        # (label, argv, budget: "no-model" or None)
        rows = [
            ("python -c pass", [py, "-c", "pass"], None),
            ('python -c "import torch"', [py, "-c", "import torch"], None),
            ('python -c "import torch, torch._dynamo"', [py, "-c", "import torch, torch._dynamo"], None),
            ('python -c "import torch, ...symbolic_shapes"',
             [py, "-c", "import torch, torch.fx.experimental.symbolic_shapes"], None),
            ("bare meta forward of the model file (no rooflinekit)", [py, "-c", BARE_FORWARD], None),
            ("rooflinekit --help", rk + ["--help"], "no-model"),
            ("rooflinekit hardware list", rk + ["hardware", "list"], "no-model"),
            ("rooflinekit hardware show H800", rk + ["hardware", "show", "H800"], "no-model"),
            ("rooflinekit plugins", rk + ["plugins"], "no-model"),
            ("rooflinekit plot saved.json -o x.png", rk + ["plot", str(a), "-o", str(tmp / "x.png")], "no-model"),
            ("rooflinekit compare a.json b.json", rk + ["compare", str(a), str(b)], "no-model"),
            (f"rooflinekit profile {MODEL} -O layers=1", rk + ["profile", str(ROOT / MODEL), "-O", "layers=1"], None),
        ]
        for _, argv, _ in rows:  # warm-up round: not timed
            run(argv, ROOT)
        times: dict[str, list[float]] = {label: [] for label, _, _ in rows}
        for _ in range(args.repeats):
            for label, argv, _ in rows:
                times[label].append(run(argv, ROOT))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    median = {label: statistics.median(t) for label, t in times.items()}
    bare, torch_s = median["python -c pass"], median['python -c "import torch"']
    dynamo_s = median['python -c "import torch, torch._dynamo"']
    shapes_s = median['python -c "import torch, ...symbolic_shapes"']
    forward_s = median["bare meta forward of the model file (no rooflinekit)"]
    profile_label = rows[-1][0]
    failed = False
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load}; "
          f"median of {args.repeats} runs from the shell (best in brackets)\n")
    print("| command | time | minus `python -c pass` | budget |")
    print("|---|---|---|---|")
    for label, _, kind in rows:
        verdict = ""
        if kind == "no-model":
            ok = median[label] < NO_MODEL_BUDGET
            failed |= not ok
            verdict = f"< {NO_MODEL_BUDGET:g} s: {'ok' if ok else 'OVER'}"
        extra = f"{median[label] - bare:+.3f} s" if label != rows[0][0] else ""
        print(f"| `{label}` | {median[label]:.3f} s ({min(times[label]):.3f}) | {extra} | {verdict} |")
    over_torch = median[profile_label] - torch_s
    ok = over_torch <= PROFILE_BUDGET
    failed |= not ok
    print(f"| `profile` minus `import torch` | {over_torch:.3f} s | | <= {PROFILE_BUDGET:g} s: "
          f"{'ok' if ok else 'OVER'} |")
    print(f"| of which torch's own symbolic_shapes/sympy import at the first meta op | {shapes_s - torch_s:.3f} s | | |")
    print(f"| (torch's `import torch._dynamo`, which a plain meta forward also pays and `profile` does not) | "
          f"{dynamo_s - torch_s:.3f} s | | |")
    print(f"| `profile` minus `import torch, ...symbolic_shapes` | {median[profile_label] - shapes_s:.3f} s | | |")
    print(f"| `profile` minus the bare meta forward (rooflinekit's whole share) | "
          f"{median[profile_label] - forward_s:.3f} s | | |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
