"""Sliding-window attention: recognise layers that declare a window, cap their KV cache at it.

rooflinekit's built-in attention plugin knows heads and head sizes but not windows: it costs a
Mistral-style layer as full attention (every cached position read). This plugin answers first
(`tryfirst=True`) for modules that declare a window, reuses the built-in recognition for the rest
of the spec, and sets `AttentionSpec.window`. The built-in cost hook then caps the positions
attended at the window: KV bytes ``B * min(context, window) * cache_bytes_per_token``.

Where a window is declared:
  * ``module.sliding_window`` or ``module.window_size`` (an int; flash-attn's ``(left, right)``
    tuple means ``left + 1`` positions). An attribute that is present but None means this layer
    attends fully (transformers' Qwen2/Gemma full-attention layers), and config is not consulted.
  * else ``module.config.sliding_window`` (transformers' Mistral attention keeps only
    ``self.config``), unless ``config.use_sliding_window`` is False (Qwen2 sets a window it does
    not use), or ``config.layer_types[module.layer_idx]`` is not ``"sliding_attention"``. Mistral
    v0.2+ configs set ``sliding_window`` to null: no window.
"""

from __future__ import annotations

import dataclasses

from rooflinekit.core.hookspecs import hookimpl

# The module, not its function: pluggy registers every hookimpl-marked attribute of a plugin
# module, so `from ... import rooflinekit_attention_spec as builtin_spec` would register the
# built-in's function a second time, under the name `builtin_spec`.
from rooflinekit_plugins import attention as builtin

MODULE_ATTRS = ("sliding_window", "window_size")


def _positive_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        left = value[0]  # flash-attn: (left, right) positions each side; -1 means unbounded
        return left + 1 if left >= 0 else None
    return None


def window_of(module) -> int | None:
    """The window a module declares (positions each query attends, itself included), or None."""
    for name in MODULE_ATTRS:
        if hasattr(module, name):
            return _positive_int(getattr(module, name))
    layer_type = getattr(module, "layer_type", None)
    if layer_type is not None and layer_type != "sliding_attention":
        return None
    config = getattr(module, "config", None)
    if config is None or getattr(config, "use_sliding_window", True) is False:
        return None
    layer_types = getattr(config, "layer_types", None)
    layer_idx = getattr(module, "layer_idx", None)
    if layer_types and isinstance(layer_idx, int) and layer_idx < len(layer_types):
        if layer_types[layer_idx] != "sliding_attention":
            return None
    return _positive_int(getattr(config, "sliding_window", None))


@hookimpl(tryfirst=True)
def rooflinekit_attention_spec(module, path, call):
    window = window_of(module)
    if window is None:
        return None  # not windowed: let the built-in answer
    spec = builtin.rooflinekit_attention_spec(module=module, path=path, call=call)
    if spec is None:
        return None
    return dataclasses.replace(
        spec, window=window, plugin="rooflinekit-swa",
        notes=spec.notes + (f"sliding window of {window} positions (rooflinekit-swa): KV cache "
                            "read capped at min(context, window)",),
    )
