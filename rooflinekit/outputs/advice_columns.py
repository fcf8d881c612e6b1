"""The columns of advise's ranked levers, defined once for every view (see rooflinekit.outputs.columns):
the text and Markdown report (rooflinekit.outputs.advise_view), the page (html_advise), the notebook
and the CSV (advise_view). Rows are (rank, LeverResult), rank 0 the baseline; the view's report the
AdviceReport."""

from __future__ import annotations

from typing import Any

from rooflinekit.core.units import ratio, seconds, si
from rooflinekit.outputs.columns import Col, View, csv_only, fits_word, page_only, text_only


def lever_assumption(lever: Any) -> str:
    """A lever's assumption, a third-party lever's prefixed with the plugin that proposed it."""
    return lever.assumption if lever.source == "rooflinekit" else f"[{lever.source}] {lever.assumption}"


def _gain(r: tuple, v: View) -> str:
    """Tokens/s per GPU over the baseline's, '-' where either is missing."""
    per_gpu, base_gpu = r[1].tokens_per_s_per_gpu, v.report.baseline.tokens_per_s_per_gpu
    gain = per_gpu / base_gpu if per_gpu and base_gpu else None
    return f"{ratio(gain)}x" if gain else "-"


def _lever(key: str, html: str, name: str, kind: str = "text", unit: str = "", hint: str = "",
           csv: bool = False) -> Col:
    """A lever field only the page (and, with `csv`, the CSV under its own name) shows."""
    def get(r: tuple) -> Any:
        return getattr(r[1], name, None)
    return page_only(key, html, get, kind, unit, hint=hint, csv=name if csv else None, raw=lambda r, v: get(r))


def _changes(r: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in (getattr(r[1], "changes", None) or {}).items())


ADVICE: tuple[Col, ...] = (
    _a_rank := Col("rank", "#", "#", cell=lambda r, v: str(r[0]), value=lambda r, v: r[0], kind="int",
                   hint="rank by speed-up", notebook="rank (0: baseline)", csv="rank", raw=lambda r, v: r[0]),
    _a_lever := Col("lever", "lever", "lever", cell=lambda r, v: r[1].lever, value=lambda r, v: r[1].lever,
                    align="left", notebook="lever", csv="lever", raw=lambda r, v: r[1].lever),
    _a_speedup := _lever("speedup", "speed-up", "speedup", "num", "x",
                         "tokens/s per GPU at the expected step over the baseline's", csv=True),
    _a_step_speedup := _lever("step_speedup", "step speed-up", "step_speedup", "num", "x",
                              "the baseline's expected step over this one's", csv=True),
    Col("expected", "expected", "expected step", cell=lambda r, v: seconds(r[1].expected_step_s),
        value=lambda r, v: getattr(r[1], "expected_step_s", None), kind="time",
        hint="each kernel at its achievable fraction"),
    _a_step_bound := Col("step_bound", None, "step bound", cell=lambda r, v: seconds(r[1].predicted_step_s),
                         value=lambda r, v: r[1].predicted_step_s, kind="time", hint="sum of op bounds",
                         notebook="predicted step [s]", csv="predicted_step_s", raw=lambda r, v: r[1].predicted_step_s),
    Col("tokens_per_gpu", "tok/s/GPU", "tokens/s per GPU", cell=lambda r, v: si(r[1].tokens_per_s_per_gpu),
        value=lambda r, v: getattr(r[1], "tokens_per_s_per_gpu", None), kind="num"),
    _a_tokens := csv_only("tokens_per_s", lambda r, v: r[1].tokens_per_s),
    Col("notebook_tokens", cell=lambda r, v: si(r[1].tokens_per_s_per_gpu or r[1].tokens_per_s),
        notebook="tokens/s per GPU"),
    Col("notebook_speedup", cell=lambda r, v: ratio(r[1].speedup) if r[1].speedup else "-", notebook="speed-up [x]"),
    text_only("gain", "per GPU", _gain),
    text_only("tokens_per_user", "tok/s/user", lambda r, v: si(r[1].tokens_per_s_per_user)),
    _a_binds := Col("binds", "binds", "binds", cell=lambda r, v: r[1].binding, value=lambda r, v: r[1].binding,
                    align="left", notebook="binds after", csv="binding", raw=lambda r, v: r[1].binding),
    _a_fits := Col("fits", None, "fits", cell=lambda r, v: {True: "yes", False: "no"}.get(r[1].fits, "-"),
                   value=lambda r, v: r[1].fits, kind="bool", align="left", notebook="fits", csv="fits",
                   raw=lambda r, v: r[1].fits),
    _a_memory := Col("memory", "memory", "memory per GPU", cell=lambda r, v: si(r[1].memory_bytes, "B"),
                     value=lambda r, v: getattr(r[1], "memory_bytes", None), kind="si", unit="B", csv="memory_bytes",
                     raw=lambda r, v: r[1].memory_bytes),
    text_only("fits_text", "fits", lambda r, v: fits_word(r[1].fits), align="left", when="markdown"),
    _a_gpus := _lever("gpus", "GPUs", "gpus", "int", csv=True),
    _a_batch := _lever("batch", "batch", "batch", "int", csv=True),
    _lever("compute", "compute time", "time_compute_s", "time", hint="compute time bound"),
    _lever("memory_time", "memory time", "time_memory_s", "time", hint="HBM time bound"),
    _lever("comm", "communication time", "time_comm_s", "time", hint="interconnect time bound"),
    text_only("assumption_text", "assumption", lambda r, v: lever_assumption(r[1]).replace("|", "/"), align="left",
              when="markdown"),
    _a_assumption := _lever("assumption", "assumption", "assumption", csv=True),
    _a_source := _lever("source", "source", "source", csv=True),
    page_only("changes", "changes", _changes, hint="what differs from the baseline's workload"),
)
#: The levers' CSV fields in their order (rank 0 the baseline).
ADVICE_CSV: tuple[Col, ...] = (
    _a_rank, _a_lever, _a_step_bound, _a_tokens, _a_speedup, _a_step_speedup, _a_binds, _a_fits, _a_gpus, _a_batch,
    _a_memory, _a_assumption, _a_source,
)
