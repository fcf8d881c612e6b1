"""The shipped JSON Schemas of the three report kinds, derived from their dataclasses (docs/schema.md)."""

from __future__ import annotations

import json
from pathlib import Path

from rooflinekit.core import codec
from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.report import ADVISE_SCHEMA_FILE, SCHEMA_FILE, SWEEP_SCHEMA_FILE, Report
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.core.version import SCHEMA_VERSION

_KINDS = {"profile": Report, "sweep": SweepReport, "advise": AdviceReport}


def report_schema(kind: str = "profile") -> dict:
    """The JSON Schema of a profile (`Report`), sweep (`SweepReport`) or advise (`AdviceReport`)
    report, from the dataclasses."""
    return codec.json_schema(_KINDS.get(kind, SweepReport), kind, SCHEMA_VERSION)


def write_schema() -> list[Path]:
    """Regenerate the shipped schema files (after changing a report dataclass)."""
    files = (("profile", SCHEMA_FILE), ("sweep", SWEEP_SCHEMA_FILE), ("advise", ADVISE_SCHEMA_FILE))
    for kind, path in files:
        path.write_text(json.dumps(report_schema(kind), indent=1) + "\n")
    return [path for _, path in files]
