"""Deprecated: rooflinekit 0.1's `rooflinekit.modelled`, kept so that
plugins written to the 0.1 plugin guide still load.
Module models are served by `rooflinekit.stages.modelled`.
"""

from __future__ import annotations

import warnings

from rooflinekit.stages.modelled import ModuleModel, emit, suppressed

warnings.warn(
    "rooflinekit.modelled is deprecated since rooflinekit 0.2: import ModuleModel, emit and "
    "suppressed from rooflinekit.stages.modelled (the plugin helpers: rooflinekit.plugin)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["ModuleModel", "emit", "suppressed"]
