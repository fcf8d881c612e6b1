"""The expected load of routed experts: one formula, for the MoE plugin's records and for the step
models that evaluate those records at any batch (torch-free)."""

from __future__ import annotations


def expected_distinct_experts(tokens: float, top_k: float, num_experts: float) -> float:
    """E*(1-(1-k/E)^T): expected distinct experts hit by T tokens choosing k of E, uniformly."""
    if tokens <= 0 or num_experts <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)
