"""Deprecated: rooflinekit 0.1's `rooflinekit.specs`, kept so that
plugins written to the 0.1 plugin guide still load.
The data types plugins receive and return are in `rooflinekit.plugin`.
"""

from __future__ import annotations

import warnings

from rooflinekit.core.specs import (
    AttentionCall,
    AttentionCost,
    AttentionShard,
    AttentionSpec,
    AttentionWindow,
    AttentionWorkload,
)

warnings.warn(
    "rooflinekit.specs is deprecated since rooflinekit 0.2: import AttentionSpec, "
    "AttentionCost, ... from rooflinekit.plugin",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["AttentionCall", "AttentionCost", "AttentionShard", "AttentionSpec", "AttentionWindow", "AttentionWorkload"]
