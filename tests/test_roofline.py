"""Roofline placement: closed forms and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooflinekit.stages.formulas import attention_pairs
from rooflinekit.stages.roofline import place

positive = st.floats(min_value=1.0, max_value=1e18, allow_nan=False, allow_infinity=False)


@given(flops=positive, nbytes=positive, peak=st.floats(1e9, 1e16), bw=st.floats(1e9, 1e13))
def test_placement_properties(flops, nbytes, peak, bw):
    p = place(flops, nbytes, peak, bw, "bf16")
    assert p.time_bound_s == pytest.approx(max(flops / peak, nbytes / bw))
    assert p.attainable_flops <= peak * (1 + 1e-12)
    assert 0 <= p.mfu_bound <= 1 + 1e-12
    assert (p.bound == "memory") == (flops / nbytes < peak / bw)
    # At the attainable rate the work takes exactly the time bound.
    assert flops / p.attainable_flops == pytest.approx(p.time_bound_s, rel=1e-9)


def test_h800_decode_gqa_example_numbers():
    # intensity 8 on H800 bf16: bound MFU = 8 / 295.3 = 2.7 % (background.md section 3)
    p = place(8.0e9, 1.0e9, 989.4e12, 3.35e12, "bf16")
    assert p.mfu_bound == pytest.approx(8 / (989.4 / 3.35))
    assert p.mfu_bound == pytest.approx(0.0271, abs=1e-4)


@given(q=st.integers(1, 300), k=st.integers(1, 300), causal=st.booleans())
def test_attention_pairs_match_enumeration(q, k, causal):
    expected = sum(1 for i in range(q) for j in range(k) if not causal or j <= i)
    assert attention_pairs(q, k, causal) == expected


def test_no_bytes_is_compute_bound_not_infinite():
    p = place(10.0, 0.0, 1e12, 1e9, "bf16")
    assert p.intensity is None and p.bound == "compute" and math.isfinite(p.time_bound_s)
