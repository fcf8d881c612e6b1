"""Built-in plugin: attention in encoders and encoder-decoders, each layer costed over its own
query and key lengths.

A module declares its role with an `attention_role` attribute (the transformers loader tags every
module of an encoder or encoder-decoder it builds; a model file may set it too):

- "encoder": self-attention over every position of the source, bidirectional; its K and V are
  activations of the step, no cache is kept (`cache_bytes_per_token` 0);
- "cross": a decoder's attention over the encoder's output; its K/V are written once (at
  prefill) and read at every step; they do not grow as tokens are generated (per token 0, per
  sequence the K/V of the source positions);
- "decoder": a decoder's causal self-attention over its cache.

The head layout (MHA, GQA, MQA) is recognised as the `mha`/`gqa` plugins do; the spec's `mode` is
the role ("encoder", "cross", None for "decoder") and its `extra` holds `role`, `q_len` and
`kv_len`, the query and key positions the layer's attention call had. Cost: softmax attention
over those (`heads_cost`), bidirectional for "encoder" and "cross".
"""

from __future__ import annotations

from dataclasses import fields, replace

from rooflinekit.plugin import call_layout, heads_cost, hookimpl, module_heads

ROLES = ("encoder", "cross", "decoder")
ROLE_ATTR = "attention_role"
PROVIDES = ("encoder attention", "cross-attention")


def role_of(module) -> str | None:
    """The role a module declares (None: none, or not one of ROLES)."""
    role = getattr(module, ROLE_ATTR, None)
    return role if isinstance(role, str) and role in ROLES else None


def _arch(heads: int, kv_heads: int) -> str:
    if kv_heads == heads:
        return "mha"
    return "mqa" if kv_heads == 1 else "gqa"


@hookimpl(tryfirst=True)
def rooflinekit_attention_spec(module, path, call):
    role = role_of(module)
    if role is None:
        return None
    layout = module_heads(module, call) or (call_layout(call) if call is not None else None)
    if layout is None:
        return None
    spec = layout.spec(_arch(layout.num_heads, layout.num_kv_heads))
    extra = {**spec.extra, "role": role}
    notes = []
    if call is not None and len(call.q_shape) >= 2 and len(call.k_shape) >= 2:
        extra.update(q_len=int(call.q_shape[-2]), kv_len=int(call.k_shape[-2]))
    else:
        notes.append("query and key lengths not seen in the layer's attention call: the workload's are assumed")
    positions = f"the {extra['kv_len']}" if "kv_len" in extra else "the"
    notes.append({
        "encoder": "encoder self-attention: bidirectional over the source positions; K/V are activations, not cached",
        "cross": (f"cross-attention: K/V of {positions} encoder positions, written once at prefill and read every "
                  "step; they do not grow with generated tokens"),
        "decoder": "",
    }[role])
    if role != "decoder" and (call is None or not call.fused):
        notes.append("bidirectional by its role: model FLOPs count every query against every key, whatever a "
                     "mask of its matmuls would say")
    return replace(spec, mode=None if role == "decoder" else role, extra=extra,
                   notes=tuple(spec.notes) + tuple(n for n in notes if n))


@hookimpl(tryfirst=True)
def rooflinekit_attention_cost(spec, workload):
    role = spec.extra.get("role") if isinstance(spec.extra, dict) or hasattr(spec.extra, "get") else None
    if role not in ROLES:
        return None
    q_len = int(spec.extra.get("q_len") or workload.q_len)
    kv_len = int(spec.extra.get("kv_len") or workload.context)
    causal = workload.causal if role == "decoder" else False
    cost = heads_cost(spec, replace(workload, q_len=q_len, context=kv_len, causal=causal))
    if role == "decoder":
        return cost
    changes = {"cache_bytes_per_token": 0.0}
    if role == "cross" and "cache_bytes_per_sequence" in {f.name for f in fields(cost)}:
        changes["cache_bytes_per_sequence"] = kv_len * cost.cache_bytes_per_token  # K/V of the source, per sequence
    return replace(cost, **changes)
