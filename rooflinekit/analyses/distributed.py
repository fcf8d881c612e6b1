"""Real distributed runs: every rank of a torchrun job profiles its own share, rank 0 merges.

    torchrun --nproc-per-node 2 -m rooflinekit profile examples/tp_mlp.py --device cpu

- Distributed mode is on when the environment says WORLD_SIZE > 1 (torchrun sets it), or with
  `--distributed` (also for a single process: a one-rank group); `--no-distributed` turns it off.
- rooflinekit initialises the default process group before it imports the model file: gloo for
  cpu and meta tensors, NCCL for --device cuda (each rank on cuda:LOCAL_RANK), with a timeout of
  $ROOFLINEKIT_DIST_TIMEOUT seconds (default 300) on every collective. The model file reads its
  rank and world size from torch.distributed itself (`dist.get_rank()`, `dist.get_world_size()`).
- Each rank captures its own forward; the c10d ops it runs (`c10d.allreduce_` from
  dist.all_reduce, `_c10d_functional.*` from functional collectives and DTensor) are recorded as
  collectives: message bytes from the tensors, group size from the process group, ring wire bytes
  (rooflinekit.stages.collectives). On the meta device the c10d ops run their meta kernels: nothing is
  sent, the records are the same, so a split model of any size profiles without memory.
- After building and after the forward, every rank posts its status to the process group's store
  (not a collective: a rank stuck in one of the model's collectives cannot be confused by it) and
  waits for everyone's, up to the timeout plus a margin. A rank that failed is reported by rank 0
  (or by the lowest rank still answering) in one error line naming it; every rank then exits 2.
- On success, rank 0 gathers every rank's report (`dist.gather_object`) and writes one merged
  report: the slowest rank's (by predicted step), with a `distributed` section holding one row per
  rank (FLOPs, bytes, compute/memory/communication time bounds, collectives).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist

from rooflinekit.core import compat
from rooflinekit.core.codec import encode
from rooflinekit.core.errors import UserError
from rooflinekit.core.report import Report

ENV_TIMEOUT = "ROOFLINEKIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
#: Checkpoints every rank passes, in order (run_profile calls the first two).
STAGES = ("built", "captured", "reported")
STAGE_WORDS = {
    "built": "while loading and building the model",
    "captured": "while running the forward",
    "reported": "while attributing and placing its counts",
}
_PREFIX = "rooflinekit"
#: Seconds a healthy rank waits before exiting after a failure elsewhere (torchrun then reports
#: the failed rank, which exits first, as the root cause, and stops the others).
EXIT_GRACE_S = 5.0


def requested(flag: bool | None) -> bool:
    """--distributed/--no-distributed, else on when WORLD_SIZE > 1 (torchrun)."""
    return flag if flag is not None else multi_process()


def timeout_s() -> float:
    raw = os.environ.get(ENV_TIMEOUT)
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise UserError(f"{ENV_TIMEOUT} must be positive, got {raw}")
    return value


def check_options(tp: int, ep: int, trace: str | None) -> None:
    """Options that make no sense for a real distributed run, refused before anything starts."""
    if tp > 1 or ep > 1:
        raise UserError("--tp/--ep plan the split of a single-GPU model; a torch.distributed run profiles "
                        "the model as its ranks split it: use one or the other (--no-distributed for --tp)")
    if trace:
        raise UserError("--trace is not supported in distributed runs (one trace per rank would collide)")


def meta_collectives_supported() -> bool:
    """Whether this torch has meta kernels for c10d collectives (a meta-device run needs them)."""

    return compat.c10d_has_meta_kernels()


def backend_for(device: str) -> str:
    """NCCL for CUDA tensors, gloo for cpu and meta ones (NCCL cannot carry them)."""
    return "nccl" if device.startswith("cuda") else "gloo"


def init(device: str, timeout: float) -> bool:
    """Initialise the default process group unless the caller did; True if this call did."""

    global _KEPT
    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed")
    backend = backend_for(device)
    if _KEPT and dist.is_initialized() and dist.get_backend() != backend:
        release(settle_s=0)  # a group of one this module kept: idle by now, so safe to destroy
    if dist.is_initialized():
        return False
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise UserError("--device cuda under torchrun: no CUDA device is available here")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    kwargs = {"backend": backend, "timeout": timedelta(seconds=timeout)}
    with _stdout_to_stderr():  # gloo (torch 2.9) prints "[Gloo] Rank 0 is connected to ..." to fd 1
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(**kwargs)
        else:  # --distributed without a launcher: a group of one
            dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, **kwargs)
    return True


@contextmanager
def _stdout_to_stderr():
    """Send what native code writes to file descriptor 1 to 2 instead, so that a report written to
    stdout (`-f json`) stays parseable."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


#: A group of one that `run_ranks` made and left up instead of destroying it right after its
#: collectives (see compat.GLOO_TEARDOWN_NEEDS_IDLE_WORKERS); later runs in the process reuse it.
_KEPT = False


def release(settle_s: float = 0.2) -> None:
    """Destroy the group of one a distributed run left up, if any, after `settle_s` seconds
    without the GIL, in which the group's worker threads finish with the last collective."""
    global _KEPT

    if _KEPT and dist.is_initialized():
        time.sleep(settle_s)
        dist.destroy_process_group()
    _KEPT = False


class PeerFailure(Exception):
    def __init__(self, stage: str, statuses: list[dict]):
        super().__init__(stage)
        self.stage = stage
        self.statuses = statuses


class Board:
    """Every rank's status per stage, through the default group's key-value store."""

    def __init__(self, store, rank: int, world: int, wait_s: float):
        self.store, self.rank, self.world, self.wait_s = store, rank, world, wait_s
        self.passed: list[str] = []

    def _key(self, stage: str, rank: int) -> str:
        return f"{_PREFIX}/{stage}/{rank}"

    def post(self, stage: str, error: str | None = None) -> None:
        status = {"rank": self.rank, "stage": stage, "ok": error is None, "error": error, "time": time.time()}
        self.store.set(self._key(stage, self.rank), json.dumps(status))

    def collect(self, stage: str) -> list[dict]:
        keys = [self._key(stage, r) for r in range(self.world)]
        try:
            self.store.wait(keys, timedelta(seconds=self.wait_s))
        except Exception:  # some rank never posted: find which
            pass
        statuses = []
        for r, key in enumerate(keys):
            try:
                present = self.store.check([key])
            except Exception:
                present = False
            if present:
                statuses.append(json.loads(self.store.get(key)))
            else:
                statuses.append({"rank": r, "stage": stage, "ok": False, "missing": True, "time": float("inf"),
                                 "error": f"sent no status within {self.wait_s:.0f} s (crashed, or stuck "
                                          "in a collective)"})
        return statuses

    def checkpoint(self, stage: str) -> None:
        self.post(stage)
        statuses = self.collect(stage)
        self.passed.append(stage)
        if not all(s["ok"] for s in statuses):
            raise PeerFailure(stage, statuses)

    def fail(self, error: str) -> list[dict]:
        stage = next((s for s in STAGES if s not in self.passed), STAGES[-1])
        self.post(stage, error)
        return self.collect(stage)


def failure_message(statuses: list[dict], world: int) -> str:
    """One line: the first failing rank (earliest), then the others."""
    failed = sorted((s for s in statuses if not s["ok"]), key=lambda s: (s.get("missing", False), s["time"]))
    first = failed[0]
    text = (f"rank {first['rank']} of {world} failed {STAGE_WORDS.get(first['stage'], first['stage'])}: "
            f"{first['error']}")
    others = [f"rank {s['rank']}: {s['error']}" for s in failed[1:]]
    if others:
        text += " (also " + "; ".join(others) + ")"
    return text


def _error_text(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"


def run_ranks(run: Callable[[Callable[[str], None]], dict], device: str) -> dict | None:
    """Run `run(on_stage)` (one rank's profile, returning its report) on every rank.

    Returns the merged report on rank 0 and None on the others; on a failure anywhere, the
    reporting rank prints one error line naming the failed rank, and every rank exits 2.
    """
    global _KEPT


    timeout = timeout_s()
    if device == "meta" and not meta_collectives_supported():
        raise UserError("this torch has no meta kernels for c10d collectives: profile the distributed "
                        "model with --device cpu (small sizes) or cuda")
    own = init(device, timeout)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        store = compat.default_store()
        board = Board(store, rank, world, timeout + 30.0)
        statuses = None
        report = None
        try:
            report = run(board.checkpoint)
            board.checkpoint("reported")
        except PeerFailure as exc:
            statuses = exc.statuses
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # this rank failed: tell the others, then learn of theirs
            statuses = board.fail(_error_text(exc))
        if statuses is not None:
            alive = [s["rank"] for s in statuses if not s.get("missing")]
            reporter = min(alive) if alive else rank
            if rank == reporter:
                print(f"rooflinekit: error: {failure_message(statuses, world)}", file=sys.stderr, flush=True)
                store.set(f"{_PREFIX}/reported", "1")
            else:
                try:
                    store.wait([f"{_PREFIX}/reported"], timedelta(seconds=30))
                except Exception:
                    pass
            if next(s for s in statuses if s["rank"] == rank)["ok"]:
                # let the failed ranks exit first, so that the launcher names them as the root cause
                time.sleep(EXIT_GRACE_S)
            raise SystemExit(2)
        if world == 1:
            # No object collective on a group of one: in torch 2.5 a gloo group that ran
            # gather_object/all_gather_object can hang for ever in destroy_process_group.
            gathered = [report]
        else:
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(report, gathered, dst=0)
        if rank != 0:
            return None
        return merge_reports(gathered, {"backend": dist.get_backend(), "device": device, "timeout_s": timeout})
    finally:
        # A single-process group is torn down here, or on old gloo kept for the process's life
        # (reused by the next run; destroyed at exit, when its workers are long idle). A real
        # multi-process group is left to the process's end (see `leave`): gloo's teardown in
        # torch 2.5 can block for ever joining a worker thread.
        if own and dist.is_initialized() and dist.get_world_size() == 1:
            if compat.GLOO_TEARDOWN_NEEDS_IDLE_WORKERS and dist.get_backend() == "gloo":
                _KEPT = True
            else:
                dist.destroy_process_group()


def multi_process() -> bool:
    """True in a launched job of more than one process (torchrun sets WORLD_SIZE)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def leave(code: int) -> None:
    """End a rank of a multi-process job once its output is written, skipping interpreter
    teardown (where the process group's destructor can hang in torch 2.5's gloo)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _collective_signature(report: Report) -> list[tuple]:
    return [(o.collective.collective, o.collective.group_size, o.collective.message_bytes)
            for o in report.ops if o.collective is not None]


def rank_row(rank: int, report: Report) -> dict:
    t, comm = report.totals, report.comm
    return {
        "rank": rank,
        "flops": t.flops,
        "flops_model": t.flops_model,
        "bytes": t.bytes,
        "weight_bytes": t.weight_bytes,
        "kv_bytes_executed": t.kv_bytes_executed,
        "time_compute_s": t.time_compute_s,
        "time_memory_s": t.time_memory_s,
        "time_comm_s": t.time_comm_s,
        "predicted_step_s": t.predicted_step_s,
        "binding": t.binding,
        "ops": t.ops,
        "comm_calls": comm.calls,
        "comm_message_bytes": comm.message_bytes,
        "comm_wire_bytes": comm.wire_bytes,
        "collectives": encode(comm.collectives),
    }


def merge_reports(reports: list[Report], info: dict | None = None) -> Report:
    """One report for the job: the slowest rank's, plus one row per rank in `distributed`."""
    info = info or {}
    rows = [rank_row(i, r) for i, r in enumerate(reports)]
    slowest = max(range(len(reports)), key=lambda i: reports[i].totals.predicted_step_s or 0.0)
    base = reports[slowest]
    warnings = list(base.warnings)
    signatures = [_collective_signature(r) for r in reports]
    if any(s != signatures[0] for s in signatures[1:]):
        warnings.append("ranks ran different collectives (count, type, group or size): on real devices "
                        "such a model hangs or computes garbage; see distributed.ranks[].collectives")
    notes = list(base.notes) + [
        f"torch.distributed run on {len(reports)} rank{'s' if len(reports) != 1 else ''}: totals, modules, attention and ops are rank "
        f"{slowest}'s (the slowest by predicted step); one row per rank in `distributed.ranks`"
    ]
    return replace(base, warnings=warnings, notes=notes, distributed={
        "world_size": len(reports),
        "backend": info.get("backend"),
        "device": info.get("device"),
        "timeout_s": info.get("timeout_s"),
        "slowest_rank": slowest,
        "ranks": rows,
        "totals_of": "the slowest rank (largest predicted_step_s)",
    })
