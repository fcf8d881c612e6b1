"""Built-in plugin: grouped-query attention (GQA), fewer K/V heads than query heads, each shared by
a group of query heads; MQA is its limit of one K/V head (arch "mqa").

Recognises any module whose declared (or seen) K/V heads differ from its query heads
(`rooflinekit.plugin.module_heads`: num_key_value_heads-style attributes, a transformers
`config`, k_proj's width, the distinct heads the attention call attends over once a repeat_kv or
expand is undone), but never torch.nn.MultiheadAttention (the `mha` plugin's). Costs are the
closed forms of docs/attention.md (`heads_cost`); under tensor parallelism N the K/V heads split
while N <= H_kv and replicate beyond (`split_heads`).

Recognition is `trylast`: the `mla` plugin, and any plain third-party implementation, go first.
"""

from __future__ import annotations

import importlib

from rooflinekit.plugin import call_layout, heads_cost, hookimpl, module_heads, split_heads

GQA, MQA = "gqa", "mqa"
PROVIDES = (GQA, MQA)


def _torch():
    """torch, imported when a hook first looks at a module: loading this plugin imports no torch
    (commands that need no model, `rooflinekit hardware list`, `plugins`, start without it)."""
    return importlib.import_module("torch")


def classify(num_heads: int, num_kv_heads: int) -> str | None:
    """"mqa" for one K/V head, "gqa" for another count below (or above) the query heads, None
    for as many K/V heads as query heads (MHA: not this plugin's)."""
    if num_kv_heads == num_heads:
        return None
    return MQA if num_kv_heads == 1 else GQA


@hookimpl(trylast=True)
def rooflinekit_attention_spec(module, path, call):
    if isinstance(module, _torch().nn.MultiheadAttention):
        return None
    layout = module_heads(module, call)
    arch = classify(layout.num_heads, layout.num_kv_heads) if layout is not None else None
    return layout.spec(arch) if arch else None


@hookimpl(trylast=True)
def rooflinekit_attention_spec_from_call(call):
    layout = call_layout(call)
    arch = classify(layout.num_heads, layout.num_kv_heads) if layout is not None else None
    return layout.spec(arch) if arch else None


@hookimpl
def rooflinekit_attention_cost(spec, workload):
    return heads_cost(spec, workload) if spec.arch in PROVIDES else None


@hookimpl
def rooflinekit_attention_shard(spec, tp):
    return split_heads(spec, tp) if spec.arch in PROVIDES and spec.num_heads % tp == 0 else None


@hookimpl
def rooflinekit_serving_attention(spec, workload):
    """FlashAttention / paged attention (GQA and MQA kernels read each K/V head once for its query
    group): the architecture minimum of `heads_cost`, the cache read once per step."""
    return heads_cost(spec, workload) if spec.arch in PROVIDES else None
