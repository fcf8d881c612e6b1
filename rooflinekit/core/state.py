"""Fixed-size states: the cost and tensor-parallel split shared by layers that keep one.

Recurrent, SSM, linear-attention and short-convolution layers read and write a state of a fixed
size per sequence instead of a K/V cache that grows with context. Nothing here names an
architecture: a plugin describes its layer by a few numbers in the spec's `extra` (`STATE_KEYS`)
and `state_cost` turns them into an `AttentionCost` with the same meaning for every family:

- `cache_bytes_per_sequence`: the state (`state_elements` at `state_itemsize`) plus the
  convolution state (`conv_elements`, the last inputs per channel, at `conv_itemsize`), each at the
  element size the code keeps it at, the layer's dtype where the plugin gives none; a cache format
  the deployment sets (`--kv-dtype`, fp8 activations: `AttentionWorkload.cache_format_set`)
  replaces both;
- `kv_bytes_min`: that state read once (when the step has a past) and written once, per sequence;
- `bytes_min`: plus the recurrence's inputs read and output written once (`io_per_token`);
- `flops_model`: `flops_per_token` per new token (the plugin's count of the recurrence, stated in
  its notes); projections and the convolution are counted where they run.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from rooflinekit.core.errors import UserError
from rooflinekit.core.specs import AttentionCost, AttentionShard, AttentionSpec, AttentionWorkload

#: The `extra` keys `state_cost` reads (per sequence and layer; per new token).
STATE_KEYS = ("state_elements", "conv_elements", "flops_per_token", "io_per_token")
#: Keys scaled by 1/N when the heads split N ways (`split_state`).
SPLIT_KEYS = STATE_KEYS
#: The attribute through which a module (or the loader that built it) declares the state tensors
#: its code keeps per sequence: a sequence of (role, shape without the batch, dtype), role
#: "recurrent" or "conv", dtype a torch dtype or an element size in bytes (`with_kept_state`).
STATE_ATTR = "rooflinekit_state_tensors"


@dataclass(frozen=True)
class StateCounts:
    """The numbers `state_cost` reads of a fixed-state layer: per sequence and layer, the elements
    of its state and of its convolution state; per new token, the recurrence's FLOPs and the
    elements of its inputs and output; the bytes per element the code keeps each state at (None:
    the layer's dtype)."""

    state_elements: float
    conv_elements: float
    flops_per_token: float
    io_per_token: float
    state_itemsize: float | None = None
    conv_itemsize: float | None = None


#: The `StateCounts` fields `state_spec` took as keywords before 0.3 (accepted with a warning until 0.4).
_COUNT_FIELDS = ("state_elements", "conv_elements", "flops_per_token", "io_per_token", "state_itemsize",
                 "conv_itemsize")


def state_spec(arch: str, heads: int, groups: int, rows: int, cols: int, counts: StateCounts | None = None, *,
               notes: tuple[str, ...] = (), **sizes) -> AttentionSpec:
    """The spec of a fixed-state layer: `heads` state heads of `rows` x `cols` (the spec's heads,
    `head_dim` and `v_head_dim`), `groups` shared key/input groups (its K/V heads), the numbers
    `state_cost` reads (`counts`), and the family's own sizes (`sizes`) for the report's `extra`.

    Deprecated since 0.3, until 0.4: the counts as keywords (`state_elements=`, ...) instead of
    `counts`, with a DeprecationWarning."""
    if counts is None:
        counts = _counts_from_keywords(sizes)
    extra = {**sizes, "state_elements": counts.state_elements, "conv_elements": counts.conv_elements,
             "flops_per_token": counts.flops_per_token, "io_per_token": counts.io_per_token}
    if counts.state_itemsize:
        extra["state_itemsize"] = counts.state_itemsize
    if counts.conv_itemsize:
        extra["conv_itemsize"] = counts.conv_itemsize
    return AttentionSpec(arch=arch, num_heads=heads, num_kv_heads=groups, head_dim=rows, v_head_dim=cols,
                         extra=extra, notes=notes, fixed_state=True)


def _counts_from_keywords(sizes: dict) -> StateCounts:
    """The `StateCounts` of a call in the form before 0.3, taken out of `sizes` (warns)."""
    missing = [f for f in _COUNT_FIELDS[:4] if f not in sizes]
    if missing:
        raise TypeError(f"state_spec() missing argument 'counts' (a StateCounts), or keyword {missing[0]!r}")
    warnings.warn("state_spec(..., state_elements=, conv_elements=, flops_per_token=, io_per_token=, ...) is "
                  "deprecated since rooflinekit 0.3: pass state_spec(..., StateCounts(...))", DeprecationWarning,
                  stacklevel=3)
    return StateCounts(**{f: sizes.pop(f) for f in _COUNT_FIELDS if f in sizes})


def _itemsize(dtype: object) -> float:
    """Bytes per element of a torch dtype (its `itemsize`), or the number given."""
    size = getattr(dtype, "itemsize", dtype)
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        raise ValueError(f"not a dtype or an element size: {dtype!r}")
    return float(size)


def _elements(shape: object) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def kept_state(module: object) -> dict[str, float] | None:
    """`state_elements`, `state_itemsize`, `conv_elements`, `conv_itemsize` of the state tensors
    `module` declares its code keeps per sequence (`STATE_ATTR`), or None when it declares none (or
    something unreadable). Several tensors of one role add up, at their mean element size."""
    tensors = getattr(module, STATE_ATTR, None)
    if not tensors:
        return None
    totals = {"recurrent": [0, 0.0], "conv": [0, 0.0]}
    try:
        for role, shape, dtype in tensors:
            n = _elements(shape)
            totals[role][0] += n
            totals[role][1] += n * _itemsize(dtype)
    except (KeyError, TypeError, ValueError):
        return None
    (sn, sb), (cn, cb) = totals["recurrent"], totals["conv"]
    return {"state_elements": sn, "state_itemsize": sb / sn if sn else None,
            "conv_elements": cn, "conv_itemsize": cb / cn if cn else None}


def _words(tensors) -> str:
    return ", ".join(f"{role} {'x'.join(str(int(d)) for d in shape)} {str(dtype).replace('torch.', '')}"
                     for role, shape, dtype in tensors)


def with_kept_state(spec: AttentionSpec, module: object) -> AttentionSpec:
    """`spec` with its state's elements and element sizes those of the tensors `module`'s code
    keeps (`kept_state`: the transformers loader declares them from the cache a one-token run
    filled), and a note naming them; `spec` as it is where the module declares none."""
    kept = kept_state(module)
    if kept is None or spec is None:
        return spec
    extra = {k: v for k, v in spec.extra.items() if k not in ("state_itemsize", "conv_itemsize")}
    extra.update({k: v for k, v in kept.items() if v is not None})
    note = f"state per sequence as the code keeps it: {_words(getattr(module, STATE_ATTR))}"
    return replace(spec, extra=extra, notes=tuple(spec.notes) + (note,))


def state_cost(spec: AttentionSpec, workload: AttentionWorkload) -> AttentionCost:
    """The cost of one fixed-state layer for one step (see the module docstring)."""
    x = spec.extra
    given = getattr(workload, "cache_format_set", False)
    state_item = workload.cache_itemsize if given else (x.get("state_itemsize") or workload.cache_itemsize)
    conv_item = workload.cache_itemsize if given else (x.get("conv_itemsize") or workload.cache_itemsize)
    per_sequence = x["state_elements"] * state_item + x["conv_elements"] * conv_item
    b, tokens = workload.batch, workload.q_len
    past = workload.context > workload.q_len
    passes = 2 if past else 1  # read the state the step starts from (if any), write the one it ends with
    kv_min = b * per_sequence * passes
    io = b * tokens * x["io_per_token"] * workload.act_itemsize
    notes = (f"fixed state of {per_sequence:.6g} B per sequence (does not grow with context): "
             f"{'read and written' if past else 'written'} once per step as the minimum",)
    return AttentionCost(flops_model=b * tokens * x["flops_per_token"], kv_bytes_min=kv_min,
                         bytes_min=kv_min + io, cache_bytes_per_token=0.0,
                         cache_bytes_per_sequence=per_sequence, notes=notes)


def split_state(spec: AttentionSpec, tp: int) -> AttentionShard:
    """A fixed-state layer under tensor parallelism N: its heads (and with them the state, the
    convolution channels, the FLOPs and the inputs) split N ways. Raises UserError when N does not
    divide the heads."""
    h, g = spec.num_heads, spec.num_kv_heads
    if h % tp:
        raise UserError(f"--tp {tp} does not divide the {h} state heads of a {spec.arch} layer")
    groups = g // tp if g >= tp and g % tp == 0 else 1
    extra = dict(spec.extra)
    for key in SPLIT_KEYS:
        if key in extra:
            extra[key] = extra[key] / tp
    note = (f"TP {tp}: {h // tp} of {h} state heads per GPU, the state, convolution channels and "
            f"recurrence split with them")
    return AttentionShard(spec=replace(spec, num_heads=h // tp, num_kv_heads=groups, extra=extra,
                                       notes=tuple(spec.notes) + (note,)),
                          kv="state split", note=note)
