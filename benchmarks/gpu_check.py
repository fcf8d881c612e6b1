"""GPU check: predicted (calibrated ceilings) vs measured decode, per attention layer and per step.

On a CUDA machine:

    python benchmarks/gpu_check.py                      # writes docs/gpu_check.md
    python benchmarks/gpu_check.py --output /tmp/check.md --json-dir /tmp/reports

1. calibrates the GPU (`rooflinekit calibrate`: copy bandwidth, matmul throughput per dtype) into
   a temporary entry;
2. runs measured decode (`profile --measure`) for the GQA and MLA examples at 32K context and
   batches 1, 4, 16, 48 with layers=2 (other dimensions: the examples' defaults, Llama-3-8B-like
   GQA and DeepSeek-V3 MLA in absorbed mode), placed on the calibrated entry and compared with
   the datasheet entry (`--compare-hardware`);
3. writes a Markdown table of predicted vs measured time per attention layer and per step.

Without CUDA it exits with one clear line. `--device cpu --small` runs the same flow with tiny
models on the CPU (a smoke test of the script; the numbers mean nothing for a GPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = {
    "GQA": ("examples/llama_gqa.py", {}),
    "MLA": ("examples/deepseek_mla.py", {"mode": "absorbed"}),
}
SMALL = {
    "GQA": {"hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512, "vocab": 1000},
    "MLA": {"hidden": 256, "heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 16, "v_head_dim": 32, "intermediate": 512, "vocab": 1000},
}


def batch_list(text: str) -> list[int]:
    """argparse type for --batches: '1,4,16' -> [1, 4, 16], comma-separated positive integers (order
    kept, duplicates dropped)."""
    items: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{part}' is not an integer (give e.g. 1,4,16)") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{n}: every batch must be at least 1")
        if n not in items:
            items.append(n)
    if not items:
        raise argparse.ArgumentTypeError("give at least one batch")
    return items


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (only with --small)")
    p.add_argument("--small", action="store_true", help="tiny models, context 64, batches 1,2: a smoke test")
    p.add_argument("--output", default=str(ROOT / "docs" / "gpu_check.md"), help="Markdown file to write")
    p.add_argument("--json-dir", default=None, help="also write each JSON report here")
    p.add_argument("--context", type=int, default=None, help="default 32768 (64 with --small)")
    p.add_argument("--batches", default=None, type=batch_list,
                   help="comma-separated; default 1,4,16,48 (1,2 with --small)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dtype", default=None, help="default bf16 on cuda, fp32 on cpu")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--models", default="GQA,MLA")
    return p.parse_args(argv)


def fail(message: str) -> None:
    print(f"gpu_check: {message}", file=sys.stderr)
    sys.exit(2)


def fmt_s(value) -> str:
    from rooflinekit.core.units import seconds

    return seconds(value)


def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def run(args) -> str:
    import torch

    from rooflinekit.analyses.calibrate import calibrate, datasheet_entry, save
    from rooflinekit.analyses.profile import ReportOptions, run_profile
    from rooflinekit.core.request import Deployment, Workload
    from rooflinekit.core.units import si
    from rooflinekit.stages.hardware import hardware_db
    from rooflinekit.stages.model_source import load_source

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail("no CUDA device is available here: this check needs an NVIDIA GPU "
             "(for a CPU smoke test of the script: --device cpu --small)")
    if device == "cpu" and not args.small:
        fail("--device cpu is only a smoke test: add --small")
    context = args.context or (64 if args.small else 32768)
    batches = args.batches or ([1, 2] if args.small else [1, 4, 16, 48])
    dtype = args.dtype or ("bf16" if device.startswith("cuda") else "fp32")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        fail(f"--models {args.models}: use a comma-separated subset of {','.join(MODELS)}")

    db = hardware_db()
    sheet = datasheet_entry(device, db)
    started = time.perf_counter()
    cal = calibrate(device, size_mb=32 if args.small else None, datasheet=sheet)
    with tempfile.TemporaryDirectory(prefix="rooflinekit-gpu-check-") as tmp:
        entry = save(cal, f"{sheet or cal.device_name} calibrated (gpu_check)", Path(tmp) / "calibrated.toml")
        print(f"calibrated {cal.device_name}: {si(cal.bandwidth, 'B/s')}, "
              + ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in cal.peaks.items()), file=sys.stderr)

        step_rows, att_rows = [], []
        for label in models:
            path, base = MODELS[label]
            for batch in batches:
                options = dict(base, layers=args.layers, **(SMALL[label] if args.small else {}))
                workload = Workload("decode", batch, context, dtype, device, tuple(sorted(options.items())))
                t0 = time.perf_counter()
                result = run_profile(load_source(str(ROOT / path), options), workload, Deployment(str(entry)),
                                 options=ReportOptions(measure=True, warmup=args.warmup, repeats=args.repeats,
                                                       compare_hardware=sheet))
                r = result.report.to_dict()
                if args.json_dir:
                    out = Path(args.json_dir)
                    out.mkdir(parents=True, exist_ok=True)
                    from rooflinekit.outputs.render import to_json

                    (out / f"{label.lower()}_b{batch}_s{context}.json").write_text(to_json(r))
                t, m = r["totals"], r["totals"]["measured"]
                alt = t.get("placement_alt", {})
                expected = None
                if sheet:  # the expected step of the same request on the datasheet entry, counted on meta
                    counted = run_profile(load_source(str(ROOT / path), options),
                                          Workload("decode", batch, context, dtype, "meta", workload.options),
                                          Deployment(sheet), options=ReportOptions(measure=False))
                    expected = counted.report.totals.expected_step_s
                step_rows.append([
                    label, batch, fmt_s(t["predicted_step_s"]), fmt_s(alt.get("predicted_step_s")),
                    fmt_s(expected), ratio(m["step_time_s"], expected),
                    fmt_s(m["step_time_s"]), fmt_s(m["op_time_s"]), fmt_s(m["unattributed_s"]),
                    fmt_s(m["step_time_plain_s"]), ratio(m["op_time_s"], t["predicted_step_s"]),
                    pct(m["mfu"]), pct(m["hfu"]), pct(m["mbu"]), t["bound"],
                ])
                for a in r["attention"]:
                    am = a.get("measured") or {}
                    pmin = a.get("placement_min") or {}
                    att_rows.append([
                        label, batch, a["module"], a["arch"] + (f"/{a['mode']}" if a.get("mode") else ""),
                        fmt_s(am.get("predicted_ops_s")), fmt_s(a["placement_executed"]["time_bound_s"]),
                        fmt_s(pmin.get("time_bound_s")), fmt_s(am.get("time_s")),
                        ratio(am.get("time_s"), am.get("predicted_ops_s")), pct(am.get("mbu")), pct(am.get("mbu_min")),
                        pct(am.get("mfu")),
                    ])
                print(f"{label} batch {batch}: measured step {fmt_s(m['step_time_s'])} "
                      f"(predicted {fmt_s(t['predicted_step_s'])}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
                del result, r
                gc.collect()
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
    from tabulate import tabulate

    spec = db.find(sheet) if sheet else None
    lines = [
        "# GPU check: predicted vs measured decode",
        "",
        f"Generated by `benchmarks/gpu_check.py{' --small --device cpu' if args.small else ''}` on "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC in {time.perf_counter() - started:.0f} s; "
        f"torch {torch.__version__}; device {cal.device_name} ({device}); datasheet entry: {sheet or 'none'}.",
        "",
        f"Workload: decode, context {context}, batches {', '.join(map(str, batches))}, {dtype}, "
        f"layers={args.layers}, warm-up {args.warmup}, {args.repeats} timed repeats (means).",
        "",
        "## Calibrated ceilings",
        "",
        tabulate(
            [["memory bandwidth (copy, read+write)", si(cal.bandwidth, "B/s"),
              si(spec.memory_bandwidth, "B/s") if spec else "-",
              ratio(cal.bandwidth, spec.memory_bandwidth) if spec else "-"]]
            + [[f"{k} matmul n={cal.matmul_n[k]}", si(v, "FLOP/s"),
                si(spec.peak_flops.get(k), "FLOP/s") if spec and spec.peak_flops.get(k) else "-",
                ratio(v, spec.peak_flops.get(k)) if spec and spec.peak_flops.get(k) else "-"]
               for k, v in cal.peaks.items()],
            headers=["ceiling", "measured", "datasheet", "measured/datasheet"], tablefmt="github",
            disable_numparse=True,
        ),
        "",
        "## Whole step",
        "",
        "Predicted = sum over ops of max(FLOPs/peak, bytes/bandwidth) on the calibrated ceilings "
        "(and on the datasheet entry). Expected = the report's expected step on the datasheet entry "
        "(each op's bound over its kernel class's published efficiency, plus launches; counted on "
        "meta, as the model's code is written). Measured step = mean profiler range of one forward plus "
        "synchronisation; ops = sum of the kernel time attributed to counted ops; unattributed = the "
        "rest (launch gaps, Python). MFU uses model FLOPs, HFU executed FLOPs, MBU executed bytes, all "
        "against the calibrated ceilings.",
        "",
        tabulate(step_rows, headers=["model", "batch", "predicted (calibrated)", "predicted (datasheet)",
                                     "expected (datasheet)", "measured / expected",
                                     "measured step", "ops", "unattributed", "uninstrumented",
                                     "ops / predicted", "MFU", "HFU", "MBU", "bound"],
                 tablefmt="github", disable_numparse=True),
        "",
        "## Attention layers",
        "",
        "Predicted = sum of the layer's op time bounds (calibrated); whole-layer bound = the layer's "
        "FLOPs and bytes placed as one point; minimum = the architecture-minimum bytes (KV cache read "
        "once) placed. MBU (min) is the minimum bytes over the measured time.",
        "",
        tabulate(att_rows, headers=["model", "batch", "layer", "arch", "predicted", "whole-layer bound",
                                    "minimum bound", "measured", "measured / predicted", "MBU",
                                    "MBU (min bytes)", "MFU"],
                 tablefmt="github", disable_numparse=True),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        from rooflinekit.core.errors import UserError
    except ImportError as exc:  # pragma: no cover
        fail(f"rooflinekit is not importable ({exc}): pip install -e .")
    try:
        text = run(args)
    except UserError as exc:
        fail(str(exc))
    from rooflinekit.core.files import write_atomic

    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.output, text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
