"""`rooflinekit advise`: what would change a step's time, lever by lever, priced by the same code.

Every lever is a change of the workload re-profiled with the model built once (batch up to what
fits, weight and KV cache formats, tensor parallelism, multi-token decode, a plugin's lever), a
restatement of the capture placed as any capture (a plugin's, such as the MLA plugin's absorbed
form), or a view the placement already gives (fused kernels: `totals.fused`). None is a separate formula.
Each is priced alone against the baseline and ranked by tokens/s per GPU at the expected step
(`totals.expected_step_s`); a lever that does not apply to the workload is listed as skipped, with
the reason. `AdviseOptions(combine=True)` adds the levers that compose priced together, each
combination one deployment (rooflinekit.analyses.combine); a draft (`draft=` a model source, or
`mtp=` heads) prices the multi-token levers as speculative cycles (rooflinekit.analyses.speculate).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from rooflinekit.analyses import combine as combining
from rooflinekit.analyses import speculate
from rooflinekit.analyses.profile import Profiled, ReportOptions, run_profile
from rooflinekit.core.advice_report import AdviceReport, LeverResult, SkippedLever
from rooflinekit.core.codec import encode
from rooflinekit.core.errors import RooflineError, UserError
from rooflinekit.core.levers import LeverProposal
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.report import Report
from rooflinekit.core.request import KV_BYTES, WEIGHT_BITS, Deployment, ModelSource, Workload
from rooflinekit.core.request import changes as deployment_changes
from rooflinekit.core.units import ratio, si
from rooflinekit.stages.collectives import binding as time_binding
from rooflinekit.stages.expected import serving_gpus, throughput
from rooflinekit.stages.hardware import HardwareDB, hardware_db
from rooflinekit.stages.request_checks import MAX_BATCH, check_workload, validate_request
from rooflinekit.stages.speculative import DEFAULT_ACCEPT
from rooflinekit.transforms.adapter import as_transform, transform_problem
from rooflinekit.transforms.base import Transform

#: Tensor-parallel sizes tried, multi-token decode lengths tried, int4's group size.
TP_SIZES = (2, 4, 8)
Q_LENS = (2, 4)
INT4_GROUP = 128
BUILTIN = "rooflinekit"

NOTES = [
    "advise: every lever is priced alone against the baseline (--combine prices those that compose together), "
    "by re-profiling the "
    "changed workload with the model built once or by re-placing a restated capture, on the same "
    "hardware entry; speed-up is tokens/s per GPU at the expected step over the baseline's (for a batch or "
    "multi-token lever, throughput: each step may take longer; a lever on more GPUs, per GPU), the figure "
    "levers are ranked by in the text, the page and the notebook",
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
class AdviseOptions:
    """What advise adds to the single levers: the combinations (`combine`, at most
    `max_combinations` priced), a draft for the multi-token levers (`draft`: a model source whose
    decode step is profiled in the same deployment, or `mtp`: heads of the model's own), and the
    per-token acceptance rate `accept` in (0, 1]."""

    combine: bool = False
    max_combinations: int = combining.COMBINE_LIMIT
    draft: ModelSource | None = None
    #: The draft's own model options (-O of the draft, sorted pairs); the target's are not its.
    draft_options: tuple[tuple[str, object], ...] = ()
    mtp: int | None = None
    accept: float = DEFAULT_ACCEPT

    def check(self) -> None:
        """One line for what cannot be asked (UserError)."""
        if not (isinstance(self.accept, (int, float)) and 0.0 < self.accept <= 1.0):
            raise UserError(f"--accept {self.accept!r}: the acceptance rate is a probability in (0, 1]")
        if self.draft is not None and self.mtp is not None:
            raise UserError("--draft and --mtp both name the draft: give one")
        if self.mtp is not None and not (isinstance(self.mtp, int) and 1 <= self.mtp <= 16):
            raise UserError(f"--mtp {self.mtp!r}: give the number of MTP heads, 1 to 16")
        if self.max_combinations < 1:
            raise UserError(f"--max-combinations {self.max_combinations!r}: give at least 1")

    @property
    def q_lens(self) -> tuple[int, ...]:
        """The multi-token levers: q_len 2 and 4, or k + 1 for k MTP heads."""
        return (self.mtp + 1,) if self.mtp else Q_LENS


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
    transform: Transform | None = None
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
    return Candidate(name, deployment=d.with_kv_format("fp8"),
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


def q_len_lever(w: Workload, n: int, extras: AdviseOptions | None = None) -> Candidate:
    name = f"q_len {n}"
    if w.phase != "decode":
        return Candidate(name, skip="multi-token decode applies to decode: a prefill step's new tokens are its context")
    if w.decode_q_len >= n:
        return Candidate(name, skip=f"already verifying {w.decode_q_len} tokens per sequence")
    extras = extras or AdviseOptions()
    if extras.draft is None and extras.mtp is None:
        return Candidate(name, workload=replace(w, decode_q_len=n),
                         assumption=f"{n} new tokens per sequence per step (speculative decoding or MTP verify), "
                                    f"causal among themselves; per-token acceptance {extras.accept:g}: tokens per "
                                    f"cycle (1 - a^{n}) / (1 - a); the draft's steps are not priced (taken as free: "
                                    "an upper bound; --draft MODEL or --mtp N prices them)")
    return Candidate(name, workload=replace(w, decode_q_len=n),
                     assumption=f"speculative decoding: {n - 1} drafted token(s) per cycle, each a draft step, then "
                                f"the target verifies {n} tokens per sequence in one step; per-token acceptance "
                                f"{extras.accept:g}: tokens per cycle (1 - a^{n}) / (1 - a); the expected step is the "
                                "cycle (drafts + verify), tokens/s per GPU and per user count the expected "
                                "accepted tokens")


def builtin_levers(w: Workload, d: Deployment, profiled: Profiled,
                   extras: AdviseOptions | None = None) -> list[Candidate]:
    """The built-in levers, in a fixed order, each priced or skipped with its reason."""
    r = profiled.report
    extras = extras or AdviseOptions()
    return ([batch_lever(w, r), weight_lever(w, d, "fp8"), weight_lever(w, d, "int4"), kv_lever(w, d, r),
             fused_lever(r)] + [tp_lever(d, r, n) for n in TP_SIZES]
            + [q_len_lever(w, n, extras) for n in extras.q_lens])


def plugin_levers(host: PluginHost, w: Workload, d: Deployment, report: Report,
                  source: ModelSource, taken: set[str] | None = None) -> list[Candidate]:
    """What plugins propose through `rooflinekit_advise_levers`; a malformed proposal (see
    `proposal_problem`), or one whose name a lever already has (`taken`: the built-in levers'), is
    named in a warning and dropped, the plugin's other proposals kept."""
    out = []
    names = set(taken or ())
    for answer, plugin in host.each(host.hook.rooflinekit_advise_levers, workload=w, deployment=d,
                                        report=report, source=source):
        for p in answer:
            reason = proposal_problem(p, w, d)
            label = f"lever '{p.name}'" if isinstance(p, LeverProposal) and isinstance(p.name, str) else "a lever"
            if reason is None and p.name in names:
                reason = "a lever of that name is already listed (the first is kept)"
            if reason is not None:
                host.warn(f"plugin '{plugin}' proposed {label}: {reason}; ignored")
                continue
            names.add(p.name)
            if p.skip:
                out.append(Candidate(p.name, skip=p.skip, source=plugin))
                continue
            transform = as_transform(p.transform, plugin, f"lever '{p.name}'") if p.transform is not None else None
            out.append(Candidate(p.name, p.assumption, workload=p.workload, deployment=p.deployment,
                                 source=plugin, rebuild=p.rebuild, transform=transform))
    return out


def proposal_problem(p: object, w: Workload, d: Deployment) -> str | None:
    """Why a plugin's lever cannot be priced, or None: a LeverProposal with a name, strings for its
    assumption and skip, a transform that is one, and a request that runs (the workload and the
    deployment checked as the command line checks the user's: phase, batch, context, formats)."""
    if not isinstance(p, LeverProposal):
        return f"expected a LeverProposal, got {type(p).__name__}"
    if not isinstance(p.name, str) or not p.name.strip():
        return f"its name must be a non-empty string, got {p.name!r}"
    if not isinstance(p.assumption, str) or (p.skip is not None and not isinstance(p.skip, str)):
        return "its assumption and skip must be strings"
    if p.skip:
        return None
    if not isinstance(p.rebuild, bool):
        return f"rebuild must be True or False, got {p.rebuild!r}"
    if p.workload is not None and not isinstance(p.workload, Workload):
        return f"its workload is a {type(p.workload).__name__}, expected a Workload"
    if p.deployment is not None and not isinstance(p.deployment, Deployment):
        return f"its deployment is a {type(p.deployment).__name__}, expected a Deployment"
    if p.transform is not None and transform_problem(p.transform) is not None:
        return transform_problem(p.transform)
    try:
        check_workload(p.workload or w)
        validate_request(p.workload or w, p.deployment or d)
    except RooflineError as exc:
        return f"its request cannot run ({exc})"
    except Exception as exc:  # a field of a type no check expects (a str tp, ...)
        return f"its request cannot be read ({type(exc).__name__}: {exc})"
    return None


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
    expected, per_gpu, per_user = _expected(report, view)
    speedup = step_speedup = None
    if base is not None:  # at the expected step, per GPU: the figures the text ranks by
        base_step, base_gpu, _ = _expected(base, "eager")
        speedup = per_gpu / base_gpu if per_gpu and base_gpu else None
        step_speedup = base_step / expected if base_step and expected else None
    return LeverResult(
        expected_step_s=expected, tokens_per_s_per_gpu=per_gpu, tokens_per_s_per_user=per_user,
        lever=name, predicted_step_s=step, tokens_per_s=tps, speedup=speedup if base else 1.0, binding=bound,
        fits=fits, assumption=assumption, step_speedup=step_speedup if base else 1.0, view=view,
        gpus=m.gpus if m is not None else 1, batch=report.workload.batch, tokens=tokens,
        memory_bytes=m.total_bytes if m is not None else None, max_batch=m.max_batch if m is not None else None,
        time_compute_s=t.time_compute_s, time_memory_s=time_memory, time_comm_s=t.time_comm_s, source=source,
        changes=dict(changes or {}))


@dataclass
class _Run:
    """One advise run: the sources (the model as loaded, and built once), the baseline's request
    and profile, the plugin host and hardware table, the profiles taken so far."""

    source: ModelSource
    once: ModelSource
    workload: Workload
    deployment: Deployment
    host: PluginHost
    db: HardwareDB
    base: Profiled
    progress: Callable[[str], None] | None = None
    profiles: int = 1

    def profile(self, workload: Workload, deployment: Deployment, transform=None, rebuild: bool = False) -> Report:
        """One request through the profile's stages, counts only (the model reused unless `rebuild`)."""
        self.profiles += 1
        return run_profile(self.source if rebuild else self.once, workload, deployment,
                       options=ReportOptions(measure=False), host=self.host, db=self.db, lever=transform).report

    def price(self, name: str, report: Report, assumption: str, workload: Workload, deployment: Deployment,
              kind: str = "combination") -> LeverResult:
        base = self.base.report
        row = price(name, report, base, assumption + _kv_caveat(report, base),
                    changes=_changes(self.workload, workload, self.deployment, deployment))
        return replace(row, kind=kind)


def _price_levers(run: _Run, cands: list[Candidate]) -> tuple[list, list[SkippedLever], dict[str, None]]:
    """Each candidate priced alone: [(candidate, LeverResult)], the skipped, the new notes."""
    base = run.base.report
    results: list[tuple[Candidate, LeverResult]] = []
    skipped: list[SkippedLever] = []
    notes: dict[str, None] = {}
    for cand in cands:
        cand = replace(cand, workload=cand.workload or run.workload, deployment=cand.deployment or run.deployment)
        if cand.skip is not None:
            skipped.append(SkippedLever(cand.name, cand.skip, cand.source))
            continue
        if run.progress:
            run.progress(cand.name)
        if cand.view == "fused":
            results.append((cand, price(cand.name, base, base, cand.assumption, view="fused")))
            continue
        try:
            report = run.profile(cand.workload, cand.deployment, cand.transform, cand.rebuild)
        except RooflineError as exc:  # a lever this model or entry cannot take: skipped, with the reason
            skipped.append(SkippedLever(cand.name, str(exc), cand.source))
            continue
        if cand.name.startswith("batch ") and report.memory is not None and report.memory.fits is False \
                and report.memory.max_batch and report.memory.max_batch < report.workload.batch:
            # activations were scaled per sequence from the baseline's batch: settle on the measured fit
            target = max(run.workload.batch, report.memory.max_batch)
            cand = replace(cand, name=f"batch {target:,} (largest that fits)",
                           workload=replace(run.workload, batch=target))
            report = run.profile(cand.workload, cand.deployment)
        notes.update(dict.fromkeys(n for n in report.notes if n not in base.notes))
        results.append((cand, price(cand.name, report, base, cand.assumption + _kv_caveat(report, base),
                                    source=cand.source,
                                    changes=_changes(run.workload, cand.workload, run.deployment, cand.deployment))))
    return results, skipped, notes


def _draft(run: _Run, extras: AdviseOptions) -> speculate.Draft:
    """The draft's step: the draft model's decode step in the same deployment, or an MTP head's."""
    if extras.mtp:
        return speculate.mtp_draft(run.base.report, extras.mtp)
    draft = extras.draft
    if run.progress:
        run.progress(f"draft {draft.name}")
    run.profiles += 1
    # the draft's steps run inside the verify's cycle: the engine's host time is the verify step's, once
    report = run_profile(draft, replace(run.workload, decode_q_len=1, options=extras.draft_options),
                     replace(run.deployment, engine=None), options=ReportOptions(measure=False), host=run.host,
                     db=run.db).report
    return speculate.model_draft(draft.name, report)


def _speculative(run: _Run, rows: list[tuple[Candidate, LeverResult]], extras: AdviseOptions) -> list:
    """The multi-token levers priced with the draft (the others as they are)."""
    multi = [(c, r) for c, r in rows if c.name.startswith("q_len")]
    if not multi:
        return rows
    # without a draft, its steps taken as free: the verified tokens still count at the acceptance
    draft = speculate.Draft("draft not priced", 0.0, 0.0) if extras.draft is None and not extras.mtp \
        else _draft(run, extras)
    m = run.base.report.memory
    usable = m.usable_bytes if m is not None else None
    return [(c, speculate.priced(r, draft, extras.accept, usable) if (c, r) in multi else r) for c, r in rows]


def _combinations(run: _Run, rows: list[tuple[Candidate, LeverResult]], baseline: LeverResult,
                  extras: AdviseOptions) -> tuple[list[LeverResult], object]:
    moves = [mv for mv in (combining.move_of(r.lever, r.changes, c, r) for c, r in rows) if mv is not None]
    ctx = combining.Context(run.workload, run.deployment, run.base.report, run.profile, run.price, run.progress)
    shown, info, _ = combining.search(ctx, moves, [r for _, r in rows], baseline, extras.max_combinations)
    return shown, info


def advise(
    source: ModelSource,
    workload: Workload,
    deployment: Deployment | None = None,
    *,
    host: PluginHost | None = None,
    db: HardwareDB | None = None,
    progress: Callable[[str], None] | None = None,
    extras: AdviseOptions | None = None,
) -> AdviceReport:
    """Profile the workload, then price every lever that applies (see the module docstring)."""
    start = time.perf_counter()
    extras = extras or AdviseOptions()
    extras.check()
    deployment = deployment or Deployment(kernels="serving")
    host = host or get_host()
    db = db or hardware_db(host)
    extra_notes = [kernels_note(deployment)]
    if workload.device != "meta":  # levers re-profile at other sizes and formats: counts only
        extra_notes.append(f"advise counts on the meta device (device {workload.device} given): no lever is timed")
        workload = replace(workload, device="meta")
    base = run_profile(source, workload, deployment, options=ReportOptions(measure=False), host=host, db=db)
    if (deployment.hardware or "auto") == "auto":  # resolved once: the entry the baseline was placed on
        deployment = replace(deployment, hardware=base.report.hardware.source or base.report.hardware.name)
    run = _Run(source, replace(source, build_model=_always(base.model)), workload, deployment, host, db, base,
               progress)
    builtins = builtin_levers(workload, deployment, base, extras)
    rows, skipped, notes = _price_levers(run, builtins + plugin_levers(host, workload, deployment, base.report, source,
                                                                       {c.name for c in builtins}))
    rows = _speculative(run, rows, extras)
    r = base.report
    baseline = replace(price("baseline", r, None, "the workload as given"), kind="baseline")
    results = [lever for _, lever in rows]
    search = None
    if extras.combine:
        shown, search = _combinations(run, rows, baseline, extras)
        results += shown
    # with --combine, the rows that fit rank first: the search is for a deployment that runs
    results.sort(key=lambda x: (extras.combine and x.fits is False, -(x.tokens_per_s_per_gpu or 0.0),
                                -(x.speedup or 0.0)))
    return AdviceReport(
        workload=r.workload, hardware=r.hardware, model=r.model, deployment=r.deployment, baseline=baseline,
        levers=results, skipped=skipped, memory=r.memory, combine=search, profiles=run.profiles,
        wall_s=time.perf_counter() - start, warnings=list(dict.fromkeys(list(r.warnings) + list(host.warnings))),
        notes=NOTES + extra_notes + list(r.notes) + [n for n in notes if n not in r.notes],
    )


def advice_dict(report: AdviceReport) -> dict:
    """The JSON form: {"levers": [...], "baseline": {...}, "skipped": [...], ...}."""
    return encode(report)
