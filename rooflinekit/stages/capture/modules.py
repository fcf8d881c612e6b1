"""The model's parameters as the capture knows them: their storages, bytes, owners and names."""

from __future__ import annotations

import itertools

import torch

from rooflinekit.core.model_facts import cached, fact
from rooflinekit.stages.capture.traffic import SidOf

#: What the model's own parameter and buffer walks are, when nothing overrides them.
_MEMBER_WALKS = ("named_parameters", "parameters", "named_buffers", "buffers", "_named_members")


def _params_and_buffers(model: torch.nn.Module, tree: list[tuple[str, torch.nn.Module]]):
    """(name, parameter) as model.named_parameters() gives them, then (None, buffer) as
    model.buffers() does, from `tree` (list(model.named_modules())): one walk of the modules,
    not three."""
    if any(getattr(type(model), walk) is not getattr(torch.nn.Module, walk) for walk in _MEMBER_WALKS):
        return list(itertools.chain(model.named_parameters(), ((None, b) for b in model.buffers())))
    out: list[tuple[str | None, torch.Tensor]] = []
    for members, named in (("_parameters", True), ("_buffers", False)):
        memo: set[torch.Tensor] = set()
        for prefix, module in tree:
            for key, value in getattr(module, members).items():
                if value is None or value in memo:
                    continue
                memo.add(value)
                out.append(((f"{prefix}.{key}" if prefix else key) if named else None, value))
    return out


def param_storages(model: torch.nn.Module, tree: list[tuple[str, torch.nn.Module]], sid_of: SidOf,
                   owners: dict[int, str], names: dict[int, str]) -> tuple[set[int], float]:
    """The storages of the model's parameters and buffers and their bytes (each storage once);
    fills `owners` (parameter storage -> the first module path holding it) and `names` (-> the
    first parameter name holding it)."""
    ids: set[int] = set()
    total = 0.0
    for pname, t in cached(model, fact("params_and_buffers"), lambda: _params_and_buffers(model, tree)):
        t = getattr(t, "_local_tensor", t)  # a DTensor: this rank's shard is what its ops read
        sid = sid_of(t)
        if sid not in ids:
            ids.add(sid)
            total += t.numel() * t.element_size()
        if pname is not None:
            owners.setdefault(sid, pname.rpartition(".")[0])
            names.setdefault(sid, pname)
    return ids, total
