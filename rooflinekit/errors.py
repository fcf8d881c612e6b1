"""Deprecated: rooflinekit 0.1's `rooflinekit.errors`, kept so that
plugins written to the 0.1 plugin guide still load.
`UserError` is `rooflinekit.plugin.UserError` (the exception family: `rooflinekit.core.errors`).
"""

from __future__ import annotations

import warnings

from rooflinekit.core.errors import RooflineError, UserError

warnings.warn(
    "rooflinekit.errors is deprecated since rooflinekit 0.2: import UserError from "
    "rooflinekit.plugin",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["RooflineError", "UserError"]
