"""The plugin author's module: the hook marker, the data types hooks receive and return, and helpers.

    from rooflinekit.plugin import AttentionCost, AttentionSpec, hookimpl, module_heads

Hooks and what each receives and returns are documented in `rooflinekit.core.hookspecs` and
docs/plugins.md. Everything named here is the public surface for plugins; rooflinekit's built-in
plugins (package `rooflinekit_plugins`) import from it too. Import the helpers freely: none is a
hook implementation, so importing them into a plugin module registers nothing.
"""

from __future__ import annotations

from rooflinekit.core.errors import UserError
from rooflinekit.core.heads import (
    HEAD_ATTRS,
    HEAD_DIM_ATTRS,
    HIDDEN_ATTRS,
    KV_GROUP_ATTRS,
    KV_HEAD_ATTRS,
    Heads,
    call_heads,
    call_layout,
    heads_cost,
    int_attr,
    lookup,
    module_heads,
    split_heads,
)
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.keys import causal_pairs, pairs_attended, positions_attended
from rooflinekit.core.levers import LeverProposal
from rooflinekit.core.limits import limit, over
from rooflinekit.core.model_facts import cached, module_tree
from rooflinekit.core.skips import skipped_layers, under
from rooflinekit.core.specs import (
    AttentionCall,
    AttentionCost,
    AttentionShard,
    AttentionSpec,
    AttentionWindow,
    AttentionWorkload,
)
from rooflinekit.core.state import STATE_KEYS, split_state, state_cost, state_spec

__all__ = [
    # the hook marker
    "hookimpl",
    # data types
    "AttentionCall",
    "AttentionCost",
    "AttentionShard",
    "AttentionSpec",
    "AttentionWindow",
    "AttentionWorkload",
    "Heads",
    "LeverProposal",
    # head recognition
    "HEAD_ATTRS",
    "HEAD_DIM_ATTRS",
    "HIDDEN_ATTRS",
    "KV_GROUP_ATTRS",
    "KV_HEAD_ATTRS",
    "call_heads",
    "call_layout",
    "int_attr",
    "lookup",
    "module_heads",
    # costs and splits of softmax attention over K/V heads
    "heads_cost",
    "split_heads",
    # keys attended: causal, windowed and chunked pair counts
    "causal_pairs",
    "pairs_attended",
    "positions_attended",
    # layers that keep a fixed-size state (SSM, linear attention, RNN, short convolution)
    "STATE_KEYS",
    "state_cost",
    "state_spec",
    "split_state",
    # layers a sweep's design capture stands in for (their per-layer inputs may stay empty)
    "skipped_layers",
    "under",
    # walks of the model, once per sweep (rooflinekit.core.model_facts)
    "cached",
    "module_tree",
    # a deliberate message to the user (stops the run with one line)
    "UserError",
    # bounds on the work one analysis may do, and the one-line error past one (rooflinekit.core.limits)
    "limit",
    "over",
]
