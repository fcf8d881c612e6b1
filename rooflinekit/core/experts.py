"""The expected load of routed experts: one formula, for the MoE plugin's records and for the step
models that evaluate those records at any batch (torch-free)."""

from __future__ import annotations


def expected_distinct_experts(tokens: float, top_k: float, num_experts: float, redundant: int = 0) -> float:
    """E*(1-(1-k/E)^T): expected distinct experts hit by T tokens choosing k of E, uniformly.

    With `redundant` extra copies (E + R expert slots, spread as evenly as they go: E - r experts
    with q copies, r with q + 1, q = (E + R) // E, r = (E + R) % E) and each expert's tokens split
    evenly between its copies, the expected slots hit: each copy of an expert with c copies is hit
    by a token with probability k/(cE)."""
    if tokens <= 0 or num_experts <= 0:
        return 0.0
    if not redundant:
        return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)
    whole = int(num_experts)
    q, r = divmod(whole + int(redundant), whole)

    def hit(copies: int) -> float:
        return copies * (1.0 - (1.0 - top_k / (copies * num_experts)) ** tokens)

    return (whole - r) * hit(q) + (r * hit(q + 1) if r else 0.0)
