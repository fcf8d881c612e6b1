"""Mixed steps: decode groups and a chunked-prefill slice in one step, the weights read once.

A serving engine's step (continuous batching with chunked prefill: vLLM, SGLang) runs decode
sequences at a spread of contexts and a slice of `chunk` new prompt tokens after `chunk_offset`
cached ones as ONE forward: every linear layer is one GEMM over all the step's tokens, so each
weight is read once per step, while attention runs per sequence over its own cache.

The step is counted from one forward per segment (`Workload.segments`: each decode group as a
decode step at its context and batch, the chunk as a prefill, or after cached positions as a
decode step of q_len `chunk`), each captured, attributed and transformed as that plain step on its
own (so attention is recognised and costed at the segment's own context), then merged
(rooflinekit.transforms.mixed; this module holds the segments' words and checks):

- an op outside attention is matched across segments by (module path, op name, its ordinal among
  that module's ops of that name); the matched ops become ONE record whose FLOPs, activation bytes
  and bytes written are the segments' sums, and whose parameter reads count once when every segment
  read the same parameter bytes (a weight read whole: the one GEMM over all tokens reads it once),
  else (an embedding's gathered rows, one per token) the sum;
- attention stays per segment: each segment's attention ops, and the ops on its K/V path, keep
  their own records, and its attention rows carry the segment (`[decode 1024x32]` after the module
  path; `extra["segment"]` in the report), so the attention table, its minimum and the KV cache
  held are summed over segments;
- an op that matches no op of the first segment keeps its own record;
- storages of the segments are renumbered apart (parameters keep their numbers: one model), and the
  activation peak is that of the segments' forwards as one batch: their peaks added.

So, exactly: FLOPs = the sum of the segments' FLOPs; bytes = the sum of the segments' bytes less
(segments - 1) x the parameter bytes each matched op read whole.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.request import Segment, Workload

#: The most decode groups a mixed step takes.
MAX_GROUPS = 1024


def label(segment: Segment) -> str:
    """'decode 1024x32' (context x sequences), 'chunk 512@2048' (new tokens after cached ones)."""
    if segment.phase == "prefill":
        return f"chunk {segment.q_len}@{segment.offset}"
    return f"decode {segment.context}x{segment.batch}"


def describe(workload: Workload) -> str:
    """The segments in words, for a report's notes."""
    parts = []
    for s in workload.segments():
        if s.phase == "prefill":
            parts.append(f"a prefill chunk of {s.q_len} new tokens after {s.offset} cached")
        else:
            parts.append(f"{s.batch} decode sequence{'s' if s.batch > 1 else ''} at context {s.context}")
    return (f"mixed step: {', '.join(parts)}; one forward counted per segment and merged: each weight read once "
            "(one GEMM over all the step's tokens), FLOPs and activation bytes summed, attention per segment")


def validate_mixed(workload: Workload, limits: tuple[int, int]) -> None:
    """One clear error per bad decode group, chunk or offset; `limits` = (max batch, max context)."""
    max_batch, max_context = limits
    w = workload
    if len(w.mix) > MAX_GROUPS:
        raise WorkloadError(f"--mix takes at most {MAX_GROUPS} decode groups, got {len(w.mix)}")
    for context, count in w.mix:
        if not 1 <= context <= max_context:
            raise WorkloadError(f"--mix: a context must be 1 to {max_context:,} positions, got {context}")
        if not 1 <= count <= max_batch:
            raise WorkloadError(f"--mix: a group's sequences must be 1 to {max_batch:,}, got {count} at context "
                                f"{context}")
        if w.decode_q_len > context:
            raise WorkloadError(f"--q-len {w.decode_q_len} exceeds the context {context} of a --mix group: the "
                                "cache's slots hold the new tokens too")
    if w.chunk < 0 or (w.chunk == 0 and not w.mix):
        raise WorkloadError(f"--chunk must be at least 1 new token, got {w.chunk}")
    if w.chunk_offset < 0:
        raise WorkloadError(f"--chunk-offset must be at least 0 cached tokens, got {w.chunk_offset}")
    if w.chunk_offset + w.chunk > max_context:
        raise WorkloadError(f"--chunk-offset + --chunk must be at most {max_context:,} positions, got "
                            f"{w.chunk_offset + w.chunk}")
    if w.batch > max_batch:
        raise WorkloadError(f"a mixed step holds at most {max_batch:,} sequences, got {w.batch}")


def check_source(source, plain: Sequence[Workload]) -> None:
    """A segment of several new tokens per sequence in decode form (a chunk after cached tokens, or
    --q-len) needs make_inputs() to name `q_len`: one line saying so, before anything is built."""
    if not any(w.phase == "decode" and w.decode_q_len > 1 for w in plain):
        return
    try:
        params = inspect.signature(source.make_inputs).parameters
    except (TypeError, ValueError):
        params = {}
    if "q_len" not in params or params["q_len"].kind is inspect.Parameter.VAR_KEYWORD:
        raise WorkloadError(f"--chunk-offset (a chunk after cached tokens) and --q-len run decode steps of several new "
                            f"tokens per sequence: make_inputs() of {source.path} takes no q_len argument; give it one "
                            "(make_inputs(batch, context, phase, q_len=1)), or use --chunk-offset 0")
