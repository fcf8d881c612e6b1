"""Sweep, advice and plan results with their views for people, as rooflinekit.outputs.render.ViewedReport
is for a profile: a one-line `repr`, the text table as `str`, Jupyter's HTML (`_repr_html_`,
rooflinekit.outputs.notebook) and `to_dataframe()` (rooflinekit.outputs.frames). The data types
(rooflinekit.core.report, rooflinekit.core.plan) import no output; the Python API returns these
subclasses of them (the same fields, not copied).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.plan import PlanResult
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.outputs import frames, notebook
from rooflinekit.outputs.advise_view import render_advice
from rooflinekit.outputs.plan_text import plan_to_text
from rooflinekit.outputs.sweep_text import sweep_to_text


def _same_fields(cls, base, value):
    if isinstance(value, cls):
        return value
    return cls(**{f.name: getattr(value, f.name) for f in fields(base)})


@dataclass(frozen=True, repr=False)
class ViewedSweep(SweepReport):
    """A SweepReport with its views (module doc)."""

    @classmethod
    def of(cls, sweep: SweepReport) -> ViewedSweep:
        return _same_fields(cls, SweepReport, sweep)

    def __repr__(self) -> str:
        return notebook.sweep_repr(self)

    def __str__(self) -> str:
        return sweep_to_text(self.to_dict())

    def _repr_html_(self) -> str:
        return notebook.sweep_html(self)

    def to_dataframe(self, section: str = "points", columns: Sequence[str] | None = None):
        """One row per point (`points`) or per context (`critical_batch`), as a pandas DataFrame."""
        return frames.sweep_frame(self, section, columns)


@dataclass(frozen=True, repr=False)
class ViewedAdvice(AdviceReport):
    """An AdviceReport with its views (module doc)."""

    @classmethod
    def of(cls, advice: AdviceReport) -> ViewedAdvice:
        return _same_fields(cls, AdviceReport, advice)

    def __repr__(self) -> str:
        return notebook.advice_repr(self)

    def __str__(self) -> str:
        return render_advice(self)

    def _repr_html_(self) -> str:
        return notebook.advice_html(self)

    def to_dataframe(self, columns: Sequence[str] | None = None):
        """The baseline (rank 0) and every lever, as a pandas DataFrame."""
        return frames.advice_frame(self, columns)


@dataclass(repr=False)
class ViewedPlan(PlanResult):
    """A PlanResult with its views (module doc)."""

    @classmethod
    def of(cls, plan: PlanResult) -> ViewedPlan:
        return _same_fields(cls, PlanResult, plan)

    def __repr__(self) -> str:
        return notebook.plan_repr(self)

    def __str__(self) -> str:
        return plan_to_text(self)

    def _repr_html_(self) -> str:
        return notebook.plan_html(self)

    def to_dataframe(self, columns: Sequence[str] | None = None):
        """One row per priced configuration, with `label`, `pareto` and `best`, as a pandas DataFrame."""
        return frames.plan_frame(self, columns)
