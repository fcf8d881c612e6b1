"""Pipeline parallelism: how a layer stack is cut into stages and how long a pipelined step takes.

Torch-free and pure, so that the profile (rooflinekit.analyses.pipeline_parallel) and any planner
reuse the same arithmetic. A pipeline of N stages runs the step's batch as M micro-batches, one
after another, each passing every stage in order (the GPipe / 1F1B schedule of an inference
forward; no interleaved virtual stages).
"""

from __future__ import annotations

import math

#: The step's formula, in words (the report's `parallel.pp.step`).
STEP_WORDS = (
    "step = (M + N - 1) x max(slowest stage's micro-batch time, one send) + (N - 1) x one send: the "
    "first micro-batch passes all N stages and crosses the N - 1 boundaries; each of the other M - 1 "
    "leaves the last stage one slowest-stage time later (later sends overlap the next micro-batch's "
    "compute unless the link is slower than the slowest stage, when it paces the pipeline); bubble "
    "fraction = (N - 1) / (M + N - 1), the share of each stage's step spent idle when the stages are "
    "equal")


#: The steady serving pipeline's formula, in words (the report's `parallel.pp.step`).
STEADY_WORDS = (
    "steady serving pipeline: M micro-batches in flight, each passing the N stages in turn and its "
    "sampled tokens sent back to the first; every sequence gains one token per period = max(M x "
    "max(slowest stage's micro-batch time, one send), the sum of the stages' micro-batch times + "
    "(N - 1) activation sends + the token send back): the stages are never idle when the first term "
    "is larger, and a micro-batch's round trip paces the pipeline when the second is")


def steady_step(stage_times: list[float], micro_batches: int, send_s: float, back_s: float) -> float:
    """Seconds per period of the steady serving pipeline (STEADY_WORDS): every sequence of every
    micro-batch gains one token each period. One stage: M x its time."""
    if not stage_times:
        raise ValueError("a pipeline needs at least one stage")
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be at least 1, got {micro_batches}")
    n = len(stage_times)
    if n == 1:
        return micro_batches * stage_times[0]
    busy = micro_batches * max(max(stage_times), send_s)
    round_trip = sum(stage_times) + (n - 1) * send_s + back_s
    return max(busy, round_trip)


def split_layers(n_layers: int, stages: int) -> list[range]:
    """Contiguous ranges of `n_layers` layers over `stages` stages, as even as possible.

    The first n_layers % stages stages hold one layer more (32 layers over 3 stages: 11, 11, 10),
    so no stage holds more than ceil(n_layers / stages): the slowest stage sets a pipeline's
    pace, and this is the least it can be with whole layers of equal cost. Raises ValueError for
    stages < 1 or more stages than layers (a stage without a layer does nothing).
    """
    if stages < 1:
        raise ValueError(f"stages must be at least 1, got {stages}")
    if stages > n_layers:
        raise ValueError(f"{stages} stages for {n_layers} layers: every stage needs a layer")
    base, extra = divmod(n_layers, stages)
    out, start = [], 0
    for i in range(stages):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def pipelined_step(stage_times: list[float], micro_batches: int, send_s: float) -> tuple[float, float]:
    """(step seconds, bubble fraction) of N = len(stage_times) stages running M = `micro_batches`.

    `stage_times` is each stage's time for one micro-batch, `send_s` the time of one activation
    send between two consecutive stages (one micro-batch, one boundary). The first micro-batch
    passes every stage and every boundary: sum of the stages plus (N - 1) sends; in the steady
    state a micro-batch leaves the last stage every max(slowest stage, send) seconds. Bounding each
    stage of the fill by the slowest one gives

        step = (M + N - 1) x max(max(stage_times), send_s) + (N - 1) x send_s

    which is exact for equal stages and an upper bound otherwise (what a schedule that never lets
    a stage run ahead of the slowest one achieves). The bubble fraction (N - 1) / (M + N - 1) is
    the share of the step each stage idles when the stages are equal: it runs M of the M + N - 1
    slots. One stage is no pipeline: (M x its time, 0).
    """
    n = len(stage_times)
    if n < 1:
        raise ValueError("a pipeline needs at least one stage")
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be at least 1, got {micro_batches}")
    slowest = max(stage_times)
    if n == 1:
        return micro_batches * slowest, 0.0
    cycle = max(slowest, send_s)
    step = (micro_batches + n - 1) * cycle + (n - 1) * send_s
    return step, (n - 1) / (micro_batches + n - 1)


def default_micro_batches(stages: int, batch: int, phase: str) -> int:
    """The micro-batches a serving engine keeps in flight when none are given.

    Decode: one per stage (min(N, batch)), as vLLM and SGLang keep N batches in flight so that
    every stage has one; prefill: one sequence each (M = batch), the finest split of the batch,
    which leaves the smallest bubble (chunked prefill, which splits a sequence, is not modelled).
    """
    if stages <= 1:
        return 1
    if phase == "prefill":
        return max(1, batch)
    return max(1, min(stages, batch))


def micro_batch_sequences(batch: int, micro_batches: int) -> int:
    """Sequences of the largest micro-batch: ceil(batch / M) (the slowest micro-batch sets the pace)."""
    return math.ceil(batch / micro_batches)
