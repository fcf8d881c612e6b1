"""`rooflinekit plan`: the best deployment of the user's model for a GPU budget and latency targets.

The search prices every combination of tensor / expert / pipeline parallel degrees, replicas,
weight and KV formats, concurrency (batch per instance), chunked-prefill budget, speculative
decoding and aggregated against disaggregated serving from step models (rooflinekit.stages.stepmodel):
per deployment, a few design captures fit every kernel's counts exactly, and a candidate costs one
pass over tens of kernel groups. What each candidate's figures mean (docs/plan.md):

- decode: the serving view's expected step (or the kernels view asked for) at batch B, averaged
  exactly over the contexts ISL .. ISL+OSL-1 the generation passes through;
- aggregated serving runs mixed steps: each step carries the B decode tokens and the prompt tokens
  that arrive meanwhile, p = B x ISL_new / OSL (chunked prefill), priced as one step whose kernels
  read the weights once (`mixed_mean`); time to first token = ceil(ISL_new / chunk) steps carrying
  a full chunk; time per output token = the mean mixed step;
- disaggregated serving: a prefill pool and a decode pool, each with its own degrees, GPUs split
  between them in the ratio that balances prompts prefilled and sequences finished per second;
  time to first token = one prefill of ISL_new tokens plus the KV cache sent to the decode pool;
- pipeline stages: M = PP micro-batches of B/PP sequences each in flight; the slowest stage holds
  ceil(L/PP) of the L layers and, taken conservatively, the embedding and head; one output token
  per sequence every PP stage times plus PP activation sends;
- speculative decoding (MTP heads or a draft model): per verify cycle, k draft steps and one
  verify step of k+1 tokens; E = (1 - a^(k+1)) / (1 - a) tokens accepted per cycle;
- memory per GPU: the weights it holds, the KV cache of B sequences at ISL+OSL (paged in blocks in
  the serving view), the activation peak of the step; at most the usable share of capacity.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TypeVar

from rooflinekit.analyses.pipeline_parallel import (
    boundary_hidden,
    module_stages,
    op_stages,
    stage_of_path,
    stage_weights,
    token_send,
)
from rooflinekit.analyses.stepfit import Shape, StepFitter
from rooflinekit.core.errors import UserError, WorkloadError
from rooflinekit.core.plan import (
    FORMAT_ORDER,
    TARGETS_AT,
    WEIGHT_FORMATS,
    PlanConfig,
    PlanResult,
    Pool,
    Speculative,
    Targets,
    pareto_front,
)
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import OVERLAPS, Deployment, ModelSource, Workload
from rooflinekit.core.revise import revised
from rooflinekit.outputs.engine_flags import engine_commands
from rooflinekit.stages import collectives
from rooflinekit.stages.collectives import link_bandwidth
from rooflinekit.stages.engine import engine_cost
from rooflinekit.stages.expected import with_efficiency
from rooflinekit.stages.hardware import HardwareDB, HardwareSpec, hardware_db
from rooflinekit.stages.memory import PeakInBatch, activation_peak
from rooflinekit.stages.pipeline_parallel import steady_step
from rooflinekit.stages.polyfit import FitError
from rooflinekit.stages.queueing import MAX_UTILISATION, max_rate, wait_quantile
from rooflinekit.stages.speculative import DEFAULT_ACCEPT, speculative_cycle
from rooflinekit.stages.spread import Spread, load_spreads
from rooflinekit.stages.stepmodel import StepModel, mixed_mean, mixed_mean_bound
from rooflinekit.stages.workload import load_source, torch_dtype

#: Chunked-prefill budgets (prompt tokens per step) the search tries for aggregated serving.
CHUNKS = (512, 2048, 8192)
#: Module models' scalings a step model fits from two batches (rooflinekit.stages.stepmodel).
FITTED_SCALINGS = ("polynomial", "expected-experts")
#: Batches per instance the search tries: powers of two up to this.
MAX_BATCH = 1024
#: The largest relative difference between a step model and a full profile that the check accepts
#: without a warning in the notes.
CHECK_TOLERANCE = 1e-6


T = TypeVar("T")


@dataclass(frozen=True)
class PlanOptions:
    """The search space and the assumptions it is priced with."""

    gpus: int = 8
    hardware: str = "H800"
    kernels: str = "serving"
    weight_dtypes: tuple[str, ...] = ("bf16", "fp8")
    kv_dtypes: tuple[str, ...] = ("bf16", "fp8")
    tps: tuple[int, ...] | None = None  # None: powers of two up to the budget
    #: EP degrees with data-parallel attention (DEPn) for MoE models; None: wide_eps
    eps: tuple[int, ...] | None = None
    #: (TP, EP) layouts a disaggregated prefill pool may take; None: any searched
    prefill_layouts: tuple[tuple[int, int], ...] | None = None
    #: (TP, EP) layouts a decode instance (aggregated, or a disaggregated decode pool) may take
    decode_layouts: tuple[tuple[int, int], ...] | None = None
    #: The busiest EP rank's tokens over the mean (Deployment.ep_imbalance), for every EP layout
    ep_imbalance: float = 1.0
    pps: tuple[int, ...] = (1, 2, 4)
    modes: tuple[str, ...] = ("aggregated", "disaggregated")
    chunks: tuple[int, ...] = CHUNKS
    max_batch: int = MAX_BATCH
    mtp: int = 0
    draft: ModelSource | str | None = None  # a draft model (its source, or a path in the Python API)
    accept: float = DEFAULT_ACCEPT
    memory_fraction: float = 0.9
    rate: float | None = None  # requests/s over the budget (None: the highest each candidate sustains)
    check: bool = True
    #: The Python API's `Targets.at` (the CLI's --targets-at): "expected" or "p90".
    targets_at: str = "expected"
    dtype: str = "bf16"  # the activation dtype (the Python API's; the CLI passes --dtype to run_plan)
    #: The expected time's efficiency source (Deployment.efficiency; --efficiency)
    efficiency: str | None = None
    #: The serving engine whose host time per step the expected figures add (Deployment.engine; --engine)
    engine: str | None = None
    #: How expected steps overlap collectives with kernels (Deployment.overlap; --overlap): with
    #: "two-batch" only disaggregated pools without pipeline stages are priced
    overlap: str = "none"


@dataclass
class Variant:
    """One deployment's priced parts: decode and prefill step models, memory per GPU."""

    deployment: Deployment
    decode: StepModel
    prefill: StepModel
    weights: float
    kv_terms: tuple[tuple[float, int | None], ...]  # (cache bytes per token, window or None) per layer kind
    kv_per_sequence: float
    activations: PeakInBatch  # the decode step's activation peak at ISL+OSL, by batch
    prefill_activations: float  # a prompt's prefill step's activation peak
    verify: StepModel | None = None
    draft: StepModel | None = None
    dtype: str = "bf16"  # the activation dtype the steps are priced at (fp8: W8A8)
    format: str = "bf16"  # the weight format's name (rooflinekit.core.plan.WEIGHT_FORMATS)

    def kv_bytes(self, context: int, block: int = 1) -> float:
        """Cache bytes one sequence holds at `context` (paged in blocks of `block` tokens)."""
        return _cache_bytes(self.kv_per_sequence, self.kv_terms, context, block)

    def memory(self, batch: int, context: int, block: int, chunk: tuple[int, float] = (0, 0.0)) -> float:
        """Bytes one GPU holds at `batch` decode sequences of `context` (`chunk`: the tokens of a
        prompt chunk in the same step and its activation peak), as `profile --mix`'s memory section
        counts them: weights + KV cache of every sequence + the segments' activation peaks added."""
        tokens, peak = chunk
        cache = batch * self.kv_bytes(context, block) + (self.kv_bytes(tokens, block) if tokens else 0.0)
        return self.weights + cache + self.activations(batch) + peak

    def prefill_memory(self, context: int, block: int) -> float:
        """Bytes one GPU of a prefill instance holds for one prompt of `context` tokens."""
        return self.weights + self.kv_bytes(context, block) + self.prefill_activations


@dataclass
class Stages:
    """A variant cut into pipeline stages as `profile --pp` cuts it: each stage's step models
    (decode, prefill, verify), weights and KV cache terms, and the activation send's bytes."""

    decode: list[StepModel]
    prefill: list[StepModel]
    verify: list[StepModel] | None
    weights: list[float]
    kv_terms: list[tuple[tuple[float, int | None], ...]]
    kv_per_sequence: list[float]
    send_bytes_per_token: float

    def kv_bytes(self, k: int, context: int, block: int) -> float:
        """Cache bytes one sequence holds on stage `k` at `context`."""
        return _cache_bytes(self.kv_per_sequence[k], self.kv_terms[k], context, block)


def _cache_bytes(per_sequence: float, terms: tuple[tuple[float, int | None], ...], context: int, block: int) -> float:
    """Cache bytes one sequence holds at `context`: its fixed state, and per layer kind its bytes
    per token x the positions it holds (the context, or its window), rounded up to whole blocks."""
    total = per_sequence
    for per_token, window in terms:
        held = min(context, window) if window else context
        total += per_token * (math.ceil(held / block) * block)
    return total


def wide_eps(gpus: int, node: int | None) -> list[int]:
    """EP degrees a data-parallel-attention layout is searched at: powers of two up to the budget
    and, where the budget spans nodes, the budget less a power-of-two pool of whole nodes (a decode
    pool beside a prefill pool: DeepSeek's EP 144 beside EP 32 on 22 nodes)."""
    out = set(_powers(gpus))
    if node and gpus > node:
        out.update(gpus - p for p in _powers(gpus) if p >= node and p % node == 0 and gpus - p >= node)
    return sorted(out)


def _powers(limit: int) -> list[int]:
    out, b = [], 1
    while b <= limit:
        out.append(b)
        b *= 2
    return out


class Planner:
    """Prices the candidates of one request (module doc)."""

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
                                     WEIGHT_FORMATS[config.weight_dtype][0], config.kv_dtype)
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

    # -- the search --

    def deployments(self) -> Iterator[tuple[Deployment, str, str]]:
        """(deployment, activation dtype, format name) of every layout and format searched."""
        o = self.options
        for tp, ep in self.layouts():
            for name in o.weight_dtypes:
                w, act = WEIGHT_FORMATS[name]
                for kv in o.kv_dtypes:
                    yield self.deployment(tp, ep, w, kv), act or self.fitter.base.dtype, name

    def deployment(self, tp: int, ep: int, weight_dtype: str | None, kv_dtype: str | None) -> Deployment:
        """The searched deployment of a layout and formats: an EP that does not divide the experts
        holds redundant copies up to whole slots per GPU; EP layouts take --ep-imbalance."""
        o, experts = self.options, self.routed_experts()
        # the engine's host time is added by the planner's compositions (host_s), not the step models:
        # the deployment carries the efficiency source, not the engine; two-batch overlap hides an
        # expert-parallel all-to-all, so only EP layouts take it (as SGLang's and vLLM's engines)
        return Deployment(hardware=self.hw.name, tp=tp, ep=ep, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
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

    # -- pricing one candidate --

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

    # -- pipeline stages --

    def stages(self, v: Variant, pp: int) -> Stages:
        """`v` cut into `pp` stages (built once per variant and degree)."""
        key = (v.deployment, v.dtype, pp)
        if key not in self._stages:
            self._stages[key] = self._cut(v, pp)
        return self._stages[key]

    def _cut(self, v: Variant, pp: int) -> Stages:
        fitter, d = self.fitter_for(v.dtype), v.deployment
        layout = fitter.layout(pp)
        decode_shape, prefill_shape, verify_shape = self._shapes(v.decode.batches is None)

        def models(shape: Shape | None) -> list[StepModel] | None:
            if shape is None:
                return None
            return [fitter.step_model(shape, d, self.hw, (layout, k)) for k in range(pp)]

        workload = replace(fitter.base, batch=1, context=decode_shape.contexts[-1])
        counted = fitter.transformed(workload, d)
        ops = counted.capture.ops
        modules = module_stages(ops, op_stages(ops, layout))
        held = SimpleNamespace(counted=counted, model=fitter.model())
        with fitter.facts():
            weights = stage_weights(held, layout, modules, replace(d, pp=pp))
        terms: list[dict] = [{} for _ in range(pp)]
        per_sequence = [0.0] * pp
        for site in counted.attention:
            if site.cost is None:
                continue
            window = (site.spec.window or site.spec.chunk) if site.spec is not None else None
            for path in fitter.stood_for(site.module):
                k = stage_of_path(path, layout, modules)
                terms[k][window] = terms[k].get(window, 0.0) + (site.cost.cache_bytes_per_token or 0.0)
                per_sequence[k] += site.cost.cache_bytes_per_sequence or 0.0
        hidden, _ = boundary_hidden(ops, layout, workload.tokens, fitter.model())
        return Stages(models(decode_shape), models(prefill_shape), models(verify_shape), weights,
                      [tuple((pt, w) for w, pt in t.items()) for t in terms], per_sequence,
                      float((hidden or 0) * torch_dtype(workload).itemsize))

    def _sends(self, v: Variant, pp: int, tokens: int) -> tuple[tuple[float, float], tuple[float, float]]:
        """((bound, expected) of one activation send, (bound, expected) of the token send back) of
        a micro-batch of `tokens` tokens, as `profile --pp` prices them."""
        group = max(v.deployment.tp, v.deployment.ep) * pp
        call = collectives.attrs("send", group, tokens * self.stages(v, pp).send_bytes_per_token, "pipeline")
        send = (collectives.call_bound(call, self.hw), collectives.call_expected(call, self.hw)[0])
        return send, token_send(self.hw, replace(v.deployment, pp=pp), tokens)

    def _pipelined(self, v: Variant, pp: int, micro: int, q_len: int, bounds: list[float],
                   expected: list[float]) -> tuple[float, float]:
        """(expected, bound) of the steady pipeline's period over the stages' micro-batch times."""
        send, back = self._sends(v, pp, micro * q_len)
        return (steady_step(expected, pp, send[1], back[1]), steady_step(bounds, pp, send[0], back[0]))

    def memory(self, v: Variant, batch: int, pp: int, chunk: tuple[int, float] = (0, 0.0)) -> float:
        """Bytes the fullest GPU of an instance holds (`profile`'s memory section; under PP its
        fullest stage's: the stage's weights and KV cache of the batch, a micro-batch's
        activations)."""
        return self._kept(("memory", self._identity(v), batch, pp, chunk), lambda: self._memory_of(v, batch, pp, chunk))

    def _memory_of(self, v: Variant, batch: int, pp: int, chunk: tuple[int, float]) -> float:
        t, block = self.targets, self._block()
        if pp <= 1:
            return v.memory(batch, t.isl + t.osl, block, chunk)
        st, (tokens, peak) = self.stages(v, pp), chunk
        fullest = max(st.weights[k] + batch * st.kv_bytes(k, t.isl + t.osl, block)
                      + (st.kv_bytes(k, tokens, block) if tokens else 0.0) for k in range(pp))
        return fullest + v.activations(batch // pp) + peak

    def _decode_time(self, v: Variant, batch: int, pp: int, share: float
                     ) -> tuple[float, float, Speculative | None]:
        """(expected, bound, speculation) of the mean seconds per output token of a sequence over
        the generation, with `share` of one prompt's prefill riding along each step (chunked
        prefill), pipeline stages and speculative decoding as the variant has them. The bound is
        the same composition of the steps' bounds, so never above the expected time."""
        return self._kept(("decode_time", self._identity(v), batch, pp, share),
                          lambda: self._decode_time_of(v, batch, pp, share))

    def _decode_time_of(self, v: Variant, batch: int, pp: int, share: float
                        ) -> tuple[float, float, Speculative | None]:
        t = self.targets
        start, stop = t.isl, t.isl + t.osl
        micro = batch // pp
        layers = self.fitter.layers()
        st = self.stages(v, pp) if pp > 1 else None

        def step(model: StepModel, q_len: int = 1) -> tuple[float, float]:
            if st is None:
                return (mixed_mean(model, v.prefill, micro, start, stop, share),
                        mixed_mean_bound(model, v.prefill, micro, start, stop, share))
            # the steady pipeline over each stage's mean: exact where one branch of the period and
            # one slowest stage hold over the contexts (docs/plan.md)
            pairs = st.verify if model is v.verify else st.decode
            ones = [mixed_mean(m, p, micro, start, stop, share / pp) for m, p in zip(pairs, st.prefill, strict=True)]
            lows = [mixed_mean_bound(m, p, micro, start, stop, share / pp)
                    for m, p in zip(pairs, st.prefill, strict=True)]
            return self._pipelined(v, pp, micro, q_len, lows, ones)

        # once per step (a verify step's cycle pays it once), over its sequences: a mixed step's
        # prompt chunk is one more, as `profile --mix` counts it
        host = self.host_s(batch + (1 if share > 0 else 0))
        plain, plain_bound = step(v.decode)
        plain += host
        if v.verify is None:
            return plain, plain_bound, None
        k = self.options.mtp or 1
        if v.draft is not None:
            drafts = (v.draft.mean_expected(batch, start, stop),
                      mixed_mean_bound(v.draft, v.draft, batch, start, stop, 0.0))
            name = "draft model"
        else:  # an MTP head: one decoder layer and the output head
            share_of = 1.0 / layers if layers > 1 else 1.0
            drafts = (mixed_mean(v.decode, v.decode, batch, start, stop, 0.0, layer_share=share_of),
                      mixed_mean_bound(v.decode, v.decode, batch, start, stop, 0.0, layer_share=share_of))
            name = "MTP"
        verify, verify_bound = step(v.verify, k + 1)
        verify += host
        cycle = speculative_cycle(drafts[0], verify, self.options.accept, k)
        low = speculative_cycle(drafts[1], verify_bound, self.options.accept, k)
        return (cycle.time_per_token_s, low.time_per_token_s,
                Speculative(name, k, self.options.accept, cycle.tokens_per_cycle, drafts[0], verify))

    def aggregated(self, v: Variant, pp: int, batch: int, chunk: int) -> PlanConfig:
        """One aggregated candidate: `batch` sequences per instance of TP x PP GPUs, prompts
        prefilled in chunks of at most `chunk` tokens riding along the decode steps."""
        t, d = self.targets, v.deployment
        new = t.new_prompt_tokens
        per_step = batch * new / t.osl  # prompt tokens arriving per step in the steady state
        gpus = max(d.tp, d.ep) * pp
        replicas = self.options.gpus // gpus
        base = dict(mode="aggregated", tp=d.tp, ep=d.ep, pp=pp, replicas=replicas, weight_dtype=v.format,
                    redundant_experts=d.redundant_experts, ep_imbalance=d.ep_imbalance,
                    dtype=v.dtype, kv_dtype=d.kv_dtype, kernels=d.kernels, batch=batch, gpus=gpus * replicas, chunk=chunk)
        if per_step > chunk:
            return PlanConfig(**base, fits=False, reject_reason=f"chunk: {per_step:.0f} prompt tokens arrive per step, "
                              f"more than the chunk of {chunk}")
        tpot, tpot_bound, spec = self._decode_time(v, batch, pp, per_step / new)
        full = min(chunk, new)
        ttft_step, ttft_low, _ = self._decode_time(replace(v, verify=None), batch, pp, full / new)
        steps = math.ceil(new / full)
        # arrivals: the rate the batch sustains (Little: batch = rate x OSL x TPOT per attention
        # replica), or --rate's share; each replica's chunk budget a server of new/chunk steps a prompt
        sustained = batch * _dp(d) / (t.osl * tpot)
        rate = sustained if self.options.rate is None else self.options.rate / replicas
        if rate > sustained * (1 + 1e-12):
            return PlanConfig(**base, fits=False, reject_reason=f"rate: {rate * replicas:.3g} requests/s need more "
                              f"than the {batch} sequences per instance hold ({sustained * replicas:.3g}/s)")
        service = new / chunk * ttft_step
        busy = rate / _dp(d) * service
        if busy >= 1:
            return PlanConfig(**base, fits=False, reject_reason=f"chunk: the prompts arriving need {busy:.0%} of the "
                              f"chunk budget's time")
        wait = wait_quantile(rate / _dp(d), service, 1)
        if not math.isfinite(wait):
            return PlanConfig(**base, fits=False, reject_reason="chunk: the prompts arriving fill the chunk budget")
        ttft = steps * ttft_step + wait
        tokens_per_gpu = t.osl * rate / gpus
        return self._finish(PlanConfig(**base, speculative=spec, ttft_s=ttft, tpot_s=tpot, ttft_bound_s=steps * ttft_low,
                                       tpot_bound_s=tpot_bound, ttft_wait_s=wait, rate_per_s=rate * replicas,
                                       e2e_s=ttft + (t.osl - 1) * tpot, tokens_per_s_per_gpu=tokens_per_gpu,
                                       tokens_per_s_per_user=1.0 / tpot,
                                       binding=v.decode.binding(batch // pp, t.isl + t.osl // 2)),
                            v, batch, pp, chunk=(t.isl - new + full, self._chunk_peak(v, full)))

    def disaggregated(self, pv: Variant, dv: Variant, pp: int, batch: int) -> PlanConfig | None:
        """One disaggregated candidate: prefill instances of `pv`'s degrees (one prompt per step),
        decode instances of `dv`'s with `batch` sequences; None when both do not fit the budget."""
        t = self.targets
        gp = max(pv.deployment.tp, pv.deployment.ep)
        gd = max(dv.deployment.tp, dv.deployment.ep) * pp
        if gp + gd > self.options.gpus:
            return None
        prefill_s = pv.prefill.expected(1, pv.prefill.design.contexts[0]) + self.host_s(1)
        prefill_bound = pv.prefill.bound(1, pv.prefill.design.contexts[0])
        tpot, tpot_bound, spec = self._decode_time(dv, batch, pp, 0.0)
        # balance: prompts prefilled per second against sequences finished per second
        rate_p, rate_d = _dp(pv.deployment) / prefill_s, batch * _dp(dv.deployment) / (t.osl * tpot)
        n_p, n_d = _pools(self.options.gpus, gp, gd, rate_p, rate_d, self._pool_unit())
        if not n_p:
            return None
        used = n_p * gp + n_d * gd
        # the prompt's KV cache, one decode GPU's share times the GPUs sharing it, sent once
        kv_sent = dv.kv_bytes(t.isl) * dv.deployment.tp
        transfer = self._send_s(1, kv_sent, used) if used > 1 else 0.0
        # arrivals: the highest rate whose TTFT (p90, the prefill queue) meets the target, else the
        # pools' rate at MAX_UTILISATION of the prefill servers, or --rate; never past the decode pool
        servers, capacity = n_p * _dp(pv.deployment), min(n_p * rate_p, n_d * rate_d)
        if self.options.rate is not None:
            rate = self.options.rate
        else:
            rate = 0.0
            if t.ttft_s is not None:
                target = t.ttft_s / self.margin("disaggregated")[0]  # met at p90 with --targets-at p90
                rate = min(max_rate(target - prefill_s - transfer, prefill_s, servers), n_d * rate_d)
            if not rate:  # no target, or none met: priced where the queue still drains (the target rejects)
                rate = min(MAX_UTILISATION * n_p * rate_p, n_d * rate_d)
        wait = wait_quantile(rate, prefill_s, servers)
        ttft = prefill_s + transfer + wait
        output = t.osl * rate
        d = dv.deployment
        prefill_memory = pv.prefill_memory(t.isl, self._block())
        usable = self._usable()
        prefill = Pool(pv.deployment.tp, pv.deployment.ep, 1, n_p, 1, prefill_s, pv.deployment.redundant_experts)
        decode = Pool(d.tp, d.ep, pp, n_d, batch, tpot, d.redundant_experts)
        overlap = "two-batch" if "two-batch" in (pv.deployment.overlap, d.overlap) else None
        config = PlanConfig(mode="disaggregated", tp=d.tp, ep=d.ep, pp=pp, replicas=n_d, weight_dtype=dv.format, overlap=overlap,
                            redundant_experts=d.redundant_experts, ep_imbalance=d.ep_imbalance,
                            dtype=dv.dtype, kv_dtype=d.kv_dtype, kernels=d.kernels, batch=batch, gpus=used, speculative=spec,
                            ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + (t.osl - 1) * tpot, ttft_bound_s=prefill_bound + transfer,
                            ttft_wait_s=wait, rate_per_s=rate,
                            tpot_bound_s=tpot_bound, tokens_per_s_per_gpu=output / used, tokens_per_s_per_user=1.0 / tpot,
                            binding=dv.decode.binding(batch // pp, t.isl + t.osl // 2), prefill=prefill, decode=decode,
                            pool_ratio=f"{n_p * gp}:{n_d * gd}")
        if rate >= n_p * rate_p or rate > n_d * rate_d * (1 + 1e-12):
            return replace(config, fits=False, reject_reason=f"rate: {rate:.3g} requests/s; the pools serve "
                                                             f"{capacity:.3g}/s")
        if usable is not None and prefill_memory > usable:
            return replace(config, fits=False, memory_per_gpu_bytes=prefill_memory, usable_bytes=usable,
                           reject_reason=f"memory: prefill instance {prefill_memory / 1e9:.1f} GB per GPU, "
                                         f"{usable / 1e9:.1f} GB usable")
        return self._finish(config, dv, batch, pp)

    def target_batch(self, v: Variant, pp: int, most: int, aggregated: bool) -> int | None:
        """The largest batch (a multiple of `pp`, at most `most`) whose TPOT meets the target, by
        bisection (TPOT grows with the batch); None without a TPOT target, a fitted batch, or one."""
        t = self.targets
        if t.tpot_s is None or v.decode.batches is not None or most < pp:
            return None
        # the largest batch up to --max-batch, found once per variant, degree and mode (the
        # chunks' caps only lower it: TPOT grows with the batch)
        found = self._kept(("target batch", self._identity(v), pp, aggregated),
                           lambda: self._largest_meeting(v, pp, self.options.max_batch, aggregated))
        return None if found is None else min(found, most - most % pp)

    def _largest_meeting(self, v: Variant, pp: int, most: int, aggregated: bool) -> int | None:
        t = self.targets

        def meets(batch: int) -> bool:
            share = batch / t.osl if aggregated else 0.0  # the prompt tokens arriving per step
            return self._decode_time(v, batch, pp, share)[0] * margin <= t.tpot_s

        margin = self.margin("aggregated" if aggregated else "disaggregated")[1]

        if most < pp or not meets(pp):
            return None
        lo, hi = 1, most // pp  # in units of pp
        while hi > lo:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if meets(mid * pp) else (lo, mid - 1)
        return lo * pp

    def batch_limit(self, v: Variant, pp: int, chunk: tuple[int, float] = (0, 0.0)) -> int | None:
        """The largest batch (a multiple of `pp`) whose memory per GPU fits (`memory` at ISL+OSL
        with `chunk`), or None when none does or capacity is unknown."""
        usable, t, block = self._usable(), self.targets, self._block()
        if usable is None:
            return None
        tokens, peak = chunk
        if pp <= 1:
            parts = [(v.weights + (v.kv_bytes(tokens, block) if tokens else 0.0), v.kv_bytes(t.isl + t.osl, block))]
        else:
            st = self.stages(v, pp)
            parts = [(st.weights[k] + (st.kv_bytes(k, tokens, block) if tokens else 0.0),
                      st.kv_bytes(k, t.isl + t.osl, block)) for k in range(pp)]
        lines = v.activations.lines or ((0.0, 0.0),)
        limit = min(math.floor((usable - fixed - peak - a) / (per + b / pp)) if per + b > 0 else math.inf
                    for fixed, per in parts for a, b in lines)
        if not math.isfinite(limit):
            return None
        limit -= limit % pp
        while limit >= pp and self.memory(v, limit, pp, chunk) > usable:  # rounding
            limit -= pp
        return limit if limit >= pp else None

    def _step(self, v: Variant, batch: int, pp: int, context: int) -> tuple[float, float]:
        """(expected, bound) of one instance's decode step of `batch` sequences at `context`, as
        `profile --phase decode` (with `--pp`: the steady pipeline's period) gives them."""
        return self._kept(("step", self._identity(v), batch, pp, context), lambda: self._step_of(v, batch, pp, context))

    def _step_of(self, v: Variant, batch: int, pp: int, context: int) -> tuple[float, float]:
        if pp <= 1:
            return v.decode.expected(batch, context) + self.host_s(batch), v.decode.bound(batch, context)
        micro, st = batch // pp, self.stages(v, pp)
        expected, bound = self._pipelined(v, pp, micro, 1, [m.stage_bound(micro, context) for m in st.decode],
                                          [m.expected(micro, context) for m in st.decode])
        return expected + self.host_s(batch), bound

    def _chunk_peak(self, v: Variant, tokens: int) -> float:
        """The activation peak of a prompt chunk of `tokens` (a prefill of that many tokens after
        the prompt's cached prefix), from its own capture."""
        return self._kept(("chunk_peak", self._identity(v), tokens), lambda: self._chunk_peak_of(v, tokens))

    def _chunk_peak_of(self, v: Variant, tokens: int) -> float:
        t, fitter = self.targets, self.fitter_for(v.dtype)
        cached = t.isl - t.new_prompt_tokens
        phase, q_len, context = ("decode", tokens, cached) if cached else ("prefill", 1, tokens)
        workload = replace(fitter.base, phase=phase, batch=1, context=context, decode_q_len=q_len)
        return activation_peak(fitter.transformed(workload, v.deployment).capture) or 0.0

    def _finish(self, config: PlanConfig, v: Variant, batch: int, pp: int,
                chunk: tuple[int, float] = (0, 0.0)) -> PlanConfig:
        """Memory and fit, bounds, the targets checked (`chunk`: a prompt chunk's tokens held and
        activation peak in each step, aggregated serving)."""
        t = self.targets
        memory = self.memory(v, batch, pp, chunk)
        usable = self._usable()
        fits = usable is None or memory <= usable
        context = t.isl + t.osl // 2
        step, low = self._step(v, batch, pp, context)
        config = revised(config, memory_per_gpu_bytes=memory, usable_bytes=usable, fits=fits, step_context=context,
                         step_s=step, step_bound_s=low, gpus_idle=self.options.gpus - config.gpus,
                         engine_host_s=self.host_s(batch) if self.engine is not None else None)
        if not self.own_table:
            config = with_spread(config)
        ttft, tpot = target_figures(config, t)
        at = " (p90)" if t.at == "p90" else ""
        reason = None
        if not fits:
            reason = f"memory: {memory / 1e9:.1f} GB per GPU, {usable / 1e9:.1f} GB usable"
        elif t.ttft_s is not None and ttft > t.ttft_s:
            reason = f"target: TTFT{at} {ttft * 1e3:.0f} ms > {t.ttft_s * 1e3:.0f} ms"
        elif t.tpot_s is not None and tpot > t.tpot_s:
            reason = f"target: TPOT{at} {tpot * 1e3:.1f} ms > {t.tpot_s * 1e3:.1f} ms"
        return revised(config, meets_slo=reason is None, reject_reason=reason)


def with_spread(config: PlanConfig) -> PlanConfig:
    """The configuration with the p10-p90 ranges of its TTFT and TPOT (Planner.spreads)."""
    ttft, tpot = Planner.spreads(config.mode)
    (t10, t90), (p10, p90) = ttft.range(config.ttft_s or 0.0), tpot.range(config.tpot_s or 0.0)
    return revised(config, ttft_p10_s=t10 if config.ttft_s is not None else None,
                   ttft_p90_s=t90 if config.ttft_s is not None else None,
                   tpot_p10_s=p10 if config.tpot_s is not None else None,
                   tpot_p90_s=p90 if config.tpot_s is not None else None)


def target_figures(config: PlanConfig, targets: Targets) -> tuple[float | None, float | None]:
    """The (TTFT, TPOT) the targets are checked against: expected, or the p90 ends (Targets.at)."""
    if targets.at == "p90":
        return config.ttft_p90_s, config.tpot_p90_s
    return config.ttft_s, config.tpot_s


def _pools(gpus: int, gp: int, gd: int, rate_p: float, rate_d: float, unit: int = 1) -> tuple[int, int]:
    """Instances of the prefill (gp GPUs each) and decode (gd each) pools within `gpus` that
    serve the most requests per second (the slower pool's rate), fewer GPUs on a tie; each pool's
    GPUs a whole number of `unit` (a node, when the budget spans nodes). (0, 0) when none fits."""
    best = (0.0, 0, 0, 0)
    for n_p in range(1, gpus // gp + 1):
        if (n_p * gp) % unit:
            continue
        most = (gpus - n_p * gp) // gd
        while most >= 1 and (most * gd) % unit:
            most -= 1
        if most < 1:
            continue
        # the fewest decode instances that keep up with the prefills (more serve no more)
        need = max(1, math.ceil(n_p * rate_p / rate_d))
        while need > 1 and (need - 1) * rate_d >= n_p * rate_p:
            need -= 1
        while need * rate_d < n_p * rate_p:
            need += 1
        while (need * gd) % unit:
            need += 1
        n_d = min(most, need)
        served = min(n_p * rate_p, n_d * rate_d)
        used = n_p * gp + n_d * gd
        if (served, -used) > (best[0], -best[1]):
            best = (served, used, n_p, n_d)
    return best[2], best[3]


# -- the search ------------------------------------------------------------------------------------


def _pps(options: PlanOptions, gpus_per_instance: int, layers: int) -> list[int]:
    return [pp for pp in options.pps if pp == 1 or (gpus_per_instance * pp <= options.gpus and pp <= layers)]


def _with_and_without_speculation(variants: list[Variant]) -> list[Variant]:
    """Each variant as is, and where it drafts (MTP or a draft model) also without: speculative
    decoding is searched on and off."""
    out = []
    for v in variants:
        out.append(v)
        if v.verify is not None:
            out.append(replace(v, verify=None, draft=None))
    return out


def _candidates(planner: Planner, variants: list[Variant]) -> Iterator[PlanConfig]:
    """Every priced configuration (module doc); divisibility rejects are not yielded."""
    o, layers = planner.options, planner.fitter.layers()
    modes = (o.modes,) if isinstance(o.modes, str) else tuple(o.modes)  # "disaggregated" holds "aggregated"
    variants = _with_and_without_speculation(variants)
    batches = planner.batches()
    def allowed(v: Variant, layouts: tuple[tuple[int, int], ...] | None) -> bool:
        return layouts is None or (v.deployment.tp, v.deployment.ep) in layouts

    if "aggregated" in modes:
        new = planner.targets.new_prompt_tokens
        for v in variants:
            if not allowed(v, o.decode_layouts):
                continue
            g = max(v.deployment.tp, v.deployment.ep)
            for pp in _pps(o, g, layers):
                for chunk in o.chunks:
                    full = min(chunk, new)
                    tokens = planner.targets.isl - new + full
                    limit = planner.batch_limit(v, pp, (tokens, planner._chunk_peak(v, full)))
                    most = min(limit or o.max_batch, o.max_batch, chunk * planner.targets.osl // new)
                    for batch in _with_limit(batches, limit, v, planner.target_batch(v, pp, most, True)):
                        if batch % pp == 0:
                            yield planner.aggregated(v, pp, batch, chunk)
    if "disaggregated" in modes:
        for dv in variants:
            if not allowed(dv, o.decode_layouts):
                continue
            g = max(dv.deployment.tp, dv.deployment.ep)
            formats = (dv.format, dv.deployment.kv_dtype)
            for pv in variants:
                if pv.verify is not None or (pv.format, pv.deployment.kv_dtype) != formats \
                        or not allowed(pv, o.prefill_layouts):
                    continue
                for pp in _pps(o, g, layers):
                    limit = planner.batch_limit(dv, pp)
                    most = min(limit or o.max_batch, o.max_batch)
                    for batch in _with_limit(batches, limit, dv, planner.target_batch(dv, pp, most, False)):
                        if batch % pp:
                            continue
                        config = planner.disaggregated(pv, dv, pp, batch)
                        if config is not None:
                            yield config


def _dp(d: Deployment) -> int:
    """Attention replicas of an instance: EP without TP is data-parallel attention (each GPU runs
    attention for its own batch, the experts spread over all of them); otherwise one."""
    return d.ep if d.tp == 1 and d.ep > 1 else 1


def _with_limit(batches: tuple[int, ...], limit: int | None, v: Variant, target: int | None = None
                ) -> tuple[int, ...]:
    """The searched batches, the largest that fits in memory and the largest whose TPOT meets the
    target (where batch is fitted, so any batch can be priced; a step model built per batch
    prices only the batches it holds)."""
    if v.decode.batches is not None:
        return batches
    extra = {b for b in (limit, target) if b is not None and b <= batches[-1]}
    return tuple(sorted(set(batches) | extra))


def _preference(c: PlanConfig) -> tuple:
    """The best's order: tokens/s per GPU (to 6 significant digits: a closer tie is no difference),
    then the cheaper weight format (fewer bits held and read; W8A8 over weight-only at equal bits)."""
    rank = FORMAT_ORDER.index(c.weight_dtype) if c.weight_dtype in FORMAT_ORDER else len(FORMAT_ORDER)
    return float(f"{c.tokens_per_s_per_gpu:.6g}"), -rank


def _closest(configs: list[PlanConfig], targets: Targets) -> tuple[int | None, str | None]:
    """The fitting configuration nearest to meeting the targets, and the figure it misses by."""
    best, worst_ratio, words = None, math.inf, None
    for i, c in enumerate(configs):
        if not c.fits or c.ttft_s is None:
            continue
        misses, (ttft, tpot) = [], target_figures(c, targets)
        at = " (p90)" if targets.at == "p90" else ""
        if targets.ttft_s is not None:
            misses.append((ttft / targets.ttft_s, f"TTFT{at} {ttft * 1e3:.0f} ms against {targets.ttft_s * 1e3:.0f} ms"))
        if targets.tpot_s is not None:
            misses.append((tpot / targets.tpot_s, f"TPOT{at} {tpot * 1e3:.1f} ms against {targets.tpot_s * 1e3:.1f} ms"))
        if not misses:
            continue
        ratio, text = max(misses)
        if ratio < worst_ratio:
            best, worst_ratio, words = i, ratio, f"{text} ({(ratio - 1) * 100:.0f}% over)"
    return best, words


def run_plan(source: ModelSource, targets: Targets, options: PlanOptions | None = None, *, dtype: str = "bf16",
             model_options: tuple = (), host: PluginHost | None = None, db: HardwareDB | None = None,
             progress: Callable[[str], None] | None = None) -> PlanResult:
    """Search the deployments of `source` for `targets` within `options` (module doc)."""
    options = options or PlanOptions()
    start = time.perf_counter()
    planner = Planner(source, targets, options, dtype=dtype, model_options=model_options, host=host, db=db,
                      progress=progress)
    say = planner.progress
    variants, skipped, warnings = [], [], []
    deployments = list(planner.deployments())
    for i, (deployment, act, name) in enumerate(deployments, 1):
        words = f"{deployment.words(act)}{' (W8A8)' if act == 'fp8' else ''}"
        say(f"step models {i}/{len(deployments)}: {words or 'as run'}")
        v = planner.variant(deployment, act)
        if isinstance(v, str):
            skipped.append(f"{words}: {v}")
        else:
            variants.append(replace(v, format=name))
    if not variants:
        raise UserError("plan: no deployment could be priced: " + "; ".join(skipped[:3]))
    configs = list(_candidates(planner, variants))
    say(f"priced {len(configs)} configurations")
    fitting = [i for i, c in enumerate(configs) if c.fits and c.tokens_per_s_per_gpu]
    front = pareto_front([(configs[i].tokens_per_s_per_gpu, configs[i].tokens_per_s_per_user) for i in fitting])
    pareto = [fitting[i] for i in front]
    meeting = [i for i, c in enumerate(configs) if c.meets_slo]
    best = max(meeting, key=lambda i: _preference(configs[i])) if meeting else None
    closest, miss = (None, None) if best is not None else _closest(configs, targets)
    if options.check and best is not None:
        try:
            words, off = planner.check(configs[best])
            (warnings if off else planner.notes).append(words)
        except FitError as exc:  # the ops do not align: the figures stand, the check could not be made
            planner.notes.append(f"the best configuration's step model could not be checked against a full profile "
                                 f"({exc})")
    if not any(c.fits for c in configs):
        warnings.append(planner.what_would_fit(variants))
    assumed = _assumptions(options, targets, planner.routed_experts() is not None, planner.own_table)
    notes = planner.notes + [f"not priced: {s}" for s in skipped] + assumed
    info = {"name": source.name, "path": source.path, "kind": source.kind, "options": dict(model_options)}
    if planner.routed_experts():
        info["routed_experts"] = planner.routed_experts()
    commands = engine_commands(configs[best], "MODEL", planner.routed_experts()) if best is not None else {}
    return PlanResult(model=info, hardware=planner.hw.name, gpus=options.gpus, targets=targets,
                      candidates=len(configs), configs=configs, pareto=pareto, best=best, closest=closest,
                      closest_miss=miss, notes=notes, warnings=warnings, commands=commands, wall_s=time.perf_counter() - start,
                      captures=planner.captures, recounts=sum(f.recounts for f in planner.fitters.values()))


def spread_note(targets: Targets) -> str:
    """How the p10-p90 ranges are made and which end the targets are met at."""
    table = load_spreads()
    where = ("the targets are met at the p90 ends (--targets-at p90)" if targets.at == "p90" else
             "the targets are met by the expected figures (--targets-at p90 meets them at the p90 ends)")
    return (f"p10-p90 of TTFT and TPOT: the expected figure times the p10 and p90 of measured/expected over "
            f"the validation's published rows of its step class (aggregated: {table['mixed'].words()}; "
            f"disaggregated prefill: {table['prefill'].words()}; decode: {table['decode'].words()}); {where}")


def _assumptions(options: PlanOptions, targets: Targets, moe: bool = False, own_table: bool = False) -> list[str]:
    notes = [
        "figures are the serving view's expected times (bounds beside them): each kernel at the achievable "
        "fraction of its class (docs/accounting.md, Expected time)" if options.kernels == "serving" else
        "figures are the model's code as written at the expected rates (docs/accounting.md, Expected time)",
        f"TPOT: the mean step over contexts {targets.isl}..{targets.isl + targets.osl - 1}, exact from fitted counts; "
        "aggregated steps carry the prompt tokens arriving meanwhile (chunked prefill, weights read once per step)",
        "TTFT at p90 under Poisson arrivals (rooflinekit.stages.queueing: M/D/c, Erlang C with the "
        "Allen-Cunneen factor 1/2): aggregated, the wait for the chunk budget (one server per attention "
        "replica, a prompt taking new/chunk of a step) plus ceil(prompt / chunk) steps carrying a full chunk, at "
        "the arrival rate the batch sustains (batch / (OSL x TPOT)); disaggregated, the wait for one of the "
        "prefill servers plus one prefill plus the KV cache sent to the decode pool, at the highest rate whose "
        f"TTFT meets the target (without one: {MAX_UTILISATION:.0%} of the prefill pool's capacity), never past "
        "the decode pool's",
        "memory per GPU: weights held, the KV cache of the batch at ISL+OSL, the activation peak",
        spread_note(targets) if not own_table else
        "no p10-p90 ranges: they are the committed efficiency table's residuals, and this plan prices with "
        "another source (a calibrated entry, its own efficiency source or --efficiency)",
    ]
    if options.engine and options.engine != "none":
        notes.append(f"{engine_cost(options.engine).convention()}; in TPOT, the step and every TTFT step (a "
                     "disaggregated prefill pays one sequence's)")
    if options.overlap == "two-batch":
        notes.append("two-batch overlap: every step of an expert-parallel pool runs as two micro-batches, one's "
                     "collectives under the other's kernels (each kernel at half the tokens reading its weights "
                     "once more, each call at half its message; the longer stream), as `profile --overlap "
                     "two-batch` prices a step; layouts without EP, and decode steps of one sequence, run as one batch")
    if options.efficiency:
        notes.append(f"efficiency source: {options.efficiency} (--efficiency; its fractions and their sources are in "
                     "a profile's expected_conventions)")
    if options.mtp or options.draft:
        notes.append(f"speculative decoding: acceptance rate {options.accept:g} per drafted token, "
                     "E = (1 - a^(k+1)) / (1 - a) tokens per verify step")
    if targets.prefix_hit:
        notes.append(f"prefix cache: {targets.prefix_hit:.0%} of each prompt found cached; the rest prefilled as "
                     "one multi-token step after it")
    if moe:
        notes.append("expert parallelism: routing uniform over the experts, the busiest rank "
                     + (f"{options.ep_imbalance:g}x the mean tokens (--ep-imbalance)" if options.ep_imbalance != 1.0
                        else "at the mean (--ep-imbalance 1)")
                     + "; an EP degree that does not divide the experts holds redundant copies up to whole slots "
                       "per GPU, each expert's tokens split evenly between its copies")
    return notes


# -- the Python API ------------------------------------------------------------------------------


def _positive(name: str, value, kind: type, *, allow_none: bool = False):
    """`value` as a positive `kind` (int: whole numbers only), or WorkloadError naming `name`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise WorkloadError(f"{name}={value!r}: give a {'whole number' if kind is int else 'number'} above zero")
    if not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"{name}={value!r}: give a value above zero")
    return kind(value)


def plan(model: str, *, isl: int = 4096, osl: int = 1024, ttft: float | None = None, tpot: float | None = None,
         prefix_hit: float = 0.0, options: dict | None = None, search: PlanOptions | None = None) -> PlanResult:
    """What `rooflinekit plan MODEL` does, as a typed `PlanResult`: `model` is a model file, a
    transformers config or `hf:TYPE` (`options` its -O options); `ttft`/`tpot` are targets in
    seconds; `search` is the search (PlanOptions: GPUs, hardware, formats, degrees, modes,
    batches, --mtp, --accept, a draft model's path or source, the activation dtype, `targets_at`:
    "p90" meets the targets at the upper end of each figure's p10-p90 range)."""
    search = search or PlanOptions()
    if search.targets_at not in TARGETS_AT:
        raise WorkloadError(f"targets_at={search.targets_at!r}: choose {' or '.join(map(repr, TARGETS_AT))}")
    if not isinstance(model, str) or not model:
        raise WorkloadError(f"model={model!r}: give the path of a model file or config (or hf:TYPE)")
    if not isinstance(prefix_hit, (int, float)) or isinstance(prefix_hit, bool) or not 0 <= prefix_hit < 1:
        raise WorkloadError(f"prefix_hit={prefix_hit!r}: give the cached share of a prompt, 0 <= share < 1")
    targets = Targets(_positive("isl", isl, int), _positive("osl", osl, int),
                      _positive("ttft", ttft, float, allow_none=True), _positive("tpot", tpot, float, allow_none=True),
                      float(prefix_hit), search.targets_at)
    host = get_host()
    opts = dict(options or {})
    draft = load_source(search.draft, {}, host) if isinstance(search.draft, str) else search.draft
    search = replace(search, gpus=_positive("gpus", search.gpus, int), draft=draft)
    return run_plan(load_source(model, opts, host), targets, search, dtype=search.dtype,
                    model_options=tuple(sorted(opts.items())), host=host)
