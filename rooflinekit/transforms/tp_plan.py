"""TP plans: which style (colwise, rowwise, vocab, colwise_gather, replicate, experts) each module
of a model takes under tensor parallelism, from the plugins' `rooflinekit_tp_plan` answers and a
structural plan of the model's blocks, and what one GPU then holds of each linear
(rooflinekit.transforms.parallel applies the plan to a capture; docs/parallel.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

import torch

from rooflinekit.core.errors import UserError
from rooflinekit.core.heads import split_heads
from rooflinekit.core.model_facts import cached, fact, module_tree
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.specs import AttentionShard, AttentionSpec

STYLES = ("colwise", "rowwise", "vocab", "colwise_gather", "replicate", "experts")

#: transformers' TP style names (and rooflinekit's own) -> rooflinekit's.
STYLE_ALIASES = {
    "colwise": "colwise", "packed_colwise": "colwise", "local_colwise": "colwise",
    "local_packed_colwise": "colwise", "colwise_rep": "colwise_gather",
    "colwise_gather_output": "colwise_gather", "colwise_gather": "colwise_gather",
    "rowwise": "rowwise", "packed_rowwise": "rowwise", "local_rowwise": "rowwise",
    "rowwise_rep": "rowwise", "rowwise_split_input": "rowwise",
    "vocab": "vocab", "embedding_rowwise": "vocab",
    "moe_tp_experts": "experts", "ep_dispatch_experts": "experts", "grouped_gemm": "experts",
    "local_experts": "experts", "experts": "experts",
    "replicate": "replicate", "replicated_with_grad_allreduce": "replicate", "gather": "replicate",
    "sequence_parallel": "replicate", "local": "replicate", "isolate": "replicate", "ep_router": "replicate",
}

#: Output projections of attention blocks, by name (else: found by shape).
ATTN_OUT_NAMES = ("o_proj", "wo", "out_proj", "c_proj", "dense", "o", "proj_out", "out")
#: MLP down projections, by name (else: found by shape).
MLP_DOWN_NAMES = ("down_proj", "w2", "c_proj", "fc2", "dense_4h_to_h", "proj_out", "wo")

# -- plans ------------------------------------------------------------------------------------


def normalise_style(style: object) -> str | None:
    return STYLE_ALIASES.get(str(style).lower()) if style is not None else None


def checked_tp_plan(plan: dict, plugin: str, host) -> dict:
    """A plugin's TP plan less the entries rooflinekit cannot use (a key that is no module path,
    a style it does not know), each plugin's such entries named in one warning."""
    usable: dict[str, object] = {}
    unknown: dict[str, list[str]] = {}
    bad_keys: list[str] = []
    for key, raw in plan.items():
        if not isinstance(key, str) or not key:
            bad_keys.append(repr(key))
        elif normalise_style(raw) is None:
            unknown.setdefault(repr(raw) if not isinstance(raw, str) else f"'{raw}'", []).append(key)
        else:
            usable[key] = raw
    if unknown:
        styles = "; ".join(f"{style} (for {', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
                           for style, keys in unknown.items())
        host.warn(f"plugin '{plugin}' answered rooflinekit_tp_plan with unknown TP style {styles}; ignored "
                  f"(known: {', '.join(STYLES)} and transformers' names)")
    if bad_keys:
        host.warn(f"plugin '{plugin}' answered rooflinekit_tp_plan with keys that are no module path: "
                  f"{', '.join(bad_keys[:5])}; ignored")
    return usable


def _pattern(key: str) -> re.Pattern:
    parts = key.split(".")
    return re.compile(r"\.".join("[^.]+" if p == "*" else re.escape(p) for p in parts) + r"\Z")


def resolve_tp_plan(plan: dict, modules: dict[str, torch.nn.Module]) -> tuple[dict[str, str], list[str]]:
    """Concrete module path -> rooflinekit style for a plan of paths and `*` patterns.

    An exact path beats a pattern; among patterns the first listed wins. Keys naming no module
    (transformers also lists parameters, e.g. `experts.gate_up_proj`) are skipped. "vocab" on a
    Linear becomes "colwise_gather", on an Embedding stays "vocab".
    """
    notes: list[str] = []
    out: dict[str, str] = {}
    patterns = []
    for key, raw in plan.items():
        style = normalise_style(raw)
        if style is None:
            notes.append(f"TP plan: unknown style '{raw}' for {key}: treated as replicate")
            style = "replicate"
        if "*" in key:
            patterns.append((_pattern(key), style))
        elif key in modules:
            out[key] = style
    if patterns:
        for path in modules:
            if path in out or not path:
                continue
            for regex, style in patterns:
                if regex.match(path):
                    out[path] = style
                    break
    for path, style in list(out.items()):
        module = modules[path]
        if isinstance(module, torch.nn.Embedding) and style in ("colwise_gather", "colwise", "rowwise"):
            out[path] = "vocab"
        elif isinstance(module, torch.nn.Linear) and style == "vocab":
            out[path] = "colwise_gather"
    return out, notes


def _linear_children(module: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    return [(n, m) for n, m in module.named_children() if isinstance(m, torch.nn.Linear)]


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _block_sites(modules: dict[str, torch.nn.Module], attention: dict[str, AttentionSpec]) -> dict[str, str]:
    """Attention block (the site or its nearest ancestor, up to 2 up, with Linear children) -> the
    first site (a key of `attention`) in it."""
    blocks: dict[str, str] = {}
    for key in attention:
        site = "" if key == "(root)" else key
        parts = site.split(".") if site else []
        for cut in range(0, min(2, len(parts)) + 1):
            path = ".".join(parts[: len(parts) - cut])
            module = modules.get(path)
            if module is not None and _linear_children(module):
                blocks.setdefault(path, key)
                break
    return blocks


def attention_blocks(modules: dict[str, torch.nn.Module], attention: dict[str, AttentionSpec]) -> dict[str, AttentionSpec]:
    """Attention block (the site or its nearest ancestor, up to 2 up, with Linear children) -> spec."""
    return {block: attention[key] for block, key in _block_sites(modules, attention).items()}


def attention_shard(spec: AttentionSpec, tp: int, host: PluginHost, where: str = "") -> AttentionShard:
    """How a layer of this spec splits N ways, as the plugin of its architecture answers
    (`rooflinekit_attention_shard`); without an answer, heads and K/V heads split as
    `rooflinekit.core.heads.split_heads` does, and the note says so. A plugin's UserError (a split
    the architecture cannot make) is raised with the layer's path."""
    try:
        shard, _ = host.first(host.hook.rooflinekit_attention_shard, spec=spec, tp=tp)
        if shard is None:
            shard = split_heads(spec, tp)
            fallback = (f"no plugin says how arch '{spec.arch}' splits under tensor parallelism: heads "
                        "and K/V heads split as standard attention's")
            shard = replace(shard, spec=replace(shard.spec, notes=shard.spec.notes + (fallback,)),
                            note=f"{shard.note}; {fallback}")
    except UserError as exc:
        raise UserError(f"{exc} ({where or '(root)'})") from None
    return shard


def attention_shards(attention: dict[str, AttentionSpec], tp: int, host: PluginHost) -> dict[str, AttentionShard]:
    """Site -> how its layer splits N ways, once the heads are checked to divide by N."""
    shards = {}
    for site, spec in attention.items():
        where = site or "(root)"
        if spec.num_heads % tp:
            raise UserError(f"--tp {tp} does not divide the {spec.num_heads} attention heads of {where}")
        shards[site] = attention_shard(spec, tp, host, where)
    return shards


def _out_projection(lins: list[tuple[str, torch.nn.Linear]], spec: AttentionSpec,
                    shard: AttentionShard) -> str | None:
    for name, _ in lins:
        if name in ATTN_OUT_NAMES:
            return name
    v_dim = shard.out_head_dim if shard.out_head_dim is not None else spec.v_head_dim
    width = spec.num_heads * (v_dim or spec.head_dim)
    cands = [n for n, m in lins if m.in_features == width]
    return cands[-1] if cands else (lins[-1][0] if lins else None)


def structural_tp_plan(model: torch.nn.Module, attention: dict[str, AttentionSpec],
                       host: PluginHost | None = None,
                       shards: dict[str, AttentionShard] | None = None) -> dict[str, str]:
    """Styles from the model's structure, and what each attention layer's plugin says about it.

    - in each attention block, the Linear that consumes the attention output (by name: o_proj,
      wo, out_proj, c_proj, ...; else the one whose input is heads x the value width the plugin's
      `rooflinekit_attention_shard` gives) is rowwise, the others colwise, except those the plugin
      keeps whole (MLA's low-rank down projections: q_a/wq_a, kv_a/wkv_a, or any Linear narrower
      than heads x qk_nope_head_dim): replicated, as DeepSeek's reference TP does. `shards` are
      the answers by site (as `rooflinekit_tp_plan` receives them); without them the plugins of
      `host` (the process-wide one by default) are asked with N = 1: these rules do not depend on N;
    - in a block with two or more Linear children where one maps the others' output width back to
      their input width (down_proj/w2/c_proj/fc2), that one is rowwise and the others colwise;
      a block's Linear that fits neither (a MoE router) stays replicated;
    - the largest Embedding is vocab-parallel, and so is every Linear producing its vocabulary
      (the output head: colwise, then an all-gather of the logits);
    - everything else (norms, position embeddings, routers) is replicated.
    """
    shards = shards or {}
    modules = cached(model, fact("modules"), lambda: dict(module_tree(model)))
    plan: dict[str, str] = {}
    blocks = _block_sites(modules, attention)
    for block, site in blocks.items():
        spec = attention[site]
        shard = shards[site] if site in shards else attention_shard(spec, 1, host or get_host(), site)
        lins = _linear_children(modules[block])
        out_name = _out_projection(lins, spec, shard)
        for name, lin in lins:
            path = _join(block, name)
            if name == out_name:
                plan[path] = "rowwise"
            elif any(fnmatchcase(name, pattern) for pattern in shard.replicated) \
                    or lin.out_features < shard.replicated_below:
                plan[path] = "replicate"
            else:
                plan[path] = "colwise"
    for path, module in modules.items():
        if path in blocks:
            continue
        lins = _linear_children(module)
        if len(lins) < 2:
            continue
        downs = [(n, m) for n, m in lins if any(o is not m for _, o in lins) and all(
            o.out_features == m.in_features and o.in_features == m.out_features for _, o in lins if o is not m)]
        if len(downs) != 1:
            named = [(n, m) for n, m in lins if n in MLP_DOWN_NAMES]
            if len(named) != 1:
                continue
            down = named[0]
            ups = [(n, m) for n, m in lins if m is not down[1] and m.out_features == down[1].in_features]
        else:
            down = downs[0]
            ups = [(n, m) for n, m in lins if m is not down[1]]
        if not ups:
            continue
        plan[_join(path, down[0])] = "rowwise"
        for n, _ in ups:
            plan[_join(path, n)] = "colwise"
    embeddings = [(p, m) for p, m in modules.items() if isinstance(m, torch.nn.Embedding)]
    if embeddings:
        path, emb = max(embeddings, key=lambda pm: pm[1].num_embeddings)
        plan[path] = "vocab"
        for p, m in modules.items():
            if isinstance(m, torch.nn.Linear) and m.out_features == emb.num_embeddings and p not in plan:
                plan[p] = "colwise_gather"
    return plan


@dataclass
class ShardPlan:
    """A resolved TP plan: styles per module and the share of output each colwise module keeps."""

    tp: int
    styles: dict[str, str]
    fractions: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replicated_kv: dict[str, str] = field(default_factory=dict)  # colwise path -> why not /N


def _colwise_fraction(lin: torch.nn.Module, shard: AttentionShard | None, tp: int) -> tuple[float, str | None]:
    """Share of a colwise Linear's output one GPU computes: 1/N, or what the layer's plugin says
    for a projection of its width (K/V heads replicated over GPUs: one K/V head per GPU)."""
    if shard is None or not isinstance(lin, torch.nn.Linear):
        return 1.0 / tp, None
    share = shard.colwise_shares.get(lin.out_features)
    if share is None:
        return 1.0 / tp, None
    return share, shard.note


def build_shard_plan(styles: dict[str, str], modules: dict[str, torch.nn.Module],
                     attention: dict[str, AttentionSpec], tp: int, host: PluginHost | None = None,
                     shards: dict[str, AttentionShard] | None = None) -> ShardPlan:
    """Check that the heads divide (and that each architecture can split N ways: its plugin's
    `rooflinekit_attention_shard`; `shards` by site when already asked), and work out each colwise
    module's share."""
    if shards is None:
        shards = attention_shards(attention, tp, host or get_host())
    shards = {block: shards[site] for block, site in _block_sites(modules, attention).items()}
    plan = ShardPlan(tp=tp, styles=dict(styles))
    for path, style in styles.items():
        if style in ("colwise", "colwise_gather", "vocab"):
            parent = path.rpartition(".")[0]
            frac, why = _colwise_fraction(modules.get(path), shards.get(parent), tp)
            plan.fractions[path] = frac
            if why:
                plan.replicated_kv[path] = why
    return plan
