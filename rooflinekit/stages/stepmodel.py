"""Step models: one deployment's step as exact polynomials per kernel, priced at any batch and context.

A step model is built (rooflinekit.stages.stepbuild) from the transformed op records of a few
captures (design points in batch and context, repeated layers skipped): identical kernels are
grouped, each group holding its count
and exact polynomials (rooflinekit.stages.fitting.Design) for FLOPs, bytes, parameter bytes and output
rows, and each collective call its message bytes. Pricing a point then costs one pass over the
groups (tens, not thousands of ops), with the same rules as a report's totals:

- `expected(B, S)` equals `totals.expected_step_s` of a profile at (B, S): each kernel at its
  class's achievable fractions (rooflinekit.stages.expected) or its measured time, a launch per
  kernel (in prefill the host's issue time where that is longer), collectives at their expected
  per-call cost;
- `bound(B, S)` equals `totals.time_bound_s`: the whole step's FLOPs and bytes at peak and
  bandwidth (perfect overlap);
- `mean_expected(B, S0, S1)` is the exact mean of `expected` over every context S0 <= S < S1 in
  decode, where each kernel's FLOPs and bytes are linear in S: the sum of each kernel's larger of
  two linear terms is summed in closed form on each side of their crossing.

A model whose counts are not polynomial in batch (a module model such as the MoE expected load)
is built per batch: `StepModel.batches` lists the batches it holds and only those are priced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rooflinekit.core.experts import expected_distinct_experts
from rooflinekit.stages import collectives
from rooflinekit.stages.efficiency_curve import micro_batch_size
from rooflinekit.stages.efficiency_table import EfficiencyTable, Fractions, table_for
from rooflinekit.stages.expected import (
    classify,
    expert_fractions,
    halved,
    runs_two_batches,
    weight_fractions,
)
from rooflinekit.stages.fitting import Design, FitError
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.kernel_times import KernelQuery, hold_shares, measured_time, whole
from rooflinekit.stages.kernel_times import answered as answered_query
from rooflinekit.stages.linesum import first_true, max_linear_sum, two_lines

#: The fractions of a kernel whose work another record's measured kernel holds: any work at no time.
INSIDE = Fractions(math.inf, math.inf)


def query_at(spec: tuple | None, values: list[float]) -> KernelQuery | None:
    """A group's query ((kind, variant, dtype, ((dimension, poly index), ...), the fallback's spec or
    None)) at `values`."""
    if spec is None:
        return None
    kind, variant, dtype, dims, fallback = spec
    return KernelQuery(kind, dtype, tuple((name, values[i]) for name, i in dims), variant, query_at(fallback, values))


@dataclass(frozen=True)
class KernelGroup:
    """`count` identical kernels: their polynomials (indices into the design's) and what decides
    their class; `key` names the kernel within its layer, for merging two phases' groups."""

    count: int
    name: str
    kind: str
    dtype: str
    attention: bool
    flops: int
    nbytes: int
    params: int
    rows: int | None  # output rows of a matrix product, a fused attention's query length, else None
    key: tuple
    in_layers: bool
    #: what a database of measured kernels is asked (rooflinekit.stages.kernel_times): (kind, variant,
    #: dtype, ((dimension, poly index), ...)); None where the kernel declares no shape
    query: tuple | None = None
    #: the weight matrix its kernel reads (expected.kernel_weights: a merged sibling GEMM's summed), a poly index
    weights: int | None = None

    def query_at(self, values: list[float]) -> KernelQuery | None:
        """The kernel's query at `values`."""
        return query_at(self.query, values)


@dataclass(frozen=True)
class CallGroup:
    """`count` collective calls of one kind over `group_size` GPUs, each of `message` bytes (a poly)."""

    count: int
    collective: str
    group_size: int
    message: int
    flops: int
    nbytes: int
    in_layers: bool
    copies: int = 0  # an expert-parallel all-to-all's routing (collectives.per_node_factor)
    experts: int = 0
    #: what a database of measured kernels is asked, as KernelGroup.query; None where none is declared
    query: tuple | None = None

    def query_at(self, values: list[float]) -> KernelQuery | None:
        """The call's query at `values`."""
        return query_at(self.query, values)


@dataclass
class StepModel:
    """One deployment's step (phase, q_len, kernels view, formats, parallel degrees) on `hw`."""

    phase: str
    design: Design
    kernels: list[KernelGroup]
    calls: list[CallGroup]
    hw: HardwareSpec
    dtype: str
    #: Batches the model holds; None: every batch (the counts are polynomial in batch).
    batches: tuple[int, ...] | None = None
    per_batch: dict[int, StepModel] = field(default_factory=dict)
    layers: int = 1  # the repeated layers the kernels in layers stand for (for pipeline stages)
    #: Values past the design's polynomials: (poly of the rest, poly of the tokens routed, bytes
    #: per expert, k, E, share, redundant copies), each rest + bytes x E(1-(1-k/E)^T) x share (an
    #: MoE record's weights follow the expected distinct experts; rooflinekit.stages.modelled.emit)
    extras: tuple[tuple[int, int, float, float, float, float, int], ...] = ()
    #: How the expected step overlaps collectives with kernels (Deployment.overlap): "two-batch"
    #: prices two micro-batches, as rooflinekit.stages.expected.expected_step does
    overlap: str = "none"
    #: Terms of mixed steps kept per (prefill model, batch, start, shares) (mixed_mean)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # -- pricing one point --

    def _values(self, batch: int, context: int) -> list[float]:
        key = ("values", batch, context)
        values = self._memo.get(key)
        if values is None:
            values = self.design.values(batch, context)
            if self.extras:
                values = values + [values[rest] + per * expected_distinct_experts(values[tokens], k, experts, redundant)
                                   * share for rest, tokens, per, k, experts, share, redundant in self.extras]
            else:
                values = list(values)
            if len(self._memo) > 20000:
                self._memo.clear()
            self._memo[key] = values
        return values

    def table(self) -> EfficiencyTable:
        """The efficiency table of `hw`, looked up once per model (pricing's inner loop asks often)."""
        found = self._memo.get("table")
        if found is None:
            found = self._memo["table"] = table_for(self.hw)
        return found

    def _at(self, batch: int) -> StepModel:
        if self.batches is None:
            return self
        try:
            return self.per_batch[batch]
        except KeyError:
            raise FitError(f"batch {batch} was not captured for this step model") from None

    def expected(self, batch: int, context: int, *, layer_share: float = 1.0, outside: bool = True) -> float:
        """The expected step at (batch, context) (`totals.expected_step_s`); `layer_share` of the
        layers' kernels and calls, the rest only with `outside` (one pipeline stage's share)."""
        key = ("expected", batch, context, layer_share, outside)
        found = self._memo.get(key)
        if found is None:
            m = self._at(batch)
            values = m._values(batch, context)
            if self.two_batch(batch):
                found = max(m._two_streams(values, layer_share, outside))
            else:
                found = m._priced(values, layer_share, outside)
            self._memo[key] = found
        return found

    def two_batch(self, batch: int) -> bool:
        """Whether a step of `batch` sequences runs as two micro-batches (expected.runs_two_batches)."""
        return runs_two_batches(self.overlap, self.phase, batch)

    def _priced(self, values: list[float], layer_share: float = 1.0, outside: bool = True) -> float:
        table = self.table()
        total = kernels = 0.0
        for k, frac in zip(self.kernels, self._classes(values, table), strict=True):
            share = layer_share if k.in_layers else (1.0 if outside else 0.0)
            if not share:
                continue
            f, b = values[k.flops], values[k.nbytes]
            if f <= 0 and b <= 0:
                continue
            total += share * k.count * _kernel_time(f, b, self.hw, frac, k.dtype)
            kernels += share * k.count
        for c in self.calls:
            share = layer_share if c.in_layers else (1.0 if outside else 0.0)
            if share:
                total += share * c.count * self._call(c, values[c.message], values)[0]
        return total + table.launches_s(self.phase, kernels, total)

    def _two_streams(self, values: list[float], layer_share: float = 1.0, outside: bool = True) -> tuple[float, float]:
        """(kernels with launches, collectives) of two micro-batches at `values`: each kernel twice at
        half the tokens, weights read whole (expected.halved), each call twice at half its message."""
        table = self.table()
        kernels = calls = count = 0.0
        for k, frac in zip(self.kernels, self._classes(values, table, micro=True), strict=True):
            share = layer_share if k.in_layers else (1.0 if outside else 0.0)
            f, b = values[k.flops], values[k.nbytes]
            if not share or (f <= 0 and b <= 0):
                continue
            hf, hb = halved(f, b, values[k.params], self._half_weights(k, values))
            kernels += share * k.count * 2 * _kernel_time(hf, hb, self.hw, frac, k.dtype)
            count += share * k.count * 2
        for c in self.calls:
            share = layer_share if c.in_layers else (1.0 if outside else 0.0)
            if share:
                calls += share * c.count * 2 * self._call(c, values[c.message] / 2, values, half=True)[0]
        return kernels + table.launches_s(self.phase, count, kernels), calls

    def _half_weights(self, k: KernelGroup, values: list[float]) -> float | None:
        """An MoE kernel's weight bytes at half its tokens (its extras slot's distinct experts at
        T/2, as expected.half_expert_weights); None for a kernel whose weights do not follow them."""
        j = k.params - (len(values) - len(self.extras))
        if j < 0:
            return None
        _, tokens, per, top_k, experts, share, redundant = self.extras[j]
        return per * expected_distinct_experts(values[tokens] / 2, top_k, experts, redundant) * share

    def _mean_two(self, batch: int, start: int, stop: int, layer_share: float = 1.0, outside: bool = True) -> float:
        """The exact mean of the two-batch step over contexts start <= S < stop: the kernels' stream
        K(S) is a sum of maxima of lines (convex), the collectives' C constant in S, so max(K, C)
        sums as K plus (C - K) over the one run of contexts where K < C."""
        m = self._at(batch)
        v0, v1 = m._values(batch, start), m._values(batch, start + 1)
        table = self.table()
        launch = table.launch_s(self.phase)
        lines, fixed = [], 0.0
        for k, frac in zip(m.kernels, m._classes(m._fractions_at(batch, start, stop, v0), table, micro=True),
                           strict=True):
            share = layer_share if k.in_layers else (1.0 if outside else 0.0)
            if not share:
                continue
            f0 = halved(v0[k.flops], v0[k.nbytes], v0[k.params], m._half_weights(k, v0))
            f1 = halved(v1[k.flops], v1[k.nbytes], v1[k.params], m._half_weights(k, v1))
            compute = frac.compute_for(k.dtype) * self.hw.peak(k.dtype)
            traffic = frac.bandwidth_for(k.dtype) * self.hw.memory_bandwidth
            w = 2 * share * k.count
            lines.append((w, f0[0] / compute, (f1[0] - f0[0]) / compute, f0[1] / traffic, (f1[1] - f0[1]) / traffic))
            if v0[k.flops] > 0 or v0[k.nbytes] > 0 or v1[k.flops] > 0 or v1[k.nbytes] > 0:
                fixed += w * launch
        _, calls = m._two_streams(v0, layer_share, outside)
        n = max(1, stop - start)

        def at(i: int) -> float:
            return fixed + sum(w * max(a + b * i, c + d * i) for w, a, b, c, d in lines)

        def summed(lo: int, hi: int) -> float:  # sum of K(i) over lo <= i < hi
            return fixed * (hi - lo) + sum(w * two_lines(a + b * lo, b, c + d * lo, d, hi - lo)
                                           for w, a, b, c, d in lines)

        total = summed(0, n)
        lo, hi = 0, n - 1  # the convex K's lowest point, by bisection on its slope
        while lo < hi:
            mid = (lo + hi) // 2
            if at(mid + 1) < at(mid):
                lo = mid + 1
            else:
                hi = mid
        low = lo
        if at(low) < calls:
            first = first_true(0, low, lambda i: at(i) < calls)  # K falls to the left of its lowest point
            last = first_true(low, n - 1, lambda i: at(i) >= calls, default=n) - 1  # and rises to the right
            total += (last - first + 1) * calls - summed(first, last + 1)
        return total / n

    def _fractions_at(self, batch: int, start: int, stop: int, first: list[float]) -> list[float]:
        """The values whose fractions price a mean over contexts start <= S < stop: the first
        context's (the classes' fractions do not follow the context in decode), or under measured
        kernel times the middle context's, whose measured time a kernel's lines then carry."""
        if self.table().times() is None:
            return first
        return self._values(batch, (start + stop - 1) // 2)

    def _fractions(self, k: KernelGroup, values: list[float], table: EfficiencyTable) -> Fractions:
        return table.classes[_class(k, values, self.phase, table)]

    def _classes(self, values: list[float], table: EfficiencyTable, micro: bool = False,
                 layers: bool = True) -> list[Fractions]:
        """Each kernel's class fractions at `values`, read on the class's curve at the kernel's size
        (with `micro`, one micro-batch's: micro_batch_size), from rules worked out once per model (a
        kernel's class depends on its values only through a product's rows, or for a modelled record
        through whether it has FLOPs and weights). Without `layers`, a record of a measured layer is
        asked as its own kernel (a mixed step's layer runs at several shapes, as `profile --mix`
        prices it)."""
        key = ("rules", id(table))
        rules = self._memo.get(key)
        if rules is None or rules[0] is not table:
            rules = self._memo[key] = (table, [_rule(k, self.phase, table) for k in self.kernels])
        classes, most = table.classes, table.small_gemm_max_rows
        small, large = classes["gemm_small"], classes["gemm_large"]
        measured = table.times()
        out, shared = [], []
        for k, rule in zip(self.kernels, rules[1], strict=True):
            if measured is not None and k.query is not None:
                found = self._measured(k, values, measured, micro, layers)
                if found is not None:
                    frac, part = found
                    if part is not None:
                        shared.append((len(out), *part))
                    out.append(frac)
                    continue
            if rule.__class__ is int:
                frac = small if values[rule] <= most else large
            elif rule is None:
                frac = classes[_class(k, values, self.phase, table)]
            else:
                frac = classes[rule]
            gemm = frac is small or frac is large
            if frac.curve is not None:
                size = self._size(k, values)
                frac = frac.at(micro_batch_size(frac.curve, size) if micro else size)
            per_expert = self._expert_bytes(k, values) if table.experts or table.weights else None
            if per_expert is None and gemm and table.weights is not None:
                frac = weight_fractions(frac, table, values[k.params if k.weights is None else k.weights])
            elif table.experts is not None:
                frac = expert_fractions(frac, table, per_expert)
            out.append(frac)
        if shared:
            self._held(out, shared)
        return out

    def _asked(self, k: KernelGroup, values: list[float], micro: bool) -> tuple[KernelQuery, float, float]:
        """A kernel's query, FLOPs and bytes at `values` (with `micro`, one micro-batch's)."""
        q = k.query_at(values)
        f, b = values[k.flops], values[k.nbytes]
        if micro:
            q = q.halved()
            f, b = halved(f, b, values[k.params], self._half_weights(k, values))
        return q, f, b

    def _measured(self, k: KernelGroup, values: list[float], measured, micro: bool,
                  layers: bool = True) -> tuple[Fractions, tuple | None] | None:
        """A kernel's measured time at `values` (with `micro`, one micro-batch's) as the fractions
        that price its FLOPs and bytes at exactly that time (expected.expected_step prices the op
        record alike), and for a share of a kernel several records make (its query, FLOPs, bytes,
        time) for _held; None where the database does not answer."""
        q, f, b = self._asked(k, values, micro)
        if not layers and q.kind == "attention_layer":
            q = q.fallback
        q = answered_query(measured, q)
        if q is None:
            return None
        peak, bandwidth = self.hw.peak(k.dtype), self.hw.memory_bandwidth
        t = measured_time(measured, q, f, b, peak, bandwidth)
        part = None if q.get("share") is None else (whole(q), f, b, t)
        if t <= 0:  # a share of a measured kernel with none of its own yet: _held splits the kernel
            return INSIDE, part
        # past 1 for a share of a kernel under its own roofline: _held splits the kernel by rooflines
        return Fractions(f / (t * peak) if f > 0 else 1.0, b / (t * bandwidth) if b > 0 else 1.0), part

    def _held(self, out: list[Fractions], shared: list[tuple]) -> None:
        """The fractions of the kernels that are shares of one measured kernel, split by their
        rooflines and held together at the roofline of their work (kernel_times.hold_shares, as
        expected.expected_step splits them), in place. `shared`: (index, the kernel's query, FLOPs,
        bytes, measured share) of each."""
        shares, times = [], []
        for n, (i, q, f, b, t) in enumerate(shared):
            k = self.kernels[i]
            peak, bandwidth = self.hw.peak(k.dtype), self.hw.memory_bandwidth
            shares.append((n, q, k.count * max(f / peak, b / bandwidth)))
            times.append(k.count * t)
        hold_shares(times, shares)
        for (i, _, f, b, _), t in zip(shared, times, strict=True):
            k = self.kernels[i]
            t /= k.count
            peak, bandwidth = self.hw.peak(k.dtype), self.hw.memory_bandwidth
            out[i] = INSIDE if not t > 0 else Fractions(f / (t * peak) if f > 0 else math.inf,
                                                         b / (t * bandwidth) if b > 0 else math.inf)

    def _expert_bytes(self, k: KernelGroup, values: list[float]) -> float | None:
        """One expert's matrix bytes of an MoE GEMM kernel (expected.expert_bytes: its extras slot's
        weight bytes per touched expert), None for other kernels."""
        j = k.params - (len(values) - len(self.extras))
        if j < 0 or k.kind != "modelled" or values[k.flops] <= 0:
            return None
        return self.extras[j][2] or None

    def _size(self, k: KernelGroup, values: list[float]) -> float | None:
        """Where a kernel sits on its class's curve at `values` (expected.size_of): its rows or query
        length, an MoE kernel's tokens per expert (its extras slot's tokens x k / experts)."""
        if k.rows is not None:
            return values[k.rows]
        j = k.params - (len(values) - len(self.extras))
        if j < 0:
            return None
        _, tokens, _, top_k, experts, _, _ = self.extras[j]
        return values[tokens] * top_k / experts if experts else None

    def _call(self, c: CallGroup, message: float, values: list[float] | None = None,
              half: bool = False, asked: KernelQuery | None = None) -> tuple[float, float]:
        """(expected, bound) seconds of one call (kept per kind, group and message); with `values`,
        a call that declares its shape (CallGroup.query) is asked of a database of measured kernels
        at them (with `half`, one micro-batch's), or at the shape `asked` where given."""
        q = asked if asked is not None else c.query_at(values) if values is not None and c.query is not None else None
        if q is not None and half:
            q = q.halved()
        key = ("call", c.collective, c.group_size, message, c.copies, c.experts, q)
        found = self._memo.get(key)
        if found is None:
            routing = {"copies": c.copies, "experts": c.experts} if c.copies and c.experts else {}
            if q is not None:
                routing["kernel"] = {"kind": q.kind, "dtype": q.dtype, **dict(q.dims)}
            a = collectives.attrs(c.collective, c.group_size, message, "step model", **routing)
            found = self._memo[key] = (collectives.call_expected(a, self.hw)[0], collectives.call_bound(a, self.hw))
        return found

    def binding(self, batch: int, context: int) -> str:
        """What binds the step at (batch, context): compute, memory or communication, by the
        largest of the whole step's FLOPs at peak, bytes at bandwidth, collectives' expected time."""
        key = ("binding", batch, context)
        if key in self._memo:
            return self._memo[key]
        m = self._at(batch)
        values = m._values(batch, context)
        flops = sum(k.count * values[k.flops] for k in m.kernels)
        nbytes = sum(k.count * values[k.nbytes] for k in m.kernels)
        comm = sum(c.count * m._call(c, values[c.message], values)[0] for c in m.calls)
        times = {"compute": flops / self.hw.peak(self.dtype), "memory": nbytes / self.hw.memory_bandwidth,
                 "communication": comm}
        found = self._memo[key] = max(times, key=times.get)
        return found

    def bound(self, batch: int, context: int) -> float:
        """The step's time bound at (batch, context) (`totals.time_bound_s`): its FLOPs at peak,
        its bytes at bandwidth or its collectives' bounds, whichever is largest."""
        key = ("bound", batch, context)
        if key in self._memo:
            return self._memo[key]
        m = self._at(batch)
        values = m._values(batch, context)
        flops = sum(k.count * values[k.flops] for k in m.kernels) + sum(c.count * values[c.flops] for c in m.calls)
        nbytes = sum(k.count * values[k.nbytes] for k in m.kernels) + sum(c.count * values[c.nbytes] for c in m.calls)
        comm = sum(c.count * m._call(c, values[c.message])[1] for c in m.calls)
        found = self._memo[key] = max(flops / self.hw.peak(self.dtype), nbytes / self.hw.memory_bandwidth, comm)
        return found

    def stage_bound(self, batch: int, context: int) -> float:
        """The time bound of a pipeline stage's micro-batch at (batch, context), as `profile --pp`
        bounds a stage: the kernels' FLOPs at peak, their bytes at bandwidth or the collectives'
        bound, whichever is largest."""
        m = self._at(batch)
        values = m._values(batch, context)
        flops = sum(k.count * values[k.flops] for k in m.kernels)
        nbytes = sum(k.count * values[k.nbytes] for k in m.kernels)
        comm = sum(c.count * m._call(c, values[c.message])[1] for c in m.calls)
        return max(flops / self.hw.peak(self.dtype), nbytes / self.hw.memory_bandwidth, comm)

    def weight_bytes(self, batch: int, context: int) -> float:
        """Parameter bytes the step reads (its kernels')."""
        m = self._at(batch)
        values = m._values(batch, context)
        return sum(k.count * values[k.params] for k in m.kernels)

    # -- a mean over contexts --

    def mean_expected(self, batch: int, start: int, stop: int) -> float:
        """The exact mean of `expected(batch, S)` over contexts start <= S < stop (decode: each
        kernel's FLOPs and bytes linear in S, each collective's message constant in S)."""
        if stop <= start + 1:
            return self.expected(batch, start)
        if self.table().host_s(self.phase):  # the host's issue time is no line in S: each context priced
            return sum(self.expected(batch, s) for s in range(start, stop)) / (stop - start)
        if self.two_batch(batch):
            return self._mean_two(batch, start, stop)
        m = self._at(batch)
        v0, v1 = m._values(batch, start), m._values(batch, start + 1)
        table = self.table()
        launch = table.launch_s(self.phase)
        n = stop - start
        total = 0.0
        for k, frac in zip(m.kernels, m._classes(m._fractions_at(batch, start, stop, v0), table), strict=True):
            f0, b0 = v0[k.flops], v0[k.nbytes]
            df, db = v1[k.flops] - f0, v1[k.nbytes] - b0
            compute = frac.compute_for(k.dtype) * self.hw.peak(k.dtype)
            traffic = frac.bandwidth_for(k.dtype) * self.hw.memory_bandwidth
            summed = max_linear_sum(f0 / compute, df / compute, b0 / traffic, db / traffic, n)
            work = f0 > 0 or b0 > 0 or df > 0 or db > 0
            total += k.count * (summed + (launch * n if work else 0.0))
        for c in m.calls:
            total += c.count * n * m._call(c, v0[c.message], v0)[0]
        return total / n


def _kernel_time(flops: float, nbytes: float, hw: HardwareSpec, frac: Fractions, dtype: str) -> float:
    return max(flops / (frac.compute_for(dtype) * hw.peak(dtype)),
               nbytes / (frac.bandwidth_for(dtype) * hw.memory_bandwidth))


def _rule(k: KernelGroup, phase: str, table: EfficiencyTable) -> str | int | None:
    """How a kernel's class follows from its values: a class name (fixed), the poly index of its
    rows (a product: small or large by them), or None (a modelled record: `_class` each time)."""
    if k.kind == "modelled":
        return None
    fixed = classify(k.name, k.kind, k.attention, False, 1, phase, table)
    if fixed in ("gemm_small", "gemm_large"):
        if k.rows is not None:
            return k.rows
        return classify(k.name, k.kind, k.attention, False, None, phase, table)
    return fixed


def _class(k: KernelGroup, values: list[float], phase: str, table: EfficiencyTable) -> str:
    rows = None if k.rows is None else values[k.rows]
    modelled_gemm = values[k.flops] > 0 and values[k.params] > 0
    return classify(k.name, k.kind, k.attention, modelled_gemm, rows, phase, table)
