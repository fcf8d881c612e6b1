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

from rooflinekit.core.errors import UserError
from rooflinekit.core.model_facts import cached, fact
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.stages.capture import CaptureResult, OpRecord


def mixer_paths(model: torch.nn.Module, host: PluginHost) -> dict[str, str]:
    """Module path -> the plugin that names it a fixed-state mixer (`rooflinekit_mixer_sites`; the
    first to name it); asked once per model in a sweep (rooflinekit.core.model_facts)."""
    return cached(model, (*fact("mixer_paths"), id(host)), lambda: _mixer_paths(model, host))


def _mixer_paths(model: torch.nn.Module, host: PluginHost) -> dict[str, str]:
    paths: dict[str, str] = {}
    for answer, plugin in host.each(host.hook.rooflinekit_mixer_sites, model=model):
        named = _read_sites(answer, plugin, host)
        for path in named:
            paths.setdefault(path, plugin)
    return paths


def _read_sites(answer: object, plugin: str, host: PluginHost) -> list[str]:
    """A plugin's answer as a list of paths: a generator read here, under the same guard as the
    hook (its failure or a non-path named in one warning, the whole answer dropped)."""
    if isinstance(answer, str):
        return [answer]
    try:
        with stdout_to_stderr():
            named = list(answer) if isinstance(answer, Iterable) else []
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as exc:
        host.warn(f"plugin '{plugin}' failed in rooflinekit_mixer_sites (reading its sites): "
                  f"{type(exc).__name__}: {exc}; ignored")
        return []
    bad = [p for p in named if not isinstance(p, str)]
    if bad:
        host.warn(f"plugin '{plugin}' answered rooflinekit_mixer_sites with {type(bad[0]).__name__} "
                  f"{bad[0]!r}: every site must be a module path (a string); ignored")
        return []
    return named


def nested(path: str, other: str) -> bool:
    """Whether module `path` lies inside module `other` (the root, "", holds every module)."""
    return path != other and (other == "" or path.startswith(other + "."))


def mixer_sites(paths: dict[str, str], sites: dict[str, list[OpRecord]],
                modules: dict[str, torch.nn.Module], host: PluginHost) -> dict[str, str]:
    """The named paths that can be sites of their own: a module of the model that neither holds
    nor lies inside an attention site found by its products, nor lies inside another named path
    (the outermost is the layer, its parts are its ops). A dropped path is named, once per plugin,
    in a warning; a kept one must still be recognised as a fixed-state layer (`rooflinekit.stages.
    attribute`)."""
    kept: dict[str, str] = {}
    dropped: dict[str, list[str]] = {}
    named = set(paths)
    for path, plugin in paths.items():
        if path in sites:
            continue  # already a site by its products
        inside = [s for s in sites if nested(path, s) or nested(s, path)] + [s for s in named if nested(path, s)]
        if path not in modules or inside:
            dropped.setdefault(plugin, []).append(path or "(root)")
        else:
            kept[path] = plugin
    for plugin, dropped_paths in dropped.items():
        host.warn(f"plugin '{plugin}' named {len(dropped_paths)} module(s) as mixer sites that are no layer of "
                  f"their own ({', '.join(sorted(dropped_paths)[:3])}{', ...' if len(dropped_paths) > 3 else ''}): "
                  "a site is a module of the model that holds no other site and lies in none; ignored")
    return kept


def not_a_mixer(path: str, named_by: str, spec: object, plugin: str | None) -> str:
    """The warning for a named path that is recognised as no fixed-state layer (a projection inside
    a layer, a norm, an embedding): it is no site, its ops stay where they ran."""
    what = (f"recognised by '{plugin}' as {getattr(spec, 'arch', '?')}, not a fixed-state layer" if spec is not None
            else "recognised by no plugin")
    return (f"plugin '{named_by}' named module '{path}' as a mixer site, but it is {what}: a mixer site holds a "
            "state (a spec with fixed_state=True); ignored")


def with_mixers(cap: CaptureResult, sites: dict[str, list[OpRecord]], paths) -> dict[str, list[OpRecord]]:
    """`sites` plus each mixer path that ran ops of its own, all in execution order (first op)."""
    extra = set(paths) - set(sites)
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
