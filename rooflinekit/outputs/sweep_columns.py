"""The columns of a sweep's points table, defined once for every view (see
rooflinekit.outputs.columns): the text and Markdown report (rooflinekit.outputs.sweep_text), the page
(html_sweep), the notebook and the CSV (rooflinekit.analyses.sweep.render_sweep). Text and CSV rows
are SweepReport.to_dict()'s points, page rows SweepPoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rooflinekit.core.units import ratio, seconds, share, si
from rooflinekit.outputs.columns import (
    Cell,
    Col,
    View,
    csv_only,
    csv_only_fields,
    fits_word,
    page_only,
    text_only,
)


def _point(key: str, text: str, html: str, name: str, fmt: Callable[[Any], str], kind: str = "text",
           unit: str = "", **layout: Any) -> Col:
    """A point column every view reads from the same field (the text report and the CSV from the point's dict)."""
    return Col(key, text, html, cell=lambda r, v: fmt(r[name]), value=lambda p, v: getattr(p, name), kind=kind,
               unit=unit, csv=name, **layout)


def _memory(name: str) -> Cell:
    """A point dict's field `name` of its memory (None without one)."""
    return lambda r, v: (r.get("memory") or {}).get(name)


def _memory_cell(r: dict, v: View) -> str:
    total = _memory("total_bytes")(r, v)
    return si(total, "B") if total is not None else "-"


SWEEP_POINTS: tuple[Col, ...] = (
    _point("batch", "B", "batch", "batch", str, "int"),
    _point("context", "S", "context", "context", str, "int"),
    _point("flops", "FLOP", "FLOPs", "flops", si, "si", "FLOP", drop=2),
    _point("bytes", "bytes", "bytes", "bytes", lambda x: si(x, "B"), "si", "B"),
    _point("intensity", "FLOP/B", "FLOP/B", "intensity", ratio, "num"),
    Col("bound", "bound", "bound", cell=lambda r, v: v.style.bound(r["bound"]), value=lambda p, v: p.bound,
        align="left", drop=3, csv="bound"),
    _point("step", "step", "predicted step", "predicted_step_s", seconds, "time", meaning="predicted step"),
    _point("tokens", "tok/s", "tokens/s", "tokens_per_s", si, "num"),
    page_only("fits", "fits", lambda p: getattr(p, "fits", None), "bool", hint="fits one GPU's memory", when="memory"),
    page_only("memory", "memory per GPU", lambda p: getattr(getattr(p, "memory", None), "total_bytes", None), "si", "B",
              hint="weights, KV cache and activation peak", when="memory"),
    _point("mfu_bound", "MFU bd", "bound MFU", "mfu_bound", share, "pct", drop=6),
    *csv_only_fields("weight_bytes", "kv_bytes_executed", "other_bytes"),
    _point("weights", "weights", "weights", "weight_share", share, "pct", hint="weights' share of the step's bytes",
           meaning="share of bytes that are weights"),
    _point("kv", "KV", "KV", "kv_share", share, "pct", hint="KV cache's share", meaning="share of bytes that are KV cache"),
    _point("other", "other", "other", "other_share", share, "pct", drop=1, meaning="share of other bytes"),
    Col("attn_min", "attn I min", "attn I min", cell=lambda r, v: ratio(r["attention"]["intensity_min"]),
        value=lambda p, v: p.attention.intensity_min, kind="num", unit="FLOP/B", csv="attention_intensity_min",
        raw=lambda r, v: r["attention"]["intensity_min"]),
    Col("attn_executed", "attn I ex", "attn I executed", cell=lambda r, v: ratio(r["attention"]["intensity_executed"]),
        value=lambda p, v: p.attention.intensity_executed, kind="num", unit="FLOP/B", drop=4,
        csv="attention_intensity_executed", raw=lambda r, v: r["attention"]["intensity_executed"]),
    *csv_only_fields("time_bound_s", "flops_model", "mfu_bound_model", "kv_bytes_min", "uncounted_bytes",
                     "uncounted_bytes_share"),
    text_only("memory_text", "memory", _memory_cell, drop=5, csv="memory_bytes", raw=_memory("total_bytes"),
              meaning="one GPU's memory (weights, KV cache, activations)"),
    text_only("fits_text", "fits", lambda r, v: fits_word(r.get("fits")), align="left", meaning="fits in that memory",
              csv="fits"),
    csv_only("max_batch_fits", _memory("max_batch")),
)
