"""Models whose layers live in stacks of their own sub-configs, each stack with a cache of its own.

BLT (Byte Latent Transformer) keeps its layers in three sub-configs, and its config has no
`num_hidden_layers`, which transformers' cache classes read: `StaticCache(config=BltConfig)`
fails. Its forward takes an `EncoderDecoderCache` whose self-attention cache holds the local
encoder's layers and whose cross-attention cache holds the local decoder's (its global
transformer runs without a cache, over the patches of the step). The caches rooflinekit passes
are built per stack here, each from its sub-config (its layers, heads, head size and windows),
as `StaticCache(config=sub_config)` or a `DynamicCache`.

Standalone like `loader` (imports nothing from rooflinekit).
"""

from __future__ import annotations

from .cache import CacheStep, config_cache, extend_attention, preallocate_static
from .meta import known_lengths

#: model type -> the sub-configs whose layers the two caches of its EncoderDecoderCache hold, in
#: that order (self-attention cache, cross-attention cache).
STACKS = {"blt": ("encoder_config", "decoder_config")}
NOTE = ("{name}: its layers are in sub-configs, each stack with a cache of its own ({stacks}, {kind}); the "
        "global transformer keeps no cache and runs over the step's patches, as transformers' code does")


def stack_configs(config) -> tuple | None:
    """The sub-configs of a stacked model's caches (STACKS), or None for another model."""
    names = STACKS.get(getattr(config, "model_type", None))
    subs = tuple(getattr(config, name, None) for name in names) if names else ()
    return subs if subs and all(sub is not None for sub in subs) else None


def kv_shapes_of(sub):
    """`kv_shapes(batch, length)` of one stack: the K/V shapes its layers pass to `cache.update`."""
    heads = sub.num_attention_heads
    kv_heads = getattr(sub, "num_key_value_heads", None) or heads
    head_dim = getattr(sub, "head_dim", None) or sub.hidden_size // heads

    def shapes(batch: int, length: int) -> tuple:
        return (batch, kv_heads, length, head_dim), (batch, kv_heads, length, head_dim)

    return shapes


def stack_cache(config, step: CacheStep, notes: list[str]):
    """An EncoderDecoderCache of one cache per stack, each holding `step.past` positions in
    `step.context` slots (static) or grown to them (dynamic)."""
    from transformers.cache_utils import EncoderDecoderCache

    caches = []
    for sub in stack_configs(config):
        shapes = kv_shapes_of(sub)
        cache = config_cache(sub, step.kind, step.context)
        if step.kind == "static":
            preallocate_static(cache, shapes, step.batch)
        extend_attention(cache, shapes, step.batch, step.past)
        known_lengths(cache, step.past, notes)  # EncoderDecoderCache asks the lengths at once
        caches.append(cache)
    text = NOTE.format(name=config.model_type.upper(), stacks=" and ".join(STACKS[config.model_type]),
                       kind=f"{step.kind} caches")
    if text not in notes:
        notes.append(text)
    return EncoderDecoderCache(*caches)
