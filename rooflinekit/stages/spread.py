"""The spread of an expected time: a p10-p90 range from the validation's residuals.

Every expected step is one number; how far real engines land from it is measured in
docs/validation.md, row by row, as measured / expected. The committed `spread.toml` holds the 10th
and 90th percentiles of that ratio per step class (written by `benchmarks/validate_published.py
--spread` from `benchmarks/published_results.json`): an expected time E of class c has the range
[E x p10(c), E x p90(c)]. A class with fewer than MIN_ROWS rows borrows the pooled residuals of all
scored rows, and says so. The range is the residuals' spread, not a confidence interval of the
model: the rows are engines of 2023-2025 on the GPUs they name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SPREAD_FILE = Path(__file__).resolve().with_name("spread.toml")

#: Step classes (docs/accounting.md, "The spread"), and the pooled residuals a thin class borrows.
CLASSES = ("decode", "prefill", "mixed", "communication")
POOLED = "all"
#: The fewest rows a class needs to stand on its own residuals.
MIN_ROWS = 8
#: A step whose collectives take at least this share of its expected time is communication-heavy.
COMM_SHARE = 0.3


@dataclass(frozen=True)
class Spread:
    """The p10 and p90 of measured / expected for one step class, and the rows behind them."""

    step_class: str
    source: str  # the class whose residuals are used: step_class, or POOLED when it has too few
    rows: int
    low: float
    high: float

    def range(self, expected_s: float) -> tuple[float, float]:
        """(p10, p90) of a step expected at `expected_s`."""
        return expected_s * self.low, expected_s * self.high

    def words(self) -> str:
        """Where the range comes from, in one line."""
        if self.source == self.step_class:
            rows = f"{self.rows} published {self.step_class} rows"
        else:
            rows = (f"all {self.rows} scored published rows (the {self.step_class} class has fewer than "
                    f"{MIN_ROWS} of its own)")
        return f"p10-p90: measured/expected {self.low:.2f}-{self.high:.2f} over {rows}, docs/validation.md"


def step_class(phase: str, comm_share: float = 0.0) -> str:
    """The class of a step: its phase, or communication-heavy when collectives take COMM_SHARE of it."""
    if comm_share >= COMM_SHARE:
        return "communication"
    return phase if phase in CLASSES else "decode"


@lru_cache(maxsize=4)
def load_spreads(path: str | None = None) -> dict[str, Spread]:
    """class -> Spread, from the committed table (or `path`), thin classes pooled."""
    data = tomllib.loads(Path(path or SPREAD_FILE).read_text())
    classes = data["class"]
    pooled = classes[POOLED]
    out = {}
    for name in (*CLASSES, POOLED):
        own = classes.get(name, {"rows": 0})
        use, source = (own, name) if own["rows"] >= MIN_ROWS else (pooled, POOLED)
        out[name] = Spread(name, source, int(use["rows"]), float(use["p10"]), float(use["p90"]))
    return out


def spread_for(phase: str, comm_share: float = 0.0) -> Spread:
    """The spread of a step of `phase` whose collectives take `comm_share` of its expected time."""
    return load_spreads()[step_class(phase, comm_share)]


def table_facts() -> dict:
    """The table's own record: what it was computed from (efficiency table hash, rows, statistic)."""
    return {k: v for k, v in tomllib.loads(SPREAD_FILE.read_text()).items() if k != "class"}
