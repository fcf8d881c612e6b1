"""Every swap a capture makes gives back what it found: a user's own wrapper of
F.scaled_dot_product_attention is there again after a capture, and swaps nest."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from rooflinekit.analyses.measure import timed_recording
from rooflinekit.core.swap import swapped
from rooflinekit.stages.capture import SDPA_NAME, call_forward, capture
from rooflinekit.stages.capture.sdpa import SDPA, patched_sdpa


class _Attention(torch.nn.Module):
    """Calls the module-level name, as nn.MultiheadAttention's functional code does."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2


def _qkv(device: str = "meta") -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(1, 2, 4, 8, device=device) for _ in range(3))


def _sentinel(*args, **kwargs):
    return SDPA(*args, **kwargs)


def test_capture_puts_back_the_sdpa_it_found(monkeypatch):
    monkeypatch.setattr(F, "scaled_dot_product_attention", _sentinel)
    cap = capture(_Attention(), _qkv())
    assert F.scaled_dot_product_attention is _sentinel
    assert [op.name for op in cap.ops].count(SDPA_NAME) == 1  # the recording wrapper was in place


def test_capture_puts_back_the_sdpa_it_found_when_the_forward_fails(monkeypatch):
    class Failing(_Attention):
        def forward(self, q, k, v):
            super().forward(q, k, v)
            raise RuntimeError("boom")

    monkeypatch.setattr(F, "scaled_dot_product_attention", _sentinel)
    with pytest.raises(RuntimeError, match="boom"):
        capture(Failing(), _qkv())
    assert F.scaled_dot_product_attention is _sentinel


def test_timed_recording_puts_back_the_sdpa_it_found(monkeypatch):
    monkeypatch.setattr(F, "scaled_dot_product_attention", _sentinel)
    model = _Attention()
    with torch.no_grad(), timed_recording(model) as rec:
        call_forward(model, _qkv("cpu"))
    assert F.scaled_dot_product_attention is _sentinel
    assert SDPA_NAME in [op.name for op in rec.ops]


def test_nested_sdpa_swaps_give_back_the_outer_wrapper():
    outer, inner = types.SimpleNamespace(suppress=0), types.SimpleNamespace(suppress=0)
    found = F.scaled_dot_product_attention
    with patched_sdpa(outer):
        outer_wrapper = F.scaled_dot_product_attention
        with patched_sdpa(inner):
            assert F.scaled_dot_product_attention is not outer_wrapper
        assert F.scaled_dot_product_attention is outer_wrapper
    assert F.scaled_dot_product_attention is found


def test_swaps_nest_and_restore_what_they_found():
    owner = types.SimpleNamespace(value="original")
    with swapped(owner, "value", "outer") as found_outer:
        assert found_outer == "original"
        with swapped(owner, "value", "inner") as found_inner:
            assert (found_inner, owner.value) == ("outer", "inner")
        assert owner.value == "outer"
        owner.value = "changed by someone inside"
        with pytest.raises(KeyError), swapped(owner, "value", "failing"):
            raise KeyError
        assert owner.value == "changed by someone inside"
    assert owner.value == "original"
    with swapped(owner, "absent", 1):
        assert owner.absent == 1
    assert not hasattr(owner, "absent")


def test_an_own_attribute_is_put_back_as_found_when_the_block_raises():
    """own_attribute: a module's forward replaced on the instance, and after the block (left by an
    exception) the instance holds what it held: nothing of its own (the class's forward shows), or
    its own earlier one."""
    import torch

    from rooflinekit.core.swap import own_attribute

    module = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="inside"), own_attribute(module, "forward", lambda x: x):
        assert module.forward(5) == 5
        raise RuntimeError("inside")
    assert "forward" not in vars(module) and module.forward.__func__ is torch.nn.Linear.forward

    def mine(x):
        return x

    module.forward = mine
    with pytest.raises(RuntimeError), own_attribute(module, "forward", lambda x: -x):
        assert module.forward(5) == -5
        raise RuntimeError("inside")
    assert vars(module)["forward"] is mine
