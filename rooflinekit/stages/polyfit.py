"""Former home of the exact polynomial fits, now rooflinekit.stages.fitting (re-exported here)."""

from rooflinekit.stages.fitting import Design, FitError, Poly, relative_difference

__all__ = ["Design", "FitError", "Poly", "relative_difference"]
