"""Attention heads through matmuls: what a [B, H, L, E] product looked like before aten folded
its heads into the batch, and the operand facts the attribute stage reads to find attention."""

from __future__ import annotations

import math

import torch

from rooflinekit.stages.capture.traffic import SidOf, unique_bytes


def distinct_heads(t: torch.Tensor) -> int | None:
    """Distinct heads of a [..., H, L, E] attention operand: 1 when H is a stride-0 expand of one
    head (MQA written with .expand), H otherwise; None below 4 dims (heads folded into batch)."""
    if t.dim() < 4:
        return None
    try:
        return 1 if t.stride(-3) == 0 else t.shape[-3]
    except RuntimeError:
        return t.shape[-3]


def matmul_hint(args) -> tuple[list, list] | None:
    """The operand shapes and distinct heads of a tensor-level matmul of 4-D (or more) operands."""
    if len(args) < 2:
        return None
    a, b = args[0], args[1]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and min(a.dim(), b.dim()) >= 4:
        return [list(a.shape), list(b.shape)], [distinct_heads(a), distinct_heads(b)]
    return None


def _einsum_indices(args) -> tuple[str, str, str] | None:
    """(indices of a, of b, of the output) of a two-operand einsum without ellipsis, else None."""
    if len(args) != 3 or not isinstance(args[0], str):
        return None
    equation, a, b = args
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or "..." in equation:
        return None
    try:
        inputs, out = equation.replace(" ", "").split("->")
        ia, ib = inputs.split(",")
    except ValueError:
        return None
    if len(ia) != a.dim() or len(ib) != b.dim():
        return None
    return ia, ib, out


def einsum_hint(args) -> tuple[list, list] | None:
    """A two-operand einsum product as a matmul hint: operand shapes in the [..., H, L, c] @
    [..., H, c, S] form (batch-like indices first, then the free index, the contracted one last
    or first), and the distinct heads of each operand.

    Only the plain attention products are read: one contracted index, one free index per operand,
    and at least two indices shared by both operands and the output (batch, heads: heads is the
    last of them in the output). Anything else gives None, and heads stay unknown.
    """
    indices = _einsum_indices(args)
    if indices is None:
        return None
    (_, a, b), (ia, ib, out) = args, indices
    shared = [i for i in out if i in ia and i in ib]
    contracted = [i for i in ia if i in ib and i not in out]
    free_a = [i for i in ia if i not in ib]
    free_b = [i for i in ib if i not in ia]
    if len(contracted) != 1 or len(free_a) != 1 or len(free_b) != 1 or len(shared) < 2:
        return None
    if len(shared) + 2 != len(ia) or len(shared) + 2 != len(ib):
        return None
    (c,), (fa,), (fb,) = contracted, free_a, free_b
    size_a = dict(zip(ia, a.shape, strict=True))
    size_b = dict(zip(ib, b.shape, strict=True))
    shape_a = [size_a[i] for i in shared] + [size_a[fa], size_a[c]]
    shape_b = [size_b[i] for i in shared] + [size_b[c], size_b[fb]]
    heads = shared[-1]

    def distinct(t, letters, size):
        return 1 if t.stride(letters.index(heads)) == 0 else size[heads]

    return [shape_a, shape_b], [distinct(a, ia, size_a), distinct(b, ib, size_b)]


def matmul_operands(a: torch.Tensor, b: torch.Tensor, sid_of: SidOf, params: set[int],
                    hint: tuple[list, list] | None, attrs: dict) -> tuple[int, ...]:
    """The K/V candidates (storages of the non-parameter operands) of an aten product a @ b, with
    its operand facts put in `attrs`; `hint` gives the shapes of a tensor-level product in progress."""
    sids = [sid_of(a), sid_of(b)]
    sinks = tuple(s for s in sids if s not in params)
    attrs["operand_sids"] = sids
    attrs["operand_bytes"] = [float(unique_bytes(a)), float(unique_bytes(b))]
    attrs["free_dims"] = [a.shape[-2] if a.dim() >= 2 else 1, b.shape[-1] if b.dim() >= 2 else 1]
    if len(sinks) == 2:  # two activations (QK^T, PV?): shapes for rooflinekit.stages.attribute
        if hint is not None:  # the first product of a tensor-level matmul
            attrs["operand_shapes"], attrs["operand_heads"] = hint
        else:
            attrs["operand_shapes"] = [list(a.shape), list(b.shape)]
            attrs["operand_heads"] = [distinct_heads(a), distinct_heads(b)]
    attrs["rows"] = math.prod(a.shape[:-1])  # tokens (or positions) the product processes
    return sinks
