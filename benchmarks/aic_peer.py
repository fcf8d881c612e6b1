"""Ask NVIDIA's AIConfigurator the questions benchmarks/compare_aic.py puts to both tools.

Runs under AIConfigurator's own interpreter (it is not a rooflinekit dependency):

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    /tmp/aic/bin/python benchmarks/aic_peer.py REQUESTS.json > ANSWERS.json

REQUESTS.json is a list of requests, each {"id", "kind", ...}:

- kind "search": {"model_path", "system", "gpus", "isl", "osl", "ttft_ms", "tpot_ms"}: AIConfigurator's
  own search (`cli default`: aggregated against disaggregated, TensorRT-LLM), answered with the best
  aggregated and disaggregated rows of its top-N tables (by its ranking figure, tokens/s per GPU of
  the cluster) and the one it chose;
- kind "estimate": {"model_path", "system", "mode", "isl", "osl", ...} with `cli_estimate`'s keyword
  arguments (tp_size, batch_size, attention_dp_size, moe_ep_size, prefill_*/decode_*, quant modes):
  one configuration's TTFT, TPOT, tokens/s per GPU and the per-op times of its steps.

The answer is a JSON object {id: answer}; a request that fails answers {"error": "..."}.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() and "." not in str(text) else value


def _side(row: dict, prefix: str = "") -> dict:
    keys = ("parallel", "tp", "pp", "dp", "moe_tp", "moe_ep", "bs", "global_bs", "workers", "memory",
            "gemm", "kvcache", "fmha", "moe", "comm", "seq/s/worker")
    return {k: _number(row[f"{prefix}{k}"]) for k in keys if f"{prefix}{k}" in row}


def _row(row: dict, disaggregated: bool) -> dict:
    out = {k: _number(row[k]) for k in ("ttft", "tpot", "tokens/s/gpu", "tokens/s/gpu_cluster", "tokens/s/user",
                                        "request_rate", "concurrency", "num_total_gpus", "ctx_tokens") if k in row}
    if disaggregated:
        out["prefill"], out["decode"] = _side(row, "(p)"), _side(row, "(d)")
    else:
        out.update(_side(row))
    return out


def _best(path: Path, disaggregated: bool) -> dict | None:
    if not path.exists():
        return None
    rows = list(csv.DictReader(path.open()))
    if not rows:
        return None
    return _row(max(rows, key=lambda r: float(r["tokens/s/gpu_cluster"])), disaggregated)


def search(req: dict) -> dict:
    from aiconfigurator.cli.api import cli_default

    with tempfile.TemporaryDirectory() as tmp:
        result = cli_default(req["model_path"], req["gpus"], req["system"], backend="trtllm", isl=req["isl"],
                             osl=req["osl"], ttft=req["ttft_ms"], tpot=req["tpot_ms"], save_dir=tmp)
        runs = [p for p in Path(tmp).iterdir() if p.is_dir()]
        agg = _best(runs[0] / "agg" / "best_config_topn.csv", False) if runs else None
        disagg = _best(runs[0] / "disagg" / "best_config_topn.csv", True) if runs else None
    chosen = getattr(result, "chosen_exp", None)
    return {"aggregated": agg, "disaggregated": disagg, "chosen": chosen}


def estimate(req: dict) -> dict:
    from aiconfigurator.cli.api import cli_estimate

    args = {k: v for k, v in req.items() if k not in ("id", "kind", "model_path", "system")}
    r = cli_estimate(req["model_path"], req["system"], backend_name="trtllm", **args)
    raw = r.raw if isinstance(r.raw, dict) else {}
    out = {"ttft": r.ttft, "tpot": r.tpot, "tokens/s/gpu": _number(raw.get("tokens/s/gpu")),
           "tokens/s/user": _number(raw.get("tokens/s/user")), "memory": _number(raw.get("memory")),
           "per_ops": r.per_ops_data if isinstance(r.per_ops_data, dict) else None}
    summary = r.summary
    if summary is not None and req.get("mode") in ("static_gen", "static_ctx"):
        # static modes: each op's time summed over the generation (ms), or the prefill's
        steps = max(1, int(req["osl"]) - 1) if req["mode"] == "static_gen" else 1
        found = summary.get_generation_latency_dict() if req["mode"] == "static_gen" else \
            summary.get_context_latency_dict()
        out["ops_ms"] = {k: v / steps for k, v in dict(found or {}).items()}
    return out


def main() -> None:
    requests = json.loads(Path(sys.argv[1]).read_text())
    answers = {}
    for req in requests:
        try:
            answers[req["id"]] = search(req) if req["kind"] == "search" else estimate(req)
        except Exception as exc:  # one failed question does not stop the others
            answers[req["id"]] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"aic_peer: {req['id']} done", file=sys.stderr, flush=True)
    json.dump(answers, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()
