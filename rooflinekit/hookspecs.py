"""Deprecated: rooflinekit 0.1's `rooflinekit.hookspecs`, kept so that
plugins written to the 0.1 plugin guide still load.
The hook marker is `rooflinekit.plugin.hookimpl`; the hook reference is `rooflinekit.core.hookspecs`.
"""

from __future__ import annotations

import warnings

from rooflinekit.core.hookspecs import hookimpl, hookspec

warnings.warn(
    "rooflinekit.hookspecs is deprecated since rooflinekit 0.2: import hookimpl from "
    "rooflinekit.plugin",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["hookimpl", "hookspec"]
