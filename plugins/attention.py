"""Built-in plugin: MHA, GQA, MQA and MLA attention, recognised from modules or from calls.

Recognition reads the attributes model code commonly carries (num_heads, num_key_value_heads,
head_dim, ..., a transformers `config`, or projection shapes), and torch.nn.MultiheadAttention.
Costs are the closed forms of ../docs/attention.md: the KV cache of the positions attended read
once, plus q read and the output written once.

Sliding windows are not recognised here: a spec's `window` is set by a plugin that knows the
architecture (see examples/plugins/rooflinekit-swa). The cost below honours any spec's `window`
(positions attended capped at it), so such a plugin only has to recognise.
"""

from __future__ import annotations

import torch

from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.specs import AttentionCost, AttentionSpec
from rooflinekit.stages.formulas import attention_pairs

HEAD_ATTRS = ("num_heads", "n_heads", "num_attention_heads", "n_head", "n_local_heads", "heads")
KV_HEAD_ATTRS = ("num_kv_heads", "num_key_value_heads", "n_kv_heads", "n_local_kv_heads", "kv_heads")
HEAD_DIM_ATTRS = ("head_dim", "head_size", "d_head", "dim_head")


def _int_attr(obj, names) -> int | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _lookup(module, names) -> int | None:
    """An attribute of the module, else of its transformers-style config."""
    value = _int_attr(module, names)
    if value is None and getattr(module, "config", None) is not None:
        value = _int_attr(module.config, names)
    return value


def classify(num_heads: int, num_kv_heads: int) -> str:
    if num_kv_heads == num_heads:
        return "mha"
    if num_kv_heads == 1:
        return "mqa"
    return "gqa"


def _mla_spec(module, path) -> AttentionSpec | None:
    rank = _lookup(module, ("kv_lora_rank",))
    rope = _lookup(module, ("qk_rope_head_dim",))
    if rank is None or rope is None:
        return None
    heads = _lookup(module, HEAD_ATTRS)
    nope = _lookup(module, ("qk_nope_head_dim",))
    v_dim = _lookup(module, ("v_head_dim",))
    if heads is None or nope is None or v_dim is None:
        return None
    declared = str(getattr(module, "mode", getattr(module, "attn_impl", "")) or "").lower()
    notes: tuple[str, ...] = ()
    if declared.startswith("absorb"):
        mode = "absorbed"
    elif declared in ("naive", "unabsorbed"):
        mode = "naive"
    else:
        mode = "naive"
        notes = ("MLA mode not declared by the module (no `mode`/`attn_impl`): model FLOPs in the "
                 "un-absorbed form, attention over per-head K and V, as transformers' DeepSeek code "
                 "computes it",)
    return AttentionSpec(
        arch="mla", num_heads=heads, num_kv_heads=1, head_dim=rank + rope, v_head_dim=rank,
        kv_lora_rank=rank, qk_rope_head_dim=rope, qk_nope_head_dim=nope, mla_v_head_dim=v_dim,
        mode=mode, notes=notes,
    )


def _call_heads(call, heads: int):
    """(head_dim, distinct K/V heads) the call shows for a module of `heads` query heads, or Nones
    when the call's shapes do not carry those heads (folded into batch, or a different layout)."""
    if call is None or len(call.q_shape) < 4 or call.q_shape[-3] != heads:
        return None, None
    return call.q_shape[-1], call.kv_heads_unique or call.k_shape[-3]


@hookimpl
def rooflinekit_attention_spec(module, path, call):
    mla = _mla_spec(module, path)
    if mla is not None:
        return mla
    if isinstance(module, torch.nn.MultiheadAttention):
        heads = module.num_heads
        return AttentionSpec(arch="mha", num_heads=heads, num_kv_heads=heads,
                             head_dim=module.head_dim, v_head_dim=module.vdim // heads)
    heads = _lookup(module, HEAD_ATTRS)
    if heads is None:
        return None
    call_dim, call_kv = _call_heads(call, heads)
    head_dim = _lookup(module, HEAD_DIM_ATTRS)
    q_proj = getattr(module, "q_proj", None)
    if head_dim is None:
        hidden = _lookup(module, ("hidden_size", "embed_dim", "d_model", "n_embd"))
        if isinstance(q_proj, torch.nn.Linear):
            head_dim = q_proj.out_features // heads
        elif call_dim is not None:
            head_dim = call_dim
        elif hidden is not None:
            head_dim = hidden // heads
    if head_dim is None:
        return None
    notes: tuple[str, ...] = ()
    kv_heads = _lookup(module, KV_HEAD_ATTRS)
    if kv_heads is None:
        groups = _lookup(module, ("num_key_value_groups", "num_kv_groups"))
        k_proj = getattr(module, "k_proj", None)
        if groups is not None:
            kv_heads = heads // groups
        elif isinstance(k_proj, torch.nn.Linear):
            kv_heads = k_proj.out_features // head_dim
        elif call_kv is not None:
            kv_heads = call_kv  # what the attention call attends over, repeats undone
        else:
            kv_heads = heads
            notes = (f"K/V heads neither declared by the module nor visible in its call: taken as "
                     f"{heads}, the query heads (MHA)",)
    elif call_kv is not None and call_kv != kv_heads:
        notes = (f"the module declares {kv_heads} K/V heads; its attention call attends over "
                 f"{call_kv} distinct heads",)
    return AttentionSpec(arch=classify(heads, kv_heads), num_heads=heads, num_kv_heads=kv_heads,
                         head_dim=head_dim, v_head_dim=head_dim, notes=notes)


@hookimpl
def rooflinekit_attention_spec_from_call(call):
    if len(call.q_shape) < 4 or len(call.k_shape) < 4:
        return None  # heads folded into batch: cannot tell heads from shapes alone
    heads = call.q_shape[-3]
    kv_heads = call.kv_heads_unique or call.k_shape[-3]
    notes = ()
    if call.kv_heads_unique:
        notes = (f"K/V widened from {call.kv_heads_unique} to {call.k_shape[-3]} heads (repeat or "
                 "expand) before the call",)
    return AttentionSpec(arch=classify(heads, kv_heads), num_heads=heads, num_kv_heads=kv_heads,
                         head_dim=call.q_shape[-1], v_head_dim=call.v_shape[-1], notes=notes)


@hookimpl
def rooflinekit_attention_cost(spec, workload):
    positions = workload.context
    if spec.window:
        # keys some query of this step sees: the last q_len + window - 1 positions (decode: the
        # window; prefill: every new token, each needed by a later query within its window)
        positions = min(workload.context, workload.q_len + spec.window - 1)
    causal = workload.is_causal
    pairs = attention_pairs(workload.q_len, workload.context, causal)
    if spec.window and spec.window < workload.context:
        # each query sees at most `window` keys
        pairs = sum(min(spec.window, k) for k in _keys_seen(workload.q_len, workload.context, causal))
    b, h = workload.batch, spec.num_heads
    if spec.arch in ("mha", "gqa", "mqa"):
        cache_per_token = spec.num_kv_heads * (spec.head_dim + spec.v_head_dim) * workload.cache_itemsize
        kv_min = b * positions * cache_per_token
        q_out = b * workload.q_len * h * (spec.head_dim + spec.v_head_dim) * workload.act_itemsize
        flops = 2 * b * h * pairs * (spec.head_dim + spec.v_head_dim)
        return AttentionCost(flops_model=flops, kv_bytes_min=kv_min, bytes_min=kv_min + q_out,
                             cache_bytes_per_token=cache_per_token)
    if spec.arch == "mla":
        r, rope = spec.kv_lora_rank, spec.qk_rope_head_dim
        nope, v = spec.qk_nope_head_dim, spec.mla_v_head_dim
        cache_per_token = (r + rope) * workload.cache_itemsize
        kv_min = b * positions * cache_per_token
        # FlashMLA's accounting: q in the absorbed space (r + rope), output in the latent (r).
        q_out = b * workload.q_len * h * ((r + rope) + r) * workload.act_itemsize
        absorbed = 2 * b * h * pairs * ((r + rope) + r)
        unabsorbed = 2 * b * h * pairs * ((nope + rope) + v)
        flops = absorbed if spec.mode == "absorbed" else unabsorbed
        return AttentionCost(
            flops_model=flops, kv_bytes_min=kv_min, bytes_min=kv_min + q_out,
            cache_bytes_per_token=cache_per_token,
            flops_alt={"absorbed": absorbed, "unabsorbed": unabsorbed},
            notes=(f"MLA model FLOPs in the {spec.mode} form; minimum bytes are the latent cache "
                   f"({r}+{rope} per token) read once",),
        )
    return None


def _keys_seen(q_len: int, kv_len: int, causal: bool):
    """Keys visible to each query row (causal: top-left aligned, as torch)."""
    for i in range(q_len):
        yield min(kv_len, i + 1) if causal else kv_len
