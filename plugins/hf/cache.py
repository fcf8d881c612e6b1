"""The cache a transformers model reads at a decode step: K/V for its attention layers, a fixed
state for its recurrent and linear-attention layers (Mamba/SSM, gated delta-net, short
convolutions, RWKV, xLSTM), each layer with the kind of cache its own code expects.

Standalone like `loader` (imports nothing from rooflinekit). Three cases:

- a cache transformers builds from the config (`StaticCache`/`DynamicCache`, whose per-layer
  classes follow `config.layer_types`: attention layers, `LinearAttentionLayer` for SSM and
  linear-attention layers, both for hybrid layers): attention layers get `past` positions; the
  state layers get conv and recurrent states of the shapes the model's own code makes;
- a model with its own cache class (MiniMax's `MiniMaxCache`, xLSTM's `xLSTMCache`) or state
  argument (RWKV's `state` list): the object the model itself returns, attention layers extended
  to `past` positions;
- a prefill (`past` 0) of such a model: no cache is passed and the model makes its own.

State shapes come from running the model once on one token (outside any capture: on meta it
allocates nothing). A recurrent state's size does not depend on how many positions it has seen,
so the state after one token is the state a decode step at any context reads and writes.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CacheStep:
    """The cache one step reads: its kind ("static" or "dynamic"), the shapes each attention layer
    writes (`kv_shapes(batch, length)`), the batch, the positions cached before the step, the
    slots in all, and the cache layer indices left empty because nothing reads them (the layers a
    sweep's design capture stands in for, as the source was told; none by default)."""

    kind: str
    kv_shapes: Callable[[int, int], tuple]
    batch: int
    past: int
    context: int
    skip: frozenset[int] = frozenset()

#: Set on a model whose state layers' tensors were declared (`declare_states`): a prefill runs its
#: one token for that once.
DECLARED = "_rooflinekit_states_declared"

#: Forward parameters that carry a cache or a recurrent state (transformers' names, old and new).
CACHE_PARAMS = ("past_key_values", "cache", "cache_params", "state")


def cache_param(model_class: type) -> str | None:
    """The forward parameter through which `model_class` takes its cache or state, or None."""
    params = inspect.signature(model_class.forward).parameters
    return next((name for name in CACHE_PARAMS if name in params), None)


def own_cache_class(model_class: type) -> str | None:
    """The name of a cache class the model's module defines for itself (not a per-layer cache
    class), or None: such a model takes only its own cache, not one built from its config."""
    from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin

    module = sys.modules.get(model_class.__module__)
    for name, obj in (vars(module).items() if module is not None else ()):
        if (isinstance(obj, type) and name.endswith("Cache") and obj.__module__ == module.__name__
                and not issubclass(obj, (CacheLayerMixin, LinearAttentionCacheLayerMixin))):
            return name
    return None


def is_state_layer(layer: object) -> bool:
    """Whether a transformers cache layer holds conv/recurrent states (SSM, linear attention, conv)."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return isinstance(layer, LinearAttentionCacheLayerMixin)


def is_attention_layer(layer: object) -> bool:
    """Whether a transformers cache layer holds per-position K/V (hybrid layers hold both)."""
    from transformers.cache_utils import CacheLayerMixin

    return isinstance(layer, CacheLayerMixin)


def run_one_token(model: torch.nn.Module, param: str | None, batch: int, cache: object = None) -> object:
    """Run `model` on one token per sequence with `use_cache`, and return the cache it filled
    (`cache` when given, else the one the model made for itself), or None when it returned none."""
    params = inspect.signature(model.forward).parameters
    kwargs: dict = {"input_ids": torch.zeros(batch, 1, dtype=torch.long), "use_cache": True}
    if "position_ids" in params:
        kwargs["position_ids"] = torch.zeros(batch, 1, dtype=torch.long)
    if "logits_to_keep" in params:
        kwargs["logits_to_keep"] = 1
    if cache is not None and param is not None:
        kwargs[param] = cache
    with torch.no_grad():
        out = model(**kwargs)
    if cache is not None:
        return cache
    for name in (param, *CACHE_PARAMS):
        if name is not None and isinstance(out, dict) and out.get(name) is not None:
            return out[name]
    return None


def prime_states(cache: object, filled: object) -> int:
    """Give every state layer of `cache` zero states shaped as those of the same layer of `filled`
    (a cache a one-token run filled), marked as holding a previous state; the layers primed."""
    primed = 0
    for ours, theirs in zip(cache.layers, filled.layers, strict=False):
        if not (is_state_layer(ours) and is_state_layer(theirs)):
            continue
        for i in range(ours.number_of_states):
            conv = theirs.conv_states.get(i) if theirs.is_conv_states_initialized.get(i) else None
            state = theirs.recurrent_states.get(i) if theirs.is_recurrent_states_initialized.get(i) else None
            if conv is not None:
                ours.lazy_initialization(conv_states=torch.empty_like(conv), state_idx=i,
                                         conv_kernel_size=conv.shape[-1])
            if state is not None:
                ours.lazy_initialization(recurrent_states=torch.empty_like(state), state_idx=i)
            if conv is not None or state is not None:
                ours.has_previous_state[i] = True
        primed += 1
    return primed


#: The attribute through which a module declares the state tensors its code keeps per sequence
#: (`rooflinekit.plugin.STATE_ATTR`, read by the built-in mixer plugins): ((role, shape without the
#: batch, dtype), ...), role "recurrent" or "conv".
STATE_ATTR = "rooflinekit_state_tensors"


def declare_states(model: torch.nn.Module, filled: object) -> int:
    """Declare on each module of `model` whose `layer_idx` is a state layer of `filled` (a cache a
    one-token run filled) the conv and recurrent state tensors that layer holds: their shapes per
    sequence and dtypes, as the model's own code made them (a float32 recurrent state in a bf16
    model, a convolution state of the full kernel width). Returns the layers declared."""
    found: dict[int, tuple] = {}
    for idx, layer in enumerate(getattr(filled, "layers", None) or ()):
        if not is_state_layer(layer):
            continue
        tensors = []
        for i in range(layer.number_of_states):
            conv = layer.conv_states.get(i) if layer.is_conv_states_initialized.get(i) else None
            state = layer.recurrent_states.get(i) if layer.is_recurrent_states_initialized.get(i) else None
            tensors += [(role, tuple(t.shape[1:]), t.dtype) for role, t in (("conv", conv), ("recurrent", state))
                        if t is not None]
        if tensors:
            found[idx] = tuple(tensors)
    for module in model.modules():
        idx = getattr(module, "layer_idx", None)
        if isinstance(idx, int) and idx in found:
            setattr(module, STATE_ATTR, found[idx])
    return len(found)


def extend_attention(cache: object, kv_shapes: Callable[[int, int], tuple], batch: int, length: int,
                     skip: frozenset[int] = frozenset()) -> None:
    """Write `length` more positions into every attention layer of `cache` (on meta: nothing
    allocated), but the layers in `skip` (CacheStep.skip)."""
    if length <= 0:
        return
    layers = getattr(cache, "layers", None)
    if not layers or not any(is_attention_layer(layer) for layer in layers):
        return
    dtype = torch.get_default_dtype()
    k_shape, v_shape = kv_shapes(batch, length)
    for idx, layer in enumerate(layers):
        if is_attention_layer(layer) and idx not in skip:
            # the layer classes handle sliding windows themselves
            cache.update(torch.empty(k_shape, dtype=dtype), torch.empty(v_shape, dtype=dtype), idx)


def preallocate_static(cache: object, kv_shapes: Callable[[int, int], tuple], batch: int,
                       skip: frozenset[int] = frozenset()) -> None:
    """Allocate a static cache's slots now rather than lazily inside the forward (an aten.zeros of
    the whole cache there would be counted), but those of the layers in `skip` (CacheStep.skip: never
    run). Cache.early_initialization cannot be used: it gives K and V one head_dim, and MLA caches
    512-wide latents with 64-wide rope keys."""
    from transformers.cache_utils import StaticLayer

    layers = [layer for idx, layer in enumerate(cache.layers) if (
        getattr(layer, "supports_early_init", False) or (is_state_layer(layer) and isinstance(layer, StaticLayer)))
        and not layer.is_initialized and idx not in skip]
    if not layers:
        return
    dtype = torch.get_default_dtype()
    k0, v0 = (torch.empty(s, dtype=dtype) for s in kv_shapes(batch, 0))
    for layer in layers:
        layer.lazy_initialization(k0, v0)  # two positional args: a hybrid layer's attention part


def config_cache(config, kind: str, context: int, past: int = 0, notes: list[str] | None = None) -> object:
    """The cache transformers builds from `config` ("static": `context` slots per attention layer)."""
    from transformers import DynamicCache, StaticCache

    if kind == "static":
        cache = StaticCache(config=config, max_cache_len=context)
    else:
        cache = DynamicCache(config=config)
    if cache.layers and not any(is_attention_layer(layer) for layer in cache.layers):
        track_positions(cache, past, notes if notes is not None else [])
    return cache


#: Said when transformers asks a cache of state layers only for its length (`track_positions`).
POSITIONS_NOTE = ("no attention layer in this model's cache: transformers' mask code asked it for the positions "
                  "seen, which only attention layers track; it was told the workload's (no layer uses that mask)")


def track_positions(cache: object, past: int, notes: list[str]) -> None:
    """Let a cache of state layers only answer how many positions it has seen (`past`).

    transformers' mask code asks every cache for its sequence length and mask sizes, which only
    attention layers track: a model whose layers are all recurrent (Bamba's and GraniteMoeHybrid's
    default configs, a hybrid cut to its first Mamba layers) fails there with "get_seq_length can
    only be called on Attention layers". No layer uses the mask it builds; the answers are the
    positions seen and the new tokens, and POSITIONS_NOTE joins `notes` when they are asked for."""

    def seen(self, layer_idx=0):
        _note(notes, POSITIONS_NOTE)
        return past

    def sizes(self, query_length, layer_idx=0):
        _note(notes, POSITIONS_NOTE)
        return past + query_length, 0

    base = type(cache)
    cache.__class__ = type(base.__name__, (base,), {"get_seq_length": seen, "get_mask_sizes": sizes,
                                                     "get_query_offset": seen})


def build_cache(model: torch.nn.Module, config, step: CacheStep,
                notes: list[str]) -> tuple[str | None, object]:
    """(forward parameter, cache) for a step of `context - past` new tokens after `past` cached
    positions; (None, None) when the model makes its own cache (a prefill of a model with its own
    cache class). A sentence for the report is added to `notes` where a state was made."""
    kind, kv_shapes, batch, past, context = step.kind, step.kv_shapes, step.batch, step.past, step.context
    model_class = type(model)
    param = cache_param(model_class)
    own = own_cache_class(model_class)
    if param is None:
        return None, None
    if own is not None or param == "state":
        if past == 0:
            return None, None  # a prefill: the model starts its own cache, as it would in generate()
        filled = run_one_token(model, param, batch)
        if filled is None:
            return None, None
        extend_attention(filled, kv_shapes, batch, past - 1, step.skip)
        _note(notes, f"{own or param}: the model's own {'cache class' if own else 'state argument'}, as "
              "left by one token (recurrent states do not grow with context; attention layers, if any, "
              f"extended to {past} positions)")
        return param, filled
    cache = config_cache(config, kind, context, past, notes)
    if kind == "static":
        preallocate_static(cache, kv_shapes, batch, step.skip)
    states = any(is_state_layer(layer) for layer in cache.layers)
    if past == 0:
        if states and not getattr(model, DECLARED, False):  # the states' shapes and dtypes, once per model
            declare_states(model, run_one_token(model, param, batch, cache=config_cache(config, "dynamic", context)))
            setattr(model, DECLARED, True)
        return param, cache
    if states:
        filled = run_one_token(model, param, batch, cache=config_cache(config, "dynamic", context))
        declare_states(model, filled)
        setattr(model, DECLARED, True)
        primed = prime_states(cache, filled)
        _note(notes, f"{primed} recurrent/linear-attention layers: conv and recurrent states shaped as "
              "the model's code makes them (one token run once before the capture); they do not grow "
              "with context")
    extend_attention(cache, kv_shapes, batch, past, step.skip)
    return param, cache


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)
