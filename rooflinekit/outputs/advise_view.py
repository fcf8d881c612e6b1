"""`rooflinekit advise` as text: the ranked levers (the columns of rooflinekit.outputs.advice_columns.ADVICE),
the baseline, what was skipped and why."""

from __future__ import annotations

import io
import textwrap

from tabulate import tabulate

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.codec import dumps
from rooflinekit.core.units import seconds, si
from rooflinekit.outputs.advice_columns import ADVICE, ADVICE_CSV, lever_assumption
from rooflinekit.outputs.columns import View, shown, text_rows
from rooflinekit.outputs.csv_tables import table_csv
from rooflinekit.outputs.memory_view import memory_line
from rooflinekit.outputs.render import workload_formats
from rooflinekit.outputs.words import efficiency_name

ADVISE_FORMATS = ("table", "json", "csv", "markdown")
#: The text report's width: the table, then each lever's assumption and the notes wrapped to it.
WIDTH = 100


def _wrapped(text: str, first: str = "", rest: str = "    ") -> str:
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)


def render_advice(report: AdviceReport, fmt: str = "table") -> str:
    """The advice as table, markdown, csv or json (the JSON form is `AdviceReport.to_dict()`)."""
    if fmt == "json":
        return dumps(report.to_dict(), allow_nan=False)
    levers = [(0, report.baseline), *enumerate(report.levers, 1)]
    if fmt == "csv":
        return table_csv(ADVICE_CSV, View(report), levers)
    md = fmt == "markdown"
    w, hw, model = report.workload, report.hardware, report.model
    head = [
        f"model: {model.name or '?'} ({model.path or ''})",
        f"workload: {w.phase}, batch {w.batch}, context {w.context}{workload_formats(report)}; hardware {hw.name}",
        f"baseline: expected step {seconds(report.baseline.expected_step_s)} (efficiency "
        f"{efficiency_name(report)}; bound {seconds(report.baseline.predicted_step_s)}), {si(report.baseline.tokens_per_s_per_gpu)} tokens/s per GPU, "
        f"{report.baseline.binding}-bound; levers ranked by tokens/s per GPU at the expected step",
    ]
    if report.memory is not None:
        head.append(memory_line(report.memory))
    head.append(f"{len(report.levers)} levers priced, {len(report.skipped)} skipped; {report.profiles} profiles "
                f"in {seconds(report.wall_s)}")
    view = View(report, markdown=md)
    table = tabulate(text_rows(ADVICE, view, levers), headers=[c.header(view) for c in shown(ADVICE, view, "text")],
                     tablefmt="github" if md else "simple", disable_numparse=True)
    out = io.StringIO()
    if md:
        out.write("# rooflinekit advise\n\n" + "\n".join(f"- {h}" for h in head))
    else:
        out.write("\n".join(_wrapped(h) for h in head))
    out.write("\n\n" + table + "\n\n")
    if not md:
        out.write("Assumptions:\n")
        for rank, lever in levers:
            out.write(_wrapped(lever_assumption(lever), f"{rank:>3}  ", "     ") + "\n")
        out.write("\n")
    if report.skipped:
        out.write("## Skipped\n\n" if md else "Skipped:\n")
        for s in report.skipped:
            who = "" if s.source == "rooflinekit" else f" [{s.source}]"
            line = f"{s.lever}{who}: {s.reason}"
            out.write(f"- {line}\n" if md else _wrapped(line, "  ", "    ") + "\n")
        out.write("\n")
    for prefix, lines in (("note", report.notes), ("warning", report.warnings)):
        for line in lines:
            out.write(f"- {prefix}: {line}\n" if md else _wrapped(f"{prefix}: {line}") + "\n")
    return out.getvalue()
