"""Pricing one plan candidate (Planner): an aggregated or a disaggregated configuration's TTFT,
TPOT and rate from the step models, pipeline stages and speculative decoding, its memory per GPU
and the targets checked (rooflinekit.analyses.plan's module doc says what each figure means)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

from rooflinekit.analyses.pipeline_parallel import boundary_hidden, stage_weights, token_send
from rooflinekit.analyses.plan_models import DeploymentModels
from rooflinekit.analyses.plan_variant import Stages, Variant
from rooflinekit.analyses.stepfit import Shape
from rooflinekit.core.plan import PlanConfig, Pool, Speculative, Targets, instance_settings
from rooflinekit.core.request import Deployment
from rooflinekit.core.revise import revised
from rooflinekit.stages import collectives
from rooflinekit.stages.memory import activation_peak
from rooflinekit.stages.pipeline_parallel import steady_step
from rooflinekit.stages.queueing import MAX_UTILISATION, max_rate, wait_quantile
from rooflinekit.stages.request_checks import torch_dtype
from rooflinekit.stages.speculative import speculative_cycle
from rooflinekit.stages.stepmixed import mixed_mean, mixed_mean_bound
from rooflinekit.stages.stepmodel import StepModel
from rooflinekit.transforms.pipeline import module_stages, op_stages, stage_of_path


class Planner(DeploymentModels):
    """Prices the candidates of one request (rooflinekit.analyses.plan's module doc)."""

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
        base = dict(mode="aggregated", **instance_settings(d), pp=pp, replicas=replicas, weight_dtype=v.format,
                    dtype=v.dtype, batch=batch, gpus=gpus * replicas, chunk=chunk)
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
        config = PlanConfig(mode="disaggregated", **instance_settings(d), pp=pp, replicas=n_d, weight_dtype=dv.format,
                            overlap=overlap, dtype=dv.dtype, batch=batch, gpus=used, speculative=spec,
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


def _dp(d: Deployment) -> int:
    """Attention replicas of an instance: EP without TP is data-parallel attention (each GPU runs
    attention for its own batch, the experts spread over all of them); otherwise one."""
    return d.ep if d.tp == 1 and d.ep > 1 else 1
