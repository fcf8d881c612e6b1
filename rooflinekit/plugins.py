"""Deprecated: rooflinekit 0.1's `rooflinekit.plugins`, kept so that
plugins written to the 0.1 plugin guide still load.
The plugin host is `rooflinekit.core.plugins.PluginHost`.
"""

from __future__ import annotations

import warnings

from rooflinekit.core.plugins import PluginHost, get_host, reset_host

warnings.warn(
    "rooflinekit.plugins is deprecated since rooflinekit 0.2: import PluginHost from "
    "rooflinekit.core.plugins (hook markers and types: rooflinekit.plugin)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["PluginHost", "get_host", "reset_host"]
