"""Deprecated: rooflinekit 0.1's one built-in attention plugin, kept so that plugins written to
the 0.1 plugin guide (`from rooflinekit_plugins import attention as builtin`, then
`builtin.rooflinekit_attention_spec(...)`) still load and run.

Since 0.2 each architecture is its own built-in plugin (`mha`, `gqa`, `mla`). The functions here
ask them in the order pluggy does (`mla` first, then the `trylast` `mha` and `gqa`) and return the
first answer. They are plain functions, not hook implementations, and this module is no entry
point: importing it, or its functions, registers nothing.
"""

from __future__ import annotations

import warnings

from rooflinekit.plugin import HEAD_ATTRS, HEAD_DIM_ATTRS, KV_HEAD_ATTRS
from rooflinekit_plugins import gqa, mha, mla

warnings.warn(
    "rooflinekit_plugins.attention is deprecated since rooflinekit 0.2: each architecture is its "
    "own plugin (rooflinekit_plugins.mha, .gqa, .mla); use the helpers of rooflinekit.plugin "
    "(module_heads, heads_cost, ...)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "HEAD_ATTRS",
    "HEAD_DIM_ATTRS",
    "KV_HEAD_ATTRS",
    "rooflinekit_attention_cost",
    "rooflinekit_attention_spec",
    "rooflinekit_attention_spec_from_call",
]


def rooflinekit_attention_spec(module, path, call=None):
    """The built-ins' `AttentionSpec` for `module`, or None (MLA, then MHA, then GQA/MQA)."""
    for builtin in (mla, mha, gqa):
        spec = builtin.rooflinekit_attention_spec(module=module, path=path, call=call)
        if spec is not None:
            return spec
    return None


def rooflinekit_attention_spec_from_call(call):
    """The built-ins' `AttentionSpec` from an attention call's shapes, or None."""
    for builtin in (mha, gqa):
        spec = builtin.rooflinekit_attention_spec_from_call(call=call)
        if spec is not None:
            return spec
    return None


def rooflinekit_attention_cost(spec, workload):
    """The built-ins' `AttentionCost` of `spec`'s architecture, or None."""
    for builtin in (mha, gqa, mla):
        cost = builtin.rooflinekit_attention_cost(spec=spec, workload=workload)
        if cost is not None:
            return cost
    return None
