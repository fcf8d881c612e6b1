"""The host cost per step of a serving engine (`--engine NAME`): the CPU time between steps that
leaves the GPU idle, from published measurements of each engine (`engines.toml`, a source per value).

The expected step adds `step_s + sequence_s x sequences` once per step (under pipeline parallelism
once per pipelined step); the bound never includes it. The default engine, `none`, adds nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from rooflinekit.core.errors import UserError
from rooflinekit.core.report import Report

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENGINES_FILE = Path(__file__).resolve().with_name("engines.toml")


@dataclass(frozen=True)
class EngineCost:
    """One engine's host time per step: a constant and a part per sequence in the step."""

    name: str
    words: str
    step_s: float
    sequence_s: float
    source: str
    #: The decode batches captured as CUDA graphs by default, ascending (empty: no padding).
    graph_sizes: tuple[int, ...] = ()
    graph_source: str = ""

    def padded(self, batch: int) -> int:
        """The captured batch a decode batch of `batch` runs as: the smallest captured size at or
        above it; the batch itself without graphs or above the largest (run without a graph)."""
        for size in self.graph_sizes:
            if size >= batch:
                return size
        return batch

    def padding_words(self, batch: int, q_len: int = 1) -> str:
        """The CUDA-graph padding of a decode step, in words (a stated factor: not priced). vLLM's
        graphs are sized in tokens, so a step of `q_len` tokens per sequence pads batch x q_len."""
        if not self.graph_sizes:
            return f"CUDA-graph padding: none ({self.name}: {self.graph_source})"
        by_tokens = self.name.startswith("vllm") and q_len > 1
        size = batch * q_len if by_tokens else batch
        unit = f"tokens ({batch} sequences x {q_len})" if by_tokens else "sequences"
        if size > self.graph_sizes[-1]:
            return (f"CUDA-graph padding: none: {size} {unit} is above {self.name}'s largest captured size "
                    f"{self.graph_sizes[-1]}, so the step runs without a graph, its launches eager "
                    f"({self.graph_source})")
        padded = self.padded(size)
        if padded == size:
            return f"CUDA-graph padding: none: {self.name} captures {size} {unit} ({self.graph_source})"
        return (f"CUDA-graph padding (stated, not priced): {self.name} runs {size} {unit} as its captured size "
                f"{padded}; the {padded - size} padded rows' GEMM and element-wise work (not their weights, "
                f"not attention) is not in the expected step ({self.graph_source})")

    def host_s(self, sequences: int) -> float:
        """Seconds of host time one step of `sequences` sequences adds."""
        return self.step_s + self.sequence_s * max(0, sequences)

    def convention(self) -> str:
        """The line a report's expected_conventions gives it."""
        return (f"engine: {self.name} ({self.words}): host time per step {self.step_s * 1e3:g} ms + "
                f"{self.sequence_s * 1e6:g} us per sequence, added once per step, not in the bound ({self.source})")


@lru_cache(maxsize=1)
def engines() -> dict[str, EngineCost]:
    """Every engine the committed table holds, by name."""
    data = tomllib.loads(ENGINES_FILE.read_text())
    out = {}
    for name, entry in data["engine"].items():
        out[name] = EngineCost(name, str(entry["words"]), float(entry["step_s"]), float(entry["sequence_s"]),
                               " ".join(str(entry["source"]).split()), graph_sizes(entry.get("graph_sizes", "")),
                               " ".join(str(entry.get("graph_source", "")).split()))
    return out


def graph_sizes(spec: str) -> tuple[int, ...]:
    """Captured batch sizes from "1,2,4,8:248:8" (a:b:c is a to b by c), ascending."""
    sizes: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if ":" in part:
            start, stop, step = (int(x) for x in part.split(":"))
            sizes.update(range(start, stop + 1, step))
        else:
            sizes.add(int(part))
    return tuple(sorted(sizes))


def engine_cost(name: str | None) -> EngineCost | None:
    """The engine named by --engine (None or "none": no host time); UserError naming the choices."""
    if name is None or name == "none":
        return None
    found = engines().get(name)
    if found is None:
        raise UserError(f"--engine {name!r}: not an engine with a published host cost (choose from "
                        f"{', '.join(engines())})")
    return found


def with_engine(report: Report, engine: EngineCost | None, sequences: int) -> Report:
    """The report with the engine's host time of one step of `sequences` sequences added to its
    expected step (tokens/s and the p10-p90 range scaled with it; the bound unchanged)."""
    if engine is None:
        return report
    t = report.totals
    host = engine.host_s(sequences)
    step = t.expected_step_s + host
    scale = t.expected_step_s / step if step else 1.0

    def scaled(rate: float | None) -> float | None:
        return None if rate is None else rate * scale

    def stretched(end: float | None) -> float | None:
        return None if end is None or not t.expected_step_s else end / scale

    fused = t.fused
    if fused is not None and fused.expected_step_s is not None:  # the fused view's step is a step too
        fused = replace(fused, expected_step_s=fused.expected_step_s + host)
    totals = replace(t, expected_step_s=step, engine_host_s=host, fused=fused,
                     tokens_per_s_per_gpu=scaled(t.tokens_per_s_per_gpu),
                     tokens_per_s_per_user=scaled(t.tokens_per_s_per_user), expected_low_s=stretched(t.expected_low_s),
                     expected_high_s=stretched(t.expected_high_s),
                     expected_conventions=[*t.expected_conventions, engine.convention(),
                                           *([engine.padding_words(sequences, report.workload.q_len)]
                                             if report.workload.phase == "decode" else [])])
    return replace(report, totals=totals)
