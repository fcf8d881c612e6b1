"""Built-in plugin: multi-head attention (MHA), as many K/V heads as query heads.

Recognises torch.nn.MultiheadAttention, and any module whose declared (or seen) K/V heads equal
its query heads (`rooflinekit.plugin.module_heads`: num_heads/head_dim-style attributes, a
transformers `config`, projection shapes, the attention call). Costs are the closed forms of
docs/attention.md (`heads_cost`: the K/V cache of the positions attended read once, plus q read
and the output written once); under tensor parallelism every GPU holds N-th of the heads and of
the cache (`split_heads`).

Recognition is `trylast`: the `mla` plugin, and any plain third-party implementation, go first.
"""

from __future__ import annotations

import importlib

from rooflinekit.plugin import (
    AttentionSpec,
    call_layout,
    heads_cost,
    hookimpl,
    module_heads,
    split_heads,
)

ARCH = "mha"
PROVIDES = (ARCH,)


def _torch():
    """torch, imported when a hook first looks at a module: loading this plugin imports no torch
    (commands that need no model, `rooflinekit hardware list`, `plugins`, start without it)."""
    return importlib.import_module("torch")


@hookimpl(trylast=True)
def rooflinekit_attention_spec(module, path, call):
    if isinstance(module, _torch().nn.MultiheadAttention):
        heads = module.num_heads
        return AttentionSpec(arch=ARCH, num_heads=heads, num_kv_heads=heads,
                             head_dim=module.head_dim, v_head_dim=module.vdim // heads)
    layout = module_heads(module, call)
    if layout is None or layout.num_kv_heads != layout.num_heads:
        return None
    return layout.spec(ARCH)


@hookimpl(trylast=True)
def rooflinekit_attention_spec_from_call(call):
    layout = call_layout(call)
    if layout is None or layout.num_kv_heads != layout.num_heads:
        return None
    return layout.spec(ARCH)


@hookimpl
def rooflinekit_attention_cost(spec, workload):
    return heads_cost(spec, workload) if spec.arch == ARCH else None


@hookimpl
def rooflinekit_attention_shard(spec, tp):
    return split_heads(spec, tp) if spec.arch == ARCH and spec.num_heads % tp == 0 else None


@hookimpl
def rooflinekit_serving_attention(spec, workload):
    """FlashAttention / paged attention: q read, the K/V cache read once per step, the output written
    once, no scores, mask or softmax in HBM (`heads_cost`, the architecture minimum)."""
    return heads_cost(spec, workload) if spec.arch == ARCH else None
