"""Deprecated: rooflinekit 0.1's `rooflinekit.workload`, kept so that
plugins written to the 0.1 plugin guide still load.
`Workload` and `ModelSource` are served by `rooflinekit.stages.workload`.
"""

from __future__ import annotations

import warnings

from rooflinekit.stages.workload import ModelSource, Workload

warnings.warn(
    "rooflinekit.workload is deprecated since rooflinekit 0.2: import ModelSource and "
    "Workload from rooflinekit.stages.workload (the plugin helpers: rooflinekit.plugin)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["ModelSource", "Workload"]
