"""Deprecated: rooflinekit 0.1's `rooflinekit.pipeline`, kept so that
plugins written to the 0.1 plugin guide still load.
`profile` is `rooflinekit.analyses.profile.profile`, `load_source` is
`rooflinekit.stages.workload.load_source` (the Python API: `rooflinekit.profile`).
"""

from __future__ import annotations

import warnings

from rooflinekit.analyses.profile import profile
from rooflinekit.stages.formulas import formula_book
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, hardware_db
from rooflinekit.stages.workload import load_source

warnings.warn(
    "rooflinekit.pipeline is deprecated since rooflinekit 0.2: import profile from "
    "rooflinekit.analyses.profile and load_source from rooflinekit.stages.workload (hook "
    "markers and types: rooflinekit.plugin)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["DEFAULT_HARDWARE", "formula_book", "hardware_db", "load_source", "profile"]
