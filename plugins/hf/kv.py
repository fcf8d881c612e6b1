"""K/V caches whose layers differ from the config's one shape: each attention layer's cached K and V
shaped as the model's own code writes them.

The loader fills a cache from one shape per model (`num_key_value_heads` heads of `head_dim`, V of
`v_head_dim`). Some models give layers their own: MiMo-V2's sliding layers have twice the K/V
heads of its full ones, Inkling's take `swa_num_key_value_heads`. When one of the model's K/V
projections differs in width from that shape, one token is run through the model once (outside any capture; on
meta it allocates nothing) and every attention layer of the cache whose K or V differs from what
that run wrote is given that layer's heads and widths, at its own length (on meta there is no
data to keep; elsewhere the slots are as uninitialised as the loader's).

Standalone like `loader` (imports nothing from rooflinekit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

NOTE = ("K/V heads differ between layers: each attention layer's cache is shaped as the model's code writes it "
        "(one token run once before the capture)")


def projection_widths(model: torch.nn.Module) -> tuple[set[int], set[int]]:
    """The output widths of the model's K and V projections (`*k_proj`, `*v_proj`)."""
    k, v = set(), set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            if name.endswith("k_proj"):
                k.add(module.out_features)
            elif name.endswith("v_proj"):
                v.add(module.out_features)
    return k, v


def fit(model: torch.nn.Module, cache: Any, kv_shapes: Callable[[int, int], tuple], probe: Callable[[], Any]) -> bool:
    """Fit `cache`'s attention layers to the model's own K/V shapes when one of its K/V projections
    differs in width from the config's one shape (`kv_shapes`): `probe()` runs one token and
    returns the cache it filled. True when a layer was changed. A model without such projections,
    whose config has no one shape, or whose one-token run fails, is left as it is."""
    k, v = projection_widths(model)
    if not k and not v:
        return False
    try:
        (_, kh, _, kd), (_, vh, _, vd) = kv_shapes(1, 0)
    except (AttributeError, TypeError, ValueError):
        return False
    if k <= {kh * kd} and v <= {vh * vd}:
        return False
    try:
        filled = probe()
    except Exception:  # noqa: BLE001 - a model with its own cache class: its layers are its own
        return False
    return fit_layers(cache, filled) > 0


def _tensor(layer: Any, name: str) -> torch.Tensor | None:
    value = getattr(layer, name, None)
    return value if isinstance(value, torch.Tensor) and value.dim() == 4 else None


def fit_layers(cache: Any, probe: Any) -> int:
    """Give each attention layer of `cache` the K/V heads and widths of the same layer of `probe`
    (a cache one token filled), keeping its batch and length; the layers changed."""
    changed = 0
    for ours, theirs in zip(getattr(cache, "layers", ()), getattr(probe, "layers", ()), strict=False):
        fitted = False
        for name, attr in (("keys", "k_head_dim"), ("values", "v_head_dim")):
            mine, seen = _tensor(ours, name), _tensor(theirs, name)
            if mine is None or seen is None:
                continue
            shape = (mine.shape[0], seen.shape[1], mine.shape[2], seen.shape[3])
            if tuple(mine.shape) != shape:
                setattr(ours, name, torch.empty(shape, dtype=mine.dtype, device=mine.device))
                if hasattr(ours, attr):
                    setattr(ours, attr, shape[3])
                if hasattr(ours, "num_heads"):
                    ours.num_heads = shape[1]
                fitted = True
        changed += fitted
    return changed
