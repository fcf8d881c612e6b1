"""`-O layers=N` on a transformers config: every layer count set to N and every per-layer field cut
to the first N layers, so that transformers' own checks (a `layer_types` as long as the layers) pass
and the N layers kept are the model's first N, each of its own kind.

What is cut, in the config's top level and in its sub-configs (`text_config`, `decoder`, ...; a
vision or audio tower is left whole, a text forward does not run it), each scope against its own
layer count L:

- a list of L entries (`layer_types`, `no_rope_layers`, `mlp_layer_types`, a per-layer
  `intermediate_size`, ...): its first N;
- a list of layer indices under a name that says so (`*layers`, `*_ids`, `*idxs`, `*indexes`,
  `*indices`: `hybrid_layer_ids`, `mlp_only_layers`, `cross_attention_layers`): those below N;
- a dict keyed by layer index (`per_layer_config`-style): the entries below N;
- a run-length list `[[pattern, repeats], ...]` spanning L layers (GPT-Neo's `attention_types`):
  the first N layers, re-encoded;
- a count of the model's last layers (Gemma-3n's `num_kv_shared_layers`): those of them among the
  first N.

Encoder-decoders have every count set (`encoder_layers`, `decoder_layers`, `num_decoder_layers`).
Standalone like `loader` (imports nothing from rooflinekit).
"""

from __future__ import annotations

import re
from typing import Any

#: Keys that count layers (one of them per scope names the scope's L; every one present is set).
COUNT_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers",
              "num_decoder_layers", "num_encoder_layers")
#: Sub-configs of towers a text forward does not run (left whole); every other one is cut.
OTHER_TOWERS = re.compile(r"(vision|visual|image|video|audio|speech|vq|vae|perceiver|projector)", re.IGNORECASE)
#: Counts of a model's last layers (Gemma-3n: the last 15 reuse earlier layers' K/V): of the first
#: N layers, the last max(0, K - (L - N)) are such layers.
TRAILING_COUNTS = ("num_kv_shared_layers",)
INDEX_NAMES = re.compile(r"(layers|layer_ids|_ids|idxs|indexes|indices)$")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _scope_layers(scope: dict) -> int | None:
    return next((scope[k] for k in COUNT_KEYS if _is_int(scope.get(k)) and scope[k] > 0), None)


def _run_length(value: list) -> list[tuple[list, int]] | None:
    """[[pattern, repeats], ...] as pairs, or None when the list is not in that form."""
    pairs = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (list, tuple))
                and item[0] and _is_int(item[1]) and item[1] >= 0):
            return None
        pairs.append((list(item[0]), item[1]))
    return pairs or None


def _cut_value(key: str, value: Any, length: int, n: int) -> tuple[Any, bool]:
    """(the value for N layers, whether it changed) of one field of a scope with `length` layers."""
    if (isinstance(value, dict) and value and "layer" in key
            and all(isinstance(k, str) and k.isdigit() or _is_int(k) for k in value)):
        if all(int(k) < length for k in value):  # keyed by layer index
            kept = {k: v for k, v in value.items() if int(k) < n}
            return kept, len(kept) != len(value)
        return value, False
    if not isinstance(value, list) or not value or "token" in key:
        return value, False
    if len(value) == length:  # one entry per layer (or every layer's index: the same cut)
        return value[:n], True
    if INDEX_NAMES.search(key) and all(_is_int(x) and 0 <= x < length for x in value):
        kept = [x for x in value if x < n]
        return kept, len(kept) != len(value)
    runs = _run_length(value)
    if runs is not None and sum(len(p) * r for p, r in runs) == length:
        layers = [kind for pattern, repeats in runs for _ in range(repeats) for kind in pattern]
        return [[layers[:n], 1]], True
    return value, False


def cut_layers(data: dict, n: int) -> tuple[dict, list[str]]:
    """A copy of a config dict (`PreTrainedConfig.to_dict()`) for `n` layers, and the fields that
    changed (dotted names, counts included; none: the dict already describes `n` layers)."""
    cut: list[str] = []

    def scope(d: dict, prefix: str) -> dict:
        length = _scope_layers(d)
        out = {}
        for key, value in d.items():
            if isinstance(value, dict) and _scope_layers(value) is not None:
                out[key] = value if OTHER_TOWERS.search(key) else scope(value, f"{prefix}{key}.")
                continue
            if key in COUNT_KEYS and _is_int(value) and value > 0:
                out[key] = n
                if value != n:
                    cut.append(prefix + key)
                continue
            if key in TRAILING_COUNTS and _is_int(value) and length is not None and n < length:
                out[key] = max(0, value - (length - n))
                if out[key] != value:
                    cut.append(prefix + key)
                continue
            if length is not None and n < length:
                value, changed = _cut_value(key, value, length, n)
                if changed:
                    cut.append(prefix + key)
            out[key] = value
        return out

    return scope(data, ""), cut


def changes(before: dict, after: dict, whole: bool = False) -> dict:
    """The fields of `after` that differ from `before`, nested as they are (sub-dicts: their
    changed fields only, or with `whole` the changed sub-dicts whole), so that what a config class
    derives from the rest is derived again."""
    out = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and not (value.keys() - old.keys()) and value != old:
            if whole or any(k.isdigit() for k in value if isinstance(k, str)):
                out[key] = value  # a sub-config as built (what its parent gave it kept), or keyed by layer
            else:
                out[key] = changes(old, value)
        elif value != old:
            out[key] = value
    return out


def merged(data: dict, update: dict) -> dict:
    """`data` with `update` written over it, sub-dicts merged key by key."""
    out = dict(data)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
