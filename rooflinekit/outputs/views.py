"""The renderers of each report kind, registered as its views for people (rooflinekit.core.views):
a one-line `repr`, the text as `str` (the CLI's), Jupyter's HTML and `to_dataframe()`.

Imported by this package's `__init__`, so that importing any output registers every kind's views.
"""

from __future__ import annotations

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.plan import PlanResult
from rooflinekit.core.report import Report
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.core.views import register_views
from rooflinekit.outputs import frames, notebook
from rooflinekit.outputs.advise_view import render_advice
from rooflinekit.outputs.plan_text import plan_to_text
from rooflinekit.outputs.render import to_text
from rooflinekit.outputs.sweep_text import sweep_to_text

__all__ = ["AdviceReport", "PlanResult", "Report", "SweepReport"]


def _sweep_text(sweep: SweepReport) -> str:
    return sweep_to_text(sweep.to_dict())


register_views(Report, repr=notebook.report_repr, text=to_text, html=notebook.report_html, frame=frames.report_frame)
register_views(SweepReport, repr=notebook.sweep_repr, text=_sweep_text, html=notebook.sweep_html,
               frame=frames.sweep_frame)
register_views(AdviceReport, repr=notebook.advice_repr, text=render_advice, html=notebook.advice_html,
               frame=frames.advice_frame)
register_views(PlanResult, repr=notebook.plan_repr, text=plan_to_text, html=notebook.plan_html,
               frame=frames.plan_frame)
