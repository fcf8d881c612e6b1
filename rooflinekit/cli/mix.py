"""`--mix`, `--chunk`, `--chunk-offset`: a mixed step of `profile` (decode groups at several contexts
and a chunked-prefill slice, the weights read once: rooflinekit.stages.mixed)."""

from __future__ import annotations

import click

from rooflinekit.cli.request_options import COUNT, parse_count
from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.request import Workload, mixed_workload
from rooflinekit.stages.request_checks import validate_request


def mix_options(f):
    """--mix CONTEXT:SEQUENCES,..., --chunk N, --chunk-offset P."""
    opts = [
        click.option("--mix", default=None, metavar="CONTEXT:SEQS,...",
                     help="A mixed step (continuous batching): decode groups, e.g. 1024:32,4096:16 = 32 sequences "
                          "at context 1024 and 16 at 4096, one forward with the weights read once. Replaces "
                          "--phase/--batch/--context. See docs/accounting.md, Mixed steps."),
        click.option("--chunk", default=None, type=COUNT, metavar="N",
                     help="A chunked-prefill slice of N new prompt tokens in the step (alone: a pure chunked "
                          "prefill step)."),
        click.option("--chunk-offset", default=None, type=int, metavar="P",
                     help="Prompt tokens of the chunk's sequence already cached (default 0)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def parse_mix(text: str) -> tuple[tuple[int, int], ...]:
    """'1024:32,4096:16' -> ((1024, 32), (4096, 16)): one clear error per malformed group."""
    groups = []
    for part in text.split(","):
        part = part.strip()
        context, sep, count = part.partition(":")
        try:
            if not sep:
                raise ValueError
            groups.append((parse_count(context, "--mix context"), int(count)))
        except (ValueError, WorkloadError):
            raise WorkloadError(f"--mix: '{part}' is not CONTEXT:SEQUENCES (e.g. --mix 1024:32,4096:16)") from None
    return tuple(groups)


def _given(name: str) -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def apply_mix(workload: Workload, deployment, mix: str | None, chunk: int | None,
              chunk_offset: int | None) -> Workload:
    """The workload as the mixed step the options describe (itself when none is given), checked."""
    if mix is None and chunk is None:
        if chunk_offset is not None:
            raise WorkloadError("--chunk-offset places a prefill chunk: give --chunk N too")
        return workload
    conflicts = [f"--{name}" for name in ("phase", "batch", "context") if _given(name)]
    if conflicts:
        raise WorkloadError(f"--mix/--chunk describe the whole step: drop {', '.join(conflicts)}")
    groups = parse_mix(mix) if mix is not None else ()
    if mix is not None and not groups:
        raise WorkloadError("--mix needs at least one CONTEXT:SEQUENCES group")
    if chunk is not None and chunk < 1:
        raise WorkloadError(f"--chunk must be at least 1 new token, got {chunk}")
    offset = chunk_offset or 0
    if offset < 0:
        raise WorkloadError(f"--chunk-offset must be at least 0 cached tokens, got {offset}")
    step = mixed_workload(workload, groups, chunk or 0, offset)
    validate_request(step, deployment)
    return step
