"""Fused attention: F.scaled_dot_product_attention recorded as one call, whatever backend runs it.

The function mode catches calls made in the model's code; the name F.scaled_dot_product_attention
is also swapped for a recording wrapper (patched_sdpa) for calls torch makes with function modes
off (nn.MultiheadAttention). The output takes the fused kernels' memory layout, so that later ops'
traffic does not depend on the backend picked on CPU or meta.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F

from rooflinekit.core.compat import disable_torch_function
from rooflinekit.core.swap import swapped
from rooflinekit.stages.capture.matmul_heads import distinct_heads
from rooflinekit.stages.capture.records import OpRecord, shape_text
from rooflinekit.stages.capture.traffic import reads, unique_bytes
from rooflinekit.stages.formulas import sdpa_flops
from rooflinekit.stages.hardware import dtype_key

if TYPE_CHECKING:
    from rooflinekit.stages.capture.liveness import LiveStorages
    from rooflinekit.stages.capture.storages import Storages


class Recording(Protocol):
    """What recording a fused call reads and writes of the capture's recorder (a
    `rooflinekit.stages.capture.recorder.Recorder`, which imports this module)."""

    canonical_sdpa_layout: bool
    suppress: int
    storages: Storages
    param_storages: set[int]
    live: LiveStorages

    @property
    def module(self) -> str: ...

    def emit(self, record: OpRecord) -> OpRecord: ...

    def record_sdpa(self, args, kwargs, out) -> None: ...

    def fused_sdpa(self, func, args, kwargs) -> Any: ...

#: The op name given to a function-level attention call.
SDPA_NAME = "F.scaled_dot_product_attention"

#: torch's own function (what the function mode knows it by, and what the swapped name runs).
SDPA = F.scaled_dot_product_attention

_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def mask_keys_max(mask: torch.Tensor, kv_len: int) -> int | None:
    """The most keys any query row of an attention mask lets through, or None without values.

    Boolean masks attend where True; floating masks are additive (a position is masked by -inf or
    the dtype's lowest value, as transformers writes them). A mask on meta (or a fake tensor) holds
    no values, and one that does not span the `kv_len` keys is not read: both give None. Below
    `kv_len`, no query sees every key: the mask is banded (a sliding window written into it).
    """
    if mask.dim() < 1 or mask.shape[-1] != kv_len or mask.is_meta or mask.numel() == 0:
        return None
    try:
        if mask.dtype == torch.bool:
            visible = mask
        elif mask.is_floating_point():
            visible = mask > torch.finfo(mask.dtype).min / 2
        else:
            return None
        return int(visible.sum(dim=-1).max())
    except Exception:  # a fake tensor, or a tensor subclass without data: values unknown
        return None


def _fused_layout(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An empty tensor of `shape` laid out as [B, L, H, E] in memory when 4-D."""
    if len(shape) != 4:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    b, h, seq, e = shape
    return torch.empty((b, seq, h, e), dtype=like.dtype, device=like.device).transpose(1, 2)


def _is_fused_layout(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.transpose(1, 2).is_contiguous()


def run_fused(rec: Recording, func, args, kwargs):
    """Run SDPA with op recording suppressed, then record it as one fused call (rec.record_sdpa).

    The output takes the memory layout fused kernels (flash, CPU flash) return, [B, L, H, E]
    in memory, so that later ops' traffic (a transpose(1, 2).reshape is then free) does not
    depend on the backend picked on CPU or meta (unless rec.canonical_sdpa_layout is False). On
    meta nothing is computed at all.

    The bookkeeping (shapes, storages, the meta output) runs past the torch function modes:
    called from the model's code (the patched F.scaled_dot_product_attention), every tensor
    attribute read there would otherwise go through each mode in Python.
    """
    rec.suppress += 1
    try:
        with disable_torch_function():
            q, v = args[0] if args else kwargs["query"], (args[2] if len(args) > 2 else kwargs["value"])
            shape = tuple(q.shape[:-1]) + (v.shape[-1],)
            out = _fused_layout(shape, q) if q.is_meta else None
        if out is None:
            out = func(*args, **kwargs)
            if rec.canonical_sdpa_layout and len(shape) == 4 and not _is_fused_layout(out):
                out = _fused_layout(shape, q).copy_(out)
    finally:
        rec.suppress -= 1
    with disable_torch_function():
        rec.record_sdpa(args, kwargs, out)
    return out


def _mask_keys(rec: Recording, mask, kv_len: int) -> int | None:
    """mask_keys_max with recording suppressed: reading the mask's values is not the model's traffic."""
    if not isinstance(mask, torch.Tensor):
        return None
    rec.suppress += 1
    try:
        return mask_keys_max(mask, kv_len)
    finally:
        rec.suppress -= 1


def record(rec: Recording, args, kwargs, out) -> None:
    """One fused record for F.scaled_dot_product_attention, independent of the backend chosen."""
    bound = dict(zip(_NAMES, args, strict=False))
    bound.update(kwargs)
    q, k, v = bound["query"], bound["key"], bound["value"]
    mask = bound.get("attn_mask")
    is_causal = bool(bound.get("is_causal", False))
    sid_of = rec.storages.id
    read, param = reads([q, k, v] + ([mask] if isinstance(mask, torch.Tensor) else []), sid_of,
                        rec.param_storages)
    out_t = out[0] if isinstance(out, (tuple, list)) else out
    writes = [(sid_of(out_t), float(unique_bytes(out_t)))]
    rec.live.written((out_t,), sid_of, rec.param_storages)
    flops = sdpa_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), is_causal)
    mask_keys = _mask_keys(rec, mask, k.shape[-2])
    rec.emit(OpRecord(
        index=0,
        name=SDPA_NAME,
        module=rec.module,
        flops=float(flops),
        bytes_read=sum(b for _, b in read),
        bytes_written=sum(b for _, b in writes),
        dtype=dtype_key(q.dtype),
        counted=True,
        kind="fused",
        param_bytes=param,
        reads=tuple(read),
        writes=tuple(writes),
        sinks=tuple(s for s in (sid_of(k), sid_of(v)) if s not in rec.param_storages),
        shapes=",".join(shape_text(t) for t in (q, k, v)),
        attrs={
            "q_shape": list(q.shape),
            "k_shape": list(k.shape),
            "v_shape": list(v.shape),
            "is_causal": is_causal,
            "enable_gqa": bool(bound.get("enable_gqa", False)),
            "has_mask": isinstance(mask, torch.Tensor),
            "mask_keys": mask_keys,
            "kv_read_bytes": float(unique_bytes(k) + unique_bytes(v)),
            "k_heads_distinct": distinct_heads(k),
        },
    ))


@contextmanager
def patched_sdpa(recorder: Recording) -> Iterator[None]:
    """Also catch SDPA called from inside other torch functions (nn.MultiheadAttention's
    F.multi_head_attention_forward), where function modes are switched off: those call the
    module-level name, which is swapped for a recording wrapper for the duration, then given back
    whatever it was on entry (a user's own wrapper, an outer capture's)."""

    def wrapper(*args, **kwargs):
        if recorder.suppress:
            return SDPA(*args, **kwargs)
        return recorder.fused_sdpa(SDPA, args, kwargs)

    with swapped(F, "scaled_dot_product_attention", wrapper):
        yield
