"""`rooflinekit advise`: what would change a step's time, lever by lever, priced by the same code.

Every lever is a change of the workload re-profiled with the model built once (batch up to what
fits, weight and KV cache formats, tensor parallelism, multi-token decode, a plugin's lever), a
restatement of the capture placed as any capture (a plugin's, such as the MLA plugin's absorbed
form), or a view the placement already gives (fused kernels: `totals.fused`). None is a separate formula.
Each is priced alone against the baseline (no combinations) and ranked by tokens/s per GPU at the
expected step (`totals.expected_step_s`); a lever that
does not apply to the workload is listed as skipped, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from rooflinekit.analyses.profile import Profiled, ReportOptions, profile
from rooflinekit.core.codec import encode
from rooflinekit.core.errors import RooflineError
from rooflinekit.core.levers import LeverProposal
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.report import AdviceReport, LeverResult, Report, SkippedLever
from rooflinekit.core.request import KV_BYTES, WEIGHT_BITS, Deployment, ModelSource, Workload
from rooflinekit.core.request import changes as deployment_changes
from rooflinekit.core.units import ratio, si
from rooflinekit.stages.collectives import binding as time_binding
from rooflinekit.stages.expected import serving_gpus, throughput
from rooflinekit.stages.hardware import HardwareDB, hardware_db
from rooflinekit.stages.transform import LegacyTransform, Transform
from rooflinekit.stages.workload import MAX_BATCH

#: Tensor-parallel sizes tried, multi-token decode lengths tried, int4's group size.
TP_SIZES = (2, 4, 8)
Q_LENS = (2, 4)
INT4_GROUP = 128
BUILTIN = "rooflinekit"

NOTES = [
    "advise: every lever is priced alone against the baseline (no combinations), by re-profiling the "
    "changed workload with the model built once or by re-placing a restated capture, on the same "
    "hardware entry; speed-up is tokens/s over the baseline's (for a batch or multi-token lever, "
    "throughput: each step may take longer)",
    "binding: the largest of the step's compute, HBM and interconnect time bounds afterwards, or "
    "'capacity' where the step does not fit in memory (memory.fits false: weights, KV cache and "
    "activations per GPU above capacity x fraction)",
]


def kernels_note(deployment: Deployment) -> str:
    """What advise prices: the serving view unless --kernels as-written was given."""
    if deployment.kernels == "serving":
        return ("advise prices the serving view (--kernels serving, advise's default): attention by each "
                "architecture's serving kernel with the cache read once per step (the q_len levers too), "
                "the engine's fused kernels; --kernels as-written prices the model's code as written")
    return "advise prices the model's code as written (--kernels as-written); advise's default is serving"


@dataclass(frozen=True)
class Candidate:
    """A lever to price: a changed workload (or a transform, or the fused view), or why it is skipped."""

    name: str
    assumption: str = ""
    workload: Workload | None = None
    #: The changed deployment (None: the baseline's).
    deployment: Deployment | None = None
    skip: str | None = None
    source: str = BUILTIN
    transform: Transform | LegacyTransform | None = None
    rebuild: bool = False  # a build option changed: the model is built again
    view: str = "eager"  # "fused": the baseline's fused view, nothing re-profiled


def _always(model) -> Callable:
    """A build_model that hands back the model already built."""

    def build_model(**_options):
        return model

    return build_model


def _changes(base: Workload, new: Workload, base_deployment: Deployment, deployment: Deployment) -> dict:
    """The fields (and model options) in which the lever's request differs from the baseline's."""
    out = {f.name: getattr(new, f.name) for f in fields(Workload)
           if f.name != "options" and getattr(new, f.name) != getattr(base, f.name)}
    before, after = dict(base.options), dict(new.options)
    out.update({k: v for k, v in after.items() if before.get(k) != v})
    out.update(deployment_changes(base_deployment, deployment))
    return out


# -- the built-in levers -------------------------------------------------------------------------


def batch_lever(w: Workload, report: Report) -> Candidate:
    m = report.memory
    name = "batch up to what fits"
    if m is None or m.max_batch is None:
        return Candidate(name, skip="the hardware entry gives no memory capacity (or nothing grows with "
                                    "batch): the largest batch that fits is unknown")
    if m.max_batch < 1:
        return Candidate(name, skip=f"no batch fits: the weights alone ({si(m.weights_bytes, 'B')} per GPU) "
                                    f"leave no room for one sequence in {si(m.usable_bytes, 'B')} usable")
    target = min(m.max_batch, MAX_BATCH)
    if target <= w.batch:
        return Candidate(name, skip=f"batch {w.batch} is already at or above the largest that fits "
                                    f"({m.max_batch:,} at context {w.context})")
    return Candidate(f"batch {target:,} (largest that fits)", workload=replace(w, batch=target),
                     assumption=f"batch raised from {w.batch} to the largest that fits at context {w.context}: "
                                f"floor((capacity x {m.fraction:g} - weights) / (KV cache + activations per "
                                "sequence)); throughput, each step takes longer")


def weight_lever(w: Workload, d: Deployment, fmt: str) -> Candidate:
    name = f"{fmt} weights"
    now = d.weight_format(w.dtype_key)
    if WEIGHT_BITS.get(now, 16) <= WEIGHT_BITS[fmt]:
        return Candidate(name, skip=f"weights are already stored in {now} ({WEIGHT_BITS.get(now)} bits)")
    if fmt == "int4":
        changed = replace(d, weight_dtype="int4", weight_group_size=INT4_GROUP)
        how = f"int4 weight-only, one fp16 scale per {INT4_GROUP} elements"
    else:
        changed = replace(d, weight_dtype=fmt, weight_group_size=None)
        how = f"{fmt} weights with one fp32 scale per output channel"
    return Candidate(name, deployment=changed,
                     assumption=f"linear and expert weights stored as {how}, read at that size; products at the "
                                f"{w.dtype_key} peak (weight-only); the token embedding and lm_head stay "
                                f"{w.dtype_key}")


def kv_lever(w: Workload, d: Deployment, report: Report) -> Candidate:
    name = "fp8 KV cache"
    if not report.attention_totals.recognised:
        return Candidate(name, skip="no attention layer is recognised: there is no KV cache to store in fp8")
    now = d.kv_format(w.dtype_key)
    if KV_BYTES.get(now, 2) <= KV_BYTES["fp8"]:
        return Candidate(name, skip=f"the KV cache is already stored in {now}")
    return Candidate(name, deployment=replace(d, kv_dtype="fp8"),
                     assumption="KV cache stored in fp8 (per-tensor scales, not counted): every cache read "
                                "and write at 1 byte per element")


def fused_lever(report: Report) -> Candidate:
    name = "fused kernels"
    if report.deployment.kernels == "serving":
        return Candidate(name, skip="the serving view already runs the engine's fused kernels")
    fused = getattr(report.totals, "fused", None)
    if fused is None:
        return Candidate(name, skip="this report has no fused view (totals.fused)")
    return Candidate(name, view="fused",
                     assumption=f"elementwise, normalisation, rope, activation and softmax chains between "
                                f"matmul/attention anchors fused as torch.compile would: {fused.ops_fused:,} ops "
                                f"in {fused.kernels:,} kernels, each reading what enters and writing what leaves")


def tp_lever(d: Deployment, report: Report, tp: int) -> Candidate:
    name = f"TP {tp}"
    if d.tp >= tp:
        return Candidate(name, skip=f"already at tensor parallel {d.tp}")
    changed = replace(d, tp=tp, ep=tp if d.ep > 1 else 1)
    bw = report.hardware.interconnect_bandwidth
    link = (f"collectives over {si(bw, 'B/s')} per GPU" if bw else
            "the hardware entry gives no interconnect bandwidth: collectives cost no time")
    return Candidate(name, deployment=changed,
                     assumption=f"tensor parallel over {tp} GPUs (heads and MLP columns split, all-reduces "
                                f"added; {link}); tokens/s per GPU (the group of {tp} serves the batch), memory per GPU")


def q_len_lever(w: Workload, n: int) -> Candidate:
    name = f"q_len {n}"
    if w.phase != "decode":
        return Candidate(name, skip="multi-token decode applies to decode: a prefill step's new tokens are its context")
    if w.decode_q_len >= n:
        return Candidate(name, skip=f"already verifying {w.decode_q_len} tokens per sequence")
    return Candidate(name, workload=replace(w, decode_q_len=n),
                     assumption=f"{n} new tokens per sequence per step (speculative decoding or MTP verify), "
                                f"causal among themselves; tokens/s counts all {n} as accepted: an upper bound")


def builtin_levers(w: Workload, d: Deployment, profiled: Profiled) -> list[Candidate]:
    """The built-in levers, in a fixed order, each priced or skipped with its reason."""
    r = profiled.report
    return ([batch_lever(w, r), weight_lever(w, d, "fp8"), weight_lever(w, d, "int4"), kv_lever(w, d, r),
             fused_lever(r)] + [tp_lever(d, r, n) for n in TP_SIZES] + [q_len_lever(w, n) for n in Q_LENS])


def plugin_levers(host: PluginHost, w: Workload, d: Deployment, report: Report,
                  source: ModelSource) -> list[Candidate]:
    """What plugins propose through `rooflinekit_advise_levers`; a malformed proposal is a warning."""
    out = []
    for answer, plugin in host.call_all("rooflinekit_advise_levers", expect=list, workload=w, deployment=d,
                                        report=report, source=source):
        for p in answer:
            if not isinstance(p, LeverProposal) or not p.name:
                host.warn(f"plugin '{plugin}' answered rooflinekit_advise_levers with {type(p).__name__}, "
                          "expected LeverProposal with a name; ignored")
            elif p.skip:
                out.append(Candidate(p.name, skip=str(p.skip), source=plugin))
            elif p.workload is not None and not isinstance(p.workload, Workload):
                host.warn(f"plugin '{plugin}' proposed lever '{p.name}' with a {type(p.workload).__name__} "
                          "for its workload, expected a Workload; ignored")
            elif p.deployment is not None and not isinstance(p.deployment, Deployment):
                host.warn(f"plugin '{plugin}' proposed lever '{p.name}' with a {type(p.deployment).__name__} "
                          "for its deployment, expected a Deployment; ignored")
            else:
                out.append(Candidate(p.name, p.assumption, workload=p.workload, deployment=p.deployment,
                                     source=plugin, rebuild=bool(p.rebuild), transform=p.transform))
    return out


# -- pricing -------------------------------------------------------------------------------------


def _kv_amplification(report: Report) -> float | None:
    t = report.totals
    return t.kv_bytes_executed / t.kv_bytes_min if t.kv_bytes_min else None


def _kv_caveat(report: Report, base: Report) -> str:
    """What the assumption must add when the lever's code moves far more K/V than the baseline's
    (transformers repeats K/V for a masked SDPA, as multi-token decode needs): the price is the
    model's code as it runs, not what a kernel reading the cache once would take."""
    now, before = _kv_amplification(report), _kv_amplification(base)
    if now is None or before is None or now < 1.5 * before:
        return ""
    return (f"; priced as the model's code runs it, which moves {ratio(now)}x the K/V minimum here against "
            f"{ratio(before)}x in the baseline (K/V re-read, e.g. repeated for a masked attention call): an "
            "attention kernel that reads the cache once would do better")


def _expected(report: Report, view: str) -> tuple[float | None, float | None, float | None]:
    """(expected step, tokens/s per GPU, tokens/s per user) of a lever's view: the totals', or for the
    fused view its own expected step at the same GPUs."""
    t, w = report.totals, report.workload
    if view != "fused":
        return t.expected_step_s or None, t.tokens_per_s_per_gpu, t.tokens_per_s_per_user
    step = t.fused.expected_step_s if t.fused is not None else None
    if not step:
        return None, None, None
    return (step, *throughput(w.tokens, w.q_len, w.phase, step, serving_gpus(report.parallel)))


def price(name: str, report: Report, base: Report | None, assumption: str, *, view: str = "eager",
          source: str = BUILTIN, changes: dict | None = None) -> LeverResult:
    """A lever's figures from its placed report (`base`: the baseline's, for the speed-ups)."""
    t = report.totals
    step, time_memory = t.predicted_step_s, t.time_memory_s
    if view == "fused":
        step, time_memory = t.fused.predicted_step_s, t.fused.bytes / report.hardware.bandwidth
    tokens = report.workload.tokens
    tps = tokens / step if step else None
    m = report.memory
    fits = m.fits if m is not None else None
    bound = "capacity" if fits is False else time_binding(t.time_compute_s, time_memory, t.time_comm_s)
    speedup = step_speedup = None
    if base is not None:
        base_tps = base.workload.tokens / base.totals.predicted_step_s if base.totals.predicted_step_s else None
        speedup = tps / base_tps if tps and base_tps else None
        step_speedup = base.totals.predicted_step_s / step if step else None
    expected, per_gpu, per_user = _expected(report, view)
    return LeverResult(
        expected_step_s=expected, tokens_per_s_per_gpu=per_gpu, tokens_per_s_per_user=per_user,
        lever=name, predicted_step_s=step, tokens_per_s=tps, speedup=speedup if base else 1.0, binding=bound,
        fits=fits, assumption=assumption, step_speedup=step_speedup if base else 1.0, view=view,
        gpus=m.gpus if m is not None else 1, batch=report.workload.batch, tokens=tokens,
        memory_bytes=m.total_bytes if m is not None else None, max_batch=m.max_batch if m is not None else None,
        time_compute_s=t.time_compute_s, time_memory_s=time_memory, time_comm_s=t.time_comm_s, source=source,
        changes=dict(changes or {}))


def advise(
    source: ModelSource,
    workload: Workload,
    deployment: Deployment | None = None,
    *,
    host: PluginHost | None = None,
    db: HardwareDB | None = None,
    progress: Callable[[str], None] | None = None,
) -> AdviceReport:
    """Profile the workload, then price every lever that applies (see the module docstring)."""
    start = time.perf_counter()
    deployment = deployment or Deployment(kernels="serving")
    host = host or get_host()
    db = db or hardware_db(host)
    extra_notes = [kernels_note(deployment)]
    if workload.device != "meta":  # levers re-profile at other sizes and formats: counts only
        extra_notes.append(f"advise counts on the meta device (device {workload.device} given): no lever is timed")
        workload = replace(workload, device="meta")
    counts = ReportOptions(measure=False)
    base = profile(source, workload, deployment, options=counts, host=host, db=db)
    if (deployment.hardware or "auto") == "auto":  # resolved once: the entry the baseline was placed on
        deployment = replace(deployment, hardware=base.report.hardware.source or base.report.hardware.name)
    once = replace(source, build_model=_always(base.model))
    profiles = 1
    results: list[LeverResult] = []
    skipped: list[SkippedLever] = []
    notes: dict[str, None] = {}
    for cand in (builtin_levers(workload, deployment, base)
                 + plugin_levers(host, workload, deployment, base.report, source)):
        cand = replace(cand, workload=cand.workload or workload, deployment=cand.deployment or deployment)
        if cand.skip is not None:
            skipped.append(SkippedLever(cand.name, cand.skip, cand.source))
            continue
        if progress:
            progress(cand.name)
        if cand.view == "fused":
            results.append(price(cand.name, base.report, base.report, cand.assumption, view="fused"))
            continue
        try:
            lever = profile(source if cand.rebuild else once, cand.workload, cand.deployment, options=counts,
                            host=host, db=db, lever=cand.transform)
        except RooflineError as exc:  # a lever this model or entry cannot take: skipped, with the reason
            skipped.append(SkippedLever(cand.name, str(exc), cand.source))
            continue
        profiles += 1
        report = lever.report
        if cand.name.startswith("batch ") and report.memory is not None and report.memory.fits is False \
                and report.memory.max_batch and report.memory.max_batch < report.workload.batch:
            # activations were scaled per sequence from the baseline's batch: settle on the measured fit
            target = max(workload.batch, report.memory.max_batch)
            cand = replace(cand, name=f"batch {target:,} (largest that fits)", workload=replace(workload, batch=target))
            report = profile(once, cand.workload, cand.deployment, options=counts, host=host, db=db).report
            profiles += 1
        notes.update(dict.fromkeys(n for n in report.notes if n not in base.report.notes))
        results.append(price(cand.name, report, base.report, cand.assumption + _kv_caveat(report, base.report),
                             source=cand.source,
                             changes=_changes(workload, cand.workload, deployment, cand.deployment)))
    results.sort(key=lambda r: (-(r.tokens_per_s_per_gpu or 0.0), -(r.speedup or 0.0)))
    r = base.report
    return AdviceReport(
        workload=r.workload, hardware=r.hardware, model=r.model, deployment=r.deployment,
        baseline=price("baseline", r, None, "the workload as given"),
        levers=results, skipped=skipped, memory=r.memory, profiles=profiles, wall_s=time.perf_counter() - start,
        warnings=list(dict.fromkeys(list(r.warnings) + list(host.warnings))),
        notes=NOTES + extra_notes + list(r.notes) + [n for n in notes if n not in r.notes],
    )


def advice_dict(report: AdviceReport) -> dict:
    """The JSON form: {"levers": [...], "baseline": {...}, "skipped": [...], ...}."""
    return encode(report)
