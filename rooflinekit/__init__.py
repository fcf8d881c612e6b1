"""rooflinekit: roofline profiling for PyTorch LLMs.

Counts FLOPs and bytes per aten op and per module of the user's own model, attributes attention
and KV-cache traffic per architecture through plugins, and places every part on the roofline of a
real accelerator.

The Python API (docs/python-api.md) is imported on first use, so that `import rooflinekit` and
the command line's start stay light:

    import rooflinekit
    report = rooflinekit.profile(model, *inputs, hardware="H800 SXM5", phase="decode")
"""

from __future__ import annotations

import importlib
import sys
import types

from rooflinekit.core.errors import RooflineError, UserError
from rooflinekit.core.version import SCHEMA_VERSION, __version__

#: Public names served lazily from their modules (PEP 562): name -> (module, attribute).
_LAZY = {
    "profile": ("rooflinekit.api", "profile"),
    "profile_file": ("rooflinekit.api", "profile_file"),
    "capture": ("rooflinekit.api", "capture"),
    "sweep": ("rooflinekit.api", "sweep"),  # every option of the CLI (issue 26, item 2)
    "advise": ("rooflinekit.api", "advise"),
    "plan": ("rooflinekit.api_search", "plan"),
    "Capture": ("rooflinekit.api", "Capture"),
    # the report (rooflinekit.core.report.Report), served from the module that registers its views
    "Report": ("rooflinekit.outputs.views", "Report"),
}

__all__ = ["SCHEMA_VERSION", "RooflineError", "UserError", "__version__", "trace", *_LAZY]


class _CallableTrace(types.ModuleType):
    """The `rooflinekit.trace` subpackage, callable as the API's `rooflinekit.trace(path, ...)`."""

    def __call__(self, path, hardware=None, step=None):
        return importlib.import_module("rooflinekit.api").trace(path, hardware=hardware, step=step)


class _Package(types.ModuleType):
    """rooflinekit's own module type: the `trace` subpackage, once imported, is made callable."""

    def __setattr__(self, name, value):
        if name == "trace" and isinstance(value, types.ModuleType):
            value.__class__ = _CallableTrace
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
import rooflinekit.trace  # noqa: E402,F401  (a docstring only: `rooflinekit.trace(path)` is the API)


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'rooflinekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names with the lazy ones (`dir(rooflinekit)` lists `profile` before its first use)."""
    return sorted(set(globals()) | set(__all__))
