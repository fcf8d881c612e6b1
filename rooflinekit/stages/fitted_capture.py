"""A fitted capture: a capture's counts as exact polynomials in batch and context, evaluated at any point.

On the meta device every count an op carries (FLOPs, bytes read and written, parameter bytes) is
a function of tensor shapes, and the shapes are affine in batch B and context S: the counts are
polynomials of low degree, linear in B and at most quadratic in S (prefill attention). Captures on
a small design (B in {b1, b2} x up to three contexts) determine each op's polynomial exactly, in
rational arithmetic (the counts are integers or dyadic floats, so `Fraction` holds them exactly);
any (B, S) is then evaluated without running the model and placed by the code that places a
capture (`rooflinekit.stages.place.build_report`); the polynomials are rooflinekit.stages.fitting's.
Attention layers' executed figures are fitted
the same way; their architecture minimum is asked again of the plugin that costs it, a closed
form of the new workload.

The design captures may skip repeated layers (rooflinekit.stages.repeated_layers): a layer whose modules,
attributes and parameters equal an earlier layer's returns that layer's output without running,
and its counts are taken to be the earlier layer's. The full capture at a point the design did not
use (the template: the op sequence every evaluation reports) checks both that the ops align and
that the fit predicts every op's counts there within rooflinekit.stages.fitting.TOLERANCE
(`FittedCapture`); a miss raises
FitError, and the caller captures every point instead.

Not polynomial, so not fitted across: a sliding window or chunk changes the form of the counts at
its size (`windows` names them; callers fit each side apart), and modelled modules whose counts
are data-dependent (MoE expected load: the distinct experts touched are not polynomial in B)
unless they declare `scaling = "polynomial"` (rooflinekit.stages.modelled.ModuleModel).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from functools import cached_property

from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.units import plain
from rooflinekit.stages.attention_ops import reexpanding
from rooflinekit.stages.attribute import (
    AttentionSite,
    attention_workload,
    causality,
    cost_and_notes,
)
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.engine import engine_cost, with_engine
from rooflinekit.stages.expected_words import stated_factors
from rooflinekit.stages.fitting import TOLERANCE, Design, FitError, relative_difference
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.memory import ScaledPeak, live_allocations
from rooflinekit.stages.place import Presentation, build_report
from rooflinekit.stages.repeated_layers import LayerRepeats

#: The attrs in which a record declares its kernel's shape to a database of measured kernels
#: (rooflinekit.stages.kernel_times).
DECLARED = ("kernel", "layer_kernel")

#: The counts of an op that are fitted.
OP_FIELDS = ("flops", "bytes_read", "bytes_written", "param_bytes")
#: The executed figures of an attention layer that are fitted (its minimum is re-costed).
SITE_FIELDS = ("flops_executed", "bytes_executed", "kv_bytes_executed", "kv_read_bytes", "kv_copy_bytes",
               "kv_reexpand_flops")


def windows(sites: list[AttentionSite]) -> tuple[set[int], set[int]]:
    """The sliding windows and the chunks of the recognised attention layers."""
    specs = [s.spec for s in sites if s.spec is not None]
    return {s.window for s in specs if s.window}, {s.chunk for s in specs if s.chunk}


# -- a capture fitted over a design -----------------------------------------------------------


def _slots(ops: list[OpRecord], repeats: LayerRepeats) -> tuple[list[tuple[str, int, str]], dict[str, int]]:
    """Per op (group, ordinal, module within the layer): the group is the representative of the
    layer the op ran in ('' outside layers), the ordinal counts the ops of that layer (or of all
    ops outside layers). Also the number of ops per layer ('' for outside)."""
    counts: dict[str, int] = defaultdict(int)
    slots = []
    for op in ops:
        child = repeats.owner(op.module)
        if child is None:
            slots.append(("", counts[""], op.module))
            counts[""] += 1
        else:
            slots.append((repeats.rep[child], counts[child], op.module[len(child):]))
            counts[child] += 1
    return slots, counts


def _site_slot(site: AttentionSite, repeats: LayerRepeats) -> tuple[str, str]:
    child = repeats.owner(site.module)
    return ("", site.module) if child is None else (repeats.rep[child], site.module[len(child):])


def _bare(spec):
    return None if spec is None else replace(spec, notes=())


_DIGITS = re.compile(r"\d+")


def _site_signature(site: AttentionSite, fitted: _Site) -> tuple:
    """What an attention layer's row at another point depends on, but its name."""
    fused = tuple((op.attrs.get("is_causal"), op.attrs.get("has_mask"), op.attrs.get("mask_keys"))
                  for op in fitted.core if op.kind == "fused")
    return (fitted.polys, fitted.key, site.dtype, site.module_class, site.plugin, tuple(fitted.reexpand_modules),
            fused, site.recognised)


@dataclass(frozen=True)
class _OpFit:
    """An op's counts: polynomial indices, and per storage read (polynomial, cap, is a parameter)."""

    flops: int
    written: int
    reads: tuple[tuple[int, float | None, bool], ...]
    read: int | None = None  # bytes read and parameter bytes as totals (records without reads)
    param: int | None = None

    def counts(self, values: list[float]) -> tuple[float, float, float, float]:
        """(flops, bytes_read, bytes_written, param_bytes) from the polynomials' values."""
        if self.read is not None:
            return values[self.flops], values[self.read], values[self.written], values[self.param]
        read = param = 0.0
        for k, cap, parameter in self.reads:
            v = values[k]
            if cap is not None and v > cap:
                v = cap
            read += v
            if parameter:
                param += v
        return values[self.flops], read, values[self.written], param


@dataclass
class _Site:
    core: list[OpRecord]  # the template's own ops of the layer (for its causality)
    reexpand_modules: list[str]
    polys: tuple[int, ...]  # SITE_FIELDS
    key: str  # the spec, for caching its cost


class FittedCapture:
    """A template capture whose every count is a polynomial fitted on design captures.

    `designs` are (capture, attention sites) at `design.points`, in that order, taken with the
    layers of `repeats` skipped; `template` is a full capture at `workload`'s batch and context, not
    a design point, with its sites. Raises FitError when the ops do not align or a prediction
    misses the template.
    """

    def __init__(self, design: Design, designs: list[tuple[CaptureResult, list[AttentionSite]]],
                 template: CaptureResult, sites: list[AttentionSite], workload: Workload, repeats: LayerRepeats,
                 host: PluginHost):
        self.design, self.template, self.sites, self.repeats, self.host = design, template, sites, repeats, host
        self.point = point = (workload.batch, workload.context)
        self._tokens = workload.tokens
        if any(op.kind == "collective" for op in template.ops):
            raise FitError("collectives carry link traffic that is not fitted")
        t_slots, t_counts = _slots(template.ops, repeats)
        aligned: list[list[OpRecord]] = []
        for (b, s), (cap, _) in zip(design.points, designs, strict=True):
            d_slots, d_counts = _slots(cap.ops, repeats)
            where = f"B={b}, S={s}"
            for unit, n in t_counts.items():
                expected = d_counts.get(repeats.rep.get(unit, unit), 0)
                if n != expected:
                    raise FitError(f"{unit or 'outside the layers'} ran {n} ops at B={point[0]}, S={point[1]} "
                                   f"and {expected} at {where}")
            by_slot = {(g, k): (rel, op) for (g, k, rel), op in zip(d_slots, cap.ops, strict=True)}
            ops = []
            for (g, k, rel), op in zip(t_slots, template.ops, strict=True):
                d_rel, d_op = by_slot[(g, k)]
                if d_rel != rel or d_op.name != op.name or d_op.kind != op.kind or d_op.dtype != op.dtype:
                    raise FitError(f"op {op.index} ({op.name} in {op.module or '(root)'}) at B={point[0]}, "
                                   f"S={point[1]} is {d_op.name} in {d_rel or '(root)'} at {where}")
                ops.append(d_op)
            aligned.append(ops)
        self._aligned = aligned
        at_template = design.monomials(*point)
        # An op of a skipped layer aligns with its representative's design records: same fit (47 of
        # a 48-layer model's layers), unless its own reads differ (a parameter's size, caps).
        fits: dict[tuple, _OpFit] = {}
        params = template.param_storages
        self.op_fits = []
        for i, op in enumerate(template.ops):
            key = (tuple(id(d[i]) for d in aligned), tuple((sid in params, nbytes) for sid, nbytes in op.reads))
            fit = fits.get(key)
            if fit is None:
                fit = fits[key] = self._fit_op(i, op, at_template)
            self.op_fits.append(fit)
        self._declared = self._fit_declared(aligned)
        self._sites = self._fit_sites(designs)
        site_groups: dict[tuple, int] = {}
        self._site_groups = [site_groups.setdefault(_site_signature(site, fitted), len(site_groups))
                             for site, fitted in zip(sites, self._sites, strict=True)]
        self._site_group_sizes = Counter(self._site_groups)
        self._shape_polys: list | None = None
        self._shape_design = Design(design.batches, design.contexts)
        self.max_difference = self._verify()
        # compact records: ops of equal counts merged, attention's apart from the rest (its kernels
        # are priced as attention), one module of the repeated layers apart from another (a merged
        # GEMM's siblings and a measured layer's records share a kernel by layer, so each compact
        # record stands for the same layers as its kernel's others); _group_of maps a template op
        # to its merged record
        in_attention = {i for site in sites for i in site.op_indices}
        groups: dict[tuple, list] = {}
        self._group_of: dict[int, int] = {}
        self._position = {id(op): k for k, op in enumerate(template.ops)}
        for op, fit in zip(template.ops, self.op_fits, strict=True):
            key = (op.name, op.dtype, op.kind, op.counted, fit, op.attrs.get("formula_error"), op.index in in_attention,
                   layer_pattern(op.module))
            if key in groups:
                groups[key][1] += 1
            else:
                groups[key] = [op, 1, fit, len(groups)]
            self._group_of[op.index] = groups[key][3]
        self._groups = [entry[:3] for entry in groups.values()]

    def _fit_op(self, i: int, op: OpRecord, at_template: tuple[int, ...]) -> _OpFit:
        """An op's counts as polynomials. Bytes read are fitted per storage read, so that a read
        capped by what the op produces (a gather reads at most its source: an embedding reads at
        most the whole table) is min(polynomial, the parameter's bytes) once the check capture,
        beyond the design points, shows the cap reached."""
        design, ops = self.design, [d[i] for d in self._aligned]
        flops = design.poly(tuple(o.flops for o in ops))
        written = design.poly(tuple(o.bytes_written for o in ops))
        if not op.reads:  # modelled records give their totals
            return _OpFit(flops, written, (), design.poly(tuple(o.bytes_read for o in ops)),
                          design.poly(tuple(o.param_bytes for o in ops)))
        if any(len(o.reads) != len(op.reads) for o in ops):
            raise FitError(f"op {op.index} ({op.name} in {op.module or '(root)'}) reads {len(op.reads)} tensors at "
                           f"B={self.point[0]}, S={self.point[1]} and another number at other points")
        reads = []
        for e, (sid, actual) in enumerate(op.reads):
            k = design.poly(tuple(o.reads[e][1] for o in ops))
            parameter = sid in self.template.param_storages
            predicted = design.polys[k].at(at_template)
            cap = None
            if parameter and actual < predicted and relative_difference(predicted, actual) > TOLERANCE:
                cap = actual  # the whole parameter, reached between the design points and here
            reads.append((k, cap, parameter))
        return _OpFit(flops, written, tuple(reads))

    def _fit_sites(self, designs) -> list[_Site]:
        by_index = {op.index: op for op in self.template.ops}
        keyed = []
        for _, sites in designs:
            keyed.append({_site_slot(site, self.repeats): site for site in sites})
        out = []
        for site in self.sites:
            slot = _site_slot(site, self.repeats)
            matches = [k.get(slot) for k in keyed]
            if any(m is None for m in matches):
                raise FitError(f"attention layer {site.module} has no counterpart in every design capture")
            if any(_bare(m.spec) != _bare(site.spec) or m.plugin != site.plugin for m in matches):
                raise FitError(f"attention layer {site.module} is recognised differently at other points")
            polys = tuple(self.design.poly(tuple(float(getattr(m, f)) for m in matches)) for f in SITE_FIELDS)
            core = [by_index[i] for i in site.op_indices]
            reexpand = sorted({by_index[i].module for i in site.kv_op_indices
                               if reexpanding(by_index[i], self._tokens)})
            out.append(_Site(core, reexpand if site.kv_reexpand_flops else [], polys, repr(site.spec)))
        return out

    def _verify(self) -> float:
        """The largest relative miss of the fit on the template; FitError above TOLERANCE."""
        values = self.design.values(*self.point)
        worst = 0.0
        for op, fit in zip(self.template.ops, self.op_fits, strict=True):
            for name, value in zip(OP_FIELDS, fit.counts(values), strict=True):
                d = relative_difference(value, getattr(op, name))
                if d > TOLERANCE:
                    raise FitError(f"the fit misses the capture at B={self.point[0]}, S={self.point[1]} by "
                                   f"{plain(d, 2)} relative ({name} of op {op.index}, {op.name} in {op.module or '(root)'})")
                worst = max(worst, d)
        for site, fitted in zip(self.sites, self._sites, strict=True):
            for name, k in zip(SITE_FIELDS, fitted.polys, strict=True):
                d = relative_difference(values[k], float(getattr(site, name)))
                if d > TOLERANCE:
                    raise FitError(f"the fit misses the capture at B={self.point[0]}, S={self.point[1]} by "
                                   f"{plain(d, 2)} relative ({name} of attention layer {site.module})")
                worst = max(worst, d)
        return worst

    # -- evaluation --

    def capture_at(self, batch: int, context: int, *, compact: bool = False) -> CaptureResult:
        """The capture at (batch, context) from the fit. `compact` merges ops of equal counts, name
        and dtype into one record each (module-less: the step's totals, attention and byte split
        are those of the full capture, its module rows are not)."""
        values = self.design.values(batch, context)
        t = self.template
        if compact:
            # each merged record keeps its first op's shapes (the group counts alike) and the number
            # of kernels it stands for (attrs "merged": the expected step's launches)
            shapes = self._shapes_at(batch, context, [self._position[id(op)] for op, _, _ in self._groups])
            ops = []
            for i, ((op, n, fit), shape) in enumerate(zip(self._groups, shapes, strict=True)):
                f, r, w, p = fit.counts(values)
                attrs = self._attrs_at(self._position[id(op)], op, values)
                ops.append(OpRecord(index=i, name=op.name, module="", flops=n * f, bytes_read=n * r,
                                    bytes_written=n * w, dtype=op.dtype, counted=op.counted, kind=op.kind,
                                    param_bytes=n * p, shapes=shape, attrs={**attrs, "merged": n}))
        else:
            shapes = self._shapes_at(batch, context)
            ops = []
            for k, (op, fit, shape) in enumerate(zip(t.ops, self.op_fits, shapes, strict=True)):
                f, r, w, p = fit.counts(values)
                ops.append(replace(op, flops=f, bytes_read=r, bytes_written=w, param_bytes=p, shapes=shape,
                                   attrs=self._attrs_at(k, op, values)))
        return CaptureResult(ops=ops, modules=t.modules, param_storages=t.param_storages,
                             param_bytes_total=t.param_bytes_total, wall_s=0.0, notes=list(t.notes),
                             param_owners=t.param_owners)

    def _fit_declared(self, aligned: list[list[OpRecord]]) -> dict[int, dict[str, dict[str, int]]]:
        """The numeric fields a record declares for a database of measured kernels (attrs "kernel"
        and "layer_kernel": batch, lengths, tokens, ...), a poly each through the design points, by
        template position, so that a point of the fit asks for its kernel at its own shape."""
        out: dict[int, dict[str, dict[str, int]]] = {}
        for i, op in enumerate(self.template.ops):
            for key in DECLARED:
                given = op.attrs.get(key)
                if not isinstance(given, dict):
                    continue
                polys = {}
                for name, v in given.items():
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        continue
                    samples = tuple((d[i].attrs.get(key) or {}).get(name) for d in aligned)
                    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in samples):
                        polys[name] = self.design.poly(tuple(float(x) for x in samples))
                if polys:
                    out.setdefault(i, {})[key] = polys
        return out

    def _attrs_at(self, i: int, op: OpRecord, values: list[float]) -> dict:
        """Template op `i`'s attrs with its declared kernel's fields at `values` (_fit_declared)."""
        declared = self._declared.get(i)
        if not declared:
            return op.attrs
        return {**op.attrs, **{key: {**op.attrs[key], **{name: float(values[k]) for name, k in polys.items()}}
                               for key, polys in declared.items()}}

    def activation_peak_at(self, batch: int, context: int) -> float | None:
        """The activation peak at (batch, context): the template's liveness, each allocation scaled
        as its op's fitted bytes written (memory.ScaledPeak, built on first use); None when the
        template's liveness was not measured."""
        peak = self._scaled_peak
        return None if peak is None else peak(self.design.values(batch, context))

    @cached_property
    def _scaled_peak(self) -> ScaledPeak | None:
        allocations = live_allocations(self.template)
        if allocations is None:
            return None
        return ScaledPeak(self.template, allocations, [fit.written for fit in self.op_fits])

    def sites_at(self, workload: Workload, deployment: Deployment | None = None, *,
                 compact: bool = False) -> list[AttentionSite]:
        """The attention layers at `workload`: executed figures from the fit, the minimum re-costed.
        `compact`: one row per group of layers that count alike, its figures (executed and minimum)
        multiplied by the layers it stands for, named after the first of them."""
        values = self.design.values(workload.batch, workload.context)
        costs: dict[tuple, tuple] = {}
        out: list[AttentionSite] = []
        done: set[int] = set()
        for site, fitted, group in zip(self.sites, self._sites, self._site_groups, strict=True):
            if compact and group in done:
                continue
            done.add(group)
            n = self._site_group_sizes[group] if compact else 1
            figures = {f: n * values[k] for f, k in zip(SITE_FIELDS, fitted.polys, strict=True)}
            causal, causal_note = causality(fitted.core, workload)
            kv_read = values[fitted.polys[SITE_FIELDS.index("kv_read_bytes")]]
            reexpand = values[fitted.polys[SITE_FIELDS.index("kv_reexpand_flops")]]
            key = (fitted.key, site.dtype, causal, causal_note, kv_read, reexpand, tuple(fitted.reexpand_modules))
            if key not in costs:
                aw = attention_workload(workload, site.dtype, causal, deployment)
                costs[key] = cost_and_notes(site.spec, aw, causal_note, self.host, kv_read, reexpand,
                                            fitted.reexpand_modules)
            cost, notes = costs[key]
            if n != 1 and cost is not None:
                cost = replace(cost, flops_model=n * cost.flops_model, kv_bytes_min=n * cost.kv_bytes_min,
                               bytes_min=n * cost.bytes_min, cache_bytes_per_token=n * cost.cache_bytes_per_token,
                               cache_bytes_per_sequence=n * cost.cache_bytes_per_sequence,
                               flops_alt={k: n * v for k, v in cost.flops_alt.items()})
            if compact:  # the merged records' indices (capture_at(compact=True))
                site = replace(site, op_indices=list(dict.fromkeys(self._group_of[i] for i in site.op_indices)),
                               kv_op_indices=list(dict.fromkeys(self._group_of[i] for i in site.kv_op_indices)))
            out.append(replace(site, cost=cost, causal=causal, **figures,
                               notes=list(notes) + list(site.spec.notes if site.spec else ())))
        return out

    def report_at(self, workload: Workload, hw: HardwareSpec, *, model_info: dict,
                  deployment: Deployment | None = None, depth: int = 3,
                  notes: list[str] | None = None, warnings: list[str] | None = None,
                  compact: bool = False) -> Report:
        """The Report at `workload`'s batch and context, placed as a capture's is (module rows to
        `depth`, repeated layers not merged). `compact`: ops of equal counts and attention layers
        that count alike merged (capture_at, sites_at), for the step's totals, byte split and
        attention totals only (the layer counts restored)."""
        cap = self.capture_at(workload.batch, workload.context, compact=compact)
        deployment = deployment or Deployment()
        view = Presentation(depth=depth, detail=not compact, model_info=model_info, overlap=deployment.overlap,
                            factors=stated_factors(deployment.ep, deployment.ep_imbalance))
        report = build_report(cap, self.sites_at(workload, deployment, compact=compact), hw, workload, view)
        report = replace(report, deployment=replace(deployment.resolved(workload.dtype_key), hardware=hw.name))
        report = with_engine(report, engine_cost(deployment.engine), workload.batch)
        if compact:
            at = report.attention_totals
            return replace(report, attention_totals=replace(at, layers=len(self.sites),
                                                            recognised=sum(s.recognised for s in self.sites)))
        return replace(report, notes=list(notes or []), warnings=list(warnings or []))

    def _shapes_at(self, batch: int, context: int, positions: list[int] | None = None) -> list[str]:
        """Each op's operand shapes at (batch, context) (of the ops at `positions` only, where given):
        every dimension fitted like a count ('' where the design captures wrote them differently)."""
        if self._shape_polys is None:
            self._shape_polys = []
            for i, op in enumerate(self.template.ops):
                skeleton = _DIGITS.sub("{}", op.shapes)
                dims = [[int(x) for x in _DIGITS.findall(d[i].shapes)] for d in self._aligned]
                n = len(_DIGITS.findall(op.shapes))
                if any(_DIGITS.sub("{}", d[i].shapes) != skeleton or len(x) != n for d, x in zip(
                        self._aligned, dims, strict=True)):
                    self._shape_polys.append(None)
                    continue
                self._shape_polys.append((skeleton, [self._shape_design.poly(tuple(float(x[j]) for x in dims))
                                                     for j in range(n)]))
        values = self._shape_design.values(batch, context)
        polys = self._shape_polys if positions is None else [self._shape_polys[k] for k in positions]
        return ["" if entry is None else entry[0].format(*(round(values[k]) for k in entry[1])) for entry in polys]
