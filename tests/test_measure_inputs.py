"""Measured mode on inputs a forward changes: each timed forward gets its own, made outside its timing."""

from __future__ import annotations

import torch

from rooflinekit.analyses.measure import FreshInputs, measure
from rooflinekit.stages.capture import capture


class _GrowingCache(torch.nn.Module):
    """A forward that appends to the cache it is given, as a DynamicCache grows (and a static one
    advances its write position): a second forward on the same inputs runs another step."""

    def forward(self, x, cache):
        cache.append(x * 2)
        return torch.cat(cache).sum(0)


def test_every_timed_forward_starts_from_fresh_inputs():
    model = _GrowingCache()
    made = []

    def fresh():
        made.append([])
        return (torch.ones(4, 8), made[-1])

    cap = capture(model, fresh())
    m = measure(model, FreshInputs(fresh), cap.ops, device="cpu", warmup=1, repeats=2)
    # the capture's inputs, then one set per forward: warm-up and timed, plain and profiled
    assert len(made) == 1 + 2 * (1 + 2)
    assert all(len(cache) == 1 for cache in made), [len(c) for c in made]  # each forward ran once on its own
    assert m.unmatched == [] and set(m.op_time_s) == {op.index for op in cap.ops}
    assert all(t > 0 for t in m.op_time_s.values())


def test_without_fresh_inputs_every_forward_runs_on_the_same_inputs():
    model = _GrowingCache()
    first = (torch.ones(4, 8), [])
    cap = capture(model, first)
    measure(model, first, cap.ops, device="cpu", warmup=1, repeats=2)
    assert len(first[1]) == 1 + 2 * (1 + 2)  # each forward saw the cache the one before left
