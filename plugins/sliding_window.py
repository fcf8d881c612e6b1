"""Built-in plugin: sliding-window and chunked attention, for any attention architecture.

Answers `rooflinekit_attention_window` after a layer is recognised (by the MHA, GQA, MLA or any
other plugin); the arch's cost then caps the positions read and the pairs scored
(rooflinekit.core.keys). Where a window comes from, first answer wins:

1. the module's own attributes: ``sliding_window``, ``window_size``, ``attention_window``,
   ``local_window``, ``sliding_window_size`` (an int: positions each query attends, itself
   included; flash-attn's causal ``(left, 0)`` tuple: ``left + 1``, ``-1`` unbounded; a
   two-sided tuple such as Swin's ``(7, 7)`` is not a causal window and is not read). Present but
   None (transformers' Qwen2/Gemma-2/GPT-OSS full-attention layers) means full attention, and the
   config is not consulted. ``attention_chunk_size`` on the module: chunked attention.
2. a transformers ``module.config``:
   - ``use_sliding_window: false`` (Qwen2, which ships a window it does not use): none;
   - ``layer_types[i]`` (Gemma-2/3, GPT-OSS, Qwen2, Cohere2, Llama 4 ...): ``sliding_attention``
     takes ``sliding_window``, ``chunked_attention`` takes ``attention_chunk_size``,
     ``full_attention`` none; the layer index is ``module.layer_idx`` or the path's last integer;
   - without ``layer_types`` (an older or hand-written config): ``max_window_layers`` (sliding from
     that layer on, Qwen2), ``sliding_window_pattern`` (every p-th layer global, Gemma-3; Cohere2),
     Gemma-2's alternation (even layers sliding), else ``sliding_window`` on every layer
     (Mistral-7B-v0.1, Phi-3); ``attention_chunk_size`` alone: chunks on every layer;
3. the attention call's mask, where it held values (``--device cpu``/``cuda``; not meta): when no
   query row sees every key, the widest row's count is taken as the window.

A window at or above the context changes no number (positions read: ``min(context, q_len +
window - 1)``). Chunked attention assumes chunks aligned to position 0 (no left padding), as
transformers' ``chunked_overlay`` with no padding: a decode step at context S reads the
``(S - 1) % chunk + 1`` positions of its own chunk.
"""

from __future__ import annotations

from rooflinekit.plugin import AttentionWindow, hookimpl

#: What this plugin adds (listed by `rooflinekit plugins`).
PROVIDES = ("sliding windows",)

WINDOW_ATTRS = ("sliding_window", "window_size", "attention_window", "local_window", "sliding_window_size")
CHUNK_ATTRS = ("attention_chunk_size",)

#: layer_types entries (transformers' names) and what they mean here
SLIDING, CHUNKED, FULL = "sliding_attention", "chunked_attention", "full_attention"


def window_value(value) -> int | None:
    """Positions a declared window lets each query attend (itself included); 0 for an explicitly
    unbounded one; None when `value` is not a window (a bool, a string, a tensor ...)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        left, right = value  # flash-attn: (left, right) positions each side; -1 means unbounded
        if left < 0:
            return 0
        if right in (0, -1):  # a causal window: itself and `left` positions before it
            return left + 1
        return None  # a two-sided window (Swin's (7, 7) patches, an encoder's band): not read
    return None


def _positive(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def layer_index(module, path: str) -> int | None:
    """The layer's index: `module.layer_idx` (transformers), else the path's last integer part."""
    idx = getattr(module, "layer_idx", None)
    if isinstance(idx, int) and not isinstance(idx, bool) and idx >= 0:
        return idx
    ints = [int(p) for p in (path or "").split(".") if p.isdigit()]
    return ints[-1] if ints else None


def _sliding(window: int, where: str) -> AttentionWindow:
    return AttentionWindow(window=window, notes=(
        f"sliding window of {window} positions ({where}): KV minimum capped at "
        f"min(context, q_len + {window} - 1) positions, each query scoring at most {window} keys",))


def _chunked(chunk: int, where: str) -> AttentionWindow:
    return AttentionWindow(chunk=chunk, notes=(
        f"chunked attention, chunks of {chunk} positions ({where}): each query sees only the keys "
        f"of its own chunk up to itself; chunks assumed aligned to position 0 (no left padding), so "
        f"a decode step at context S reads the (S - 1) % {chunk} + 1 positions of its chunk",))


def from_module(module) -> AttentionWindow | int | None:
    """A window or chunk the module itself declares; 0 when it declares full attention."""
    for name in WINDOW_ATTRS:
        if name in vars(module) or hasattr(type(module), name):
            value = getattr(module, name, None)
            if value is None:
                return 0  # declared, and None: this layer attends fully (transformers' convention)
            window = window_value(value)
            if window is None:
                continue
            return _sliding(window, f"module attribute {name}={value!r}") if window else 0
    for name in CHUNK_ATTRS:
        chunk = _positive(getattr(module, name, None))
        if chunk:
            return _chunked(chunk, f"module attribute {name}={chunk}")
    return None


def from_config(config, idx: int | None) -> AttentionWindow | int | None:
    """A window or chunk a transformers-style config gives layer `idx`; 0: full attention."""
    if config is None:
        return None
    window = _positive(getattr(config, "sliding_window", None))
    if getattr(config, "use_sliding_window", None) is False:
        window = None  # Qwen2: a window in the config that the model does not use
    chunk = _positive(getattr(config, "attention_chunk_size", None))
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, (list, tuple)) and layer_types:
        if idx is None or idx >= len(layer_types):
            kinds = set(layer_types)
            if len(kinds) != 1:
                return None  # mixed layers and no index for this one: cannot tell
            kind, where = layer_types[0], "config.layer_types (every layer)"
        else:
            kind, where = layer_types[idx], f"config.layer_types[{idx}] = {layer_types[idx]!r}"
        if kind == SLIDING:
            return _sliding(window, f"{where}, config.sliding_window") if window else 0
        if kind == CHUNKED:
            return _chunked(chunk, f"{where}, config.attention_chunk_size") if chunk else 0
        if kind == FULL:
            return 0
        return None  # another kind of layer (linear attention, ...): not this plugin's
    if window:
        pattern = _positive(getattr(config, "sliding_window_pattern", None)) or _positive(
            getattr(config, "_sliding_window_pattern", None))
        max_window_layers = getattr(config, "max_window_layers", None)
        use = getattr(config, "use_sliding_window", None)
        if use is True and _positive(max_window_layers) is not None and idx is not None:
            if idx < max_window_layers:
                return 0  # Qwen2: the first max_window_layers layers attend fully
            return _sliding(window, f"config.max_window_layers = {max_window_layers}, layer {idx}")
        if pattern and idx is not None:
            if (idx + 1) % pattern == 0:
                return 0  # every pattern-th layer is global
            return _sliding(window, f"config.sliding_window_pattern = {pattern}, layer {idx}")
        if getattr(config, "model_type", None) == "gemma2" and idx is not None:
            # Gemma-2: local (sliding) and global layers alternate, the first one local
            return _sliding(window, f"Gemma-2 alternation, layer {idx}") if idx % 2 == 0 else 0
        return _sliding(window, "config.sliding_window, every layer")
    if chunk:
        return _chunked(chunk, "config.attention_chunk_size, every layer (no layer_types)")
    return None


def from_mask(call) -> AttentionWindow | None:
    """A window read from the call's mask values: no query row sees every key."""
    keys = getattr(call, "mask_keys", None) if call is not None else None
    if not _positive(keys) or len(call.k_shape) < 2 or keys >= call.k_shape[-2]:
        return None
    return AttentionWindow(window=keys, notes=(
        f"sliding window of {keys} positions read from the attention mask's values: no query row "
        f"sees more than {keys} of the {call.k_shape[-2]} keys (a banded mask; a chunked one reads "
        "the same at decode)",))


@hookimpl
def rooflinekit_attention_window(module, path, call, spec):
    found = from_module(module)
    if found is None:
        found = from_config(getattr(module, "config", None), layer_index(module, path))
    if found is None or found == 0:
        # nothing declared, or full attention declared: a banded mask still shows a window
        return from_mask(call) or found
    return found
