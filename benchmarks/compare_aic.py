"""`rooflinekit plan` beside NVIDIA's AIConfigurator on twelve planning questions.

AIConfigurator (pip `aiconfigurator`, Apache-2.0) prices TensorRT-LLM configurations from a bundled
database of kernels measured on each GPU, and searches aggregated against disaggregated serving
for TTFT / TPOT targets, as `rooflinekit plan` does from the model's own code and a roofline with
achievable fractions. For each question (dense, MoE, MLA; H100 SXM and H200 SXM; fp8 weights and
KV cache, as engines serve on Hopper):

- each tool's best configuration (layout, batch, TTFT, TPOT, output tokens/s per GPU);
- each tool's figures for the other's best (rooflinekit prices AIConfigurator's layout and batch;
  AIConfigurator's `cli estimate` prices rooflinekit's);
- the steps underneath, where the two differ: one decode step of AIConfigurator's decode layout
  and batch (its static-batch TPOT, the mean over the generation, against rooflinekit's mean over
  the same contexts) and one prefill of a prompt (batch 1), with AIConfigurator's per-op times.

AIConfigurator is not a rooflinekit dependency: with `--aic-python PYTHON` (an interpreter with
`aiconfigurator` installed) the script asks it (benchmarks/aic_peer.py: its searches, then its
estimates of rooflinekit's answers) and keeps the answers in benchmarks/compare_aic_peer.json;
without, it reads that file. Writes benchmarks/compare_aic.json and the table between the markers
in docs/plan.md.

    python benchmarks/compare_aic.py [--aic-python /tmp/aic/bin/python] [--only q1 q9]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import CHUNKS, PlanOptions
from rooflinekit.analyses.plan_pricing import Planner
from rooflinekit.core.plan import PlanConfig, Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.stages.expected import MATMUL_OPS
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_parts  # noqa: E402  (one step split by part: shared with deepseek_layout.py)
from doc_table import put_between  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(__file__).with_name("compare_aic_peer.json")
OUT = Path(__file__).with_name("compare_aic.json")
DOC = ROOT / "docs/plan.md"
BEGIN, END = "<!-- aic-comparison -->", "<!-- /aic-comparison -->"
SYSTEMS = {"h100_sxm": "H100 SXM5", "h200_sxm": "H200 SXM"}
#: The checkpoints' fp8 formats as AIConfigurator reads them from config.json (it takes no format
#: flags in its search): per-tensor dynamic fp8 for the dense and Mixtral models (its GEMM "fp8",
#: fp8 KV cache), DeepSeek-V3's own 128x128 blocks ("fp8_block", fp8 KV cache).
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}

#: (id, model config, AIConfigurator system, GPUs, ISL, OSL, TTFT ms, TPOT ms)
QUESTIONS = (
    ("q1", "llama-3.1-8b", "h100_sxm", 8, 4096, 1024, 2000, 20),
    ("q2", "llama-3.1-8b", "h200_sxm", 8, 1024, 1024, 1000, 10),
    ("q3", "llama-3.1-70b", "h100_sxm", 8, 4096, 1024, 2000, 50),
    ("q4", "llama-3.1-70b", "h200_sxm", 8, 4096, 1024, 2000, 50),
    ("q5", "llama-3.1-70b", "h200_sxm", 16, 2048, 512, 1000, 30),
    ("q6", "qwen2.5-14b", "h100_sxm", 8, 4096, 1024, 2000, 30),
    ("q7", "mixtral-8x7b", "h100_sxm", 8, 4096, 1024, 2000, 50),
    ("q8", "mixtral-8x7b", "h200_sxm", 8, 1024, 1024, 1000, 20),
    ("q9", "deepseek-v3", "h200_sxm", 8, 4096, 1024, 3000, 50),
    ("q10", "deepseek-v3", "h200_sxm", 16, 4096, 1024, 3000, 50),
    ("q11", "deepseek-v3", "h100_sxm", 16, 2048, 1024, 3000, 50),
    ("q12", "deepseek-v3", "h200_sxm", 32, 4096, 1024, 3000, 50),
)
#: Above this relative difference a figure is explained in docs/plan.md.
EXPLAIN = 0.15


# -- AIConfigurator's side ------------------------------------------------------------------------


def model_dir(tmp: Path, name: str) -> str:
    """A directory holding the example config with the checkpoint's fp8 format, as AIConfigurator reads it."""
    config = json.loads((ROOT / "examples/configs" / f"{name}.json").read_text())
    config["quantization_config"] = FP8_BLOCK if name.startswith("deepseek") else FP8
    out = tmp / name
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def ask(python: str, requests: list[dict]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(requests, f)
    run = subprocess.run([python, str(Path(__file__).with_name("aic_peer.py")), f.name], capture_output=True,
                         text=True, check=False)
    if run.returncode:
        sys.exit(f"compare_aic: AIConfigurator failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


def aic_layout(side: dict) -> dict:
    """An AIConfigurator row's parallel sizes as `cli estimate` keyword arguments."""
    out = {"tp_size": int(side["tp"]), "pp_size": int(side["pp"]), "attention_dp_size": int(side["dp"])}
    if side.get("moe_ep") not in (None, "", 0):
        out.update(moe_tp_size=int(side["moe_tp"]), moe_ep_size=int(side["moe_ep"]))
    return out


def our_layout_args(c: PlanConfig, moe: bool, role: str | None = None) -> dict:
    """rooflinekit's instance as `cli estimate` arguments (DEPn: attention DP n, experts over EP n)."""
    tp, ep = (c.prefill.tp, c.prefill.ep) if role == "prefill" else (c.decode.tp, c.decode.ep) if role else (c.tp, c.ep)
    dep = tp == 1 and ep > 1
    out = {"tp_size": tp, "pp_size": c.pp if role != "prefill" else 1, "attention_dp_size": ep if dep else 1}
    if moe:
        out.update(moe_tp_size=1 if dep or ep == tp else tp, moe_ep_size=ep)
    return out


# -- rooflinekit's side ---------------------------------------------------------------------------


def options(q: tuple, **more) -> PlanOptions:
    _, _, system, gpus, *_ = q
    return PlanOptions(gpus=gpus, hardware=SYSTEMS[system], weight_dtypes=("fp8",), kv_dtypes=("fp8",), check=False,
                       **more)


def targets(q: tuple) -> Targets:
    *_, isl, osl, ttft, tpot = q
    return Targets(isl, osl, ttft_s=ttft / 1e3, tpot_s=tpot / 1e3)


def ours_layout(side: dict, moe: bool) -> tuple[int, int]:
    """AIConfigurator's instance in rooflinekit's layouts: attention DP n is DEPn (experts over EP n,
    where AIConfigurator may split them by MoE TP instead), else TP with experts over the TP group."""
    tp, dp = int(side["tp"]), int(side["dp"])
    if dp > 1:
        return 1, dp * tp
    return tp, tp if moe else 1


def price_aic_best(q: tuple, row: dict, moe: bool, disaggregated: bool) -> PlanConfig | None:
    """rooflinekit's figures for AIConfigurator's best: its layout(s) and batch, rooflinekit's chunk
    (the best of those searched) and pool split."""
    host = get_host()
    if disaggregated:
        p_layout, d_layout = ours_layout(row["prefill"], moe), ours_layout(row["decode"], moe)
        opts = options(q, prefill_layouts=(p_layout,), decode_layouts=(d_layout,), modes=("disaggregated",))
    else:
        d_layout = ours_layout(row, moe)
        opts = options(q, decode_layouts=(d_layout,), modes=("aggregated",))
    planner = Planner(load_source(str(ROOT / "examples/configs" / f"{q[1]}.json"), {}, host), targets(q), opts,
                      host=host)
    dv = planner.variant(planner.deployment(*d_layout, "fp8", "fp8"), "fp8")
    if isinstance(dv, str):
        return None
    dv = replace(dv, format="fp8")
    side = row["decode"] if disaggregated else row
    batch, pp = int(side["bs"]), int(side["pp"])
    if disaggregated:
        pv = replace(planner.variant(planner.deployment(*p_layout, "fp8", "fp8"), "fp8"), format="fp8")
        return planner.disaggregated(pv, dv, pp, batch)
    priced = [planner.aggregated(dv, pp, batch, chunk) for chunk in CHUNKS]
    return max(priced, key=lambda c: (c.meets_slo, c.tokens_per_s_per_gpu or 0.0))


def steps(q: tuple, decode: tuple[int, int], batch: int, prefill: tuple[int, int]) -> dict:
    """rooflinekit's mean decode step over the generation at `batch` and one prefill of a prompt,
    each also split into the parts AIConfigurator names (PARTS: the decode step at the mean context,
    where its attention, affine in the context, takes its mean)."""
    host = get_host()
    planner = Planner(load_source(str(ROOT / "examples/configs" / f"{q[1]}.json"), {}, host), targets(q),
                      options(q), host=host)
    t = planner.targets
    dv = planner.variant(planner.deployment(*decode, "fp8", "fp8"), "fp8")
    pv = planner.variant(planner.deployment(*prefill, "fp8", "fp8"), "fp8")
    fitter = planner.fitter_for(dv.dtype)
    middle = replace(fitter.base, phase="decode", batch=batch, context=t.isl + (t.osl - 1) // 2, decode_q_len=1)
    shape = planner._shapes(True)[1]
    prompt = fitter._workload(shape, 1, shape.contexts[0])
    return {"decode_s": dv.decode.mean_expected(batch, t.isl, t.isl + t.osl),
            "prefill_s": pv.prefill.expected(1, pv.prefill.design.contexts[0]),
            "decode_parts": _merged(step_parts.parts(planner, dv, middle, part_of)),
            "prefill_parts": _merged(step_parts.parts(planner, pv, prompt, part_of))}


#: The parts both tools' step breakdowns can be put in.
PARTS = ("attention", "experts", "GEMMs", "other")


def part_of(op, in_attention: bool) -> str:
    """rooflinekit's op records in PARTS: the experts with their all-to-all (AIConfigurator's
    dispatch), other products, the rest (norms, element-wise, embedding, all-reduce, launches)."""
    if op.kind == "collective" or op.attrs.get("collective"):
        return "experts" if op.attrs.get("collective") == "all_to_all" else "other"
    if in_attention:
        return "attention"
    if op.name.startswith("moe."):
        return "experts"
    return "GEMMs" if op.name in MATMUL_OPS or (op.kind == "modelled" and op.flops and op.param_bytes) else "other"


def _merged(found: dict[str, float]) -> dict[str, float]:
    out = dict.fromkeys(PARTS, 0.0)
    for key, value in found.items():
        if key != "step":
            out[key if key in out else "other"] += value
    return {k: v * 1e3 for k, v in out.items()}


def aic_parts(ops_ms: dict[str, float]) -> dict[str, float]:
    """AIConfigurator's per-op times (ms) in PARTS."""
    out = dict.fromkeys(PARTS, 0.0)
    for name, ms in ops_ms.items():
        # DeepSeek-V3: its mla_block holds MLA's projections with the attention (rooflinekit: GEMMs)
        # and its moe_overlap the shared expert with the routed ones
        key = ("attention" if "attention" in name or "mla" in name else "experts" if "moe" in name
               else "GEMMs" if name.endswith("_gemm") else "other")
        out[key] += ms
    return out


def label(c: PlanConfig | None) -> str:
    if c is None:
        return "none"
    return c.label().split(", fp8")[0] + f", B {c.batch}"


def aic_label(row: dict | None, disaggregated: bool) -> str:
    if not row:
        return "none"
    if disaggregated:
        p, d = row["prefill"], row["decode"]
        return f"disagg {p['workers']}x {p['parallel']} : {d['workers']}x {d['parallel']} B {d['bs']}"
    return f"agg {row['parallel']} B {row['bs']}"


# -- single steps (--steps) -----------------------------------------------------------------------

#: (model, system, format, (TP, EP), phase, batch, ISL): decode steps are the mean over a static
#: batch's generation (ISL 4096, OSL 1024 unless ISL says otherwise), prefill steps one prompt.
#: Format "fp8": fp8 GEMMs and KV cache (DeepSeek-V3: its 128x128 blocks); "bf16": all bf16.
STEPS = (
    ("llama-3.1-8b", "h100_sxm", "fp8", (1, 1), "decode", 1, 4096),
    ("llama-3.1-8b", "h100_sxm", "fp8", (1, 1), "decode", 64, 4096),
    ("llama-3.1-8b", "h100_sxm", "fp8", (1, 1), "decode", 256, 4096),
    ("llama-3.1-8b", "h100_sxm", "bf16", (1, 1), "decode", 64, 4096),
    ("llama-3.1-8b", "h100_sxm", "fp8", (1, 1), "prefill", 1, 4096),
    ("llama-3.1-8b", "h100_sxm", "bf16", (1, 1), "prefill", 1, 1024),
    ("llama-3.1-8b", "h200_sxm", "fp8", (1, 1), "decode", 8, 4096),
    ("llama-3.1-8b", "h200_sxm", "fp8", (1, 1), "decode", 512, 1024),
    ("llama-3.1-8b", "h200_sxm", "fp8", (2, 1), "decode", 128, 4096),
    ("llama-3.1-8b", "h200_sxm", "fp8", (1, 1), "prefill", 1, 1024),
    ("llama-3.1-70b", "h100_sxm", "fp8", (2, 1), "decode", 1, 4096),
    ("llama-3.1-70b", "h100_sxm", "fp8", (2, 1), "decode", 64, 4096),
    ("llama-3.1-70b", "h100_sxm", "fp8", (4, 1), "decode", 256, 4096),
    ("llama-3.1-70b", "h100_sxm", "bf16", (4, 1), "decode", 64, 4096),
    ("llama-3.1-70b", "h100_sxm", "fp8", (2, 1), "prefill", 1, 4096),
    ("llama-3.1-70b", "h100_sxm", "bf16", (4, 1), "prefill", 1, 2048),
    ("llama-3.1-70b", "h200_sxm", "fp8", (1, 1), "decode", 32, 4096),
    ("llama-3.1-70b", "h200_sxm", "fp8", (1, 1), "decode", 128, 4096),
    ("llama-3.1-70b", "h200_sxm", "fp8", (8, 1), "decode", 1, 4096),
    ("llama-3.1-70b", "h200_sxm", "fp8", (8, 1), "decode", 256, 4096),
    ("llama-3.1-70b", "h200_sxm", "fp8", (1, 1), "prefill", 1, 4096),
    ("llama-3.1-70b", "h200_sxm", "fp8", (8, 1), "prefill", 1, 1024),
    ("qwen2.5-14b", "h100_sxm", "fp8", (1, 1), "decode", 16, 4096),
    ("qwen2.5-14b", "h100_sxm", "fp8", (1, 1), "decode", 128, 4096),
    ("qwen2.5-14b", "h100_sxm", "bf16", (2, 1), "decode", 64, 4096),
    ("qwen2.5-14b", "h100_sxm", "fp8", (1, 1), "prefill", 1, 4096),
    ("mixtral-8x7b", "h100_sxm", "fp8", (2, 2), "decode", 1, 4096),
    ("mixtral-8x7b", "h100_sxm", "fp8", (2, 2), "decode", 64, 4096),
    ("mixtral-8x7b", "h100_sxm", "fp8", (1, 4), "decode", 32, 4096),
    ("mixtral-8x7b", "h100_sxm", "fp8", (2, 2), "prefill", 1, 4096),
    ("mixtral-8x7b", "h200_sxm", "fp8", (1, 8), "decode", 64, 4096),
    ("mixtral-8x7b", "h200_sxm", "fp8", (1, 8), "decode", 256, 1024),
    ("mixtral-8x7b", "h200_sxm", "fp8", (8, 8), "decode", 8, 4096),
    ("mixtral-8x7b", "h200_sxm", "fp8", (8, 8), "prefill", 1, 4096),
    ("deepseek-v3", "h200_sxm", "fp8", (1, 8), "decode", 1, 4096),
    ("deepseek-v3", "h200_sxm", "fp8", (1, 8), "decode", 16, 4096),
    ("deepseek-v3", "h200_sxm", "fp8", (1, 8), "decode", 64, 4096),
    ("deepseek-v3", "h200_sxm", "fp8", (1, 8), "decode", 128, 2048),
    ("deepseek-v3", "h200_sxm", "fp8", (1, 16), "decode", 32, 4096),
    ("deepseek-v3", "h100_sxm", "fp8", (1, 16), "decode", 8, 4096),
    ("deepseek-v3", "h100_sxm", "fp8", (1, 16), "decode", 32, 2048),
    ("deepseek-v3", "h100_sxm", "fp8", (1, 16), "decode", 64, 4096),
)
STEPS_BEGIN, STEPS_END = "<!-- aic-steps -->", "<!-- /aic-steps -->"
STEPS_OUT = Path(__file__).with_name("compare_aic_steps.json")
VALIDATION = ROOT / "docs/validation.md"


def step_id(step: tuple) -> str:
    model, system, fmt, (tp, ep), phase, batch, isl = step
    layout = f"DEP{ep}" if tp == 1 and ep > 1 else f"TP{tp}" + (f"EP{ep}" if ep > 1 else "")
    return f"{model}/{system}/{fmt}/{layout}/{phase}/B{batch}/{isl}"


def step_model_dir(tmp: Path, name: str, fmt: str) -> str:
    if fmt == "fp8":
        return model_dir(tmp, name)
    out = tmp / f"{name}-bf16"
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text((ROOT / "examples/configs" / f"{name}.json").read_text())
    return str(out)


def step_request(tmp: Path, step: tuple) -> dict:
    model, system, fmt, (tp, ep), phase, batch, isl = step
    dep = tp == 1 and ep > 1
    layout = {"tp_size": tp, "attention_dp_size": ep if dep else 1}
    if ep > 1:
        layout.update(moe_tp_size=1, moe_ep_size=ep)
    return {"id": f"step/{step_id(step)}", "kind": "estimate", "model_path": step_model_dir(tmp, model, fmt),
            "system": system, "mode": "static_gen" if phase == "decode" else "static_ctx", "batch_size": batch,
            "isl": isl, "osl": 1024 if phase == "decode" else 2, **layout}


def our_step(step: tuple, efficiency: str | None = None) -> dict:
    """rooflinekit's figure for one step, and its parts (PARTS, ms), priced with the efficiency
    source `efficiency` (None: the published table)."""
    model, system, fmt, (tp, ep), phase, batch, isl = step
    osl = 1024
    host = get_host()
    opts = PlanOptions(gpus=max(tp, ep), hardware=SYSTEMS[system], weight_dtypes=(fmt,), kv_dtypes=(fmt,),
                       check=False, dtype=fmt if fmt == "fp8" else "bf16", efficiency=efficiency)
    planner = Planner(load_source(str(ROOT / "examples/configs" / f"{model}.json"), {}, host),
                      Targets(isl, osl), opts, host=host)
    v = planner.variant(planner.deployment(tp, ep, fmt, kv_dtype=fmt), "fp8" if fmt == "fp8" else "bf16")
    if isinstance(v, str):
        return {"error": v}
    fitter = planner.fitter_for(v.dtype)
    if phase == "decode":
        seconds = v.decode.mean_expected(batch, isl, isl + osl)
        workload = replace(fitter.base, phase="decode", batch=batch, context=isl + (osl - 1) // 2, decode_q_len=1)
    else:
        seconds = v.prefill.expected(1, isl)
        workload = replace(fitter.base, phase="prefill", batch=1, context=isl, decode_q_len=1)
    return {"ms": seconds * 1e3, "parts": _merged(step_parts.parts(planner, v, workload, part_of))}


#: The MoE tables' token distribution AIConfigurator's estimates read (its default workload distribution).
AIC_ROUTING = "power_law_1.2"


def as_estimated(step: tuple) -> str:
    """The aic efficiency source of the step's GPU with the settings AIConfigurator's estimate used:
    its MoE routing (AIC_ROUTING) and the checkpoint's fp8 format (fp8_block for DeepSeek-V3's
    128x128 blocks, model_dir)."""
    from rooflinekit_plugins.aic.table import variant  # the aic extra: only where asked

    block = step[0].startswith("deepseek") and step[2] == "fp8"
    return str(variant(hardware_db(get_host()).get(SYSTEMS[step[1]]), routing=AIC_ROUTING,
                       fp8="fp8_block" if block else None))


def run_steps(aic_python: str | None, efficiency: str | None = None) -> None:
    peer = json.loads(PEER.read_text()) if PEER.exists() else {}
    tmp = Path(tempfile.mkdtemp(prefix="compare_aic_steps_"))
    if aic_python:
        missing = [step_request(tmp, s) for s in STEPS if f"step/{step_id(s)}" not in peer]
        if missing:
            peer.update(ask(aic_python, missing))
            PEER.write_text(json.dumps(peer, indent=1, default=str) + "\n")
    rows = []
    for step in STEPS:
        ours = our_step(step)
        theirs = peer.get(f"step/{step_id(step)}", {})
        aic_ms = theirs.get("tpot") if step[4] == "decode" else theirs.get("ttft")
        rows.append({"id": step_id(step), "ours_ms": ours.get("ms"), "aic_ms": aic_ms or None,
                     "ours_parts": ours.get("parts"), "aic_parts": aic_parts(theirs.get("ops_ms") or {}),
                     "error": ours.get("error") or theirs.get("error")})
        if efficiency:  # the same step priced with another efficiency source, beside the published one
            source = our_step(step, as_estimated(step) if efficiency == "aic" else efficiency)
            rows[-1].update(efficiency=efficiency, ours_source_ms=source.get("ms"),
                            ours_source_parts=source.get("parts"))
        print(f"compare_aic: {rows[-1]['id']}: {rows[-1]['ours_ms']} / {aic_ms}", file=sys.stderr)
    STEPS_OUT.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    table = render_steps(rows)
    print(table)
    put_between(VALIDATION, STEPS_BEGIN, STEPS_END, table)


def render_steps(rows: list[dict]) -> str:
    source = next((r["efficiency"] for r in rows if r.get("efficiency")), None)
    extra = f" ratio with --efficiency {source} |" if source else ""
    lines = ["| step (model / GPU / format / layout / phase / batch / ISL) | ms (ours / AIC) | ratio |" + extra + " "
             + " | ".join(f"{p} (ours / AIC)" for p in PARTS) + " |", "|---|---|---|" + "---|" * (len(PARTS) + bool(source))]
    by_part: dict[str, list[float]] = {p: [] for p in PARTS}
    ratios: dict[str, list[float]] = {"decode": [], "prefill": []}
    for r in rows:
        if r.get("error") or not r.get("aic_ms") or not r.get("ours_ms"):
            lines.append(f"| {r['id']} | n/a ({(r.get('error') or 'no figure')[:80]}) | | " + " | " * (len(PARTS) + bool(source)))
            continue
        ratio = r["ours_ms"] / r["aic_ms"]
        ratios["decode" if "/decode/" in r["id"] else "prefill"].append(ratio)
        cells = []
        for p in PARTS:
            o, a = r["ours_parts"][p], r["aic_parts"][p]
            cells.append(f"{o:.2f} / {a:.2f}")
            if o > 0 and a > 0:
                by_part[p].append(o / a)
        flag = " **" if abs(ratio - 1) > EXPLAIN else ""
        other = (f" {r['ours_source_ms'] / r['aic_ms']:.2f} |" if r.get("ours_source_ms") else " n/a |") if source else ""
        lines.append(f"| {r['id']} | {r['ours_ms']:.2f} / {r['aic_ms']:.2f} | {ratio:.2f}{flag} |{other} "
                     + " | ".join(cells) + " |")

    def med(values: list[float]) -> str:
        values = sorted(values)
        return f"{values[len(values) // 2]:.2f} ({values[0]:.2f}-{values[-1]:.2f}, {len(values)} steps)" if values else "n/a"

    lines += ["", "| rooflinekit / AIConfigurator | median (range, steps) |", "|---|---|"]
    for k, v in ratios.items():
        lines.append(f"| whole {k} step | {med(v)} |")
    if source:
        sourced = [r["ours_source_ms"] / r["aic_ms"] for r in rows if r.get("ours_source_ms") and r.get("aic_ms")]
        near = sum(abs(v - 1) <= 0.05 for v in sourced)
        lines.append(f"| whole step with --efficiency {source} | {med(sourced)}; {near} within 5% |")
    for p, v in by_part.items():
        lines.append(f"| {p} | {med(v)} |")
    apart = [r for r in rows if r.get("ours_source_ms") and r.get("aic_ms") and r.get("ours_source_parts")
             and abs(r["ours_source_ms"] / r["aic_ms"] - 1) > 0.05]
    if source and apart:
        lines += ["", f"Steps more than 5% apart with --efficiency {source}, by part (ours / AIC, ms):", "",
                  "| step | ratio | " + " | ".join(PARTS) + " |", "|---|---|" + "---|" * len(PARTS)]
        for r in apart:
            cells = [f"{r['ours_source_parts'][p]:.2f} / {r['aic_parts'][p]:.2f}" for p in PARTS]
            lines.append(f"| {r['id']} | {r['ours_source_ms'] / r['aic_ms']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic-python", help="an interpreter with aiconfigurator installed: ask it again")
    parser.add_argument("--fresh", action="store_true", help="with --aic-python: search again the questions it answered")
    parser.add_argument("--only", nargs="*", help="question ids")
    parser.add_argument("--render", action="store_true", help="only write the table again from compare_aic.json")
    parser.add_argument("--efficiency", help="with --steps: also price each step with this efficiency source "
                        "(aic, a file), a column beside the published table's")
    parser.add_argument("--steps", action="store_true",
                        help="single steps instead of questions: STEPS against AIConfigurator's static estimates, "
                             "written to docs/validation.md")
    args = parser.parse_args()
    if args.steps:
        return run_steps(args.aic_python, args.efficiency)
    if args.render:
        rows = json.loads(OUT.read_text())
        peer = json.loads(PEER.read_text())
        for r in rows:
            for name, key in (("decode_step", "decode-step"), ("prefill_step", "prefill-step")):
                if r.get(name):
                    r[name]["aic_parts"] = aic_parts(peer.get(f"{r['id']}/{key}", {}).get("ops_ms") or {})
        OUT.write_text(json.dumps(rows, indent=1, default=str) + "\n")
        return write(rows, True)
    questions = [q for q in QUESTIONS if not args.only or q[0] in args.only]
    peer = json.loads(PEER.read_text()) if PEER.exists() else {}
    tmp = Path(tempfile.mkdtemp(prefix="compare_aic_"))
    if args.aic_python:  # its searches (kept unless --fresh: they take minutes), then its estimates
        reqs = [{"id": f"{q[0]}/search", "kind": "search", "model_path": model_dir(tmp, q[1]), "system": q[2],
                 "gpus": q[3], "isl": q[4], "osl": q[5], "ttft_ms": q[6], "tpot_ms": q[7]} for q in questions
                if args.fresh or f"{q[0]}/search" not in peer]
        if reqs:
            peer.update(ask(args.aic_python, reqs))
    ours: dict[str, dict] = {}
    estimates = []
    for q in questions:
        qid, name = q[0], q[1]
        moe = name.startswith(("mixtral", "deepseek"))
        t0 = time.perf_counter()
        result = run_plan(load_source(str(ROOT / "examples/configs" / f"{name}.json"), {}), targets(q), options(q),
                          host=get_host())
        best = result.best_config
        found = peer.get(f"{qid}/search", {})
        mode = "disaggregated" if found.get("chosen") == "disagg" else "aggregated"
        aic_best = found.get(mode)
        cross = price_aic_best(q, aic_best, moe, mode == "disaggregated") if aic_best else None
        entry = {"seconds": time.perf_counter() - t0, "best": asdict(best) if best else None,
                 "best_label": label(best), "for_aic_best": asdict(cross) if cross else None}
        if aic_best:
            dside = aic_best["decode"] if mode == "disaggregated" else aic_best
            pside = aic_best["prefill"] if mode == "disaggregated" else aic_best
            decode, prefill = ours_layout(dside, moe), ours_layout(pside, moe)
            entry["steps"] = steps(q, decode, int(dside["bs"]), prefill)
            entry["steps"].update(decode_layout=decode, decode_batch=int(dside["bs"]), prefill_layout=prefill)
            common = {"model_path": model_dir(tmp, name), "system": q[2], "isl": q[4], "osl": q[5]}
            estimates += [
                {"id": f"{qid}/decode-step", "kind": "estimate", "mode": "static_gen", "batch_size": int(dside["bs"]),
                 **aic_layout(dside), **common},
                {"id": f"{qid}/prefill-step", "kind": "estimate", "mode": "static_ctx", "batch_size": 1,
                 **aic_layout(pside), **common},
            ]
        if best:
            common = {"model_path": model_dir(tmp, name), "system": q[2], "isl": q[4], "osl": q[5]}
            if best.mode == "disaggregated":
                p, d = our_layout_args(best, moe, "prefill"), our_layout_args(best, moe, "decode")
                layout = {**{f"prefill_{k}": v for k, v in p.items()}, **{f"decode_{k}": v for k, v in d.items()},
                          "prefill_batch_size": 1, "decode_batch_size": best.batch,
                          "prefill_num_workers": best.prefill.instances, "decode_num_workers": best.decode.instances}
                estimates.append({"id": f"{qid}/our-best", "kind": "estimate", "mode": "disagg", **layout, **common})
            else:
                estimates.append({"id": f"{qid}/our-best", "kind": "estimate", "mode": "agg", "batch_size": best.batch,
                                  "ctx_tokens": best.chunk, **our_layout_args(best, moe), **common})
        ours[qid] = entry
        print(f"compare_aic: {qid} {name}: rooflinekit {entry['best_label']} "
              f"({best.tokens_per_s_per_gpu if best else 0:,.0f} tok/s/GPU, {entry['seconds']:.0f} s); "
              f"AIConfigurator {aic_label(aic_best, mode == 'disaggregated')}", file=sys.stderr)
    if args.aic_python:
        peer.update(ask(args.aic_python, estimates))
        PEER.write_text(json.dumps(peer, indent=1, default=str) + "\n")
    rows = [compare(q, ours[q[0]], peer) for q in questions]
    OUT.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    write(rows, not args.only)


def write(rows: list[dict], docs: bool) -> None:
    """Print the table, and put it between the markers in docs/plan.md."""
    table = render(rows)
    print(table)
    if docs:
        put_between(DOC, BEGIN, END, table)


def _ratio(a, b):
    return a / b if a and b else None


def compare(q: tuple, ours: dict, peer: dict) -> dict:
    qid = q[0]
    found = peer.get(f"{qid}/search", {})
    mode = "disaggregated" if found.get("chosen") == "disagg" else "aggregated"
    aic_best = found.get(mode)
    best, cross = ours.get("best"), ours.get("for_aic_best")
    estimate = peer.get(f"{qid}/our-best", {})
    dec, pre = peer.get(f"{qid}/decode-step", {}), peer.get(f"{qid}/prefill-step", {})
    s = ours.get("steps", {})
    row = {
        "id": qid, "model": q[1], "system": q[2], "gpus": q[3], "isl": q[4], "osl": q[5], "ttft_ms": q[6],
        "tpot_ms": q[7],
        "aic_best": aic_label(aic_best, mode == "disaggregated"),
        "aic_best_tps": aic_best and aic_best.get("tokens/s/gpu_cluster"),
        "aic_best_ttft_ms": aic_best and aic_best.get("ttft"), "aic_best_tpot_ms": aic_best and aic_best.get("tpot"),
        "ours_for_aic_best_tps": cross and cross["tokens_per_s_per_gpu"],
        "ours_for_aic_best_tpot_ms": cross and cross["tpot_s"] and cross["tpot_s"] * 1e3,
        "ours_for_aic_best_ttft_ms": cross and cross["ttft_s"] and cross["ttft_s"] * 1e3,
        "ours_best": ours.get("best_label"), "ours_best_tps": best and best["tokens_per_s_per_gpu"],
        "ours_best_ttft_ms": best and best["ttft_s"] * 1e3, "ours_best_tpot_ms": best and best["tpot_s"] * 1e3,
        "aic_for_ours_tps": estimate.get("tokens/s/gpu"), "aic_for_ours_tpot_ms": estimate.get("tpot"),
        "aic_for_ours_ttft_ms": estimate.get("ttft"), "aic_for_ours_error": estimate.get("error"),
        "decode_step": s and {"layout": s["decode_layout"], "batch": s["decode_batch"], "ours_ms": s["decode_s"] * 1e3,
                              "aic_ms": dec.get("tpot"), "ours_parts": s["decode_parts"],
                              "aic_parts": aic_parts(dec.get("ops_ms") or {})},
        "prefill_step": s and {"layout": s["prefill_layout"], "ours_ms": s["prefill_s"] * 1e3, "aic_ms": pre.get("ttft"),
                               "ours_parts": s["prefill_parts"], "aic_parts": aic_parts(pre.get("ops_ms") or {})},
        "seconds": ours.get("seconds"),
    }
    row["ours_best_memory_gib"] = best and best["memory_per_gpu_bytes"] / 2**30
    row["aic_for_ours_memory_gib"] = estimate.get("memory")
    if s and aic_best:
        row["ours_the_peers_way_tps"] = the_peers_way(q, aic_best, mode == "disaggregated", s)
        row["peers_way_ratio"] = _ratio(row["ours_the_peers_way_tps"], row["aic_best_tps"])
    row["best_ratio"] = _ratio(row["ours_best_tps"], row["aic_best_tps"])
    row["same_config_ratio"] = _ratio(row["ours_for_aic_best_tps"], row["aic_best_tps"])
    row["our_config_ratio"] = _ratio(row["ours_best_tps"], row["aic_for_ours_tps"])
    if s:
        row["decode_step_ratio"] = _ratio(row["decode_step"]["ours_ms"], row["decode_step"]["aic_ms"])
        row["prefill_step_ratio"] = _ratio(row["prefill_step"]["ours_ms"], row["prefill_step"]["aic_ms"])
    return row


#: AIConfigurator 0.12's composition of a disaggregated configuration from its steps (read from its
#: source, aiconfigurator_core): TPOT = the decode worker's static-batch TPOT x 1.08; requests/s =
#: min(0.9 x the prefill workers' rate, 0.92 x the decode workers' rate).
AIC_DECODE_FACTOR, AIC_PREFILL_DERATE, AIC_DECODE_DERATE = 1.08, 0.9, 0.92


def the_peers_way(q: tuple, row: dict, disaggregated: bool, s: dict) -> float:
    """Output tokens/s per GPU of AIConfigurator's best from rooflinekit's own steps composed as
    AIConfigurator composes its steps: aggregated, each decode step plus its share of a prompt's
    prefill priced apart (batch / OSL prompts per step, no kernel shared); disaggregated, its
    derating and TPOT factor with its worker counts."""
    osl = q[5]
    decode_s, prefill_s = s["decode_s"], s["prefill_s"]
    if disaggregated:
        p, d = row["prefill"], row["decode"]
        gp, gd = (int(x["tp"]) * int(x["pp"]) * int(x["dp"]) for x in (p, d))
        rate_p = int(p["workers"]) * int(p["dp"]) / prefill_s * AIC_PREFILL_DERATE
        rate_d = int(d["workers"]) * int(d["dp"]) * int(d["bs"]) / (osl * decode_s * AIC_DECODE_FACTOR) * AIC_DECODE_DERATE
        return min(rate_p, rate_d) * osl / (int(p["workers"]) * gp + int(d["workers"]) * gd)
    batch, dp, gpus = int(row["bs"]), int(row["dp"]), int(row["tp"]) * int(row["pp"]) * int(row["dp"])
    tpot = decode_s + batch / osl * prefill_s
    return batch * dp / (tpot * gpus)


def _n(v, fmt=",.0f"):
    return "n/a" if v is None else format(v, fmt)


def _aic(r: dict, key: str, fmt: str = ",.0f") -> str:
    """AIConfigurator's figure for rooflinekit's best, or why it has none."""
    if r.get(key) is None and r.get("aic_for_ours_error"):
        return "OOM" if "OOM" in r["aic_for_ours_error"] else "error"
    return _n(r.get(key), fmt)


def render(rows: list[dict]) -> str:
    lines = ["| q | model, GPUs, ISL/OSL, TTFT/TPOT | AIConfigurator's best | tok/s/GPU (AIC / ours) | rooflinekit's best | "
             "tok/s/GPU (ours / AIC) | GiB/GPU (ours / AIC) | decode step ms (ours / AIC) | prefill ms (ours / AIC) | "
             "AIC's best, our steps composed AIC's way |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, p = r.get("decode_step") or {}, r.get("prefill_step") or {}
        lines.append(
            f"| {r['id']} | {r['model']} {r['system']} x{r['gpus']}, {r['isl']}/{r['osl']}, {r['ttft_ms']}/{r['tpot_ms']} ms | "
            f"{r['aic_best']} | {_n(r['aic_best_tps'])} / {_n(r['ours_for_aic_best_tps'])} | {r['ours_best']} | "
            f"{_n(r['ours_best_tps'])} / {_aic(r, 'aic_for_ours_tps')} | "
            f"{_n(r.get('ours_best_memory_gib'), '.1f')} / {_aic(r, 'aic_for_ours_memory_gib', '.1f')} | "
            f"{_n(d.get('ours_ms'), '.1f')} / {_n(d.get('aic_ms'), '.1f')} (B {d.get('batch', '')}) | "
            f"{_n(p.get('ours_ms'), '.0f')} / {_n(p.get('aic_ms'), '.0f')} | "
            f"{_n(r.get('ours_the_peers_way_tps'))} ({_n(r.get('peers_way_ratio'), '.2f')}) |")
    ratios = [(k, [r[k] for r in rows if r.get(k)]) for k in ("best_ratio", "same_config_ratio", "our_config_ratio",
                                                              "decode_step_ratio", "prefill_step_ratio",
                                                              "peers_way_ratio")]
    lines += ["", "| rooflinekit / AIConfigurator | median | min | max |", "|---|---|---|---|"]
    words = {"best_ratio": "best against best (tok/s/GPU)", "same_config_ratio": "AIConfigurator's best, both priced",
             "our_config_ratio": "rooflinekit's best, both priced", "decode_step_ratio": "decode step (mean TPOT, static batch)",
             "prefill_step_ratio": "prefill of one prompt",
             "peers_way_ratio": "AIConfigurator's best, rooflinekit's steps composed AIConfigurator's way"}
    for key, values in ratios:
        if values:
            values = sorted(values)
            lines.append(f"| {words[key]} | {values[len(values) // 2]:.2f} | {values[0]:.2f} | {values[-1]:.2f} |")
    lines += ["", "Where the steps differ, by part (ms; rooflinekit / AIConfigurator; experts include their "
              "all-to-all, other holds norms, element-wise kernels, all-reduces and launches):", "",
              "| q | step | " + " | ".join(PARTS) + " | whole step |", "|---|---|" + "---|" * (len(PARTS) + 1)]
    for r in rows:
        for name in ("decode_step", "prefill_step"):
            st = r.get(name) or {}
            if not st or not st.get("aic_parts") or not any(st["aic_parts"].values()):
                continue
            cells = [f"{st['ours_parts'][k]:.2f} / {st['aic_parts'][k]:.2f}" for k in PARTS]
            what = f"decode B {st['batch']}" if name == "decode_step" else "prefill"
            lines.append(f"| {r['id']} | {what} | " + " | ".join(cells) +
                         f" | {st['ours_ms']:.2f} / {st['aic_ms']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
