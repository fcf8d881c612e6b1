"""What a plugin's `rooflinekit_advise_levers` answers: a lever as a changed request.

`rooflinekit advise` re-profiles each proposal's workload with the same capture, attribution and
placement as every built-in lever, so a plugin's lever is priced like rooflinekit's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LeverProposal:
    """One lever: its name, the request it changes to, and what it assumes.

    `workload` is a `Workload` (a `dataclasses.replace` of the one the hook received: another batch,
    a -O option, q_len) and `deployment` a `Deployment` (a replace of the one received: a format,
    `tp`, ...); None keeps the baseline's. `skip` instead says why the lever does not apply here: it
    is listed with that reason, not evaluated. `rebuild`: the workload changes how the model is
    built (a -O option the model file reads), so it is built again. `transform`: a restatement of
    the capture placed instead of the capture itself, after the built-in transforms, for a lever the
    model's code cannot run (an architecture's other form): a `Transform`
    (`rooflinekit.plugin.Transform`), or a function `(capture, rows, workload, host) -> (capture,
    rows, notes)`.
    """

    name: str
    workload: Any = None
    assumption: str = ""
    skip: str | None = None
    rebuild: bool = False
    transform: Any = None
    deployment: Any = None
