"""Bounds on the work one analysis may do: an absurd model fails fast with one line, not after minutes.

The analysis runs on the meta device, so tensor sizes cost nothing; what costs time and memory is
the number of Python objects: modules built, ops recorded (each ~0.2-0.4 ms and ~1.5 kB here).
Each bound has a default far above real models and an environment variable that raises it:

| bound | default | applies to | variable |
|---|---|---|---|
| layers | 2,048 | a transformers config's `num_hidden_layers` (and `-O layers=N` on one) | ROOFLINEKIT_MAX_LAYERS |
| parameters | 1e13 (10 trillion) | a transformers config, estimated before building, counted after | ROOFLINEKIT_MAX_PARAMETERS |
| modules | 100,000 | modules registered while `build_model()` runs (any model source) | ROOFLINEKIT_MAX_MODULES |
| ops | 500,000 | ops recorded in one forward (capture and each timed forward) | ROOFLINEKIT_MAX_OPS |

For scale: Llama-3.1-405B has 126 layers; DeepSeek-V3 (671B) builds 1,215 modules and records
5,505 ops in decode; a Llama-style model at 2,048 layers builds ~26,000 modules and records
~88,000 ops (~45 s and ~0.6 GB on a 2-core machine).
"""

from __future__ import annotations

import math
import os

from rooflinekit.core.errors import UserError

#: name -> (environment variable, default)
LIMITS: dict[str, tuple[str, float]] = {
    "layers": ("ROOFLINEKIT_MAX_LAYERS", 2048),
    "parameters": ("ROOFLINEKIT_MAX_PARAMETERS", 1e13),
    "modules": ("ROOFLINEKIT_MAX_MODULES", 100_000),
    "ops": ("ROOFLINEKIT_MAX_OPS", 500_000),
}


class LimitError(UserError):
    """The work asked for is beyond a bound (see rooflinekit.core.limits)."""


def limit(name: str) -> float:
    """The bound `name` (a key of LIMITS): its environment variable when set, else the default."""
    var, default = LIMITS[name]
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw.replace("_", ""))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1:
        raise UserError(f"{var}={raw!r}: give a number of at least 1 (default {default:,.0f})")
    return value


def show(name: str, value: float | None = None) -> str:
    """A bound (or a count measured against it) for a message: 2,048 layers; 1e+13 parameters."""
    value = limit(name) if value is None else value
    return f"{value:.3g}" if value >= 1e9 else f"{value:,.0f}"


def over(name: str, message: str) -> LimitError:
    """The one-line error: `message` (what is too large, and what to do), then the bound and how to
    raise it."""
    var, _ = LIMITS[name]
    return LimitError(f"{message} (limit: {show(name)} {name}; set {var} to raise it)")
