"""The page's data for an advice report: the baseline, every lever as a bar and a row (the columns of
rooflinekit.outputs.advice_columns.ADVICE), the levers skipped."""

from __future__ import annotations

from typing import Any

from rooflinekit.outputs.advice_columns import ADVICE
from rooflinekit.outputs.columns import View, page_rows
from rooflinekit.outputs.html_data import TableView, col, item, table
from rooflinekit.outputs.html_profile import memory_cards
from rooflinekit.outputs.html_tables import page_columns
from rooflinekit.outputs.words import deployment_words, options_words, request_words

#: What binds a step after a lever -> its bar's colour.
BINDING_COLOURS = {"compute": "#1f77b4", "memory": "#d95f02", "communication": "#7570b3", "capacity": "#c0392b"}


def _lever_tip(lv: Any) -> list[list]:
    g = lambda k: getattr(lv, k, None)  # noqa: E731
    return [item("speed-up (tokens/s per GPU)", g("speedup"), "num", "x"),
            item("step speed-up", g("step_speedup"), "num", "x"),
            item("expected step", g("expected_step_s"), "time"), item("step bound", g("predicted_step_s"), "time"),
            item("tokens/s per GPU", g("tokens_per_s_per_gpu"), "num"),
            item("binds afterwards", g("binding")), item("fits in memory", g("fits"), "bool"),
            item("memory per GPU", g("memory_bytes"), "si", "B"), item("GPUs", g("gpus"), "int"),
            item("batch", g("batch"), "int"), item("compute bound", g("time_compute_s"), "time"),
            item("memory bound", g("time_memory_s"), "time"), item("communication bound", g("time_comm_s"), "time"),
            item("assumption", g("assumption"))]


def advise_payload(advice: Any) -> dict:
    """The page's data for an advice report (rooflinekit.core.advice_report.AdviceReport): the baseline,
    every lever as a bar from the baseline's tokens/s to its own, the levers skipped and why."""
    w, hw, model, base = advice.workload, advice.hardware, advice.model, advice.baseline
    levers = list(getattr(advice, "levers", []) or [])
    bars = [{"n": lv.lever, "v": lv.speedup, "c": BINDING_COLOURS.get(lv.binding, "#777777"), "k": lv.binding,
             "fits": lv.fits, "tip": _lever_tip(lv)} for lv in levers if lv.speedup]
    view = View(advice)
    rows = page_rows(ADVICE, view, [(0, base), *enumerate(levers, 1)])
    tables = [table("levers", "Levers, ranked by speed-up", page_columns(ADVICE, view), rows, TableView(
        series="levers", caption="row 0 is the baseline; each lever is priced alone against it"))]
    skipped = list(getattr(advice, "skipped", []) or [])
    if skipped:
        tables.append(table("skipped", "Levers that do not apply", [col("lever"), col("reason"), col("source")],
                            [[x.lever, x.reason, getattr(x, "source", None)] for x in skipped]))
    best = levers[0] if levers else None
    tiles = [item("baseline expected step", getattr(base, "expected_step_s", None), "time"),
             item("its bound", base.predicted_step_s, "time"),
             item("baseline tokens/s per GPU", getattr(base, "tokens_per_s_per_gpu", None), "num"),
             item("binds", base.binding)]
    if best is not None:
        tiles += [item("best lever", best.lever), item("its speed-up", best.speedup, "num", "x")]
    tiles.append(item("levers priced / skipped", f"{len(levers)} / {len(skipped)}"))
    cards = [
        {"title": "Model", "items": [item("name", model.name), item("kind", model.kind), item("path", model.path),
                                     item("parameters", model.parameters, "si"),
                                     item("weights", model.param_bytes, "si", "B")]},
        {"title": "Workload", "items": [item("phase", w.phase), item("batch", w.batch, "int"),
                                        item("context", w.context, "int"), item("dtype", w.dtype),
                                        item("deployment", deployment_words(advice.deployment, w.dtype)
                                             or "one GPU, as run"),
                                        *([item("options", options_words(w.options))] if w.options else []),
                                        item("device", w.device)]},
        {"title": "Hardware", "items": [item("name", hw.name), item(f"peak {hw.dtype} (dense)", hw.peak_flops, "si", "FLOP/s"),
                                        item("bandwidth", hw.bandwidth, "si", "B/s"),
                                        item("ridge", hw.ridge, "num", "FLOP/B")]},
        *memory_cards(advice),
        {"title": "Run", "items": [item("profiles", getattr(advice, "profiles", None), "int"),
                                   item("wall time", getattr(advice, "wall_s", None), "time")]},
    ]
    words = request_words(w.dtype, advice.deployment, w.q_len if w.phase == "decode" else None, w.options)
    title = f"{model.name or 'model'}: what would change {w.phase}, batch {w.batch}, context {w.context}{words} on {hw.name}"
    return {"kind": "advise", "title": title, "header": {"tiles": tiles, "cards": cards},
            "warnings": list(advice.warnings), "notes": list(advice.notes), "conventions": [],
            "bars": {"bars": bars, "series": "levers", "baseline": base.tokens_per_s,
                     "label": "speed-up of tokens/s per GPU at the expected step (log scale; 1\u00d7 is the baseline)",
                     "legend": [[k, c] for k, c in BINDING_COLOURS.items() if any(b["k"] == k for b in bars)]},
            "tables": tables}
