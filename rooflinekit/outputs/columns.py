"""The columns of each report table, defined once for every view: the text and Markdown report
(rooflinekit.outputs.sections, sweep_text, advise_view), the HTML page (rooflinekit.outputs.html_tables,
html_sweep, html_advise), the notebook view (rooflinekit.outputs.notebook: the text report's columns
and cells under the page's names, or a table's own notebook columns where it names them) and the CSV
(rooflinekit.outputs.csv_tables). The profile's tables are here; the sweep's points, advise's levers
and the plan's configurations are defined the same way in rooflinekit.outputs.sweep_columns,
advice_columns and plan_columns.

A table is one ordered list of `Col`. Each column names its header in the views that show it (the
text report's short header, the page's longer one, the CSV's field), how a view gets its cell from a
row (the CSV: the raw number, in SI base units), how the page formats and explains it, and, for the
text report, its alignment and when it may be left out at narrow widths. A new column is one entry
in its table, and every view it names a header for shows it, the CSV included. A field only the CSV
carries is an entry with only a CSV name (`csv_only`), as a column only the page shows has only a
page header. The CSV lists its fields in table order, except where a table states its CSV order as a
sequence of its own entries (MODULES_CSV, OPS_CSV, ADVICE_CSV, PLAN_CSV).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rooflinekit.core.report import AttentionRow, Report
from rooflinekit.core.units import ratio, seconds, share, si
from rooflinekit.outputs.tables import ABBREVIATIONS, PLAIN, Column, Style

Cell = Callable[[Any, "View"], Any]


def num(value, unit: str = "") -> str:
    """A number with SI prefix and unit, or '-' for none."""
    return si(value, unit) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


@dataclass(frozen=True)
class View:
    """What a table's rows are rendered against: the report (a sweep's for its points), the text
    decoration, whether repeated layers are folded, and the conditions that add columns (`measured`,
    `states`, `memory`)."""

    report: Any
    style: Style = PLAIN
    group: bool = True
    measured: bool = False
    states: bool = False
    memory: bool = False
    markdown: bool = False


@dataclass(frozen=True)
class Col:
    """One column of a table.

    `text` / `html`: its header in the text report and on the page (None: not in that view; `text`
    may depend on the view). `cell` gives the text cell, `value` the page's raw value, each from that
    view's row. `kind` and `unit` say how the page formats the value (text, int, si, num, pct, time,
    bool), `hint` is the page header's hover text. `align`, `drop` (lower: left out first at narrow
    widths) and `wide_only` lay out the text column. `when` names the view condition that adds it.
    `meaning` is the text legend's word for a header of this table alone (else the glossary's).
    `notebook`: its header in the notebook where a table names its own notebook columns (the advice
    table, the plan's); the notebook then shows those columns, `cell` giving each cell. A table without any
    shows the text report's columns in the notebook, under `notebook_header`. `page_text`: the
    page's cell where the page writes its cells itself (the plan's table) beside `value`, its sort key.
    `csv`: its field in the CSV, whose value is `raw` of the CSV's row, else that row's own field of
    that name (a CSV row is then a mapping): the report's number in SI base units, never formatted.
    """

    key: str
    text: str | Callable[[View], str] | None = None
    html: str | None = None
    cell: Cell | None = None
    value: Cell | None = None
    kind: str = "text"
    unit: str = ""
    hint: str = ""
    align: str = "right"
    drop: int | None = None
    wide_only: bool = False
    when: str = ""
    meaning: str = ""
    notebook: str | None = None
    page_text: Cell | None = None
    csv: str | None = None
    raw: Cell | None = None

    def header(self, view: View) -> str:
        """The text report's header in `view`."""
        return self.text(view) if callable(self.text) else str(self.text)

    def legend(self, view: View) -> str:
        """What the text header means: its own `meaning`, else the report's glossary's ('' when it
        needs no words)."""
        return self.meaning or ABBREVIATIONS.get(self.header(view), "")

    def csv_value(self, row: Any, view: View) -> Any:
        """The CSV's value of this column in `row`."""
        return self.raw(row, view) if self.raw is not None else row.get(self.csv)


def shown(cols: Sequence[Col], view: View, where: str) -> list[Col]:
    """The columns of `cols` that `where` ("text", "html", "notebook" or "csv") shows in `view`, in order."""
    return [c for c in cols if getattr(c, where) is not None and (not c.when or getattr(view, c.when))]


def text_columns(cols: Sequence[Col], view: View) -> list[Column]:
    """The text layout of the columns the text report shows."""
    return [Column(c.header(view), c.align, c.drop, c.wide_only) for c in shown(cols, view, "text")]


def text_rows(cols: Sequence[Col], view: View, rows: Sequence[Any]) -> list[list[str]]:
    """The text cells of `rows` under the columns the text report shows."""
    kept = shown(cols, view, "text")
    return [[c.cell(r, view) for c in kept] for r in rows]


def notebook_columns(cols: Sequence[Col], view: View) -> list[Col]:
    """The columns the notebook shows in `view`: the table's own notebook columns where it names
    them, else those the text report shows."""
    return shown(cols, view, "notebook") or shown(cols, view, "text")


def notebook_rows(cols: Sequence[Col], view: View, rows: Sequence[Any]) -> list[list[str]]:
    """The notebook's cells of `rows` under the columns the notebook shows."""
    kept = notebook_columns(cols, view)
    return [[c.cell(r, view) for c in kept] for r in rows]


def notebook_header(c: Col, view: View) -> str:
    """The notebook's header of a column: its own `notebook` name where it has one; else, for a column
    the text report shows, the page's name where the page has one (the text's is abbreviated for a
    terminal), else, or where the text's name follows the view as its cells do ('cache/tok' or
    'cache'), the text's; then `[unit]` where the name does not already say it ('bytes [B]',
    'I min [FLOP/B]'; time and share cells carry their own)."""
    if c.notebook is not None:
        return c.notebook
    name = c.header(view) if callable(c.text) or not c.html else c.html
    return f"{name} [{c.unit}]" if c.unit and c.unit not in name else name


def page_rows(cols: Sequence[Col], view: View, rows: Sequence[Any]) -> list[list]:
    """The page's raw values of `rows` under the columns the page shows."""
    kept = shown(cols, view, "html")
    return [[c.value(r, view) for c in kept] for r in rows]


def page_index(cols: Sequence[Col], view: View, key: str) -> int:
    """The position of column `key` among those the page shows (its first sort)."""
    return [c.key for c in shown(cols, view, "html")].index(key)


def csv_header(cols: Sequence[Col], view: View) -> list[str]:
    """The CSV's field names of the columns it shows, in the order of `cols`."""
    return [c.csv for c in shown(cols, view, "csv")]


def csv_rows(cols: Sequence[Col], view: View, rows: Sequence[Any]) -> list[list]:
    """The CSV's raw values of `rows` under the columns it shows."""
    kept = shown(cols, view, "csv")
    return [[c.csv_value(r, view) for c in kept] for r in rows]


def _both(key: str, text: str, html: str, get: Callable[[Any], Any], fmt: Callable[[Any], str],
          kind: str = "text", unit: str = "", **layout: Any) -> Col:
    """A column the text report and the page show from the same raw value: the text report formats
    it with `fmt` (the CSV, where it names a field, has that field of its own rows)."""
    return Col(key, text, html, cell=lambda r, v: fmt(get(r)), value=lambda r, v: get(r), kind=kind, unit=unit,
               **layout)


def page_only(key: str, html: str, get: Callable[[Any], Any], kind: str = "text", unit: str = "", **more: Any) -> Col:
    """A column only the page (and, where it names a `csv` field, the CSV) shows; `more`: its other
    `Col` fields (hint, when, csv, raw)."""
    return Col(key, None, html, value=lambda r, v: get(r), kind=kind, unit=unit, **more)


def text_only(key: str, text: str | Callable[[View], str], cell: Cell, **layout: Any) -> Col:
    """A column only the text report (and, where it names a field, the CSV) shows."""
    return Col(key, text, None, cell=cell, **layout)


def csv_only(name: str, raw: Cell | None = None, *, when: str = "") -> Col:
    """A field only the CSV carries: the row's own `name`, or `raw` of the row."""
    return Col(name, csv=name, raw=raw, when=when)


def csv_only_fields(*names: str, when: str = "") -> tuple[Col, ...]:
    """Fields only the CSV carries, each the row's own."""
    return tuple(csv_only(name, when=when) for name in names)


def fits_word(value: bool | None) -> str:
    """'yes', 'NO' or '-' for whether something fits in memory."""
    return {True: "yes", False: "NO"}.get(value, "-")


def _bytes(value) -> str:
    return num(value, "B")


def _over(a: float | None, b: float | None) -> str:
    """'a / b' as a ratio, '-' when either is missing."""
    return ratio(a / b) if a is not None and b else "-"


# -- modules: rows are rooflinekit.outputs.sections.ModuleLine, CSV rows each Module's fields, then the step's

MODULES: tuple[Col, ...] = (
    _m_name := _both("name", "module", "module", lambda m: m.name, str, align="left", csv="name"),
    _m_ops := page_only("ops", "ops", lambda m: m.ops, "int", csv="ops"),
    _m_flops := _both("flops", "FLOP", "FLOPs", lambda m: m.flops, num, "si", "FLOP", drop=3, csv="flops"),
    _m_bytes := _both("bytes", "bytes", "bytes", lambda m: m.bytes, _bytes, "si", "B", drop=5, csv="bytes"),
    _m_weights := page_only("weights", "weights", lambda m: m.weight_bytes, "si", "B", csv="weight_bytes"),
    _m_intensity := _both("intensity", "FLOP/B", "FLOP/B", lambda m: m.intensity, ratio, "num",
                          hint="arithmetic intensity", csv="intensity"),
    _m_bound := Col("bound", "bound", "bound", cell=lambda m, v: v.style.bound(m.bound), value=lambda m, v: m.bound,
                    align="left", drop=4, csv="bound"),
    _m_attainable := page_only("attainable", "attainable", lambda m: m.attainable_flops, "si", "FLOP/s",
                               hint="min(peak, bandwidth x intensity)", csv="attainable_flops"),
    _m_time_bound_s := csv_only("time_bound_s"),
    _m_time_bound := _both("time_bound", "t bound", "time bound", lambda m: m.time_bound_ops_s, seconds, "time",
                           hint="sum of its ops' time bounds", csv="time_bound_ops_s"),
    _m_share := _both("share", "share", "share", lambda m: m.time_share, share, "pct",
                      hint="share of the predicted step (sum of op bounds)", csv="time_share"),
    _m_mfu_bound := _both("mfu_bound", "MFU bd", "MFU bound", lambda m: m.mfu_bound, share, "pct", drop=2,
                          csv="mfu_bound"),
    _m_dtype := page_only("dtype", "dtype", lambda m: m.dtype, csv="dtype"),
    _m_measured := _both("measured", "measured", "measured", lambda m: m.time_s, seconds, "time", when="measured",
                         csv="time_s"),
    _m_x_bound := text_only("x_bound", "x bound", lambda m, v: _over(m.time_s, m.time_bound_ops_s), drop=1,
                            when="measured", csv="time_vs_bound"),
    _m_achieved := page_only("achieved", "achieved", lambda m: m.achieved, "si", "FLOP/s", when="measured",
                             csv="achieved_flops"),
    _m_bandwidth := csv_only("achieved_bandwidth", when="measured"),
    _m_mfu := _both("mfu", "MFU", "MFU", lambda m: m.mfu, share, "pct", when="measured", csv="mfu"),
    _m_hfu := csv_only("hfu", when="measured"),
    _m_mbu := _both("mbu", "MBU", "MBU", lambda m: m.mbu, share, "pct", when="measured", csv="mbu"),
)
#: The modules' CSV fields in their order: the module's counts, its roofline, then the measured figures.
MODULES_CSV: tuple[Col, ...] = (
    _m_name, _m_flops, _m_bytes, _m_intensity, _m_attainable, _m_bound, _m_time_bound_s, _m_time_bound, _m_share,
    _m_mfu_bound, _m_weights, _m_ops, _m_dtype, _m_measured, _m_achieved, _m_bandwidth, _m_mfu, _m_hfu, _m_mbu,
    _m_x_bound,
)


# -- attention / mixers: text rows are (first row, label, layers) of folded layers, page rows AttentionRow,
# CSV rows each AttentionRow's fields (rooflinekit.outputs.csv_tables) ---------------------------------------


def arch_label(a: AttentionRow) -> str:
    """'gqa', 'mla/absorbed', 'gqa win 4096', 'gqa chunk 8192'."""
    label = a.arch + (f"/{a.mode}" if a.mode else "")
    if a.window:
        label += f" win {a.window}"
    if a.chunk:
        label += f" chunk {a.chunk}"
    return label


def cache_cell(a: AttentionRow, states: bool) -> str:
    """A row's cache: per token (K/V), or per sequence for a fixed state."""
    per_seq = getattr(a, "cache_bytes_per_sequence", None)
    if per_seq:
        return num(per_seq, "B") + "/seq"
    return num(a.cache_bytes_per_token, "B") + ("/tok" if states and a.cache_bytes_per_token is not None else "")


def op_time(report: Report, row: AttentionRow) -> float:
    """An attention row's time as the predicted step counts it: the sum of its ops' bounds."""
    if row.op_indices and len(report.ops) > max(row.op_indices):
        return sum(report.ops[i].time_bound_s for i in row.op_indices)
    return row.placement_executed.time_bound_s


def _step_share(time_s: float | None, report: Report) -> float | None:
    step = report.totals.predicted_step_s
    return time_s / step if time_s is not None and step else None


def _att(key: str, text: str, html: str, name: str, fmt: Callable[[Any], str], kind: str = "text",
         unit: str = "", **layout: Any) -> Col:
    """An attention column every view reads from the same field (the text report from a group's first row)."""
    return Col(key, text, html, cell=lambda g, v: fmt(getattr(g[0], name)), value=lambda a, v: getattr(a, name),
               kind=kind, unit=unit, csv=name, **layout)


def _heads(value) -> str:
    return str(value or "-")


def _placed(placement: str, name: str) -> Cell:
    """A CSV row's field `name` of its placement (None where it has none)."""
    return lambda r, v: (r.get(placement) or {}).get(name)


ATTENTION: tuple[Col, ...] = (
    Col("name", lambda v: "mixer (per layer)" if v.states else "attention (per layer)", "layer",
        cell=lambda g, v: g[1], value=lambda a, v: a.module, align="left", csv="module"),
    page_only("class", "class", lambda a: a.module_class, csv="module_class"),
    *csv_only_fields("recognised", "plugin"),
    Col("arch", "arch", "arch", cell=lambda g, v: arch_label(g[0]), align="left", csv="arch",
        value=lambda a, v: a.arch + (f"/{a.mode}" if a.mode else "") + ("" if a.recognised else " (not recognised)")),
    csv_only("mode"),
    _att("num_heads", "H", "H", "num_heads", _heads, "int", hint="query heads", drop=3),
    _att("num_kv_heads", "Hkv", "H_kv", "num_kv_heads", _heads, "int", hint="key/value heads", drop=3),
    _att("head_dim", "d", "d", "head_dim", _heads, "int", hint="head dim", drop=2),
    csv_only("v_head_dim"),
    page_only("window", "window", lambda a: a.window, "int", csv="window"),
    csv_only("chunk"),
    Col("cache", lambda v: "cache" if v.states else "cache/tok", "cache/token",
        cell=lambda g, v: cache_cell(g[0], v.states), value=lambda a, v: a.cache_bytes_per_token, kind="si", unit="B",
        hint="cache bytes per token, per layer", csv="cache_bytes_per_token"),
    page_only("state", "state/sequence", lambda a: getattr(a, "cache_bytes_per_sequence", None), "si", "B",
              hint="recurrent state bytes per sequence", when="states", csv="cache_bytes_per_sequence"),
    _att("kv_min", "KV min", "KV min", "kv_bytes_min", _bytes, "si", "B", hint="architecture minimum: cache read once"),
    _att("kv_executed", "KV exec", "KV executed", "kv_bytes_executed", _bytes, "si", "B", hint="KV bytes the code moved"),
    _att("amplification", "ampl", "executed/min", "amplification", ratio, "num", hint="amplification"),
    csv_only("read_amplification"),
    _att("flops_model", "FLOP model", "FLOPs model", "flops_model", num, "si", "FLOP", drop=5),
    _att("flops_executed", "FLOP exec", "FLOPs executed", "flops_executed", num, "si", "FLOP", drop=4),
    csv_only("bytes_min"),
    page_only("bytes_executed", "bytes executed", lambda a: a.bytes_executed, "si", "B", csv="bytes_executed"),
    _att("intensity_min", "I min", "I min", "intensity_min", ratio, "num", "FLOP/B",
         hint="intensity at the architecture minimum"),
    page_only("intensity_executed", "I executed", lambda a: a.intensity_executed, "num", "FLOP/B",
              hint="intensity as executed", csv="intensity_executed"),
    csv_only("dtype"),
    text_only("bound_min", "bound", lambda g, v: v.style.bound(g[0].placement_min.bound) if g[0].placement_min else "-",
              align="left", drop=1, csv="bound_min", raw=_placed("placement_min", "bound")),
    csv_only("time_bound_min_s", _placed("placement_min", "time_bound_s")),
    page_only("bound_executed", "bound", lambda a: a.placement_executed.bound, csv="bound_executed",
              raw=_placed("placement_executed", "bound")),
    csv_only("time_bound_executed_s", _placed("placement_executed", "time_bound_s")),
    Col("time_bound", None, "time bound", value=lambda a, v: op_time(v.report, a), kind="time",
        hint="sum of its ops' time bounds"),
    Col("share", None, "share", value=lambda a, v: _step_share(op_time(v.report, a), v.report), kind="pct",
        hint="share of the predicted step"),
    page_only("notes", "notes", lambda a: " | ".join(a.notes)),
    *csv_only_fields("time_s", "achieved_flops", "achieved_bandwidth", "mfu", "hfu", "mbu", "time_vs_bound",
                     when="measured"),
)


# -- the most expensive ops: text rows are rooflinekit.outputs.sections.OpLine, page rows OpRow, CSV rows
# each OpRow's fields ---------------------------------------------------------------------------------------


def _op_share(o, v: View) -> str:
    """An op line's share of the measured step where measured, else of the predicted step."""
    measured, predicted = v.report.totals.measured, v.report.totals.predicted_step_s
    if measured and o.time_s is not None and measured.step_time_s:
        return share(o.time_s / measured.step_time_s)
    return share(o.time_bound_s / predicted if predicted else None)


OPS: tuple[Col, ...] = (
    _o_index := page_only("index", "#", lambda o: o.index, "int", hint="index in execution order", csv="index"),
    _o_name := Col("op", "op", "op", cell=lambda o, v: o.first.name, value=lambda o, v: o.name, align="left",
                   csv="name"),
    text_only("count", lambda v: "n" if v.group else "#", lambda o, v: str(o.count if v.group else o.first.index)),
    _o_module := Col("module", "module", "module", cell=lambda o, v: o.label, value=lambda o, v: o.module,
                     align="left", csv="module"),
    _o_kind := page_only("kind", "kind", lambda o: o.kind, csv="kind"),
    _o_flops := Col("flops", "FLOP", "FLOPs", cell=lambda o, v: num(o.flops), value=lambda o, v: o.flops, kind="si",
                    unit="FLOP", drop=3, csv="flops"),
    _o_flops_model := csv_only("flops_model"),
    _o_bytes := Col("bytes", "bytes", "bytes", cell=lambda o, v: num(o.bytes, "B"), value=lambda o, v: o.bytes,
                    kind="si", unit="B", drop=4, csv="bytes", raw=lambda r, v: r["bytes_read"] + r["bytes_written"]),
    *(_o_byte_parts := csv_only_fields("bytes_read", "bytes_written", "param_bytes")),
    _o_intensity := Col("intensity", "FLOP/B", "FLOP/B", cell=lambda o, v: ratio(o.flops / o.bytes) if o.bytes else "-",
                        value=lambda o, v: o.intensity, kind="num", csv="intensity"),
    _o_bound := Col("bound", "bound", "bound", cell=lambda o, v: v.style.bound(o.first.bound),
                    value=lambda o, v: o.bound, align="left", drop=2, csv="bound"),
    _o_time_bound := _both("time_bound", "t bound", "time bound", lambda o: o.time_bound_s, seconds, "time",
                           csv="time_bound_s"),
    _o_share := Col("share", "share", "share", cell=_op_share, value=lambda o, v: _step_share(o.time_bound_s, v.report),
                    kind="pct", hint="share of the predicted step", csv="time_share",
                    raw=lambda r, v: _step_share(r["time_bound_s"], v.report)),
    _o_measured := text_only("measured", "measured", lambda o, v: seconds(o.time_s), when="measured", csv="time_s"),
    _o_x_bound := text_only("x_bound", "x bound", lambda o, v: _over(o.time_s, o.time_bound_s), drop=1,
                            when="measured", csv="time_vs_bound"),
    _o_dtype := page_only("dtype", "dtype", lambda o: o.dtype, csv="dtype"),
    _o_counted := page_only("counted", "counted", lambda o: o.counted, "bool", hint="has a FLOP formula",
                            csv="counted"),
    _o_shapes := Col("shapes", "shapes", "shapes", cell=lambda o, v: o.first.shapes, value=lambda o, v: o.shapes,
                     align="left", wide_only=True, csv="shapes"),
    *(_o_rates := csv_only_fields("achieved_flops", "achieved_bandwidth", "mfu", "hfu", "mbu", when="measured")),
)
#: The ops' CSV fields in their order: the op's counts and roofline, then the measured figures.
OPS_CSV: tuple[Col, ...] = (
    _o_index, _o_name, _o_module, _o_kind, _o_flops, _o_flops_model, _o_bytes, *_o_byte_parts, _o_intensity,
    _o_bound, _o_time_bound, _o_share, _o_dtype, _o_counted, _o_shapes, _o_measured, *_o_rates, _o_x_bound,
)


# -- ops without a FLOP formula (rows: UncountedOp) ------------------------------------------------------

UNCOUNTED: tuple[Col, ...] = (
    Col("name", "op without FLOP formula", "op", align="left", value=lambda u, v: u.name,
        cell=lambda u, v: u.name + (" (formula failed)" if u.formula_error else "")),
    _both("count", "count", "count", lambda u: u.count, str, "int"),
    _both("bytes", "bytes", "bytes", lambda u: u.bytes, _bytes, "si", "B"),
    _both("bytes_share", "bytes share", "bytes share", lambda u: u.bytes_share, share, "pct"),
    page_only("time_bound", "time bound", lambda u: u.time_bound_s, "time"),
    _both("time_share", "time share", "time share", lambda u: u.time_share, share, "pct"),
    page_only("formula_error", "formula error", lambda u: u.formula_error),
)


# -- collectives per GPU (rows: CollectiveSummary) --------------------------------------------------------

COMM: tuple[Col, ...] = (
    _both("collective", "collective", "collective", lambda c: c.collective, str, align="left"),
    _both("group", "group", "group", lambda c: c.group_size, str, "int"),
    _both("calls", "calls", "calls", lambda c: c.calls, str, "int"),
    _both("message", "message", "message", lambda c: c.message_bytes, _bytes, "si", "B"),
    _both("wire", "wire B/GPU", "wire bytes per GPU", lambda c: c.wire_bytes, _bytes, "si", "B"),
    _both("time_bound", "t bound", "time bound", lambda c: c.time_bound_s, seconds, "time"),
    text_only("latency", "latency/call", lambda c, v: f"{seconds(c.latency_s)} / {seconds(c.expected_latency_s)}"),
    text_only("expected", "t expected", lambda c, v: seconds(c.expected_time_s)),
    text_only("algorithm", "algorithm", lambda c, v: c.algorithm, align="left", drop=1),
)


# -- ranks of a distributed run (rows: the report's distributed["ranks"] dicts; text only) ----------------


def _rank(key: str, text: str, fmt: Callable[[Any], str], **layout: Any) -> Col:
    return text_only(key, text, lambda r, v: fmt(r[key]), **layout)


RANKS: tuple[Col, ...] = (
    _rank("rank", "rank", str),
    _rank("flops", "FLOP", num),
    _rank("bytes", "bytes", _bytes),
    _rank("weight_bytes", "weights", _bytes, drop=2),
    _rank("time_compute_s", "compute", seconds),
    _rank("time_memory_s", "memory", seconds),
    _rank("time_comm_s", "comm", seconds),
    _rank("binding", "binds", str, align="left"),
    _rank("comm_calls", "coll.", str, drop=1),
    _rank("comm_wire_bytes", "wire B", _bytes, drop=3),
    _rank("predicted_step_s", "pred. step", seconds),
)
