"""Benchmark: analyse DeepSeek-V3 (671B, 61 layers) in decode on the meta device.

Prints, from one process (the machine may be shared: every figure is a median of several runs):
- the cost of `rooflinekit profile` at batch 48, context 32768 (build, capture, attribute, report
  and its JSON form) against a bare meta forward of the same model (build and forward, no
  recording; MoE experts replaced by a zeros_like so routing can run on meta), the floor for any
  dispatch-level tool: the two alternate, and the ratio is the median of the per-pair ratios
  (target: at most 1.3x, issue 16);
- the same profile with the meta memo off (every meta kernel run: rooflinekit.stages.capture.meta_memo),
  and the memo's hits and misses;
- the cost at context 1024 vs 131072 and batch 1 vs 48 (must not grow), and at 15/30/61 layers
  (must grow linearly); peak RSS.

Every timed run starts after a full garbage collection (`gc.collect()`), so that no run pays for
the garbage of the one before it; the process's CPU time is shown beside the wall time (on a
shared machine it moves less).

Run: python benchmarks/deepseek_v3_scale.py [--repeats 9] [--markdown FILE.md]
(figures quoted in docs/performance.md). Exit status 1 when the ratio is over the target.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "configs" / "deepseek-v3.json"
#: Profile / bare meta forward, the most the capture may cost (issue 16).
TARGET_RATIO = 1.3


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn) -> tuple[float, float]:
    """(wall s, process CPU s) of one call, after a full collection."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def median_of(n: int, fn) -> float:
    return statistics.median(timed(fn)[0] for _ in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="runs of each timing (medians)")
    parser.add_argument("--markdown", help="also write the results as a Markdown table here")
    args = parser.parse_args()

    t0 = time.perf_counter()
    from rooflinekit.analyses.profile import run_profile
    from rooflinekit.core.request import Deployment, Workload
    from rooflinekit.stages.capture.forward import call_forward
    from rooflinekit.stages.capture.recorder import Recorder
    from rooflinekit.stages.model_source import build, in_effect, load_source

    source = load_source(str(CONFIG), {})
    import_s = time.perf_counter() - t0

    def workload(batch=48, context=32768, layers=None):
        options = (("layers", layers),) if layers else ()
        return Workload("decode", batch, context, "bf16", "meta", options)

    def source_for(layers=None):
        return load_source(str(CONFIG), {"layers": layers} if layers else {})

    def bare(w, src):
        built = build(src, w)
        for module in built.model.modules():
            if type(module).__name__.endswith("Experts"):
                module.forward = lambda hidden, *a, **k: torch.zeros_like(hidden)
        with torch.no_grad(), in_effect(w):
            call_forward(built.model, built.inputs)

    def analyse(w, src):
        return run_profile(src, w, Deployment("H800")).report.to_dict()

    w = workload()
    bare(w, source)  # first meta forward pays torch's one-off meta-kernel imports
    report = analyse(w, source)
    pairs = []  # (bare wall, bare cpu, profile wall, profile cpu), alternating
    for _ in range(args.repeats):
        pairs.append(timed(lambda: bare(w, source)) + timed(lambda: analyse(w, source)))
    bare_s = statistics.median(p[0] for p in pairs)
    tool_s = statistics.median(p[2] for p in pairs)
    ratios = sorted(p[2] / p[0] for p in pairs)
    ratio = statistics.median(ratios)
    cpu_ratio = statistics.median(p[3] / p[1] for p in pairs)
    n = args.repeats
    rows = [
        ("import rooflinekit + transformers, load config (once per process)", f"{import_s:.2f} s"),
        ("bare meta forward, B=48, S=32768 (build + forward)", f"{bare_s:.3f} s"),
        ("rooflinekit profile, B=48, S=32768 (build, capture, attribute, report, to_dict)", f"{tool_s:.3f} s"),
        (f"ratio profile / bare forward (median of {n} pairs; range)",
         f"{ratio:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"),
        ("the same ratio in process CPU time", f"{cpu_ratio:.2f}x"),
        ("ops recorded / modules", f"{len(report['ops'])} / {report['model']['modules']}"),
        ("parameters", f"{report['model']['parameters'] / 1e9:.1f} B"),
    ]
    runs = max(3, n // 3)
    Recorder.memo_meta = False
    plain = [timed(lambda: bare(w, source)) + timed(lambda: analyse(w, source)) for _ in range(runs)]
    Recorder.memo_meta = True
    plain_ratio = statistics.median(p[2] / p[0] for p in plain)
    rows.append((f"profile with the meta memo off (median of {runs} pairs), ratio to the bare forward",
                 f"{statistics.median(p[2] for p in plain):.3f} s, {plain_ratio:.2f}x"))
    memo = run_profile(source, w, Deployment("H800")).capture.memo_counts
    rows.append(("meta memo: calls answered from it / kernels run", f"{memo[0]} / {memo[1]}"))
    for label, kw in [("context 1024", {"context": 1024}), ("context 131072", {"context": 131072}),
                      ("batch 1", {"batch": 1})]:
        wk = workload(**kw)
        rows.append((f"profile, {label}", f"{median_of(runs, lambda wk=wk: analyse(wk, source)):.3f} s"))
    per_layer = []
    for layers in (15, 30, 61):
        src = source_for(layers)
        wk = workload(layers=layers)
        analyse(wk, src)
        seconds = median_of(runs, lambda wk=wk, src=src: analyse(wk, src))
        per_layer.append(seconds / layers)
        rows.append((f"profile, {layers} layers", f"{seconds:.3f} s ({1000 * seconds / layers:.1f} ms/layer)"))
    spread = (max(per_layer) - min(per_layer)) / statistics.mean(per_layer)
    rows.append(("spread of ms/layer across 15/30/61 layers", f"{100 * spread:.0f}%"))
    rows.append(("peak RSS of this process", f"{peak_rss_mb():.0f} MB"))

    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if args.markdown:
        lines = ["| measurement | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    if ratio > TARGET_RATIO:
        print(f"over the target: {ratio:.2f}x > {TARGET_RATIO}x", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
