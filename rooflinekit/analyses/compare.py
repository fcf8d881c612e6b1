"""Compare two profile reports side by side: totals, attention, per-layer cache and modules, with A/B ratios."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tabulate import tabulate

from rooflinekit.core.codec import encode
from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.report import Report
from rooflinekit.core.units import ratio as fmt_ratio
from rooflinekit.core.units import seconds, share, si
from rooflinekit.outputs.groups import fold
from rooflinekit.outputs.render import to_json
from rooflinekit.outputs.report_io import attention_figures
from rooflinekit.outputs.tables import WIDTH, Column, legend, wrap
from rooflinekit.outputs.tables import table as layout
from rooflinekit.outputs.words import request_words

#: (key, unit) of the whole step compared; units drive formatting only.
TOTALS = [("flops", "FLOP"), ("flops_model", "FLOP"), ("bytes", "B"), ("intensity", "FLOP/B"),
          ("bound", ""), ("weight_bytes", "B"), ("kv_bytes_executed", "B"), ("kv_bytes_min", "B"),
          ("other_bytes", "B"), ("time_bound_s", "s"), ("predicted_step_s", "s"), ("tokens_per_s", "1/s"),
          ("mfu_bound", "%"), ("mfu_bound_model", "%")]
ATTENTION = [("layers", ""), ("recognised", ""), ("flops_model", "FLOP"), ("flops_executed", "FLOP"),
             ("bytes_min", "B"), ("bytes_executed", "B"), ("kv_bytes_min", "B"), ("kv_bytes_executed", "B"),
             ("cache_bytes_per_token", "B"), ("cache_bytes_per_token_per_layer", "B"),
             ("intensity_min", "FLOP/B"), ("intensity_executed", "FLOP/B")]
LAYER = [("cache_bytes_per_token", "B"), ("kv_bytes_min", "B"), ("kv_bytes_executed", "B"),
         ("amplification", ""), ("flops_model", "FLOP"), ("intensity_min", "FLOP/B"),
         ("intensity_executed", "FLOP/B")]
MODULE = [("flops", "FLOP"), ("bytes", "B"), ("intensity", "FLOP/B"), ("time_bound_ops_s", "s")]
WORKLOAD_KEYS = ("phase", "batch", "context", "q_len", "dtype", "device")
#: The compare tables' headers where they differ from profile's.
COMPARE_MEANINGS = {"I exec": "intensity as executed (FLOP/B)", "FLOP": "FLOPs (summed over folded layers)",
                    "bytes": "bytes moved (summed over folded layers)"}


@dataclass
class Row:
    """One compared quantity: A's value, B's, and A/B (None where undefined)."""

    section: str
    name: str
    key: str
    a: object
    b: object
    ratio: float | None
    unit: str = ""


def ratio(a, b) -> float | None:
    """A/B for two numbers; None where either is missing or B is zero."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        return None
    if b == 0 or any(math.isnan(v) or math.isinf(v) for v in (a, b)):
        return None
    return a / b


def _rows(section: str, name: str, a: dict, b: dict, keys) -> list[Row]:
    return [Row(section, name, key, a.get(key), b.get(key), ratio(a.get(key), b.get(key)), unit)
            for key, unit in keys]


def _attention(report: Report) -> dict:
    return {**encode(report.attention_totals), **attention_figures(report)}


def _describe(report: Report, path: str) -> dict:
    w = encode(report.workload)
    return {"path": path, "model": report.model.name, "model_path": report.model.path,
            "options": w.get("options", {}), "workload": {k: w.get(k) for k in WORKLOAD_KEYS},
            "deployment": encode(report.deployment), "hardware": report.hardware.name}


def compare(a: Report, b: Report, a_path: str = "A", b_path: str = "B") -> dict:
    """The comparison as a JSON-ready dict; every ratio is A/B."""
    rows = _rows("step", "whole step", encode(a.totals), encode(b.totals), TOTALS)
    rows += _rows("attention", "all layers", _attention(a), _attention(b), ATTENTION)
    layers_a = [x for x in a.attention if x.recognised]
    layers_b = [x for x in b.attention if x.recognised]
    for la, lb in zip(layers_a, layers_b, strict=False):
        name = la.module if la.module == lb.module else f"{la.module} | {lb.module}"
        rows += _rows("attention layer", name, encode(la), encode(lb), LAYER)
    mods_b = {m.name: m for m in b.modules}
    matched = [m for m in a.modules if m.name in mods_b]
    for m in matched:
        rows += _rows("module", m.name, encode(m), encode(mods_b[m.name]), MODULE)
    notes = []
    da, db = _describe(a, a_path), _describe(b, b_path)
    differ = [f"{k} ({da['workload'][k]} vs {db['workload'][k]})" for k in WORKLOAD_KEYS
              if da["workload"][k] != db["workload"][k]]
    if da["hardware"] != db["hardware"]:
        differ.append(f"hardware ({da['hardware']} vs {db['hardware']})")
    if differ:
        notes.append("A and B differ in: " + ", ".join(differ))
    if len(layers_a) != len(layers_b):
        notes.append(f"recognised attention layers: {len(layers_a)} in A, {len(layers_b)} in B; "
                     f"the first {min(len(layers_a), len(layers_b))} are compared in order")
    unmatched = len(a.modules) - len(matched) + len(b.modules) - len(matched)
    if unmatched:
        notes.append(f"{unmatched} modules have no namesake in the other report and are not compared")
    return {"kind": "compare", "ratio": "A/B", "a": da, "b": db, "rows": [asdict(r) for r in rows], "notes": notes}


def _fmt(value, unit: str) -> str:

    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if unit == "s":
        return seconds(value)
    if unit == "%":
        return share(value)
    if unit in ("FLOP", "B", "1/s"):
        return si(value, "" if unit == "1/s" else unit)
    if isinstance(value, float):
        return fmt_ratio(value, 4)
    return str(value)


#: Short headers of the per-layer and per-module tables (the legend under each says what they are).
SHORT = {"cache_bytes_per_token": "cache/tok", "kv_bytes_executed": "KV exec", "intensity_min": "I min",
         "intensity_executed": "I exec", "flops": "FLOP", "bytes": "bytes", "intensity": "FLOP/B"}
#: Figures of folded layers that add up (a module row's FLOPs and bytes, as profile sums them).
SUMMED = ("flops", "bytes")


def _wide(rows: list[dict], keys: list[tuple[str, str]], summed: bool = False) -> tuple[list[Column], list[list[str]]]:
    """One line per name: A, B and A/B for each key; identical layers folded into one row as
    profile folds them (model.layers.*.mlp (x28)), their FLOPs and bytes summed where `summed`."""
    by_name: dict[str, dict[str, dict]] = {}
    for r in rows:  # 'A's name | B's name' where they differ: A's in the table, the pair in a note
        by_name.setdefault(r["name"].split(" | ")[0], {})[r["key"]] = r
    columns = [Column("name", "left")]
    for key, _ in keys:  # B's own figures: -f markdown or json (A and A/B give them)
        h = SHORT.get(key, key)
        columns += [Column(f"{h} A"), Column(f"{h} B", wide_only=True), Column("A/B")]
    figures = [(name, [(c.get(k) or {}).get(f) for k, _ in keys for f in ("a", "b")])
               for name, c in by_name.items()]
    table_rows = []
    for g in fold(figures, lambda item: item[0], lambda item: item[1]):
        values = []
        for j, (key, unit) in enumerate(keys):
            a, b = (g.members[0][1][2 * j + x] for x in (0, 1))
            if summed and key in SUMMED and a is not None and b is not None:
                a, b = (sum(m[1][2 * j + x] for m in g.members) for x in (0, 1))
            values += [_fmt(a, unit), _fmt(b, unit), fmt_ratio(ratio(a, b), 4)]
        table_rows.append([g.label, *values])
    return columns, table_rows


def render_compare(data: dict, fmt: str = "table") -> str:
    """Tables (or markdown): the step and attention totals, then per layer and per module; or JSON."""


    if fmt == "json":
        return to_json(data)
    md = fmt == "markdown"
    tablefmt = "github" if md else "simple"
    out = []
    for tag in ("a", "b"):
        d = data[tag]
        w = d["workload"]
        words = request_words(w["dtype"], d.get("deployment"), w.get("q_len") if w["phase"] == "decode" else None,
                              d.get("options"))
        line = f"{tag.upper()}: {d['path']}: {d['model']} - {w['phase']}, batch {w['batch']}, context {w['context']}"
        line += f"{words}, {d['hardware']}"
        out.append(f"- {line}" if md else wrap(line, WIDTH))
    out.append("")
    rows = data["rows"]
    for section, title in (("step", "Whole step"), ("attention", "Attention (all recognised layers)")):
        table = [[r["key"], _fmt(r["a"], r["unit"]), _fmt(r["b"], r["unit"]),
                  fmt_ratio(r["ratio"], 4)] for r in rows if r["section"] == section]
        out += [f"## {title}\n" if md else title,
                tabulate(table, headers=["quantity", "A", "B", "A/B"], tablefmt=tablefmt, disable_numparse=True), ""]
    for section, title, keys in (
        ("attention layer", "Attention per layer (in order)",
         [("cache_bytes_per_token", "B"), ("kv_bytes_executed", "B"), ("intensity_min", "FLOP/B"),
          ("intensity_executed", "FLOP/B")]),
        ("module", "Modules (matched by name; (xN): N identical layers, FLOPs and bytes summed)", [("flops", "FLOP"), ("bytes", "B"), ("intensity", "FLOP/B")]),
    ):
        picked = [r for r in rows if r["section"] == section]
        if picked:
            columns, body = _wide(picked, keys, summed=section == "module")
            text, left_out = layout(columns, body, width=None if md else WIDTH, markdown=md)
            key = legend([SHORT.get(k, k) for k, _ in keys], [], COMPARE_MEANINGS)
            renamed = sorted({layer_pattern(r["name"]) for r in picked if " | " in r["name"]})
            out += [f"## {title}\n" if md else title, text]
            if renamed:
                out += [wrap("named in A | in B: " + ", ".join(renamed), None if md else WIDTH)]
            out += [
                    wrap(f"{key}; A/B = the ratio" + (f"; left out to fit {WIDTH} columns: "
                                                      f"{', '.join(left_out)}" if left_out else ""),
                         None if md else WIDTH), ""]
    for note in data["notes"]:
        out.append(f"note: {note}")
    return "\n".join(out) + "\n"
