"""Built-in plugin: the cost and tensor-parallel split of every fixed-state layer.

The mixer plugins (`ssm`, `linear_attention`, `rwkv`, `xlstm`, and any third party's) recognise
their layers and describe them with `rooflinekit.plugin.state_spec`, which marks the spec
`fixed_state`; this plugin costs every such spec (`state_cost`: the state read and written once a
step, not growing with context) and splits it under `--tp` (`split_state`), whatever its family.
"""

from __future__ import annotations

from rooflinekit.plugin import hookimpl, split_state, state_cost


@hookimpl
def rooflinekit_attention_cost(spec, workload):
    return state_cost(spec, workload) if spec.fixed_state else None


@hookimpl
def rooflinekit_attention_shard(spec, tp):
    return split_state(spec, tp) if spec.fixed_state else None


@hookimpl
def rooflinekit_serving_attention(spec, workload):
    """The mixer's kernel (a chunked scan in prefill, a recurrent step in decode): the state read and
    written once, its inputs read and output written once (`state_cost`)."""
    return state_cost(spec, workload) if spec.fixed_state else None
