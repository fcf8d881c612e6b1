"""The plan's configurations table (the Pareto front), defined once for the text report
(rooflinekit.outputs.plan_text), the page (rooflinekit.outputs.plan_view), the notebook
(rooflinekit.outputs.notebook) and the CSV of every priced configuration (plan_view), with the
formats of its cells."""

from __future__ import annotations

import dataclasses
import math

from rooflinekit.core.plan import PlanConfig, Pool, Speculative
from rooflinekit.core.settings import searched_of
from rooflinekit.core.units import plain, seconds
from rooflinekit.outputs.columns import Col, csv_only, num


def ms_cell(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def gb_cell(nbytes: float | None) -> str:
    return "-" if nbytes is None else f"{nbytes / 1e9:.1f} GB"


def rate_cell(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 else plain(value, 3)


def short_layout(tp: int, ep: int) -> str:
    """'TP8', 'TP8 EP8', 'DEP32' (data-parallel attention, experts over EP 32)."""
    if tp == 1 and ep > 1:
        return f"DEP{ep}"
    return f"TP{tp}" + (f" EP{ep}" if ep > 1 else "")


def short_label(c: PlanConfig) -> str:
    """A configuration in a table cell: 'agg TP8 x1 fp8/fp8 B32 c512' (weights/KV formats)."""
    if c.mode == "disaggregated" and c.prefill and c.decode:
        head = f"dis {c.pool_ratio} P:{short_layout(c.prefill.tp, c.prefill.ep)} D:{short_layout(c.decode.tp, c.decode.ep)}"
    else:
        head = f"agg {short_layout(c.tp, c.ep)} x{c.replicas}"
    if c.pp > 1:
        head += f" PP{c.pp}"
    tail = f" {'/'.join([c.weight_dtype, *searched_of(c).values()])} B{c.batch}" + (f" c{c.chunk}" if c.chunk else "")
    if c.speculative:
        tail += f" {c.speculative.draft} k{c.speculative.k}"
    return head + tail


def _in_ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


def _plain_ms(value: float | None) -> str:
    return "-" if value is None else plain(value * 1e3, 3)


def _page_gb(nbytes: float | None) -> str:
    return "-" if nbytes is None else f"{nbytes / 1e9:.1f}"


def _yes(c: PlanConfig) -> str:
    return "yes" if c.meets_slo else "no"


def _config(key: str, text: str | None, html: str | None, field: str, cell=None, value=None, page=None,
            **layout) -> Col:
    """A column of a configuration's `field`: the text cell, the page's sort value and cell, each
    formatting the field's value, and the CSV's field of that name (rows are (index, PlanConfig)); a
    number unless `kind` says."""
    def get(r: tuple):
        return getattr(r[1], field)
    return Col(key, text, html, cell=cell and (lambda r, v: cell(get(r))), value=value and (lambda r, v: value(get(r))),
               page_text=page and (lambda r, v: page(get(r))), csv=field, raw=lambda r, v: get(r),
               **{"kind": "num", **layout})


def _same(x):
    return x


def _nb(key: str, notebook: str, cell, **layout) -> Col:
    """A column only the notebook shows."""
    return Col(key, cell=cell, notebook=notebook, **layout)


# Rows: (index in plan.configs, PlanConfig), the Pareto front's (the CSV's: every configuration); the
# view's report the PlanResult.
_SHOWN: tuple[Col, ...] = (
    Col("configuration", "configuration", "configuration", align="left", kind="text",
        cell=lambda r, v: ("* " if r[1].meets_slo else "  ") + short_label(r[1]),
        value=lambda r, v: r[1].label(), page_text=lambda r, v: r[1].label(), csv="label",
        raw=lambda r, v: r[1].label()),
    _config("gpus", None, "GPUs", "gpus", value=_same, page=str, kind="int"),
    _config("per_gpu", "tok/s/GPU", "per GPU (tok/s)", "tokens_per_s_per_gpu", lambda x: f"{x:,.0f}", _same, rate_cell),
    _config("per_user", "tok/s/user", "per user (tok/s)", "tokens_per_s_per_user", lambda x: f"{x:,.1f}", _same,
            rate_cell),
    _config("ttft", "TTFT", "TTFT (ms)", "ttft_s", ms_cell, _in_ms, _plain_ms),
    _config("tpot", "TPOT", "TPOT (ms)", "tpot_s", ms_cell, _in_ms, _plain_ms),
    _config("e2e", None, "e2e (s)", "e2e_s", value=_same, page=lambda x: "-" if x is None else plain(x, 3)),
    _config("memory", "mem/GPU", "memory/GPU (GB)", "memory_per_gpu_bytes", gb_cell, _same, _page_gb),
    _config("binds", None, "binds", "binding", value=lambda x: x or "", page=lambda x: x or "-", kind="text",
            align="left"),
    Col("meets", None, "meets targets", value=lambda r, v: _yes(r[1]), page_text=lambda r, v: _yes(r[1]),
        align="left", csv="meets_slo", raw=lambda r, v: r[1].meets_slo),
    _nb("notebook_configuration", "configuration",
        lambda r, v: ("* " if r[0] == v.report.best else "") + r[1].label(), align="left"),
    _nb("notebook_ttft", "TTFT [s]", lambda r, v: seconds(r[1].ttft_s)),
    _nb("notebook_tpot", "TPOT [s]", lambda r, v: seconds(r[1].tpot_s)),
    _nb("notebook_per_gpu", "tokens/s per GPU", lambda r, v: rate_cell(r[1].tokens_per_s_per_gpu)),
    _nb("notebook_per_user", "tokens/s per user", lambda r, v: rate_cell(r[1].tokens_per_s_per_user)),
    _nb("notebook_memory", "memory per GPU [B]", lambda r, v: num(r[1].memory_per_gpu_bytes, "B")),
    _nb("notebook_meets", "meets targets", lambda r, v: "yes" if r[1].meets_slo else (r[1].reject_reason or "no"),
        align="left"),
)


#: The configuration's fields held in a part of it, each part's fields flattened in the CSV
#: (speculative_k, prefill_tp, decode_batch, ...).
_PARTS = {"speculative": Speculative, "prefill": Pool, "decode": Pool}


def _scalar(name: str) -> Col:
    """A field of the configuration only the CSV carries."""
    return csv_only(name, lambda r, v: getattr(r[1], name))


def _in_part(part: str, name: str) -> Col:
    """A field of a part of the configuration (empty where the configuration has no such part)."""
    def get(r: tuple, v):
        held = getattr(r[1], part)
        return None if held is None else getattr(held, name)
    return csv_only(f"{part}_{name}", get)


def _csv_order(cols: tuple[Col, ...]) -> tuple[Col, ...]:
    """The CSV's columns in order: index, label, every scalar field of PlanConfig (the column of `cols`
    that names it as its CSV field, where one does), every field of its parts, whether it is on the
    Pareto front and whether it is the best."""
    own = {c.csv: c for c in cols if c.csv}
    scalars = [own.get(f.name) or _scalar(f.name) for f in dataclasses.fields(PlanConfig) if f.name not in _PARTS]
    parts = [_in_part(part, f.name) for part, cls in _PARTS.items() for f in dataclasses.fields(cls)]
    return (csv_only("index", lambda r, v: r[0]), own["label"], *scalars, *parts,
            csv_only("pareto", lambda r, v: r[0] in v.report.pareto),
            csv_only("best", lambda r, v: r[0] == v.report.best))


#: The plan's CSV: a row per priced configuration, in this order.
PLAN_CSV: tuple[Col, ...] = _csv_order(_SHOWN)
#: The configurations table: the columns its views show, then the fields only the CSV carries.
PLAN: tuple[Col, ...] = (*_SHOWN, *(c for c in PLAN_CSV if all(c is not s for s in _SHOWN)))


def front_rows(plan) -> list[tuple[int, PlanConfig]]:
    """The Pareto front's rows, (index, configuration), in the plan's order."""
    return [(i, plan.configs[i]) for i in plan.pareto]

