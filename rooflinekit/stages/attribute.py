"""Attribute: find attention layers in a capture, ask plugins what they are, split K/V traffic.

An attention *site* is a module whose own ops (not its children's) include a fused attention call
or a matrix product of two activations (QK^T, PV). For each site:

- executed FLOPs and bytes are those of the site's own ops, less the ops that read parameters
  (projections run inside the module, e.g. nn.MultiheadAttention's in_proj, MLA's W_UK);
- K/V operands are the fused call's k and v, or for plain matmuls the operand that spans the key
  length (`context`; on a tie, the second operand of QK^T, the conventional q @ k^T order) and is
  not derived from another attention product (the probabilities);
- executed K/V bytes are the K/V operands' reads plus every op of the site that produced them
  (cache writes, torch.cat cache updates, repeat_kv copies, rope on k), found by walking the
  storages backwards until a projection, a parameter or another module's op.

Reading the ops (attention products, K/V operands, the K/V path, repeats) is
rooflinekit.stages.attention_ops; this module recognises, costs and reports each site.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from rooflinekit.core.model_facts import cached, fact
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.specs import (
    AttentionCall,
    AttentionCost,
    AttentionSpec,
    AttentionWindow,
    AttentionWorkload,
)
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.core.units import ratio, si
from rooflinekit.stages.attention_ops import (
    _kv_path,
    _repeat_factor,
    _subtrees,
    dtype_itemsize,
    find_sites,
    is_attention_product,
    is_projection,
    kv_operands,
    reexpanded_flops,
    reexpanding,
)
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.mixers import (
    StorageLife,
    mixer_paths,
    mixer_sites,
    not_a_mixer,
    state_traffic,
    with_mixers,
)


@dataclass
class AttentionSite:
    """One attention layer as found in a capture: what it is, what its architecture needs, what its
    code moved, and its ops (the working object; the report's row is core.report.AttentionRow)."""

    module: str
    module_class: str
    spec: AttentionSpec | None
    plugin: str | None
    cost: AttentionCost | None
    flops_executed: float
    bytes_executed: float
    kv_bytes_executed: float
    kv_read_bytes: float  # K/V operands read by the attention products themselves
    kv_copy_bytes: float  # cache updates, repeats and other copies on the K/V path
    dtype: str
    op_indices: list[int] = field(default_factory=list)
    kv_op_indices: list[int] = field(default_factory=list)
    kv_reexpand_flops: float = 0.0  # projections re-applied to cached positions every step
    causal: bool | None = None  # what the model FLOPs assumed (see `causality`)
    notes: list[str] = field(default_factory=list)
    #: (batch, q_len, context) the layer's attention calls ran at, read from their shapes
    #: (`ran_shape`); its cost is asked there, not at the workload's. None: the workload's.
    shape: tuple[int, int, int] | None = None

    @property
    def recognised(self) -> bool:
        return self.spec is not None and self.cost is not None

    @property
    def amplification(self) -> float | None:
        if not self.recognised or not self.cost.kv_bytes_min:
            return None
        return self.kv_bytes_executed / self.cost.kv_bytes_min

    @property
    def read_amplification(self) -> float | None:
        if not self.recognised or not self.cost.kv_bytes_min:
            return None
        return self.kv_read_bytes / self.cost.kv_bytes_min

    @property
    def intensity_min(self) -> float | None:
        if not self.recognised or not self.cost.bytes_min:
            return None
        return self.cost.flops_model / self.cost.bytes_min

    @property
    def intensity_executed(self) -> float | None:
        return self.flops_executed / self.bytes_executed if self.bytes_executed else None


def _call_for(path: str, module_class: str, ops: list[OpRecord], params: set[int]) -> AttentionCall | None:
    """The attention call of a site, from its fused SDPA record or its QK^T and PV products."""
    for op in ops:
        if op.kind == "fused" and "q_shape" in op.attrs:
            q, k, v = (tuple(op.attrs[n]) for n in ("q_shape", "k_shape", "v_shape"))
            distinct = op.attrs.get("k_heads_distinct")
            unique = distinct if distinct is not None and len(k) >= 4 and distinct < k[-3] else None
            return AttentionCall(path, module_class, q, k, v, op.attrs.get("enable_gqa", False), unique, True,
                                 op.attrs.get("mask_keys"))
    products = [op for op in ops if op.kind != "fused" and is_attention_product(op, params)
                and len(op.attrs.get("operand_shapes", [[], []])[0]) >= 4]
    if not products:
        return None
    (q, kt), (_, kt_heads) = products[0].attrs["operand_shapes"], products[0].attrs["operand_heads"]
    if kt[-2] != q[-1]:
        return None  # not q @ k^T over a shared head dimension
    k = (*kt[:-2], kt[-1], kt[-2])
    v = tuple(products[1].attrs["operand_shapes"][1]) if len(products) > 1 else k
    unique = kt_heads if kt_heads is not None and kt_heads < k[-3] else None
    return AttentionCall(path, module_class, tuple(q), k, v, False, unique, False)


def causality(core: list[OpRecord], workload: Workload) -> tuple[bool | None, str | None]:
    """Whether the site's attention is causal, from its fused call, and a note when assumed.

    is_causal=True: causal. No mask and not is_causal: every query sees every key (an encoder,
    cross-attention). An explicit mask, or attention written with matmuls, is not inspected:
    causal is assumed for prefill and the note says so. Decode (one query row) is the same either way.
    """
    fused = next((op for op in core if op.kind == "fused" and "is_causal" in op.attrs), None)
    if fused is not None and fused.attrs["is_causal"]:
        return True, None
    if fused is not None and not fused.attrs.get("has_mask"):
        return False, None
    if workload.q_len <= 1:
        return None, None
    if fused is not None and fused.attrs.get("mask_keys") is not None:
        return None, ("an explicit attention mask: only its widest row is read (for a window); model "
                      "FLOPs assume a causal mask")
    how = "an explicit attention mask" if fused is not None else "attention written with matmuls"
    return None, f"{how}: its values are not inspected; model FLOPs assume a causal mask"


def cost_and_notes(spec: AttentionSpec | None, aw: AttentionWorkload, causal_note: str | None,
                   host: PluginHost, kv_read: float, kv_reexpand_flops: float,
                   reexpand_modules: list[str], kv_repeat: float = 1.0) -> tuple[AttentionCost | None, list[str]]:
    """A layer's architecture cost at `aw` (its plugin's closed form) and the notes its row
    carries before the spec's own, from what its code read (`kv_read`, of which each distinct K/V
    element `kv_repeat` times: K/V repeated before the products) and re-computed."""
    notes = [causal_note] if causal_note else []
    cost = None
    if spec is not None:
        cost, _ = host.first(host.hook.rooflinekit_attention_cost, spec=spec, workload=aw)
        distinct = kv_read / max(kv_repeat, 1.0)  # a repeat_kv copy must not hide a window
        if cost is None:
            notes.append(f"no plugin costs arch '{spec.arch}': minimum bytes not attributed")
        elif not getattr(spec, "fixed_state", False) and distinct < 0.99 * cost.kv_bytes_min:
            notes.append(
                f"the attention read {ratio(distinct / cost.kv_bytes_min)}x the K/V minimum"
                f"{f' (its {ratio(kv_repeat)}x repeated K/V counted once)' if kv_repeat > 1 else ''}: it attends "
                f"fewer positions than the spec assumes (a sliding window or sparse pattern no "
                f"installed plugin models), so the minimum and model FLOPs over-state this layer"
            )
    else:
        notes.append("not recognised by any plugin: executed FLOPs and bytes counted, minimum not attributed")
    if kv_reexpand_flops:
        notes.append(
            f"K/V of all cached positions re-computed every step by {', '.join(reexpand_modules)}: "
            f"{si(kv_reexpand_flops, 'FLOP')} the architecture does not need (not in model FLOPs)"
        )
    return cost, notes


def attention_workload(workload: Workload, dtype: str, causal: bool | None,
                       deployment: Deployment | None = None,
                       shape: tuple[int, int, int] | None = None) -> AttentionWorkload:
    """What a layer's cost formula is asked at `workload`: q and output at the layer's `dtype`,
    cached elements at the deployment's KV cache format (or fp8 activations') size where one is
    given, else at `dtype`'s. `shape`: the (batch, q_len, context) the layer's calls ran at
    (AttentionSite.shape), which replaces the workload's."""
    itemsize = dtype_itemsize(dtype)
    given = (deployment or Deployment()).kv_itemsize(workload.dtype_key)
    batch, q_len, context = shape or (workload.batch, workload.q_len, workload.context)
    return AttentionWorkload(batch=batch, q_len=q_len, context=context, phase=workload.phase,
                             cache_itemsize=given or itemsize, act_itemsize=itemsize, causal=causal,
                             cache_format_given=given is not None)


def _call_shapes(core: list[OpRecord]) -> list[tuple[tuple, tuple]]:
    """(q shape, k shape) of each attention call among a site's ops: every fused call, else each QK^T
    product shaped as the site's first (a loop over sequences runs several); none where a PV product
    could have those shapes too (keys as many as the head dimension)."""
    fused = [(tuple(op.attrs["q_shape"]), tuple(op.attrs["k_shape"])) for op in core
             if op.kind == "fused" and "q_shape" in op.attrs]
    if fused:
        return fused
    # a site's core holds no product of a parameter: every product of two operands is one of activations
    products = [tuple(tuple(s) for s in op.attrs["operand_shapes"]) for op in core
                if op.kind != "fused" and is_attention_product(op, set())
                and len(op.attrs.get("operand_shapes") or ()) == 2]
    if not products or len(products[0][0]) < 3 or len(products[0][1]) < 3:
        return []
    q, kt = products[0]
    same = products.count(products[0])
    if kt[-2] != q[-1] or (same > 1 and kt[-1] == q[-1]):
        return []
    return [(q, (*kt[:-2], kt[-1], kt[-2]))] * same


def ran_shape(core: list[OpRecord], spec: AttentionSpec | None, workload: Workload,
              prefix: int = 0) -> tuple[int, int, int] | None:
    """(batch, q_len, context) a site's attention calls ran at, read from their shapes. With q laid
    out [B, H, L, E] (H the spec's heads) the queries are L and the sequences B, summed over the
    calls; any other layout ([B*H, L, E], heads folded into the rows) gives the query rows over the
    heads, split into sequences at the phase's queries per sequence (prefill: one per key; decode:
    the workload's q_len). The keys are k's length in prefill; in decode the workload's context
    (a cache shorter than it is a window, which a window plugin or the row's read note accounts
    for; one longer, padding). None for a fixed-state layer, calls over different key lengths, and
    rows that do not divide so. `prefix`: positions every sequence holds before its own tokens
    (`prefix_positions`), which a decode step's keys include."""
    heads = spec.num_heads if spec is not None and not getattr(spec, "fixed_state", False) else 0
    shapes = _call_shapes(core) if heads > 0 else []
    if not shapes or len({k[-2] for _, k in shapes}) != 1:
        return None
    context = shapes[0][1][-2] if workload.phase == "prefill" else workload.context + prefix
    if all(len(q) >= 4 and q[-3] == heads for q, _ in shapes) and len({q[-2] for q, _ in shapes}) == 1:
        q_len, batch = shapes[0][0][-2], sum(math.prod(q[:-3]) for q, _ in shapes)
    else:
        rows = sum(math.prod(q[:-1]) for q, _ in shapes)
        q_len = context if workload.phase == "prefill" else workload.q_len
        if rows % (heads * q_len):
            return None
        batch = rows // (heads * q_len)
    return (batch, q_len, context) if batch and q_len and context else None


def shape_note(shape: tuple[int, int, int] | None, workload: Workload) -> str | None:
    """A row's note when its calls ran at another shape than the workload says, else None."""
    if shape is None or shape == (workload.batch, workload.q_len, workload.context):
        return None
    batch, q_len, context = shape
    return (f"attention ran at batch {batch}, {q_len} queries over {context} keys per sequence (the "
            f"workload: batch {workload.batch}, {workload.q_len} over {workload.context}): its model "
            "FLOPs and minimum are costed at the shapes that ran")


def attribute_attention(
    cap: CaptureResult, model: torch.nn.Module, workload: Workload, host: PluginHost,
    deployment: Deployment | None = None,
) -> list[AttentionSite]:
    """One AttentionSite per attention site, in execution order; the architecture minimum costed
    at the deployment's KV cache format."""
    with stdout_to_stderr():  # plugins' prints: one redirect for all the hooks asked, not one per call
        return _attribute_attention(cap, model, workload, host, deployment or Deployment())


@dataclass(frozen=True)
class _KVTraffic:
    """What a site's code moved of its K/V cache (or state): the reads of its products, the copies on
    their path, the projections re-expanding cached positions, the dtype it is kept in, and how many
    times each distinct K/V head is repeated (one place for what the two kinds of site compute)."""

    read: float
    copy: float
    path: list[int]
    reexpand: list[OpRecord]
    reexpand_flops: float
    dtype: str
    repeat: float = 1.0


def _softmax_traffic(core: list[OpRecord], subtree: list[OpRecord], cap: CaptureResult, workload: Workload,
                     by_index: dict[int, OpRecord]) -> _KVTraffic:
    """A site's K/V traffic read from its attention products' operands and the ops that produced
    them: every site's first reading, which a fixed-state mixer's replaces."""
    sinks = kv_operands(core, cap.param_storages, workload.context)
    kv_path = _kv_path(subtree, sinks, cap.param_storages, workload.tokens)
    kv_read = sum(b for operands in sinks.values() for _, b in operands)
    kv_copy = sum(by_index[i].bytes - by_index[i].param_bytes for i in kv_path)
    # Projections on the K/V path over more rows than this step's new tokens re-compute
    # K/V of cached positions (transformers' MLA expands its latent cache every step).
    reexpand = [by_index[i] for i in kv_path if reexpanding(by_index[i], workload.tokens)]
    kv_reexpand_flops = sum(reexpanded_flops(op, workload.tokens) for op in reexpand)
    dtype = next((op.dtype for op in core if op.index in sinks), core[0].dtype if core else "bf16")
    return _KVTraffic(read=kv_read, copy=kv_copy, path=kv_path, reexpand=reexpand,
                      reexpand_flops=kv_reexpand_flops, dtype=dtype)


def _fixed_state_traffic(subtree: list[OpRecord], life: StorageLife, workload: Workload) -> _KVTraffic:
    """A fixed-state mixer's traffic: its cache is a state, what the code read of it and wrote into
    it (rooflinekit.stages.mixers), kept at the model's dtype whatever the code computes in."""
    kv_read, kv_copy, kv_path = state_traffic(subtree, life)
    return _KVTraffic(read=kv_read, copy=kv_copy, path=kv_path, reexpand=[], reexpand_flops=0.0,
                      dtype=workload.dtype)


def _with_unique_kv_heads(call: AttentionCall | None, core: list[OpRecord], kv_path: list[int],
                          by_index: dict[int, OpRecord]) -> AttentionCall | None:
    """The call with its distinct K/V heads when the code repeated them before a call that saw as
    many K/V heads as query heads (repeat_kv copies), else the call as it was."""
    if call is not None and call.kv_heads_unique is None and not call.enable_gqa \
            and call.k_shape[-3] == call.q_shape[-3]:
        factor = _repeat_factor(core, kv_path, by_index)
        heads = call.q_shape[-3] / factor if factor else 0
        if heads == int(heads) and 1 <= heads < call.q_shape[-3]:
            call = AttentionCall(**{**call.__dict__, "kv_heads_unique": int(heads)})
    return call


def _recognise(path: str, modules: dict, call: AttentionCall | None,
               host: PluginHost) -> tuple[AttentionSpec | None, str | None, list[str]]:
    """The spec a plugin gives a site and that plugin's name, and the modules asked (innermost
    first): the module itself, then up to two ancestors (a parameter-free core module inside an
    attention block), then the call alone."""
    spec, plugin = None, None
    candidates = [path]
    parts = path.split(".") if path else []
    for cut in (1, 2):
        if len(parts) > cut:
            candidates.append(".".join(parts[:-cut]))
    for candidate in candidates:
        mod = modules.get(candidate)
        if mod is None:
            continue
        spec, plugin = host.first(host.hook.rooflinekit_attention_spec, module=mod, path=candidate, call=call
        )
        if spec is not None:
            break
    if spec is None and call is not None:
        spec, plugin = host.first(host.hook.rooflinekit_attention_spec_from_call, call=call)
    if spec is not None and spec.plugin != plugin:
        spec = replace(spec, plugin=plugin)  # the plugin that recognised it, whatever the spec said
    return spec, plugin, candidates


#: The attribute through which a module declares the positions every sequence holds before its own
#: tokens (CPM-Ant's learned prompt, set by the transformers loader): a decode step's keys include them.
PREFIX_ATTR = "attention_prefix"


def prefix_positions(modules: dict, candidates: list[str]) -> int:
    """The PREFIX_ATTR the first of `candidates` (a site and its parents) declares, else 0."""
    for candidate in candidates:
        value = getattr(modules.get(candidate), PREFIX_ATTR, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _costed(spec: AttentionSpec | None, core: list[OpRecord], kv: _KVTraffic, workload: Workload,
            deployment: Deployment, host: PluginHost, prefix: int = 0
            ) -> tuple[AttentionCost | None, list[str], bool | None, tuple[int, int, int] | None]:
    """A site's architecture cost at the deployment and at the shapes its calls ran at, the notes it
    carries before its spec's, whether its FLOPs assumed causal attention, and those shapes."""
    causal, causal_note = causality(core, workload)
    if spec is not None and getattr(spec, "fixed_state", False):
        causal_note = None  # a recurrence is causal by construction: no mask to read
    shape = ran_shape(core, spec, workload, prefix)
    aw = attention_workload(workload, kv.dtype, causal, deployment, shape)
    cost, cost_notes = cost_and_notes(spec, aw, causal_note, host, kv.read, kv.reexpand_flops,
                                      sorted({op.module for op in kv.reexpand}), kv.repeat)
    note = shape_note(shape, workload)
    return cost, cost_notes + ([note] if note else []), causal, shape


def _site_row(path: str, module_class: str, spec: AttentionSpec | None, plugin: str | None,
              core: list[OpRecord], kv: _KVTraffic,
              costed: tuple[AttentionCost | None, list[str], bool | None, tuple[int, int, int] | None]
              ) -> AttentionSite:
    """The AttentionSite of one site, from what was recognised, costed and measured of it."""
    cost, cost_notes, causal, shape = costed
    return AttentionSite(
        module=path or "(root)",
        module_class=module_class,
        spec=spec,
        plugin=plugin,
        cost=cost,
        flops_executed=sum(op.flops for op in core),
        bytes_executed=sum(op.bytes for op in core),
        kv_bytes_executed=kv.read + kv.copy,
        kv_read_bytes=kv.read,
        kv_copy_bytes=kv.copy,
        kv_reexpand_flops=kv.reexpand_flops,
        causal=causal,
        dtype=kv.dtype,
        op_indices=[op.index for op in core],
        kv_op_indices=kv.path,
        notes=list(cost_notes) + list(spec.notes if spec else ()),
        shape=shape,
    )


def _attribute_attention(
    cap: CaptureResult, model: torch.nn.Module, workload: Workload, host: PluginHost, deployment: Deployment
) -> list[AttentionSite]:
    modules = cached(model, fact("modules"), lambda: dict(model.named_modules()))
    by_index = {op.index: op for op in cap.ops}
    rows = []
    sites = find_sites(cap)
    mixers = mixer_paths(model, host)
    if mixers:  # layers that keep a state may run no attention product: named by their plugins
        mixers = mixer_sites(mixers, sites, modules, host)
        sites = with_mixers(cap, sites, mixers)
    life: StorageLife | None = None
    subtrees = _subtrees(cap.ops, set(sites))
    for path, ops in sites.items():
        core = [op for op in ops if not is_projection(op)]
        subtree = subtrees.get(path, []) if path else cap.ops
        kv = _softmax_traffic(core, subtree, cap, workload, by_index)
        module = modules.get(path)
        module_class = type(module).__name__ if module is not None else "?"
        call = _call_for(path, module_class, core, cap.param_storages)
        call = _with_unique_kv_heads(call, core, kv.path, by_index)
        spec, plugin, candidates = _recognise(path, modules, call, host)
        if path in mixers and not getattr(spec, "fixed_state", False):
            host.warn(not_a_mixer(path, mixers[path], spec, plugin))
            continue
        if spec is not None and getattr(spec, "fixed_state", False):
            life = life or StorageLife.of(cap)
            kv = _fixed_state_traffic(subtree, life, workload)
        elif spec is not None:
            spec = _with_window(spec, host, modules, candidates, call, workload.context)
            if call is not None and call.kv_heads_unique and len(call.k_shape) >= 4:
                kv = replace(kv, repeat=call.k_shape[-3] / call.kv_heads_unique)
        costed = _costed(spec, core, kv, workload, deployment, host, prefix_positions(modules, candidates))
        rows.append(_site_row(path, module_class, spec, plugin, core, kv, costed))
    return rows


def _with_window(spec: AttentionSpec, host: PluginHost, modules: dict, candidates: list[str],
                 call: AttentionCall | None, context: int) -> AttentionSpec:
    """The spec with the window or chunk `rooflinekit_attention_window` gives, whatever its arch.

    Asked only when the recognising plugin set neither; for the candidate modules innermost first,
    until a plugin answers (0: full attention, nothing applied). The answer's plugin is named in a note.
    """
    if spec.window or spec.chunk:
        return spec
    for candidate in candidates:
        mod = modules.get(candidate)
        if mod is None:
            continue
        answer, plugin = host.first(host.hook.rooflinekit_attention_window, module=mod, path=candidate, call=call, spec=spec)
        if answer is None or isinstance(answer, bool):
            continue
        if isinstance(answer, int):
            answer = AttentionWindow(window=answer)
        window = answer.window if isinstance(answer.window, int) and answer.window > 0 else None
        chunk = answer.chunk if isinstance(answer.chunk, int) and answer.chunk > 0 else None
        if window is None and chunk is None:
            return spec  # full attention, as the plugin says
        notes = list(answer.notes)
        if not notes:
            what = f"sliding window of {window}" if window else f"chunked attention, chunks of {chunk}"
            notes.append(f"{what} positions")
        notes[0] += f" [plugin '{plugin}']"
        limit = min(x for x in (window, chunk) if x)
        if limit >= context:
            notes.append(f"the {'window' if window else 'chunk'} ({limit}) is not below the context "
                         f"({context}): every position is attended, no number changes")
        return replace(spec, window=window, chunk=chunk, notes=spec.notes + tuple(notes))
    return spec
