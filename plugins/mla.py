"""Built-in plugin: DeepSeek's multi-head latent attention (MLA), naive and absorbed.

Recognises modules declaring `kv_lora_rank` and `qk_rope_head_dim` (and heads, `qk_nope_head_dim`,
`v_head_dim`), on the module or its transformers `config`. The spec has one K/V "head", the latent
plus the shared rope key (`head_dim` = rank + rope, `v_head_dim` = rank), `mode` "absorbed" or
"naive" (from the module's `mode`/`attn_impl`), and the MLA sizes in `extra`. Minimum bytes are
the latent cache read once (FlashMLA's accounting); model FLOPs are the absorbed or the
un-absorbed form's, both in `flops_alt`. Under tensor parallelism the latent cache and its
low-rank down projections are replicated (DeepSeek's reference TP) and the heads split.

Asked in the ordinary order, before the `trylast` head plugins (`mha`, `gqa`), which would
otherwise take an MLA module for plain attention.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

from rooflinekit.plugin import (
    HEAD_ATTRS,
    AttentionCost,
    AttentionShard,
    AttentionSpec,
    LeverProposal,
    hookimpl,
    lookup,
    pairs_attended,
    positions_attended,
)

ARCH = "mla"
PROVIDES = (ARCH,)
#: Low-rank down projections, kept whole on every GPU under TP (DeepSeek's reference code and
#: transformers' names).
DOWN_PROJECTIONS = ("wq_a", "q_a_proj", "wkv_a", "kv_a_proj_with_mqa", "kv_a_proj")


@hookimpl
def rooflinekit_attention_spec(module, path, call):
    rank = lookup(module, ("kv_lora_rank",))
    rope = lookup(module, ("qk_rope_head_dim",))
    if rank is None or rope is None:
        return None
    heads = lookup(module, HEAD_ATTRS)
    nope = lookup(module, ("qk_nope_head_dim",))
    v_dim = lookup(module, ("v_head_dim",))
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
        arch=ARCH, num_heads=heads, num_kv_heads=1, head_dim=rank + rope, v_head_dim=rank, mode=mode,
        extra={"kv_lora_rank": rank, "qk_rope_head_dim": rope, "qk_nope_head_dim": nope, "v_head_dim": v_dim},
        notes=notes,
    )


@hookimpl
def rooflinekit_attention_cost(spec, workload):
    if spec.arch != ARCH:
        return None
    x = spec.extra
    r, rope, nope, v = x["kv_lora_rank"], x["qk_rope_head_dim"], x["qk_nope_head_dim"], x["v_head_dim"]
    # keys some query of this step sees (a window or chunk honoured), and the pairs scored
    chunk = getattr(spec, "chunk", None)
    positions = positions_attended(workload.q_len, workload.context, spec.window, chunk)
    pairs = pairs_attended(workload.q_len, workload.context, workload.is_causal, spec.window, chunk)
    b, h = workload.batch, spec.num_heads
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


@hookimpl
def rooflinekit_serving_attention(spec, workload):
    """FlashMLA-style absorbed MLA, whatever mode the code runs: W_UK folded into the query and W_UV
    into the output, the latent cache (rank + rope per token) read once per step; the absorbed cost
    of `rooflinekit_attention_cost` (the same as `mla_absorb`'s absorbed attention record)."""
    if spec.arch != ARCH:
        return None
    return rooflinekit_attention_cost(replace(spec, mode="absorbed"), workload)


@hookimpl
def rooflinekit_attention_shard(spec, tp):
    if spec.arch != ARCH or spec.num_heads % tp:
        return None  # not MLA, or a split of the heads it cannot make
    x = spec.extra
    heads = spec.num_heads // tp
    note = (f"TP {tp}: {heads} of {spec.num_heads} heads per GPU; the MLA latent cache "
            f"({x['kv_lora_rank']}+{x['qk_rope_head_dim']} per token) is replicated: every GPU holds "
            "and reads all of it")
    return AttentionShard(
        spec=replace(spec, num_heads=heads, notes=tuple(spec.notes) + (note,)),
        kv="latent replicated",
        # the down projections by name, and any projection narrower than the heads' no-rope keys
        # (a q or kv down projection under another name)
        replicated=DOWN_PROJECTIONS,
        replicated_below=spec.num_heads * (x.get("qk_nope_head_dim") or 1),
        out_head_dim=x.get("v_head_dim"),
        note=note,
    )


@hookimpl
def rooflinekit_advise_levers(workload, deployment, report, source):
    """The absorbed form, for MLA layers that run naive: the model's own absorbed mode where its
    model file has one (-O mode=absorbed), else its capture restated (rooflinekit_plugins.mla_absorb's
    `AbsorbMLA`, at the deployment's KV cache format)."""
    name = "absorbed MLA"
    rows = [a for a in report.attention if a.recognised and a.arch == ARCH]
    if not rows:
        return [LeverProposal(name, skip="no MLA attention layer in this model")]
    if not any(a.mode == "naive" for a in rows):
        return [LeverProposal(name, skip="the MLA layers already run absorbed")]
    if deployment.kernels == "serving":
        return [LeverProposal(name, skip="the serving view already prices MLA absorbed (FlashMLA's kernel over "
                                         "the latent); --kernels as-written prices the model's naive code")]
    if _takes_option(source, "mode"):
        options = dict(workload.options, mode="absorbed")
        return [LeverProposal(name, replace(workload, options=tuple(sorted(options.items()))), rebuild=True,
                              assumption="the model's own absorbed mode (-O mode=absorbed): the latent cached and "
                                         "attended, kv_b_proj folded into the query and output")]
    # imports torch: only when a lever is asked for
    from rooflinekit_plugins.mla_absorb import AbsorbMLA

    return [LeverProposal(name, workload, transform=AbsorbMLA(),
                          assumption="kv_b_proj's re-expansion of every cached position and the attention over the "
                                     "expanded K/V replaced by the absorbed form: the same weights on the new tokens "
                                     "only, attention over the latent at the MLA plugin's absorbed cost (the model's "
                                     "code has no absorbed mode: its capture restated)")]


def _takes_option(source, name: str) -> bool:
    """Whether the model source's build_model or make_inputs takes option `name`."""
    if source is None or source.options_handled:
        return False
    for fn in (source.build_model, source.make_inputs):
        try:
            if name in inspect.signature(fn).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False


#: `-O mode=...` values that ask for the absorbed form.
ABSORBED = ("absorbed", "absorb")


@hookimpl
def rooflinekit_option_transform(name, value):
    """`-O mode=absorbed` on MLA code that has no absorbed mode (transformers' DeepSeek-V2/V3 code,
    any config whose MLA layers run naive): the capture restated in the absorbed form, as the
    advise lever restates it (`rooflinekit_plugins.mla_absorb.AbsorbMLA`). A model file taking
    `mode` runs it itself (its layers then run absorbed, and nothing is left to restate)."""
    if name != "mode" or str(value).lower() not in ABSORBED:
        return None
    # imports torch: only when the option is given
    from rooflinekit_plugins.mla_absorb import AbsorbedOption

    return AbsorbedOption()
