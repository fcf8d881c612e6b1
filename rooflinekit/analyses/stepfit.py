"""Step models of one model under many deployments, from few captures (rooflinekit.stages.stepmodel).

The model is built once. A design capture (one forward with the repeated layers skipped,
rooflinekit.stages.repeated_layers.skipping) is taken per design point and per *capture key*: the parts of a
deployment the capture itself depends on (tensor and expert degrees only where a module model,
such as the MoE expected load, shapes its records by them; the KV cache format is the format
transform's, which prices attention's minimum at it). Every deployment then runs the profile's transforms (formats, serving view, parallel
shard) on those captures, which costs milliseconds, and its step model is fitted from them.

A step model is checked once per phase against a full profile at a point the design did not use
(`check`); a miss beyond rooflinekit.stages.fitting.TOLERANCE raises FitError.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from rooflinekit.analyses.profile import (
    TRANSFORMS,
    Counting,
    ReportOptions,
    count,
    recounted,
    run_profile,
)
from rooflinekit.core.model_facts import ModelFacts, using
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, ModelSource, Workload
from rooflinekit.core.skips import skipping_layers
from rooflinekit.stages.fitted_capture import _slots
from rooflinekit.stages.fitting import TOLERANCE, Design, FitError, relative_difference
from rooflinekit.stages.hardware import HardwareDB, HardwareSpec
from rooflinekit.stages.model_source import build
from rooflinekit.stages.repeated_layers import LayerRepeats, layer_repeats, skipping
from rooflinekit.stages.stepbuild import DesignCapture, build_step_model
from rooflinekit.stages.stepmodel import StepModel
from rooflinekit.transforms.base import Counted, TransformContext, run_transforms
from rooflinekit.transforms.pipeline import Layout, layout_of, op_stages


def boundary_plan(plan: LayerRepeats) -> LayerRepeats:
    """The layers a design capture runs, so that every kind of boundary between layers is seen
    (the serving view fuses a layer's residual add with the next layer's norm, whose form depends
    on both layers): a child's kind is its fingerprint with its next sibling's; per stack, the
    first and second child of each kind and the stack's last child run; every other child stands
    in for the second of its kind. Each run layer's ops count as many times as the layers it
    stands for. (Three dense layers then MoE layers: the last dense layer, before an MoE layer,
    runs, instead of standing in for a dense layer followed by a dense one.)"""
    stacks: dict[str, list[str]] = {}
    for child in plan.rep:
        stacks.setdefault(child.rpartition(".")[0], []).append(child)
    rep: dict[str, str] = {}
    for children in stacks.values():
        first: set[tuple] = set()
        second: dict[tuple, str] = {}
        for i, child in enumerate(children):
            kind = (plan.rep[child], plan.rep[children[i + 1]] if i + 1 < len(children) else None)
            if kind not in first or child == children[-1]:
                first.add(kind)
                rep[child] = child
            elif kind not in second:
                rep[child] = second[kind] = child
            else:
                rep[child] = second[kind]
    return LayerRepeats(rep=rep, modules=dict(plan.modules))


def _always(model):
    def build_model(**_options):
        return model

    return build_model


@dataclass(frozen=True)
class Shape:
    """What a step model prices: the phase, new tokens per sequence in decode, the design's
    batches (None: batch is not fitted, `batches` are captured one by one) and contexts."""

    phase: str
    q_len: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    fit_batch: bool = True


@dataclass
class StepFitter:
    """Step models of `source` under deployments, sharing design captures between them."""

    source: ModelSource
    base: Workload
    host: PluginHost
    db: HardwareDB
    captures: int = 0
    _model: object = None
    _facts: ModelFacts | None = None
    _plan: LayerRepeats | None = None
    _raw: dict = field(default_factory=dict)
    _transformed: dict = field(default_factory=dict)
    _layouts: dict = field(default_factory=dict)
    _module_models: bool | None = None
    #: Captures with module models, by (workload, skip): another layout's is recounted from one.
    _bases: dict = field(default_factory=dict)
    recounts: int = 0
    on_capture: Callable[[], None] | None = None
    #: A fitter of the same model at the dtype the model runs in, whose captures an fp8 fitter
    #: reuses (an fp8 workload runs in bf16 and is transformed) when the KV format is given.
    runs_as: StepFitter | None = None

    # -- the model, built once --

    def model(self):
        if self._model is None:
            self._model = build(self.source, self.base).model
            self._facts = ModelFacts(self._model)
            self._plan = boundary_plan(layer_repeats(self._model))
        return self._model

    def facts(self):
        """A block in which the model's unchanging facts (module tree, parameter sizes, TP plan)
        are answered from this fitter's cache (rooflinekit.core.model_facts.using)."""
        self.model()
        return using(self._facts)

    @property
    def built(self) -> ModelSource:
        return replace(self.source, build_model=_always(self.model()))

    def layers(self) -> int:
        self.model()
        return max(1, len(self._plan.rep))

    # -- design captures --

    def capture_key(self, deployment: Deployment) -> Deployment:
        """The deployment as the capture sees it (module doc): not its KV cache format, which the
        format transform applies (cache storages rescaled, attention's minimum asked again at it)."""
        key = Deployment(quantize_embeddings=deployment.quantize_embeddings)
        if self._module_models is not False:  # module models (MoE experts) price the parallel layout
            key = replace(key, tp=deployment.tp, ep=deployment.ep, redundant_experts=deployment.redundant_experts,
                          ep_imbalance=deployment.ep_imbalance)
        return key

    def raw(self, workload: Workload, deployment: Deployment, skip: bool = True) -> Counting:
        """The counted capture (before transforms) at `workload` for the deployment's capture key."""
        self.model()
        if self.runs_as is not None and deployment.kv_format_given:
            return self.runs_as.raw(replace(workload, dtype=self.runs_as.base.dtype), deployment, skip)
        key = (workload, self.capture_key(deployment), skip)
        if key not in self._raw:
            counting = self._recounted(workload, key[1], skip)
            if counting is None:
                counting = self._captured(workload, key[1], skip)
            if self._module_models is None:
                self._module_models = bool(counting.models)
                key = (workload, self.capture_key(deployment), skip)
            self._raw[key] = counting
        return self._raw[key]

    def _captured(self, workload: Workload, key: Deployment, skip: bool) -> Counting:
        """One forward captured (its transforms are run per deployment by `transformed`)."""
        with using(self._facts), (skipping(self._plan) if skip else nullcontext()):
            counting = count(self.built, workload, key, self.host, transforms=False)
        self.captures += 1
        if self.on_capture:
            self.on_capture()
        if counting.calls:
            self._bases.setdefault((workload, skip), []).append(counting)
        return counting

    def _recounted(self, workload: Workload, key: Deployment, skip: bool) -> Counting | None:
        """A capture of the same workload at another layout with its module models asked again at
        `key` (profile.recounted: MoE experts under another TP/EP), where one fits."""
        for base in self._bases.get((workload, skip), ()):
            with using(self._facts):
                counting = recounted(base, self.source, workload, key, self.host)
            if counting is not None:
                self.recounts += 1
                return counting
        return None

    def transformed(self, workload: Workload, deployment: Deployment, skip: bool = True) -> Counted:
        """The design capture at `workload` through the deployment's transforms (kept: a pipeline's
        stages and the memory figures read the same one)."""
        key = (workload, deployment, skip)
        if key not in self._transformed:
            self._transformed[key] = self._transform(workload, deployment, skip)
        return self._transformed[key]

    def _transform(self, workload: Workload, deployment: Deployment, skip: bool) -> Counted:
        counting = self.raw(workload, deployment, skip)
        ctx = TransformContext(workload, deployment, self._model, self.host)
        # the model's facts (module tree, parallel plan) computed once; a skipped layer's weights
        # take its representative's stored format (rooflinekit.core.skips.stand_ins)
        reps = {child: self._plan.rep[child] for child in self._plan.skipped} if skip else {}
        with using(self._facts), skipping_layers(reps):
            return run_transforms(counting.raw, TRANSFORMS, ctx)

    def stands(self) -> Callable[[str], int]:
        """module path -> the layers a module of a run layer stands for (1 outside the layers)."""
        stands = Counter(self._plan.rep.values())

        def count(path: str) -> int:
            child = self._plan.owner(path)
            return 1 if child is None else stands[self._plan.rep[child]]

        return count

    def stood_for(self, path: str) -> list[str]:
        """Module `path` (in a run layer of a design capture) and its twins in the layers that
        layer stands for; [path] outside the layers."""
        child = self._plan.owner(path)
        if child is None:
            return [path]
        rep = self._plan.rep[child]
        rest = path[len(child):]
        return [c + rest for c, r in self._plan.rep.items() if r == rep]

    def design_capture(self, workload: Workload, deployment: Deployment, skip: bool = True,
                       stage: tuple[Layout, int] | None = None) -> DesignCapture:
        """One design point's ops through the deployment's transforms, with multiplicities; with
        `stage` (a pipeline's layout and a stage), only that stage's: a run layer of the cut stack
        counts the layers it stands for within the stage, any other op counts on the stage
        `profile --pp` puts it (the last layer run before it)."""
        counted = self.transformed(workload, deployment, skip)
        ops = counted.capture.ops
        plan = self._plan if skip else LayerRepeats()
        slots, _ = _slots(ops, plan)
        stands = Counter(plan.rep.values())
        multiplicity = [stands[g] if g else 1 for g, _, _ in slots]
        if stage is not None:
            multiplicity = self._stage_multiplicity(ops, slots, multiplicity, plan, *stage)
        attention = frozenset(i for site in counted.attention for i in site.op_indices)
        return DesignCapture(ops, attention, multiplicity, [bool(g) for g, _, _ in slots],
                             [(g, rel, op.name) for (g, _, rel), op in zip(slots, ops, strict=True)])

    def _stage_multiplicity(self, ops, slots, multiplicity: list[int], plan: LayerRepeats, layout: Layout,
                            k: int) -> list[int]:
        span = layout.ranges[k]
        within: Counter = Counter()
        for child, rep in plan.rep.items():
            index = layout.layer_index(child)
            if index is not None and index in span:
                within[rep] += 1
        stages = op_stages(ops, layout)
        out = []
        for (g, _, _), n, where in zip(slots, multiplicity, stages, strict=True):
            if g and layout.layer_index(g) is not None:
                out.append(within[g])
            else:
                out.append(n if where == k else 0)
        return out

    # -- step models --

    def step_model(self, shape: Shape, deployment: Deployment, hw: HardwareSpec,
                   stage: tuple[Layout, int] | None = None) -> StepModel:
        """The step model of `deployment` over `shape`'s design (module doc); with `stage`, of one
        pipeline stage's ops (design_capture)."""
        if shape.fit_batch:
            return self._fitted(shape, shape.batches, deployment, hw, stage)
        per = {b: self._fitted(shape, (b,), deployment, hw, stage) for b in shape.batches}
        first = next(iter(per.values()))
        return replace(first, batches=tuple(per), per_batch=per)

    def layout(self, pp: int) -> Layout:
        """The stages `profile --pp` cuts the model into (found once per degree)."""
        if pp not in self._layouts:
            self._layouts[pp] = layout_of(self.model(), pp)
        return self._layouts[pp]

    def _fitted(self, shape: Shape, batches: tuple[int, ...], deployment: Deployment,
                hw: HardwareSpec, stage: tuple[Layout, int] | None = None) -> StepModel:
        design = Design(batches, shape.contexts)
        caps = [self.design_capture(self._workload(shape, b, s), deployment, stage=stage) for b, s in design.points]
        model = build_step_model(shape.phase, design, caps, hw, self.base.dtype_key, self.layers())
        return replace(model, overlap=deployment.overlap) if deployment.overlap != "none" else model

    def _workload(self, shape: Shape, batch: int, context: int) -> Workload:
        return replace(self.base, phase=shape.phase, batch=batch, context=context,
                       decode_q_len=shape.q_len if shape.phase == "decode" else 1)

    def check(self, model: StepModel, shape: Shape, deployment: Deployment, batch: int, context: int,
              tolerance: float = TOLERANCE) -> float:
        """The step model against a full profile at (batch, context): the largest relative miss of
        the expected step and the bound; FitError beyond `tolerance`."""
        workload = self._workload(shape, batch, context)
        with using(self._facts):
            report = run_profile(self.built, workload, deployment, options=ReportOptions(detail=False, measure=False),
                             host=self.host, db=self.db).report
        self.captures += 1
        misses = (relative_difference(model.expected(batch, context), report.totals.expected_step_s),
                  relative_difference(model.bound(batch, context), report.totals.time_bound_s))
        if max(misses) > tolerance:
            raise FitError(f"the step model misses a full profile at B={batch}, S={context} by {max(misses):.2e} "
                           "relative")
        return max(misses)
