"""Fixed-size states: the cost and tensor-parallel split shared by layers that keep one.

Recurrent, SSM, linear-attention and short-convolution layers read and write a state of a fixed
size per sequence instead of a K/V cache that grows with context. Nothing here names an
architecture: a plugin describes its layer by a few numbers in the spec's `extra` (`STATE_KEYS`)
and `state_cost` turns them into an `AttentionCost` with the same meaning for every family:

- `cache_bytes_per_sequence`: the state (`state_elements` at `state_itemsize`, or the cache's
  element size) plus the convolution state (`conv_elements`, the last kernel-1 inputs per channel,
  at the cache's element size);
- `kv_bytes_min`: that state read once (when the step has a past) and written once, per sequence;
- `bytes_min`: plus the recurrence's inputs read and output written once (`io_per_token`);
- `flops_model`: `flops_per_token` per new token (the plugin's count of the recurrence, stated in
  its notes); projections and the convolution are counted where they run.
"""

from __future__ import annotations

from dataclasses import replace

from rooflinekit.core.errors import UserError
from rooflinekit.core.specs import AttentionCost, AttentionShard, AttentionSpec, AttentionWorkload

#: The `extra` keys `state_cost` reads (per sequence and layer; per new token).
STATE_KEYS = ("state_elements", "conv_elements", "flops_per_token", "io_per_token")
#: Keys scaled by 1/N when the heads split N ways (`split_state`).
SPLIT_KEYS = STATE_KEYS


def state_spec(arch: str, heads: int, groups: int, rows: int, cols: int, *, state_elements: float,
               conv_elements: float, flops_per_token: float, io_per_token: float,
               state_itemsize: int | None = None, notes: tuple[str, ...] = (), **sizes) -> AttentionSpec:
    """The spec of a fixed-state layer: `heads` state heads of `rows` x `cols` (the spec's heads,
    `head_dim` and `v_head_dim`), `groups` shared key/input groups (its K/V heads), the numbers
    `state_cost` reads, and the family's own sizes (`sizes`) for the report's `extra`."""
    extra = {**sizes, "state_elements": state_elements, "conv_elements": conv_elements,
             "flops_per_token": flops_per_token, "io_per_token": io_per_token}
    if state_itemsize:
        extra["state_itemsize"] = state_itemsize
    return AttentionSpec(arch=arch, num_heads=heads, num_kv_heads=groups, head_dim=rows, v_head_dim=cols,
                         extra=extra, notes=notes, fixed_state=True)


def state_cost(spec: AttentionSpec, workload: AttentionWorkload) -> AttentionCost:
    """The cost of one fixed-state layer for one step (see the module docstring)."""
    x = spec.extra
    state_item = x.get("state_itemsize") or workload.cache_itemsize
    per_sequence = x["state_elements"] * state_item + x["conv_elements"] * workload.cache_itemsize
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
