"""Benchmark: coverage of transformers' model types. Every `model_type` the installed transformers'
AutoModelForCausalLM can build, from its default config (`hf:MODEL_TYPE`) cut to 2 layers
(`-O layers=2`), profiled on meta in two phases: decode (batch 2, context 1024) and prefill (batch 1,
context 512), through rooflinekit's own API, as `rooflinekit profile hf:MODEL_TYPE` would.

Each type runs in its own process with a time limit, so that one hang or crash does not stop the
run; progress goes to stderr. The result is docs/coverage.md: a row per type with pass/fail per
phase, the mixers found per layer (architectures and counts) and, for a failure, the one-line
reason with where it arose and whose it is.

    python benchmarks/hf_coverage.py [--jobs 2] [--only llama,bart] [--timeout 300] [--output FILE]

With `--only` the table is printed to stdout instead of written (unless --output is given).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "coverage.md"
#: The two steps every type is profiled at: (phase, batch, context).
PHASES = (("decode", 2, 1024), ("prefill", 1, 512))
LAYERS = 2
#: Why a type fails, where the failure is understood: the construct and whose it is. Keyed by
#: model type; shown only for a failing type, beside the measured error (a stale entry is visible).
_HEAD_DIM = ("transformers 5.24 bug: the default config's head_dim is None and the attention reads it with "
             "getattr(config, 'head_dim', default), so its scaling is None ** -0.5")
KNOWN: dict[str, str] = {
    "cohere_compass_text": ("transformers 5.24 bug: the default config's rope_parameters have no 'full_attention' "
                            "entry, which its layer_types name (KeyError in its rotary embedding)"),
    "dbrx": ("transformers 5.24 bug: the default DbrxConfig's attention config (DbrxAttentionConfig) lacks "
             "rope_theta, which DBRX's rotary embedding reads"),
    "deepseek_v2": ("transformers 5.24 bug: the default DeepseekV2Config has num_experts_per_tok None, which its "
                    "router passes to torch.topk as k"),
    "dots1": ("transformers 5.24 bug: the default Dots1Config leaves num_local_experts / moe_intermediate_size "
              "None, with which its experts call torch.empty"),
    "gemma4_assistant": ("transformers 5.24 bug: the default Gemma4AssistantConfig fails its own validation "
                         "(hidden_size_per_layer_input must be 0)"),
    "gemma4_unified_assistant": ("not a standalone LM: a draft model for speculative decoding whose forward needs "
                                 "the main model's K/V (shared_kv_states), which only its main model's forward "
                                 "makes; rooflinekit does not pair it with one, so it is named here, not profiled"),
    "hunyuan_v1_dense": _HEAD_DIM,
    "hunyuan_v1_moe": _HEAD_DIM,
    "ministral": _HEAD_DIM,
    "lfm2_moe": ("transformers 5.24 bug: the default Lfm2MoeConfig has layer_types None, which its decoder layers "
                 "index"),
    "nemotron": ("transformers 5.24 bug: the default NemotronConfig has num_key_value_heads None (num_heads // None "
                 "in its attention)"),
    "xlnet": ("transformers bug: XLNet makes its attention weights with torch.FloatTensor (fp32) whatever dtype is "
              "asked, so a bf16 model mixes in fp32 weights (einsum dtype error)"),
}


# -- one type, in a worker process ------------------------------------------------------------------


def _innermost(exc: BaseException) -> BaseException:
    """The original error under rooflinekit's one-line wrappers (`raise ... from`, `from None`)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return exc


def _where(exc: BaseException) -> tuple[str, str]:
    """(origin, place): whose code raised, and the file:line in it ("transformers", "modeling_x.py:12")."""
    frames = traceback.extract_tb(exc.__traceback__)
    origin, place = "?", ""
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        if "/torch/" in path and origin == "?":
            origin = "torch"
            place = f"{Path(path).name}:{frame.lineno}"
            continue
        if "/transformers/" in path:
            owner = "transformers"
        elif "/rooflinekit/" in path or "/plugins/" in path or "rooflinekit_plugins" in path:
            owner = "rooflinekit"
        else:
            continue
        where = f"{path.split('/transformers/')[-1] if owner == 'transformers' else Path(path).name}:{frame.lineno}"
        if origin in ("?", "torch"):
            return (owner if origin == "?" else f"torch via {owner}"), where
    return origin, place


def _mixers(report) -> dict[str, int]:
    """Architecture -> layers, from the report's attention (mixer) rows."""
    counts: Counter[str] = Counter()
    for row in report.attention:
        arch = row.arch if row.recognised else f"unrecognised {row.module_class}"
        if row.mode:
            arch += f" ({row.mode})"
        counts[arch] += 1
    return dict(counts)


def _profile(model_type: str, phase: str, batch: int, context: int, layers: int) -> dict:
    """One profile as a table entry: the mixers found, or why it failed (the innermost error, where
    it arose and whose code raised it)."""
    from rooflinekit.api import profile_file
    from rooflinekit.core.errors import RooflineError

    start = time.perf_counter()
    entry: dict = {}
    try:
        report = profile_file(f"hf:{model_type}", phase=phase, batch=batch, context=context,
                              options={"layers": layers})
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every failure is a row
        inner = _innermost(exc)
        origin, where = _where(inner)
        entry.update(ok=False, user_error=isinstance(exc, RooflineError),
                     reason=" ".join(str(exc).split())[:400], origin=origin, where=where,
                     error=f"{type(inner).__name__}: {' '.join(str(inner).split())[:300]}")
    else:
        entry.update(ok=True, mixers=_mixers(report), kind=report.model.kind,
                     flops=report.totals.flops, kv_bytes_min=report.totals.kv_bytes_min,
                     unrecognised=sum(1 for r in report.attention if not r.recognised))
    entry["seconds"] = round(time.perf_counter() - start, 2)
    return entry


def covering_layers(model_type: str) -> int | None:
    """The fewest first layers of the type's default config that hold one layer of every kind in its
    `layer_types` (a hybrid whose first layers are all linear attention), or None."""
    from transformers import AutoConfig

    try:
        kinds = list(getattr(AutoConfig.for_model(model_type).get_text_config(decoder=True), "layer_types", None) or [])
    except Exception:  # noqa: BLE001
        return None
    if not kinds:
        return None
    wanted = set(kinds)
    return next((n for n in range(1, len(kinds) + 1) if set(kinds[:n]) == wanted), None)


def run_type(model_type: str) -> dict:
    """Profile one model type in both phases: what passed, the mixers, why a phase failed.

    Two retries, each shown in the table: a config transformers rejects at LAYERS layers is profiled
    at the fewest layers that hold every kind of its `layer_types`; a decode beyond the decoder's
    learned positions (Whisper: 448) at that many positions."""
    from rooflinekit_plugins.hf.loader import load_hf_config

    result: dict = {"type": model_type, "phases": {}, "layers": LAYERS}
    try:  # what the loader builds (the failure itself, if any, is the profile's to report)
        source = load_hf_config(f"hf:{model_type}", {"layers": LAYERS})
        result.update(task=source.task, cls=source.class_name)
    except Exception as exc:  # noqa: BLE001
        fewest = covering_layers(model_type) if f"cut to {LAYERS} layers" in str(exc) else None
        if fewest is not None and fewest > LAYERS:
            result["layers"] = fewest
            try:
                source = load_hf_config(f"hf:{model_type}", {"layers": fewest})
                result.update(task=source.task, cls=source.class_name)
            except Exception:  # noqa: BLE001
                pass
    for phase, batch, context in PHASES:
        if result.get("task") == "encoder" and phase == "decode":
            result["phases"][phase] = {"ok": True, "na": True, "seconds": 0.0}
            continue
        entry = _profile(model_type, phase, batch, context, result["layers"])
        limit = re.search(r"beyond the decoder's (\d+) learned positions", entry.get("reason", ""))
        if limit and not entry["ok"]:
            entry = {**_profile(model_type, phase, batch, int(limit.group(1)), result["layers"]),
                     "context": int(limit.group(1)), "first": entry["reason"]}
        result["phases"][phase] = entry
    return result


def worker(model_type: str) -> int:
    """The `--worker TYPE` process: one JSON line on stdout."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # whatever the model prints stays off the result line
    try:
        result = run_type(model_type)
    finally:
        sys.stdout = real_stdout
    print(json.dumps(result), flush=True)
    return 0


# -- the run: every type in a subprocess --------------------------------------------------------------


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def run_one(model_type: str, timeout: float) -> dict:
    """One type in a fresh process; a timeout or crash is that type's failure."""
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "--worker", model_type], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        reason = f"no answer within {timeout:.0f} s (killed)"
        return {"type": model_type, "seconds": round(time.perf_counter() - start, 1),
                "phases": {p: {"ok": False, "reason": reason, "origin": "?", "where": ""} for p, _, _ in PHASES}}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " ".join(done.stderr.strip().splitlines()[-1:])[:300]
        reason = f"worker exited {done.returncode}: {tail}"
        return {"type": model_type, "seconds": round(time.perf_counter() - start, 1),
                "phases": {p: {"ok": False, "reason": reason, "origin": "?", "where": ""} for p, _, _ in PHASES}}
    result = json.loads(lines[-1])
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def _status(entry: dict) -> str:
    if entry.get("na"):
        return "n/a"
    at = f" (context {entry['context']})" if entry.get("context") else ""
    if entry.get("ok"):
        return ("pass" if not entry.get("unrecognised") else "pass*") + at
    return "**fail**" + at


def _mixer_text(entry: dict) -> str:
    mixers = entry.get("mixers")
    if mixers is None:
        return ""
    if not mixers:
        return "none found"
    return ", ".join(f"{arch} x{n}" for arch, n in mixers.items())


def _reason(result: dict) -> str:
    """The one-line reason for a failing type: the known construct and owner, then what was measured."""
    failed = [(p, e) for p, e in result["phases"].items() if not e.get("ok")]
    if not failed:
        return ""
    texts = []
    for phase, entry in failed:
        where = f" [{entry['origin']}: {entry['where']}]" if entry.get("where") else ""
        text = f"{entry['reason']}{where}"
        if all(t != text for _, t in texts):
            texts.append((phase, text))
    measured = "; ".join(text if len(texts) == 1 else f"{phase}: {text}" for phase, text in texts)
    known = KNOWN.get(result["type"])
    return f"{known} (measured: {measured})" if known else measured


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(results: list[dict], seconds: float, jobs: int) -> str:
    import torch
    import transformers

    n = len(results)
    both = sum(all(e.get("ok") for e in r["phases"].values()) for r in results)
    per_phase = {p: sum(r["phases"][p].get("ok", False) for r in results) for p, _, _ in PHASES}
    steps = ", ".join(f"{p} (batch {b}, context {s})" for p, b, s in PHASES)
    lines = [
        "# Coverage: transformers model types",
        "",
        "Generated by `python benchmarks/hf_coverage.py` (do not edit by hand). Every `model_type` of the",
        "installed transformers' `AutoModelForCausalLM` mapping, built from its default config",
        f"(`rooflinekit profile hf:MODEL_TYPE -O layers={LAYERS}`) on the meta device, bf16, profiled at {steps}.",
        "Encoders (BERT-style) are built as masked LMs, with no decode step (*n/a*, counted as passing), and",
        "encoder-decoders as sequence-to-sequence models (see docs/transformers.md). *pass\\** means the",
        "profile completed but some mixer layer was not recognised by any plugin (its executed counts are",
        "reported, its minimum is not). Two retries are shown where they happen: a config transformers",
        f"rejects at {LAYERS} layers runs at the fewest layers holding every kind of its `layer_types`",
        "(*-O layers=N*), and a decode past the decoder's learned positions runs at that many (*context N*).",
        "A failure's reason names the construct and whose it is, then the error measured and where it arose.",
        "",
        f"transformers {transformers.__version__}, torch {torch.__version__}, Python {platform.python_version()}; "
        f"{n} types in {seconds / 60:.1f} min with {jobs} jobs.",
        "",
        f"**{both} of {n} types ({100 * both / max(n, 1):.1f}%) profile in both phases**; "
        + ", ".join(f"{p}: {k} of {n}" for p, k in per_phase.items()) + ".",
        "",
        "| model type | built as | decode | prefill | mixers per layer (decode; prefill for encoders) | reason "
        "(failures) |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: r["type"]):
        d, p = r["phases"]["decode"], r["phases"]["prefill"]
        mixers = _mixer_text(d) or _mixer_text(p)
        built = f"{r['cls']}" if r.get("cls") else ""
        if r.get("layers", LAYERS) != LAYERS:
            built += f" (-O layers={r['layers']})"
        lines.append(f"| `{r['type']}` | {built} | {_status(d)} | {_status(p)} | {_cell(mixers)} | {_cell(_reason(r))} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="types profiled at once (processes)")
    parser.add_argument("--only", default=None, help="comma-separated model types (default: all)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per type before it is killed")
    parser.add_argument("--output", default=None, help=f"markdown file (default: {OUTPUT.relative_to(ROOT)}, "
                                                       "or stdout with --only)")
    parser.add_argument("--json", default=None, help="also write the raw results here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    types = model_types()
    if args.only:
        wanted = [t.strip() for t in args.only.split(",") if t.strip()]
        unknown = sorted(set(wanted) - set(types))
        if unknown:
            parser.error(f"not causal-LM model types here: {', '.join(unknown)}")
        types = wanted
    start = time.perf_counter()
    results: list[dict] = []

    def one(model_type: str) -> dict:
        result = run_one(model_type, args.timeout)
        results.append(result)
        marks = ", ".join(f"{p} {'ok' if e.get('ok') else 'FAIL'}" for p, e in result["phases"].items())
        print(f"[{len(results)}/{len(types)}] {model_type}: {marks} ({result['seconds']} s)", file=sys.stderr,
              flush=True)
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, types))
    seconds = time.perf_counter() - start
    text = markdown(results, seconds, args.jobs)
    if args.json:
        Path(args.json).write_text(json.dumps(sorted(results, key=lambda r: r["type"]), indent=1))
    output = args.output or (None if args.only else str(OUTPUT))
    if output:
        Path(output).write_text(text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    both = sum(all(e.get("ok") for e in r["phases"].values()) for r in results)
    print(f"{both} of {len(results)} types pass both phases ({seconds:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
