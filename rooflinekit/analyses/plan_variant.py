"""A searched deployment's priced parts: its step models, weights, KV cache and activation
peaks per GPU (Variant), and the same cut into pipeline stages (Stages)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflinekit.core.request import Deployment
from rooflinekit.stages.memory import PeakInBatch
from rooflinekit.stages.stepmodel import StepModel


@dataclass
class Variant:
    """One deployment's priced parts: decode and prefill step models, memory per GPU."""

    deployment: Deployment
    decode: StepModel
    prefill: StepModel
    weights: float
    kv_terms: tuple[tuple[float, int | None], ...]  # (cache bytes per token, window or None) per layer kind
    kv_per_sequence: float
    activations: PeakInBatch  # the decode step's activation peak at ISL+OSL, by batch
    prefill_activations: float  # a prompt's prefill step's activation peak
    verify: StepModel | None = None
    draft: StepModel | None = None
    dtype: str = "bf16"  # the activation dtype the steps are priced at (fp8: W8A8)
    format: str = "bf16"  # the weight format's name (rooflinekit.core.plan.WEIGHT_FORMATS)

    def kv_bytes(self, context: int, block: int = 1) -> float:
        """Cache bytes one sequence holds at `context` (paged in blocks of `block` tokens)."""
        return _cache_bytes(self.kv_per_sequence, self.kv_terms, context, block)

    def memory(self, batch: int, context: int, block: int, chunk: tuple[int, float] = (0, 0.0)) -> float:
        """Bytes one GPU holds at `batch` decode sequences of `context` (`chunk`: the tokens of a
        prompt chunk in the same step and its activation peak), as `profile --mix`'s memory section
        counts them: weights + KV cache of every sequence + the segments' activation peaks added."""
        tokens, peak = chunk
        cache = batch * self.kv_bytes(context, block) + (self.kv_bytes(tokens, block) if tokens else 0.0)
        return self.weights + cache + self.activations(batch) + peak

    def prefill_memory(self, context: int, block: int) -> float:
        """Bytes one GPU of a prefill instance holds for one prompt of `context` tokens."""
        return self.weights + self.kv_bytes(context, block) + self.prefill_activations


@dataclass
class Stages:
    """A variant cut into pipeline stages as `profile --pp` cuts it: each stage's step models
    (decode, prefill, verify), weights and KV cache terms, and the activation send's bytes."""

    decode: list[StepModel]
    prefill: list[StepModel]
    verify: list[StepModel] | None
    weights: list[float]
    kv_terms: list[tuple[tuple[float, int | None], ...]]
    kv_per_sequence: list[float]
    send_bytes_per_token: float

    def kv_bytes(self, k: int, context: int, block: int) -> float:
        """Cache bytes one sequence holds on stage `k` at `context`."""
        return _cache_bytes(self.kv_per_sequence[k], self.kv_terms[k], context, block)


def _cache_bytes(per_sequence: float, terms: tuple[tuple[float, int | None], ...], context: int, block: int) -> float:
    """Cache bytes one sequence holds at `context`: its fixed state, and per layer kind its bytes
    per token x the positions it holds (the context, or its window), rounded up to whole blocks."""
    total = per_sequence
    for per_token, window in terms:
        held = min(context, window) if window else context
        total += per_token * (math.ceil(held / block) * block)
    return total
