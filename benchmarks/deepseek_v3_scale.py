"""Benchmark: analyse DeepSeek-V3 (671B, 61 layers) in decode on the meta device.

Prints, from one process (ratios are measured in one run; the machine may be shared):
- wall time and peak RSS of `rooflinekit profile` at batch 48, context 32768;
- the time of a bare meta forward of the same model (no recording; MoE experts replaced by a
  zeros_like so routing can run on meta), the floor for any dispatch-level tool;
- the cost at context 1024 vs 131072 and batch 1 vs 48 (must not grow), and at 15/30/61 layers
  (must grow linearly).

Run: python benchmarks/deepseek_v3_scale.py [--markdown FILE.md]  (figures quoted in docs/performance.md)
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "configs" / "deepseek-v3.json"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="best of N for each timing")
    parser.add_argument("--markdown", help="also write the results as a Markdown table here")
    args = parser.parse_args()

    t0 = time.perf_counter()
    from rooflinekit.analyses.profile import profile
    from rooflinekit.stages.capture import call_forward
    from rooflinekit.stages.workload import Workload, build, in_effect, load_source

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
        return profile(src, w, "H800").report.to_dict()

    w = workload()
    bare(w, source)  # first meta forward pays torch's one-off meta-kernel imports
    report = analyse(w, source)
    bare_s = best_of(args.repeats, lambda: bare(w, source))
    tool_s = best_of(args.repeats, lambda: analyse(w, source))
    rows = [
        ("import rooflinekit + transformers, load config (once per process)", f"{import_s:.2f} s"),
        ("bare meta forward, B=48, S=32768 (build + forward)", f"{bare_s:.2f} s"),
        ("rooflinekit profile, B=48, S=32768 (build, capture, attribute, report)", f"{tool_s:.2f} s"),
        ("ratio profile / bare forward", f"{tool_s / bare_s:.2f}x"),
        ("ops recorded / modules", f"{len(report['ops'])} / {report['model']['modules']}"),
        ("parameters", f"{report['model']['parameters'] / 1e9:.1f} B"),
    ]
    for label, kw in [("context 1024", {"context": 1024}), ("context 131072", {"context": 131072}),
                      ("batch 1", {"batch": 1})]:
        wk = workload(**kw)
        rows.append((f"profile, {label}", f"{best_of(args.repeats, lambda wk=wk: analyse(wk, source)):.2f} s"))
    per_layer = []
    for layers in (15, 30, 61):
        src = source_for(layers)
        wk = workload(layers=layers)
        analyse(wk, src)
        seconds = best_of(args.repeats, lambda wk=wk, src=src: analyse(wk, src))
        per_layer.append(seconds / layers)
        rows.append((f"profile, {layers} layers", f"{seconds:.2f} s ({1000 * seconds / layers:.0f} ms/layer)"))
    spread = (max(per_layer) - min(per_layer)) / statistics.mean(per_layer)
    rows.append(("spread of ms/layer across 15/30/61 layers", f"{100 * spread:.0f}%"))
    rows.append(("peak RSS of this process", f"{peak_rss_mb():.0f} MB"))

    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if args.markdown:
        lines = ["| measurement | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
