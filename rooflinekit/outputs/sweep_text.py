"""The sweep as text (a terminal table fitting 100 columns, or Markdown): one row per point, the
critical batch per context, notes and warnings; numbers through rooflinekit.core.units."""

from __future__ import annotations

import io

from rooflinekit.core.units import plain, si
from rooflinekit.outputs.columns import View, shown, text_columns, text_rows
from rooflinekit.outputs.sweep_columns import SWEEP_POINTS
from rooflinekit.outputs.tables import WIDTH, Style, legend, table, wrap
from rooflinekit.outputs.words import request_words


def _differing(summary: str, main: str) -> str:
    """The parts of `summary` ('; '-separated) that `main` does not already say ('the same' if none):
    the largest batch that fits is said once per context, not again for attention at its minimum."""
    said = set(main.split("; "))
    parts = [p for p in summary.split("; ") if p not in said]
    return "; ".join(parts) if parts else "the same"


def sweep_to_text(data: dict, fmt: str = "table", *, wide: bool = False, colour: bool = False) -> str:
    """The sweep dict (SweepReport.to_dict()) as a terminal table (`table`) or Markdown."""
    md = fmt == "markdown"
    width = None if (wide or md) else WIDTH
    style = Style(colour and not md)
    hw, w, model = data["hardware"], data["workload"], data["model"]
    head = [
        f"model: {model.get('name', '?')} ({model.get('path', '')})",
        f"sweep: {w['phase']}, batches {','.join(map(str, w['batches']))}, contexts "
        f"{','.join(map(str, w['contexts']))}"
        f"{request_words(w['dtype'], data.get('deployment'), w.get('q_len'), w.get('options'))}, device {w['device']}",
    ]
    if hw:
        head.append(f"hardware: {hw['name']}: {si(hw['peak_flops'], 'FLOP/s')} dense {hw['dtype']}, "
                    f"{si(hw['bandwidth'], 'B/s')}, ridge {plain(hw['ridge'], 4)} FLOP/B")
    out = io.StringIO()
    if md:
        out.write("# rooflinekit sweep\n\n" + "\n".join(f"- {h}" for h in head) + "\n\n")
    else:
        out.write("\n".join(wrap(h, width) for h in head) + "\n\n")
    view = View(data, style)
    columns = text_columns(SWEEP_POINTS, view)
    text, left_out = table(columns, text_rows(SWEEP_POINTS, view, data["points"]), width=width, markdown=md,
                           style=style)
    meanings = {c.header(view): c.meaning for c in shown(SWEEP_POINTS, view, "text") if c.meaning}
    key = legend([c.header for c in columns], left_out, meanings)
    out.write(("## Points\n\n" if md else "") + text + "\n" + (("\n" if md else "") + wrap(key, width) + "\n"
                                                                   if key else "") + "\n")
    if data["critical_batch"]:
        out.write("## Critical batch\n\n" if md else style.title("Critical batch (whole step reaches the ridge):")
                  + "\n")
        ideal = {c["context"]: c for c in data.get("critical_batch_attention_minimum", [])}
        for c in data["critical_batch"]:
            line = f"S={c['context']}: {c['summary']}"
            if c["context"] in ideal:
                line += f"; with attention at its architecture minimum: {_differing(ideal[c['context']]['summary'], c['summary'])}"
            out.write(("- " + line if md else wrap("  " + line, width, "    ")) + "\n")
            notes = [c.get("note") if c["method"] != "none" else ""]  # "none": the summary is the note
            if c["context"] in ideal and ideal[c["context"]].get("note") and ideal[c["context"]]["method"] != "none":
                notes.append("with attention at its architecture minimum: " + ideal[c["context"]]["note"])
            for note in filter(None, notes):
                out.write(("  " + note if md else wrap("    " + note, width, "      ")) + "\n")
        out.write("\n")
    if left_out:
        out.write(wrap(f"columns left out to fit {WIDTH} columns: {', '.join(left_out)}; --wide shows them",
                       width) + "\n")
    for line in data.get("notes", []):
        out.write(f"- note: {line}\n" if md else wrap(f"note: {line}", width) + "\n")
    for line in data.get("warnings", []):
        out.write(f"- warning: {line}\n" if md else style.warning(wrap(f"warning: {line}", width)) + "\n")
    return out.getvalue()
