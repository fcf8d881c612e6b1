"""Mixed steps (chunked prefill): a decode step model's step with a share of one prompt's prefill
model's, each kernel the two phases run at one place merged into one kernel, priced as the mean over
contexts (mixed_mean) and bounded (mixed_mean_bound) as `profile --mix` prices one such step."""

from __future__ import annotations

import math
from dataclasses import replace

from rooflinekit.stages.fitting import FitError
from rooflinekit.stages.kernel_times import TOKEN_DIMS, KernelQuery
from rooflinekit.stages.linesum import max_linear_sum
from rooflinekit.stages.stepmodel import KernelGroup, StepModel, _kernel_time


def mixed_mean(decode: StepModel, prefill: StepModel, batch: int, start: int, stop: int, share: float, *,
               layer_share: float = 1.0, outside: bool = True) -> float:
    """The exact mean over contexts start <= S < stop of a mixed step: `decode` at (batch, S) and
    `share` of one prompt's prefill (`prefill` at its first design point, batch 1: a chunk of
    share x its tokens), each kernel the two phases run at the same place merged into one kernel
    (FLOPs and activation bytes added, the prompt's weight reads dropped: the step reads the weights
    once; the merged kernel keeps the decode kernel's class, as a `profile --mix` record does), the
    prefill's other kernels at `share` of their time, collectives' messages added."""
    if decode.two_batch(batch):
        if share:
            raise FitError("a mixed step (chunked prefill) is not priced with two-batch overlap")
        return decode._mean_two(batch, start, max(stop, start + 1), layer_share, outside)
    d = decode._at(batch)
    p = prefill._at(1)
    # under measured kernel times, each kernel's time is read at the middle context (as mean_expected)
    mid = (start + max(stop, start + 1) - 1) // 2 if decode.table().times() is not None else None
    # a layer that runs a prompt's chunk beside the decode groups is no one measured layer (as
    # `profile --mix` prices it): its records are asked as their own kernels
    rows, prefill_time, prefill_launch = _mixed_table(d, p, batch, start, layer_share, outside, mid, not share)
    launch = decode.table().launch_s(decode.phase)
    n = max(1, stop - start)
    total = 0.0
    tail = (n - 1) * n / 2  # sum of i over 0..n-1
    for weight, a, da, c, dc, pa, pc, work in rows:
        # max_linear_sum(a + share * pa, da, c + share * pc, dc, n), inlined (the search's inner loop)
        a += share * pa
        c += share * pc
        if da == dc:
            summed = (a if a > c else c) * n + da * tail
        else:
            cross = (c - a) / (da - dc)
            split = 0 if cross <= 0 else n if cross >= n else math.ceil(cross)
            lo, lq, hi, hq = (a, da, c, dc) if da < dc else (c, dc, a, da)  # below the crossing: the smaller slope
            summed = (lo * split + lq * (split - 1) * split / 2 if split > 0 else 0.0) + \
                     (hi * (n - split) + hq * (split + n - 1) * (n - split) / 2 if n > split else 0.0)
        if work or (share and (pa > 0 or pc > 0)):
            summed += launch * n
        total += weight * summed
    if share:
        total += n * (share * prefill_time + prefill_launch)
    v0 = d._values(batch, start)
    pv = p._values(1, p.design.contexts[0])
    total += n * _mixed_calls(d, p, v0, pv, share, layer_share, outside)
    return total / n


def _mixed_table(d: StepModel, p: StepModel, batch: int, start: int, layer_share: float, outside: bool,
                 mid: int | None = None, layers: bool = True) -> tuple:
    """mixed_mean's per-kernel terms, which do not depend on the prompt's share or the contexts'
    count (kept on the decode model): per decode kernel (weight, FLOP time at `start` and its slope,
    byte time and slope, the merged prefill kernel's FLOP and activation-byte times, whether it
    works), and the prefill's own kernels' time and launches per unit of share. With `mid`
    (measured kernel times), the decode kernels' rates are those measured at that context and a
    merged kernel's prompt work runs at the prompt kernel's own measured rate; without `layers`, a
    measured layer's records are asked as their own kernels (StepModel._classes)."""
    return _kept(d, ("mixed", id(p), batch, start, layer_share, outside, mid, layers), p,
                 lambda: _build_mixed_table(d, p, batch, start, layer_share, outside, mid, layers))


def _kept(d: StepModel, key: tuple, p: StepModel, build) -> tuple:
    """`build()`'s terms kept on `d` under `key` (which names `p` by id: checked to be `p`)."""
    memo = d._memo.get(key)
    if memo is None or memo[0] is not p:
        memo = d._memo[key] = (p, build())
    return memo[1]


def _build_mixed_table(d: StepModel, p: StepModel, batch: int, start: int, layer_share: float,
                       outside: bool, mid: int | None = None, layers: bool = True) -> tuple:
    v0, v1 = d._values(batch, start), d._values(batch, start + 1)
    pv = p._values(1, p.design.contexts[0])
    table = d.table()
    launch = table.launch_s(d.phase)
    hw = d.hw
    merged = {k.key: k for k in p.kernels}
    prompt_rates = {}  # measured times: each prompt kernel's own rates (by key)
    if mid is not None:
        prompt_rates = {q.key: (frac.compute_for(q.dtype) * hw.peak(q.dtype), frac.bandwidth_for(q.dtype) *
                                hw.memory_bandwidth) for q, frac in zip(p.kernels, p._classes(pv, table, layers=layers),
                                                                     strict=True)}
    rows = []
    rates: dict[tuple[int, str], tuple[float, float]] = {}
    # the decode kernel's class, as `profile --mix` classes a merged record
    for k, frac in zip(d.kernels, d._classes(v0 if mid is None else d._values(batch, mid), table, layers=layers),
                       strict=True):
        scale = layer_share if k.in_layers else (1.0 if outside else 0.0)
        if not scale:
            continue
        rate = rates.get((id(frac), k.dtype))
        if rate is None:
            rate = rates[(id(frac), k.dtype)] = (frac.compute_for(k.dtype) * hw.peak(k.dtype),
                                                  frac.bandwidth_for(k.dtype) * hw.memory_bandwidth)
        compute, traffic = rate
        f0, b0 = v0[k.flops], v0[k.nbytes]
        df, db = v1[k.flops] - f0, v1[k.nbytes] - b0
        q = merged.get(k.key)
        p_compute, p_traffic = prompt_rates.get(k.key, rate)
        pa = pv[q.flops] / p_compute if q is not None else 0.0
        pc = (pv[q.nbytes] - pv[q.params]) / p_traffic if q is not None else 0.0
        rows.append((scale * k.count, f0 / compute, df / compute, b0 / traffic, db / traffic, pa, pc,
                     f0 > 0 or b0 > 0 or df > 0 or db > 0))
    used = {k.key for k in d.kernels}
    prefill_time = prefill_launch = 0.0
    for q, frac in zip(p.kernels, p._classes(pv, table, layers=layers), strict=True):
        scale = layer_share if q.in_layers else (1.0 if outside else 0.0)
        if q.key in used or not scale:
            continue
        f, b = pv[q.flops], pv[q.nbytes]
        if f <= 0 and b <= 0:
            continue
        prefill_time += scale * q.count * _kernel_time(f, b, hw, frac, q.dtype)
        prefill_launch += scale * q.count * launch
    return rows, prefill_time, prefill_launch


def mixed_mean_bound(decode: StepModel, prefill: StepModel, batch: int, start: int, stop: int, share: float, *,
                     layer_share: float = 1.0, outside: bool = True) -> float:
    """The exact mean over contexts start <= S < stop of the time bound of the mixed step that
    `mixed_mean` prices: the step's FLOPs at peak, its bytes at bandwidth or its collectives'
    bounds (constant in the context), whichever is largest, with the same kernels, shares and
    weights read once (so it is never above `mixed_mean`)."""
    d = decode._at(batch)
    p = prefill._at(1)
    f0, f1, b0, b1, pf, pb = _bound_sums(d, p, batch, start, layer_share, outside)
    n = max(1, stop - start)
    f0, f1, b0, b1 = f0 + share * pf, f1 + share * pf, b0 + share * pb, b1 + share * pb
    compute, traffic = decode.hw.peak(decode.dtype), decode.hw.memory_bandwidth
    comm = _mixed_calls(d, p, d._values(batch, start), p._values(1, p.design.contexts[0]), share, layer_share,
                        outside, which=1) if d.calls or (share and p.calls) else 0.0
    return max_linear_sum(f0 / compute, (f1 - f0) / compute, b0 / traffic, (b1 - b0) / traffic, n, comm) / n


def _bound_sums(d: StepModel, p: StepModel, batch: int, start: int, layer_share: float, outside: bool) -> tuple:
    """mixed_mean_bound's sums: the decode step's FLOPs and bytes at `start` and `start + 1`, and a
    whole prompt's FLOPs and bytes beside them (its merged kernels' weights not read again)."""
    return _kept(d, ("bound", id(p), batch, start, layer_share, outside), p,
                 lambda: _build_bound_sums(d, p, batch, start, layer_share, outside))


def _build_bound_sums(d: StepModel, p: StepModel, batch: int, start: int, layer_share: float,
                      outside: bool) -> tuple:
    v0, v1 = d._values(batch, start), d._values(batch, start + 1)
    pv = p._values(1, p.design.contexts[0])

    def scale(group) -> float:
        return layer_share if group.in_layers else (1.0 if outside else 0.0)

    f0 = f1 = b0 = b1 = pf = pb = 0.0
    for g in (*d.kernels, *d.calls):
        f0, f1 = f0 + scale(g) * g.count * v0[g.flops], f1 + scale(g) * g.count * v1[g.flops]
        b0, b1 = b0 + scale(g) * g.count * v0[g.nbytes], b1 + scale(g) * g.count * v1[g.nbytes]
    merged = {k.key for k in d.kernels}
    for g in (*p.kernels, *p.calls):
        once = g.params if isinstance(g, KernelGroup) and g.key in merged else None
        pf += scale(g) * g.count * pv[g.flops]
        pb += scale(g) * g.count * (pv[g.nbytes] - (pv[once] if once is not None else 0.0))
    return f0, f1, b0, b1, pf, pb


def _merged_query(decode: KernelQuery | None, prompt: KernelQuery | None, share: float) -> KernelQuery | None:
    """A declared call's shape in a mixed step: the decode call's with `share` of the prompt call's
    tokens added; None where either declares none or the two are not of one kernel."""
    name = TOKEN_DIMS.get(decode.kind) if decode is not None else None
    if name is None or prompt is None or prompt.kind != decode.kind or decode.get(name) is None \
            or prompt.get(name) is None:
        return None
    dims = {**dict(decode.dims), name: decode[name] + share * prompt[name]}
    return replace(decode, dims=tuple(dims.items()))


def _mixed_calls(d: StepModel, p: StepModel, v0: list[float], pv: list[float], share: float, layer_share: float,
                 outside: bool, which: int = 0) -> float:
    """One mixed step's collectives: each decode call's message plus `share` of the prefill's call
    of the same kind and place (matched by kind, group size, count and layer), else its own."""
    spare = {}
    for c in p.calls:
        spare.setdefault((c.collective, c.group_size, c.count, c.in_layers), []).append(c)
    total = 0.0
    for c in d.calls:
        scale = layer_share if c.in_layers else (1.0 if outside else 0.0)
        if not scale:
            continue
        twins = spare.get((c.collective, c.group_size, c.count, c.in_layers))
        twin = twins.pop(0) if twins and share else None
        message = v0[c.message] + (share * pv[twin.message] if twin is not None else 0.0)
        # a call that declares its shape is asked at the decode step's, a merged one at both steps'
        # tokens (the prompt's share of its own), as `profile --mix` asks its merged record
        asked = None if twin is None else _merged_query(c.query_at(v0), twin.query_at(pv), share)
        total += scale * c.count * d._call(c, message, v0 if twin is None else None, asked=asked)[which]
    if share:
        for rest in spare.values():
            for c in rest:
                scale = layer_share if c.in_layers else (1.0 if outside else 0.0)
                total += scale * c.count * p._call(c, share * pv[c.message])[which]
    return total
