"""Built-in plugin: tensor-parallel plans for planned parallelism (`rooflinekit profile --tp N`).

A transformers model carries its own plan (`model.tp_plan`: e.g. "model.layers.*.self_attn.q_proj":
"colwise"); it is used where it names a module. Everything it leaves out (DeepSeek-V3's config has
no plan for its MLA attention; model files have none at all) gets rooflinekit's structural rules
(`rooflinekit.transforms.tp_plan.structural_tp_plan`: attention output projection rowwise, other attention
projections colwise except MLA's low-rank down projections, MLP down projection rowwise and the
others colwise, the vocabulary embedding and head vocab-parallel, the rest replicated).
"""

from __future__ import annotations

from rooflinekit.plugin import hookimpl

PROVIDES = ("tensor-parallel plans",)


def transformers_plan(model) -> dict:
    """The model's transformers TP plan (full-model paths, `*` for layer numbers), or {}."""
    for attr in ("tp_plan", "_tp_plan"):
        try:
            plan = getattr(model, attr, None)
        except Exception:  # a property that needs a distributed setup
            plan = None
        if isinstance(plan, dict) and plan:
            return dict(plan)
    config = getattr(model, "config", None)
    base = getattr(config, "base_model_tp_plan", None)
    if isinstance(base, dict) and base:
        prefix = getattr(model, "base_model_prefix", "")
        if prefix and getattr(model, prefix, None) is not None:  # a ...ForCausalLM around the base model
            return {f"{prefix}.{k}": v for k, v in base.items()}
        return dict(base)
    return {}


@hookimpl(trylast=True)
def rooflinekit_tp_plan(model, attention, shards):
    # these need torch: imported when the hook runs, so that loading the plugin imports none
    from rooflinekit.plugin import resolve_tp_plan, structural_tp_plan

    plan = structural_tp_plan(model, attention, shards=shards)
    hf = transformers_plan(model)
    if hf:  # transformers' own entries win where they name a module
        resolved, _ = resolve_tp_plan(hf, dict(model.named_modules()))
        plan.update(resolved)
    return plan
