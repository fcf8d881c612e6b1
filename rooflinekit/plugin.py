"""The plugin author's module: the hook marker, the data types hooks receive and return, and helpers.

    from rooflinekit.plugin import AttentionCost, AttentionSpec, hookimpl, module_heads

Hooks and what each receives and returns are documented in `rooflinekit.core.hookspecs` and
docs/plugins.md. Everything named here is the public surface for plugins; rooflinekit's built-in
plugins (package `rooflinekit_plugins`) import from it too. Import the helpers freely: none is a
hook implementation, so importing them into a plugin module registers nothing.

Loading this module imports no torch: the names whose modules need it (the capture records, the
transforms, the module-model emitters, the tensor-parallel helpers) and `Report` are imported on
first use (`_LAZY`). A plugin that imports them inside a hook, or in a module of its own imported
from a hook, still loads without torch.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

from rooflinekit.core.errors import UserError
from rooflinekit.core.experts import expected_distinct_experts
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
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, ModelSource, Workload
from rooflinekit.core.skips import skipped_layers, under
from rooflinekit.core.specs import (
    AttentionCall,
    AttentionCost,
    AttentionShard,
    AttentionSpec,
    AttentionWindow,
    AttentionWorkload,
    ModuleModel,
)
from rooflinekit.core.state import (
    STATE_ATTR,
    STATE_KEYS,
    StateCounts,
    kept_state,
    split_state,
    state_cost,
    state_spec,
    with_kept_state,
)
from rooflinekit.core.swap import environment, own_attribute, setting, swapped
from rooflinekit.core.version import older_than_tested

if TYPE_CHECKING:  # served by __getattr__ below: modules that import torch, or slow to import
    from rooflinekit.core.compat import TorchDispatchMode, disable_torch_dispatch
    from rooflinekit.core.report import Report
    from rooflinekit.stages.attention_ops import (
        downstream,
        dtype_itemsize,
        is_attention_product,
        reexpanding,
    )
    from rooflinekit.stages.attribute import AttentionSite, attention_workload
    from rooflinekit.stages.capture import CaptureResult, OpRecord
    from rooflinekit.stages.hardware import dtype_key
    from rooflinekit.stages.model_source import load_model_file
    from rooflinekit.stages.modelled import (
        Dispatch,
        OpCounts,
        Provenance,
        emit,
        emit_collective,
        emit_dispatch,
        suppressed,
    )
    from rooflinekit.transforms.base import Counted, Transform, TransformContext, rebuild_ops
    from rooflinekit.transforms.tp_plan import resolve_tp_plan, structural_tp_plan

#: Name -> the module it is imported from on first use (PEP 562): these modules import torch, or
#: are slow to import (the report's types).
_LAZY = {
    **dict.fromkeys(("Counted", "Transform", "TransformContext", "rebuild_ops"), "rooflinekit.transforms.base"),
    **dict.fromkeys(("CaptureResult", "OpRecord"), "rooflinekit.stages.capture"),
    **dict.fromkeys(("AttentionSite", "attention_workload"), "rooflinekit.stages.attribute"),
    **dict.fromkeys(("downstream", "dtype_itemsize", "is_attention_product", "reexpanding"),
                    "rooflinekit.stages.attention_ops"),
    **dict.fromkeys(("Dispatch", "OpCounts", "Provenance", "emit", "emit_collective", "emit_dispatch", "suppressed"),
                    "rooflinekit.stages.modelled"),
    **dict.fromkeys(("resolve_tp_plan", "structural_tp_plan"), "rooflinekit.transforms.tp_plan"),
    "dtype_key": "rooflinekit.stages.hardware",
    "PUBLISHED_EFFICIENCY": "rooflinekit.stages.efficiency_table",
    "Report": "rooflinekit.core.report",
    **dict.fromkeys(("TorchDispatchMode", "disable_torch_dispatch"), "rooflinekit.core.compat"),
    "load_model_file": "rooflinekit.stages.model_source",
}


#: Names renamed in 0.3 (old -> new): served with a DeprecationWarning until 0.4.
_RENAMED = {"resolve": "resolve_tp_plan", "structural_plan": "structural_tp_plan"}


def __getattr__(name: str):
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(f"rooflinekit.plugin.{name} is deprecated since rooflinekit 0.3: import "
                      f"rooflinekit.plugin.{new}", DeprecationWarning, stacklevel=2)
        return __getattr__(new) if new not in globals() else globals()[new]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    # the request a hook receives: what runs, how it is deployed, what builds the model
    "Workload",
    "Deployment",
    "ModelSource",
    # the plugins, for a hook that asks other hooks (`host.first(host.hook.rooflinekit_...)`), and a profile's report
    "PluginHost",
    "Report",
    # a module's analytic stand-in during capture (rooflinekit_module_model) and the records it emits
    "ModuleModel",
    "OpCounts",
    "Provenance",
    "emit",
    "emit_collective",
    "emit_dispatch",
    "Dispatch",
    "suppressed",
    # a lever's restatement of the capture (LeverProposal(transform=...)): the protocol, what it
    # receives, the capture records and attention rows it restates, and the costs it asks for
    "Transform",
    "Counted",
    "TransformContext",
    "rebuild_ops",
    "CaptureResult",
    "OpRecord",
    "AttentionSite",
    "attention_workload",
    "downstream",
    "dtype_itemsize",
    "is_attention_product",
    "reexpanding",
    "dtype_key",
    # tensor-parallel plans (rooflinekit_tp_plan): the structural rules, and a plan's patterns resolved
    "structural_tp_plan",
    "resolve_tp_plan",
    # the model-file loader (rooflinekit_workload_loader)
    "load_model_file",
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
    "StateCounts",
    "state_cost",
    "state_spec",
    "split_state",
    # the state tensors a module's code keeps (their shapes and dtypes), where it declares them
    "STATE_ATTR",
    "kept_state",
    "with_kept_state",
    # layers a sweep's design capture stands in for (their per-layer inputs may stay empty)
    "skipped_layers",
    "under",
    # the expected load of routed experts (module models; step models evaluate it at any batch)
    "expected_distinct_experts",
    # walks of the model, once per sweep (rooflinekit.core.model_facts)
    "cached",
    "module_tree",
    "older_than_tested",
    # torch's dispatch-mode internals, named in one place (rooflinekit.core.compat): the base class
    # of a mode that sees every aten op, and a context in which no mode sees the ops run inside
    "TorchDispatchMode",
    "disable_torch_dispatch",
    # patches for the length of a block on what the plugin did not make, each put back as found
    # (rooflinekit.core.swap)
    "swapped",
    "own_attribute",
    "environment",
    "setting",
    # a deliberate message to the user (stops the run with one line)
    "UserError",
    # bounds on the work one analysis may do, and the one-line error past one (rooflinekit.core.limits)
    "limit",
    "over",
]
