"""The plan search's deployments: the layouts and formats searched, each deployment's step
models and memory per GPU built once (Variant), and the hardware figures candidates are priced with."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TypeVar

from rooflinekit.analyses.plan_options import (
    CHECK_TOLERANCE,
    FITTED_SCALINGS,
    PlanOptions,
    _powers,
    wide_eps,
)
from rooflinekit.analyses.plan_variant import Stages, Variant
from rooflinekit.analyses.stepfit import Shape, StepFitter
from rooflinekit.core.errors import UserError
from rooflinekit.core.plan import WEIGHT_FORMATS, PlanConfig, Targets
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import OVERLAPS, Deployment, ModelSource, Workload
from rooflinekit.core.settings import searched_of, searched_settings
from rooflinekit.stages.collectives import link_bandwidth
from rooflinekit.stages.efficiency_table import with_efficiency
from rooflinekit.stages.engine import engine_cost
from rooflinekit.stages.fitting import FitError
from rooflinekit.stages.hardware import HardwareDB, HardwareSpec, hardware_db
from rooflinekit.stages.memory import PeakInBatch, activation_peak
from rooflinekit.stages.request_checks import torch_dtype
from rooflinekit.stages.spread import Spread, load_spreads

T = TypeVar("T")


class DeploymentModels:
    """A request's searched deployments and their step models, each built once (the state
    Planner prices candidates from)."""

    def __init__(self, source: ModelSource, targets: Targets, options: PlanOptions, *, dtype: str = "bf16",
                 model_options: tuple = (), host: PluginHost | None = None, db: HardwareDB | None = None,
                 progress: Callable[[str], None] | None = None):
        self.targets, self.options = targets, options
        self.host = host or get_host()
        self.db = db or hardware_db(self.host)
        self.hw: HardwareSpec = with_efficiency(self.db.get(options.hardware), options.efficiency, self.host)
        self.engine = engine_cost(options.engine)
        if options.overlap not in OVERLAPS:
            raise UserError(f"overlap={options.overlap!r}: use one of {', '.join(OVERLAPS)}")
        modes = (options.modes,) if isinstance(options.modes, str) else tuple(options.modes)
        if options.overlap == "two-batch" and ("aggregated" in modes or any(pp > 1 for pp in options.pps)):
            raise UserError("--overlap two-batch prices disaggregated pools without pipeline stages (a chunked-prefill "
                            "step and a pipeline stage are other schedules): give --mode disaggregated --pp 1")
        if targets.at == "p90" and self.own_table:
            raise UserError(f"--targets-at p90: the p10-p90 ranges are the committed efficiency table's residuals, "
                            f"and '{self.hw.name}' prices with its own (calibrated, or an efficiency source): use "
                            "--targets-at expected")
        self.progress = progress or (lambda _msg: None)
        base = Workload("decode", 1, targets.isl, dtype, "meta", model_options)
        self.fitter = StepFitter(source, base, self.host, self.db)
        self.fitters = {base.dtype: self.fitter}
        self.draft_fitter = StepFitter(options.draft, base, self.host, self.db) if options.draft else None
        self.notes: list[str] = []
        self.variants: dict[tuple[Deployment, str], Variant | str] = {}
        self._stages: dict[tuple[Deployment, str, int], Stages] = {}
        self._memo: dict[tuple, object] = {}  # figures many candidates share (_kept)

    def host_s(self, sequences: int) -> float:
        """The engine's host time in one step of `sequences` sequences (0 without --engine)."""
        return self.engine.host_s(sequences) if self.engine is not None else 0.0

    def _kept(self, key: tuple, compute: Callable[[], T]) -> T:
        """compute(), once per `key`: a variant's figure at a batch, degree and chunk is shared by
        the candidates that differ elsewhere (chunk, pools, replicas)."""
        try:
            return self._memo[key]  # type: ignore[return-value]
        except KeyError:
            value = self._memo[key] = compute()
            return value

    @staticmethod
    def spreads(mode: str) -> tuple[Spread, Spread]:
        """The spreads of a candidate's (TTFT, TPOT): mixed steps aggregated; prefill and decode
        steps disaggregated (rooflinekit.stages.spread)."""
        table = load_spreads()
        return (table["mixed"], table["mixed"]) if mode == "aggregated" else (table["prefill"], table["decode"])

    @property
    def own_table(self) -> bool:
        """Whether the hardware entry prices with its own efficiency source (or its calibrated
        ceilings): the validation's residuals, and so the p10-p90 ranges, are the committed table's."""
        return bool(self.hw.efficiency) or self.hw.calibrated

    def margin(self, mode: str) -> tuple[float, float]:
        """What (TTFT, TPOT) are multiplied by before the targets are checked: their p90 / expected
        ratios with `Targets.at` "p90", else 1."""
        if self.targets.at != "p90":
            return 1.0, 1.0
        ttft, tpot = self.spreads(mode)
        return ttft.high, tpot.high

    @staticmethod
    def _identity(v: Variant) -> tuple:
        """What a variant's priced figures depend on: its deployment, formats and which drafting it runs."""
        return (v.deployment, v.dtype, v.format, v.verify is not None, v.draft is not None)

    def fitter_for(self, dtype: str) -> StepFitter:
        """The step fitter of an activation dtype (W8A8 formats run fp8 activations), sharing the
        model the first one built."""
        if dtype not in self.fitters:
            f = self.fitter
            runs_as = f if torch_dtype(replace(f.base, dtype=dtype)) == torch_dtype(f.base) else None
            self.fitters[dtype] = StepFitter(f.built, replace(f.base, dtype=dtype), f.host, f.db, runs_as=runs_as)
        return self.fitters[dtype]

    @property
    def captures(self) -> int:
        return sum(f.captures for f in self.fitters.values())

    # -- step models per deployment --

    def batches(self) -> tuple[int, ...]:
        return tuple(_powers(self.options.max_batch))

    def _shapes(self, fit_batch: bool) -> tuple[Shape, Shape, Shape | None]:
        t = self.targets
        batches = (1, 2) if fit_batch else self.batches()
        decode = Shape("decode", 1, batches, (t.isl, t.isl + t.osl), fit_batch)
        new = t.new_prompt_tokens
        if new < t.isl:  # a prefix hit: the prompt's rest as one multi-token step after the cached part
            prefill = Shape("decode", new, (1, 2) if fit_batch else (1,), (t.isl - new,), fit_batch)
        else:
            prefill = Shape("prefill", 1, (1, 2) if fit_batch else (1,), (t.isl,), fit_batch)
        verify = None
        if self.options.mtp or self.options.draft:
            k = self.options.mtp or 1
            verify = Shape("decode", k + 1, batches, (t.isl, t.isl + t.osl), fit_batch)
        return decode, prefill, verify

    def variant(self, deployment: Deployment, dtype: str | None = None) -> Variant | str:
        """The deployment's step models at activation `dtype` (default: the request's), built
        once, or why it cannot be priced."""
        key = (deployment, dtype or self.fitter.base.dtype)
        if key not in self.variants:
            try:
                self.variants[key] = self._variant(*key)
            except (UserError, FitError) as exc:
                self.variants[key] = str(exc).splitlines()[0]
        return self.variants[key]

    def _variant(self, deployment: Deployment, dtype: str) -> Variant:
        fitter = self.fitter_for(dtype)
        fit_batch = self._fit_batch(deployment)
        try:
            return self._built(deployment, dtype, fitter, fit_batch)
        except FitError as exc:
            if not fit_batch:
                raise
            # the ops differ between batches (a fusion that forms at one batch only): each batch
            # searched is captured on its own instead of fitted across batches
            note = (f"{deployment.words(dtype) or 'as run'}: {exc}; priced at the batches searched, each "
                    "captured on its own (no batch at the memory limit)")
            if note not in self.notes:
                self.notes.append(note)
            return self._built(deployment, dtype, fitter, False)

    def _built(self, deployment: Deployment, dtype: str, fitter: StepFitter, fit_batch: bool) -> Variant:
        decode_shape, prefill_shape, verify_shape = self._shapes(fit_batch)
        decode = fitter.step_model(decode_shape, deployment, self.hw)
        prefill = fitter.step_model(prefill_shape, deployment, self.hw)
        verify = fitter.step_model(verify_shape, deployment, self.hw) if verify_shape else None
        draft = None
        if self.draft_fitter is not None:
            draft = self.draft_fitter.step_model(decode_shape, replace(deployment), self.hw)
        memory = self._memory(deployment, decode_shape, fitter)
        return Variant(deployment, decode, prefill, *memory, verify=verify, draft=draft, dtype=dtype)


    def _fit_batch(self, deployment: Deployment) -> bool:
        """Whether counts are fitted in batch: polynomial, or polynomial but for weights that
        follow the expected distinct experts (a step model evaluates those at any batch)."""
        counting = self.fitter.raw(replace(self.fitter.base, batch=1), deployment)
        return all(getattr(m, "scaling", None) in FITTED_SCALINGS for m in counting.models)

    def check(self, config: PlanConfig) -> tuple[str, bool]:
        """The decode step model of `config`'s deployment against a full profile at a point its
        design did not use: the note saying how far apart, and whether beyond CHECK_TOLERANCE
        (FitError when the two cannot be compared)."""
        deployment = self.deployment(config.decode.tp if config.decode else config.tp,
                                     config.decode.ep if config.decode else config.ep,
                                     WEIGHT_FORMATS[config.weight_dtype][0], **searched_of(config))
        v = self.variant(deployment, config.dtype)
        shape = self._shapes(v.decode.batches is None)[0]
        batch = 3 if v.decode.batches is None else v.decode.batches[-1]
        context = (shape.contexts[0] + shape.contexts[-1]) // 2 + 1
        miss = self.fitter_for(v.dtype).check(v.decode, shape, deployment, batch, context, tolerance=math.inf)
        words = (f"the best configuration's decode step model checked against a full profile at B={batch}, "
                 f"S={context}: largest relative difference {miss:.1e} (expected step and bound)")
        if miss > CHECK_TOLERANCE:
            words += (f", above the {CHECK_TOLERANCE:g} the step models hold for every model checked: the plan's "
                      "figures may be off by that much; `rooflinekit profile` of the deployment is exact")
        return words, miss > CHECK_TOLERANCE

    def _memory(self, deployment: Deployment, shape: Shape, fitter: StepFitter) -> tuple:
        """Weights per GPU, KV bytes per token and per sequence, the activation peaks (decode, by
        batch; a prompt's prefill), from the transformed design captures."""
        context = shape.contexts[-1]

        def capture(batch: int, phase: str = "decode", at: int = context):
            return fitter.transformed(replace(fitter.base, phase=phase, batch=batch, context=at), deployment).capture

        if shape.fit_batch:
            peaks = PeakInBatch.from_captures(1, capture(1), 2, capture(2))
        else:  # counts not polynomial in batch: each batch's own capture (the step model took them)
            peaks = PeakInBatch(at=tuple((b, activation_peak(capture(b)) or 0.0) for b in shape.batches))
        prefill = self._shapes(shape.fit_batch)[1]
        workload = fitter._workload(prefill, 1, prefill.contexts[0])
        prefill_peak = activation_peak(fitter.transformed(workload, deployment).capture) or 0.0
        counted = fitter.transformed(replace(fitter.base, batch=1, context=context), deployment)
        par = counted.parallel or {}
        weights = float(par.get("weights_per_gpu") or counted.capture.param_bytes_total)
        terms: dict[int | None, float] = {}
        per_sequence = 0.0
        stands = fitter.stands()
        for site in counted.attention:
            cost, spec = site.cost, site.spec
            if cost is None:
                continue
            window = (spec.window or spec.chunk) if spec is not None else None
            terms[window] = terms.get(window, 0.0) + stands(site.module) * (cost.cache_bytes_per_token or 0.0)
            per_sequence += stands(site.module) * (cost.cache_bytes_per_sequence or 0.0)
        return weights, tuple((pt, w) for w, pt in terms.items()), per_sequence, peaks, prefill_peak

    def what_would_fit(self, variants: list[Variant]) -> str:
        """When nothing fits: the least memory a candidate needs, and the smallest TP degree (a
        power of two, so the GPU count) or weight format at which one sequence would fit."""
        t, usable, block = self.targets, self._usable(), self._block()
        if usable is None:
            return "no configuration fits in memory"
        least = min(variants, key=lambda v: v.memory(1, t.isl + t.osl, block))
        need = least.memory(1, t.isl + t.osl, block)
        words = (f"nothing fits in memory: the least any candidate needs is {need / 1e9:.1f} GB per GPU "
                 f"({least.deployment.words(self.fitter.base.dtype_key)}, TP {least.deployment.tp}, one sequence of "
                 f"{t.isl + t.osl} tokens) against {usable / 1e9:.1f} GB usable")
        base = least.deployment
        for fmt in ("fp8", "int4"):
            if fmt in self.options.weight_dtypes or fmt == base.weight_dtype:
                continue
            v = self.variant(replace(base, weight_dtype=fmt), least.dtype)
            if not isinstance(v, str) and v.memory(1, t.isl + t.osl, block) <= usable:
                return words + f"; with --weight-dtypes {fmt} it would fit at TP {base.tp}"
        tp = base.tp * 2
        while tp <= 4096:
            v = self.variant(replace(base, tp=tp, ep=tp if base.ep > 1 else 1), least.dtype)
            if isinstance(v, str):
                break
            if v.memory(1, t.isl + t.osl, block) <= usable:
                return words + f"; at TP {tp} it would fit: give --gpus {tp} or more"
            tp *= 2
        return words + "; no TP degree tried (up to 4096) makes it fit"

    # -- the layouts and formats searched --

    def deployments(self) -> Iterator[tuple[Deployment, str, str]]:
        """(deployment, activation dtype, format name) of every layout and format searched."""
        o = self.options
        searched = searched_settings()
        grid = [dict(zip([s.name for s in searched], values, strict=True))
                for values in itertools.product(*(getattr(o, s.plural) for s in searched))]
        for tp, ep in self.layouts():
            for name in o.weight_dtypes:
                w, act = WEIGHT_FORMATS[name]
                for values in grid:
                    yield self.deployment(tp, ep, w, **values), act or self.fitter.base.dtype, name

    def deployment(self, tp: int, ep: int, weight_dtype: str | None, **searched: str) -> Deployment:
        """The searched deployment of a layout, weight format and the other searched settings' values
        (the KV cache format): an EP that does not divide the experts holds redundant copies up to
        whole slots per GPU; EP layouts take --ep-imbalance."""
        o, experts = self.options, self.routed_experts()
        # the engine's host time is added by the planner's compositions (host_s), not the step models:
        # the deployment carries the efficiency source, not the engine; two-batch overlap hides an
        # expert-parallel all-to-all, so only EP layouts take it (as SGLang's and vLLM's engines)
        return Deployment(hardware=self.hw.name, tp=tp, ep=ep, weight_dtype=weight_dtype, **searched,
                          efficiency=o.efficiency, overlap=o.overlap if ep > 1 else "none",
                          kernels=o.kernels, memory_fraction=o.memory_fraction,
                          redundant_experts=-experts % ep if experts and ep > 1 else 0,
                          ep_imbalance=o.ep_imbalance if ep > 1 else 1.0)

    def layouts(self) -> list[tuple[int, int]]:
        """(TP, EP) of every instance layout searched: TP degrees (within a node unless asked) with
        EP 1, or for MoE models EP = TP, and TP 1 with experts over EP GPUs (wide_eps); with
        --prefill/--decode layouts given, those."""
        o = self.options
        if o.prefill_layouts is not None or o.decode_layouts is not None:
            given = (o.prefill_layouts or ()) + (o.decode_layouts or ())
            if o.prefill_layouts is None or o.decode_layouts is None:  # the other pool searched freely
                given = self._free_layouts() + given
            return list(dict.fromkeys(given))
        return self._free_layouts()

    def _free_layouts(self) -> list[tuple[int, int]]:
        o = self.options
        # TP within the scale-up domain (a node) unless asked: TP across nodes is not served
        tps = o.tps or tuple(_powers(min(o.gpus, self.hw.node_gpus or o.gpus)))
        moe = self._moe()
        wide = [e for e in (o.eps or wide_eps(o.gpus, self.hw.node_gpus)) if e > 1] if moe else []
        out = []
        for tp in tps:
            # experts over the TP group, or (TP 1) data-parallel attention with experts over EP GPUs
            for ep in ((1, tp) if moe and tp > 1 else (1, *wide)):
                out.append((tp, ep))
        return out

    def routed_experts(self) -> int | None:
        """The routed experts of the model's MoE layers (the most any layer has), None without."""
        def count() -> int | None:
            counting = self.fitter.raw(replace(self.fitter.base, batch=1), Deployment())
            found = [int(t["experts"]) for op in counting.raw.capture.ops if (t := op.attrs.get("expected_experts"))]
            return max(found) if found else None

        return self._kept(("routed experts",), count)

    def _moe(self) -> bool:
        counting = self.fitter.raw(replace(self.fitter.base, batch=1), Deployment())
        return bool(counting.models)

    # -- the hardware's figures --

    def _pool_unit(self) -> int:
        """GPUs a disaggregated pool is sized in: a node's when the budget spans nodes, else 1."""
        node = self.hw.node_gpus
        return node if node and self.options.gpus > node else 1

    def _usable(self) -> float | None:
        capacity = self.hw.memory_bytes
        if not capacity:
            return None
        return max(0.0, capacity - self.hw.reserve_bytes) * self.options.memory_fraction

    def _block(self) -> int:
        return 16 if self.options.kernels == "serving" else 1

    def _send_s(self, tokens: int, hidden: float, gpus: int) -> float:
        """One point-to-point send of `tokens` x `hidden` bytes (a pipeline send, a prompt's KV
        cache): the link's latency and its one-direction bandwidth, the scale-out network's when
        `gpus` span nodes."""
        bandwidth = link_bandwidth(self.hw.interconnect_bandwidth) or 0.0  # one direction
        latency = self.hw.interconnect_latency or 0.0
        if gpus > (self.hw.node_gpus or gpus):
            bandwidth = self.hw.scale_out_bandwidth or bandwidth
            latency = max(latency, self.hw.scale_out_latency or 0.0)
        return latency + (tokens * hidden / bandwidth if bandwidth else 0.0)
