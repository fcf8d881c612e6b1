"""rooflinekit 0.2's module for the model's loading and the request's checks, kept until 0.4: each
name warns (DeprecationWarning) and is served from where it now lives,
rooflinekit.stages.model_source (loading, building, inputs) or rooflinekit.stages.request_checks
(the request's checks, `parse_options`)."""

from __future__ import annotations

import importlib
import warnings

#: Names renamed on the way (old -> new).
_RENAMED = {"validate_levers": "validate_request"}
_MODULES = ("rooflinekit.stages.model_source", "rooflinekit.stages.request_checks")


def __getattr__(name: str):
    new = _RENAMED.get(name, name)
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        if hasattr(module, new):
            value = getattr(module, new)
            home = getattr(value, "__module__", None) or module_name  # a class or function's own module
            warnings.warn(f"rooflinekit.stages.workload.{name} is deprecated since rooflinekit 0.3: import "
                          f"{home}.{new}", DeprecationWarning, stacklevel=2)
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
