"""Layers that keep a fixed state: their sites, and what their code moved in and out of the state.

Attention sites are found by their products of two activations; a recurrent, SSM, linear-attention
or short-convolution layer may run none (RWKV's elementwise recurrence, a decode step of a gated
delta-net). Plugins name such modules (`rooflinekit_mixer_sites`), and each becomes a site with
its own ops, recognised and costed like any other.

A state is told apart from other tensors by where its storage lives, not by any architecture: it
existed before the forward (the cache the step was given: first read before any op wrote it), or
it was written and never read again in the step (a state left for the next step, as a prefill
leaves it). Executed state bytes are the site's reads of the first kind and its writes of either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from rooflinekit.core.model_facts import cached, fact
from rooflinekit.core.plugins import PluginHost
from rooflinekit.stages.capture import CaptureResult, OpRecord


def mixer_paths(model: torch.nn.Module, host: PluginHost) -> set[str]:
    """Module paths every plugin names as a fixed-state mixer (`rooflinekit_mixer_sites`); asked
    once per model in a sweep (rooflinekit.core.model_facts)."""
    return cached(model, (*fact("mixer_paths"), id(host)), lambda: _mixer_paths(model, host))


def _mixer_paths(model: torch.nn.Module, host: PluginHost) -> set[str]:
    paths: set[str] = set()
    for answer, _ in host.call_all("rooflinekit_mixer_sites", model=model):
        if isinstance(answer, str):
            answer = (answer,)
        if isinstance(answer, Iterable):
            paths.update(p for p in answer if isinstance(p, str))
    return paths


def with_mixers(cap: CaptureResult, sites: dict[str, list[OpRecord]], paths: set[str]) -> dict[str, list[OpRecord]]:
    """`sites` plus each mixer path that ran ops of its own, all in execution order (first op)."""
    extra = paths - set(sites)
    if not extra:
        return sites
    found: dict[str, list[OpRecord]] = {}
    for op in cap.ops:
        if op.module in extra:
            found.setdefault(op.module, []).append(op)
    if not found:
        return sites
    merged = {**sites, **found}
    return dict(sorted(merged.items(), key=lambda item: item[1][0].index))


@dataclass
class StorageLife:
    """When each storage was first written, first read and last read in the capture (op indices)."""

    first_write: dict[int, int]
    first_read: dict[int, int]
    last_read: dict[int, int]
    params: set[int]

    @classmethod
    def of(cls, cap: CaptureResult) -> StorageLife:
        first_write: dict[int, int] = {}
        first_read: dict[int, int] = {}
        last_read: dict[int, int] = {}
        for op in cap.ops:
            i = op.index
            for sid, _ in op.reads:
                first_read.setdefault(sid, i)
                last_read[sid] = i
            for sid, _ in op.writes:
                first_write.setdefault(sid, i)
        return cls(first_write, first_read, last_read, cap.param_storages)

    def given(self, sid: int) -> bool:
        """The storage existed before the step (read before any op wrote it), not a parameter."""
        if sid in self.params or sid not in self.first_read:
            return False
        return self.first_read[sid] <= self.first_write.get(sid, self.first_read[sid])

    def left(self, sid: int, index: int) -> bool:
        """Written by op `index` and never read after it in the step (left for a later step)."""
        return sid not in self.params and self.last_read.get(sid, -1) < index


def state_traffic(ops: list[OpRecord], life: StorageLife) -> tuple[float, float, list[int]]:
    """(bytes read from the state, bytes written to it, indices of the ops that did) by `ops`."""
    read = written = 0.0
    indices = []
    for op in ops:
        r = sum(b for sid, b in op.reads if life.given(sid))
        w = sum(b for sid, b in op.writes if life.given(sid) or life.left(sid, op.index))
        if r or w:
            read += r
            written += w
            indices.append(op.index)
    return read, written, indices
